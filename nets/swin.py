"""Swin Transformer: Liu et al. 2021, "Swin Transformer: Hierarchical Vision Transformer using
Shifted Windows" (arXiv:2103.14030), as timm 1.0 builds it (`timm.models.swin_transformer`).

A 4x4/4 patch embedding with LayerNorm; four stages, each (but the first) opened by patch merging
(the 2x2 neighbours concatenated, LayerNorm, a linear 4C -> 2C without bias); blocks of LayerNorm,
window multi-head self-attention with a learned relative position bias (a `(2w - 1)^2 x heads`
table, indexed by the relative offset of each pair of tokens in a window), residual; LayerNorm,
an MLP with exact (erf) GELU, residual; every second block shifts the windows by half a window
(a cyclic roll of the map), with an additive mask of -100 (timm's and the paper's value) between
tokens the roll brought together. A final LayerNorm, average pooling and the classifier.
Parameter counts are timm's and torchvision's: 28,288,354 for Swin-T at 1000 classes.

Where this differs from timm's `SwinTransformer`:
- Windows and shifts are set per stage for `img_size` (timm's field, 224), as timm sets them at
  construction: a stage whose map is no larger than the window in a dimension takes the map's size
  as its window there, without shift (at 224 px, Swin-T's 7x7 last stage: one window, no shift).
  At other image sizes the windows stay (the relative position tables are never resampled) and
  each block pads its map at the bottom and right with zeros up to window multiples, after the
  roll, and builds the shift mask for the padded map: timm's `dynamic_img_size=True` exactly (its
  padding tokens take part in the attention, unmasked; so here). timm's `set_input_size`, which
  rescales windows and resamples the tables, is not here. Odd maps are padded before merging, as
  timm does; images that are not multiples of 4 lose their last rows and columns to the 'VALID'
  patch embedding, where timm refuses them.
- torchvision's `swin_t`/`swin_s`/`swin_b` are the same functions at 224 px (the same merging
  order (h, w) = (0, 0), (1, 0), (0, 1), (1, 1), the same mask, LayerNorm epsilon 1e-5) and
  load into the same networks; at sizes whose maps are not window multiples torchvision pads
  before the roll and never shrinks windows, which `load_pretrained` does not reproduce.
- Regularisation: `drop_path_rate` rises linearly over all blocks from 0 (timm's schedule; its
  constructor defaults to 0.1, the paper trains T/S/B with 0.2/0.3/0.5; 0.0 here, as every
  network of the zoo); `dropout_rate` is timm's `drop_rate`, before the classifier only. timm's
  `proj_drop_rate` and `attn_drop_rate` (0 in every published configuration) are not fields.
- Weight decay (`NetworkFn.regularization_loss`) covers the convolution and dense kernels only:
  not LayerNorm, biases or `relative_position_bias_table` (timm's `no_weight_decay()` names the
  tables, its optimizer factory leaves out every 1-D parameter).
- Initialisation: dense kernels and the tables from a normal of standard deviation 0.02 cut at
  two (timm: at +-2, absolute), biases zero, LayerNorm ones and zeros; the patch embedding as
  flax's default (timm: PyTorch's).

End points: `stem` (the patch embedding, `[batch, h/4, w/4, C]`), `stage1`..`stage4` (each stage's
output, NHWC, as timm's `layers.{i}`), `pre_logits` (after the final LayerNorm, pooled),
`logits`, `predictions`.
"""

import math
from collections.abc import Sequence
from functools import partial
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from nets.layers import (
    Conv,
    DotProductAttention,
    ModuleDef,
    checkpointed,
    classify,
    drop_path,
    global_avg_pool,
)
from nets.layers.attention import Implementation
from nets.layers.drop_path import check_drop_path_rate, linear_drop_path_rates
from nets.layers.layer_depth import stage_block_index
from nets.vit import Mlp, head_shape

LAYER_NORM_EPSILON = 1e-5  # torch.nn.LayerNorm's default, which timm's and torchvision's Swin use
MASKED = -100.0  # the shifted windows' mask value in the paper's code, timm and torchvision
_INIT = nn.initializers.truncated_normal(0.02)
Window = tuple[int, int]


def stage_windows(grid: int, depth: int, window: int) -> list[tuple[Window, Window]]:
    """`(window, shift)` of each of `depth` stages for a `grid x grid` patch grid, as timm sets
    them at construction: stage `i` sees `ceil(grid / 2**i)` patches a side; where that is no
    more than `window`, the window shrinks to it and there is no shift, else the shift is
    `window // 2`."""
    out, size = [], grid
    for i in range(depth):
        if i:
            size = (size + 1) // 2
        out.append(((min(size, window),) * 2, ((0 if size <= window else window // 2),) * 2))
    return out


def relative_position_index(window: Window) -> np.ndarray:
    """`[N, N]` (N = wh * ww): row of the table holding the bias between token `i` and token `j`
    of a window, `(dh + wh - 1) * (2 ww - 1) + (dw + ww - 1)` for their offset `(dh, dw)`."""
    wh, ww = window
    coords = np.stack(np.meshgrid(np.arange(wh), np.arange(ww), indexing="ij")).reshape(2, -1)
    offsets = coords[:, :, None] - coords[:, None, :]
    return (offsets[0] + wh - 1) * (2 * ww - 1) + offsets[1] + ww - 1


def shift_mask(size: Window, window: Window, shift: Window) -> np.ndarray:
    """`[windows, N, N]` additive mask of a rolled `size` map (already a window multiple): 0
    between tokens of the same region before the roll, -100 between tokens of different ones."""
    regions = np.zeros(size, np.int32)
    for axis, (w, s) in enumerate(zip(window, shift, strict=True)):
        bands = np.zeros(size[axis], np.int32)
        bands[size[axis] - w :] += 1
        bands[size[axis] - s :] += 1
        regions = regions * 3 + (bands[:, None] if axis == 0 else bands[None, :])
    labels = partition(regions[None, :, :, None], window)[..., 0]
    return np.where(labels[:, :, None] != labels[:, None, :], MASKED, 0.0).astype(np.float32)


def partition(x, window: Window):
    """`[b, h, w, c]` -> `[b * windows, wh * ww, c]`, windows in row-major order per image."""
    b, h, w, c = x.shape
    wh, ww = window
    x = x.reshape(b, h // wh, wh, w // ww, ww, c).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, wh * ww, c)


def merge(windows: jax.Array, window: Window, size: Window) -> jax.Array:
    """`partition`'s inverse: `[b * windows, wh * ww, c]` -> `[b, h, w, c]`."""
    (h, w), (wh, ww), c = size, window, windows.shape[-1]
    x = windows.reshape(-1, h // wh, w // ww, wh, ww, c).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, h, w, c)


def masked(bias: jax.Array, mask: np.ndarray | None, batch: int) -> jax.Array:
    """The position bias `[heads, N, N]` as the product's bias: `[1, heads, N, N]`, or with the
    shift's mask `[windows, N, N]` added, `[batch, heads, N, N]` (the mask repeated per image)."""
    bias = bias[None]
    if mask is not None:  # [1, heads, N, N] + [windows, 1, N, N], repeated per image
        windows = mask.shape[0]
        bias = bias + jnp.asarray(mask)[:, None]
        bias = jnp.broadcast_to(bias[None], (batch // windows, *bias.shape))
        bias = bias.reshape(batch, *bias.shape[-3:])
    return bias


def stage_heads(width: int, num_heads: int) -> tuple[int, int]:
    """`(num_heads, head_dim)` of a stage's window attention (V1's and V2's); one line when the
    stage's width does not split."""
    rule = "each stage's width (embed_dim * 2**i) must be a multiple of its num_heads"
    return head_shape(width, num_heads, "width", rule)


class WindowAttention(nn.Module):
    """Multi-head self-attention within each window, with the relative position bias: `qkv`,
    the product (`DotProductAttention`, bias and mask added to its float32 logits), `proj`."""

    num_heads: int
    window: Window
    dtype: Any = jnp.float32
    attention: Implementation = "auto"

    @nn.compact
    def __call__(self, x: jax.Array, mask: np.ndarray | None) -> jax.Array:
        """`x`: `[b * windows, N, C]`; `mask`: `[windows, N, N]` or None."""
        batch, tokens, width = x.shape
        heads, head_dim = stage_heads(width, self.num_heads)
        wh, ww = self.window
        table = self.param(
            "relative_position_bias_table", _INIT, ((2 * wh - 1) * (2 * ww - 1), heads)
        )
        bias = masked(table[relative_position_index(self.window)].transpose(2, 0, 1), mask, batch)
        dense = partial(nn.Dense, dtype=self.dtype, kernel_init=_INIT)
        # timm's order of the 3 * width outputs: (q, k, v), then heads, then head_dim.
        qkv = dense(3 * width, name="qkv")(x).reshape(batch, tokens, 3, heads, head_dim)
        product = DotProductAttention(self.attention, name="product")
        x = product(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], bias)
        return dense(width, name="proj")(x.reshape(batch, tokens, width))


class SwinBlock(nn.Module):
    """`x + drop_path(attn(norm1(x)))` over (shifted) windows, then `x + drop_path(mlp(norm2(x)))`:
    timm's `SwinTransformerBlock` on NHWC maps."""

    num_heads: int
    window: Window
    shift: Window
    mlp_ratio: float = 4.0
    drop_path_rate: float = 0.0
    epsilon: float = LAYER_NORM_EPSILON
    dtype: Any = jnp.float32
    attention: Implementation = "auto"

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        norm = partial(nn.LayerNorm, epsilon=self.epsilon, dtype=self.dtype)
        attn = WindowAttention(self.num_heads, self.window, self.dtype, self.attention, name="attn")
        y = shifted_windows(norm(name="norm1")(x), self.window, self.shift, attn)
        x = x + drop_path(self, y, self.drop_path_rate, train)
        mlp = Mlp(int(x.shape[-1] * self.mlp_ratio), dtype=self.dtype, name="mlp")
        return x + drop_path(self, mlp(norm(name="norm2")(x), train), self.drop_path_rate, train)


def shifted_windows(x: jax.Array, window: Window, shift: Window, attend) -> jax.Array:
    """`attend(windows, mask)` over the windows of an NHWC map: rolled by `-shift`, padded at the
    bottom and right to window multiples (after the roll, as timm), partitioned, attended with
    the shift's mask (None without shift), merged, cropped and rolled back."""
    _, height, width, _ = x.shape
    (wh, ww), (sh, sw) = window, shift
    if sh or sw:
        x = jnp.roll(x, (-sh, -sw), axis=(1, 2))
    padded = (math.ceil(height / wh) * wh, math.ceil(width / ww) * ww)
    x = jnp.pad(x, ((0, 0), (0, padded[0] - height), (0, padded[1] - width), (0, 0)))
    mask = shift_mask(padded, window, shift) if sh or sw else None
    x = merge(attend(partition(x, window), mask), window, padded)[:, :height, :width]
    if sh or sw:
        x = jnp.roll(x, (sh, sw), axis=(1, 2))
    return x


def neighbours(x: jax.Array) -> jax.Array:
    """`[b, h, w, c]` -> `[b, ceil(h / 2), ceil(w / 2), 4c]`: each 2x2 neighbourhood concatenated
    in timm's order ((h, w) = (0, 0), (1, 0), (0, 1), (1, 1)), odd maps padded with zeros at the
    bottom and right first."""
    b, h, w, c = x.shape
    x = jnp.pad(x, ((0, 0), (0, h % 2), (0, w % 2), (0, 0)))
    h, w = (h + 1) // 2, (w + 1) // 2
    return x.reshape(b, h, 2, w, 2, c).transpose(0, 1, 3, 4, 2, 5).reshape(b, h, w, 4 * c)


class PatchMerging(nn.Module):
    """Each 2x2 neighbourhood concatenated in timm's order ((h, w) = (0, 0), (1, 0), (0, 1),
    (1, 1)), LayerNorm, a linear 4C -> `features` without bias; odd maps padded with zeros at the
    bottom and right first."""

    features: int
    epsilon: float = LAYER_NORM_EPSILON
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = nn.LayerNorm(epsilon=self.epsilon, dtype=self.dtype, name="norm")(neighbours(x))
        return nn.Dense(
            self.features, use_bias=False, dtype=self.dtype, kernel_init=_INIT, name="reduction"
        )(x)


class SwinStage(nn.Module):
    """timm's `SwinTransformerStage`: patch merging (`downsample`) to `features` channels, then
    `depth` blocks, every second one with shifted windows."""

    depth: int
    features: int
    num_heads: int
    window: Window
    shift: Window
    drop_path_rates: tuple[float, ...]
    downsample: bool = True
    mlp_ratio: float = 4.0
    epsilon: float = LAYER_NORM_EPSILON
    dtype: Any = jnp.float32
    attention: Implementation = "auto"
    remat: bool | str = False
    block: ModuleDef = SwinBlock  # Swin V2's blocks and merging are others (nets.swinv2)
    merging: ModuleDef = PatchMerging

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        if self.downsample:
            x = self.merging(self.features, self.epsilon, self.dtype, name="downsample")(x)
        block = checkpointed(self.block, self.remat, takes_train=True)
        for j in range(self.depth):
            x = block(
                self.num_heads,
                self.window,
                self.shift if j % 2 else (0, 0),
                self.mlp_ratio,
                self.drop_path_rates[j],
                self.epsilon,
                self.dtype,
                self.attention,
                name=f"blocks_{j}",
            )(x, train)
        return x


class PatchEmbed(nn.Module):
    """`proj`, a `patch_size`-strided 'VALID' convolution, then `norm`, a LayerNorm."""

    features: int
    patch_size: int
    conv: ModuleDef
    epsilon: float = LAYER_NORM_EPSILON
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        patch = (self.patch_size, self.patch_size)
        x = self.conv(
            self.features, patch, strides=patch, padding="VALID", dtype=self.dtype, name="proj"
        )(x)
        return nn.LayerNorm(epsilon=self.epsilon, dtype=self.dtype, name="norm")(x)


class SwinTransformer(nn.Module):
    """Swin with stages of `depths` blocks, `embed_dim * 2**i` wide with `num_heads[i]` heads.

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the pooled features
    `[batch, embed_dim * 2**(stages - 1)]` when `num_classes` is 0 or None. Parameter names are
    timm's: `patch_embed/{proj,norm}`, `layers_{i}/downsample/{norm,reduction}` (stages 1-3),
    `layers_{i}/blocks_{j}/{norm1,attn/qkv,attn/proj,attn/relative_position_bias_table,norm2,
    mlp/fc1,mlp/fc2}`, `norm`, `head`.
    """

    default_image_size: ClassVar[int] = 224  # the paper's ImageNet-1k resolution

    patch_size: int = 4
    embed_dim: int = 96
    depths: Sequence[int] = (2, 2, 6, 2)
    num_heads: Sequence[int] = (3, 6, 12, 24)
    window_size: int = 7
    img_size: int = 224  # the image size the windows and shifts are set for (timm's img_size)
    mlp_ratio: float = 4.0
    num_classes: int | None = 1000
    dropout_rate: float = 0.0  # before the classifier (timm's `drop_rate`)
    # Stochastic depth of the residual branches, rising linearly from 0 at the first block to
    # this rate at the last (timm's schedule); training only, with the 'dropout' rng.
    drop_path_rate: float = 0.0
    epsilon: float = LAYER_NORM_EPSILON
    dtype: Any = jnp.float32
    # 'auto': cuDNN's fused kernel on GPUs in half precision, else XLA's; 'xla' or 'cudnn' force.
    attention: Implementation = "auto"
    conv: ModuleDef = Conv
    remat: bool | str = False  # stem, blocks recomputed in backward (nets.layers.remat.POLICIES)

    @property
    def min_image_size(self) -> int:
        """One patch (later maps of one token are padded to two before merging)."""
        return self.patch_size

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: each stage's map, from the patch size (`nets.features`)."""
        return {f"stage{i + 1}": self.patch_size * 2**i for i in range(len(self.depths))}

    def layer_id(self, path: tuple[str, ...]) -> int:
        """The depth of the parameter under module `path`, for layer-wise learning-rate decay
        (timm's `group_matcher`): 0 for the patch embedding, `1 + n` for the network's block `n`
        (a stage's patch merging with its first block), the final norm with the last block, the
        head last."""
        if path[0] == "patch_embed":
            return 0
        if path[0].startswith("layers_"):
            return 1 + stage_block_index(self.depths, path)
        return sum(self.depths) + (path[0] != "norm")

    def stage_parts(self, stage: int) -> dict[str, ModuleDef]:
        """Stage `stage`'s `block` and `merging` modules where they are not V1's (nets.swinv2)."""
        del stage
        return {}

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = True):
        self._check()
        norm = partial(nn.LayerNorm, epsilon=self.epsilon, dtype=self.dtype)
        end_points = {}
        x = end_points["stem"] = checkpointed(PatchEmbed, self.remat)(  # the largest maps: a unit
            self.embed_dim, self.patch_size, self.conv, self.epsilon, self.dtype, name="patch_embed"
        )(jnp.asarray(x, self.dtype))

        rates = linear_drop_path_rates(self.drop_path_rate, sum(self.depths))
        windows = stage_windows(
            self.img_size // self.patch_size, len(self.depths), self.window_size
        )
        for i, (depth, heads) in enumerate(zip(self.depths, self.num_heads, strict=True)):
            x = end_points[f"stage{i + 1}"] = SwinStage(
                depth,
                self.embed_dim * 2**i,
                heads,
                *windows[i],
                tuple(rates[sum(self.depths[:i]) : sum(self.depths[: i + 1])]),
                downsample=i > 0,
                mlp_ratio=self.mlp_ratio,
                epsilon=self.epsilon,
                dtype=self.dtype,
                attention=self.attention,
                remat=self.remat,
                name=f"layers_{i}",
                **self.stage_parts(i),
            )(x, train)

        x = global_avg_pool(norm(name="norm")(x))
        return classify(
            x,
            end_points,
            self.num_classes,
            train=train,
            dropout_rate=self.dropout_rate,
            dtype=self.dtype,
            name="head",
            kernel_init=_INIT,
        )

    def _check(self) -> None:
        if len(self.depths) != len(self.num_heads) or not self.depths:
            raise ValueError(
                f"Swin needs one head count per stage: depths {tuple(self.depths)}, "
                f"num_heads {tuple(self.num_heads)}"
            )
        if self.img_size < self.patch_size or self.window_size < 1:
            raise ValueError(
                f"img_size {self.img_size} and window_size {self.window_size}: img_size must be "
                f"at least patch_size ({self.patch_size}) and window_size at least 1"
            )
        check_drop_path_rate(self.drop_path_rate)


# timm's configurations (Liu et al. Table 1 / Section 3.3: Swin-T, Swin-S, Swin-B at 224 px,
# window 7); torchvision's swin_t, swin_s, swin_b are the same networks.
swin_tiny_patch4_window7_224 = partial(
    SwinTransformer, embed_dim=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24)
)
swin_small_patch4_window7_224 = partial(
    SwinTransformer, embed_dim=96, depths=(2, 2, 18, 2), num_heads=(3, 6, 12, 24)
)
swin_base_patch4_window7_224 = partial(
    SwinTransformer, embed_dim=128, depths=(2, 2, 18, 2), num_heads=(4, 8, 16, 32)
)

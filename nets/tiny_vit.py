"""TinyViT: Wu et al. 2022, "TinyViT: Fast Pretraining Distillation for Small Vision
Transformers" (arXiv:2207.10666), as timm 1.0 builds it (`timm.models.tiny_vit`).

A convolutional stem (two 3x3/2 convolutions with BatchNorm, GELU between), a first stage of
MBConv blocks (1x1 expansion by 4, 3x3 depthwise, 1x1 projection, each with BatchNorm, GELU after
the first two and after the residual sum), then three stages opened by patch merging (1x1 to the
stage's width, 3x3/2 depthwise, 1x1; BatchNorm each, GELU after the first two) and made of TinyViT
blocks: `x + attn(x)` over non-overlapping windows (no shift), a 3x3 depthwise convolution with
BatchNorm (`local_conv`, no residual), `x + mlp(x)`. The attention LayerNorms its input itself
(`attn/norm`), and so does the MLP (`mlp/norm`: timm's `NormMlp`). Each head has a learnt bias
per absolute offset `(|dh|, |dw|)` of a window's pair of tokens (`attention_biases`, `[heads,
w * w]`, LeViT's scheme: `w * w` offsets, not Swin's `(2w - 1)^2` signed ones). Maps that are not
window multiples are padded with zeros at the bottom and right, whose tokens take part in the
attention unmasked (the LayerNorm makes them its bias), and cropped after. The head: average
pooling, LayerNorm, the classifier (timm's `NormMlpClassifierHead` without hidden layer).
LayerNorm and BatchNorm epsilon 1e-5, exact GELU. Parameter counts are timm's: 5,392,764 for
tiny_vit_5m_224 at 1000 classes.

The 384 and 512 px networks are the 21M one with windows of (12, 24, 12) and (16, 32, 16) for
maps of (48, 24, 12) and (64, 32, 16): their bias tables hold 144, 576, 144 and 256, 1024, 256
offsets per head where the 224 px network's hold 49, 196, 49 (the first entry of
`window_sizes` belongs to the convolutional stage and is never read). Their published files have
those larger tables; timm resizes a file's tables to the network's (bicubic, its
`resize_rel_pos_bias_table_levit`) only when they differ, which no published file needs here: a
file with tables of another window is refused by its shapes.

Where this differs from timm's `TinyVit`:
- Initialisation: dense kernels from a normal of standard deviation 0.02 cut at two, biases zero,
  `attention_biases` zero (timm's); convolutions as flax's default (timm: PyTorch's); every
  BatchNorm scale one, where timm starts the MBConv projection's at zero.
- Weight decay (`NetworkFn.regularization_loss`) covers the convolution and dense kernels only:
  not the norms, biases or `attention_biases` (timm's `no_weight_decay()` names the biases, its
  optimizer factory leaves out every 1-D parameter).
- `drop_path_rate` rises linearly over all blocks, the MBConv ones included, from 0 (timm's
  schedule; its networks default to 0.0, 0.1, 0.2 and 0.1 for 5M, 11M, 21M and the 21M fine-tunes;
  0.0 here, as every network of the zoo); `dropout_rate` is timm's `drop_rate`, before the
  classifier; timm's `proj_drop_rate` (0 in every published configuration) is not a field.

`padding` is a field: the 3x3 convolutions pad one pixel on each side ('SYMMETRIC', PyTorch's),
as the weights were trained; 'SAME' would pad the stride-2 ones of even maps at the end only.
MACs count the attention products (`DotProductAttention`), padded windows included, as torch's
`FlopCounterMode` on timm's networks.

End points: `stem` (`[batch, h/4, w/4, C0]`), `stage1`..`stage4` (each stage's output, NHWC, at
strides 4, 8, 16, 32: timm's `stages.{i}`), `pre_logits` (pooled, after the head's LayerNorm),
`logits`, `predictions`.
"""

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from nets.layers import (
    TORCH,
    Conv,
    ConvNormAct,
    DotProductAttention,
    ModuleDef,
    batch_norm,
    checkpointed,
    classify,
    drop_path,
    gelu,
    global_avg_pool,
)
from nets.layers.attention import Implementation
from nets.layers.drop_path import check_drop_path_rate, linear_drop_path_rates
from nets.layers.layer_depth import stage_block_index
from nets.layers.padding import PaddingLike, smallest_input
from nets.swin import shifted_windows, stage_heads
from nets.vit import Mlp

LAYER_NORM_EPSILON = 1e-5  # torch.nn.LayerNorm's default, timm's TinyViT's
_INIT = nn.initializers.truncated_normal(0.02)


def attention_bias_index(window: int | tuple[int, int], stride: int = 1) -> np.ndarray:
    """`[Q, N]` (N = h * w tokens of an `(h, w)` map, or `w * w` of a square window; Q the
    tokens every `stride`-th row and column keep): the column of a head's biases for query `i`
    and key `j`, `|dh| * w + |dw|` for their offset `(dh, dw)`: timm's `attention_bias_idxs`
    (TinyViT's and LeViT's; LeViT's subsampling attention queries with `stride` 2)."""
    height, width = (window, window) if isinstance(window, int) else window
    keys = np.stack(np.meshgrid(np.arange(height), np.arange(width), indexing="ij"))
    queries = keys[:, ::stride, ::stride]
    offsets = np.abs(queries.reshape(2, -1)[:, :, None] - keys.reshape(2, -1)[:, None, :])
    return offsets[0] * width + offsets[1]


class Attention(nn.Module):
    """LayerNorm (`norm`), multi-head self-attention within each window (`qkv`, the product with
    the per-head offset biases added to its logits, `proj`)."""

    num_heads: int
    window: int
    epsilon: float = LAYER_NORM_EPSILON
    dtype: Any = jnp.float32
    attention: Implementation = "auto"

    @nn.compact
    def __call__(self, x: jax.Array, mask: None = None) -> jax.Array:
        """`x`: `[b * windows, w * w, C]`; `mask` is `shifted_windows`' (None: no shift)."""
        del mask
        batch, tokens, width = x.shape
        heads, head_dim = stage_heads(width, self.num_heads)
        biases = self.param(
            "attention_biases", nn.initializers.zeros, (heads, self.window * self.window)
        )
        bias = biases[:, attention_bias_index(self.window)][None]
        dense = partial(nn.Dense, dtype=self.dtype, kernel_init=_INIT)
        x = nn.LayerNorm(epsilon=self.epsilon, dtype=self.dtype, name="norm")(x)
        # timm's order of the 3 * width outputs: heads, then (q, k, v), then head_dim.
        qkv = dense(3 * width, name="qkv")(x).reshape(batch, tokens, heads, 3, head_dim)
        product = DotProductAttention(self.attention, name="product")
        x = product(qkv[..., 0, :], qkv[..., 1, :], qkv[..., 2, :], bias)
        return dense(width, name="proj")(x.reshape(batch, tokens, width))


class NormMlp(Mlp):
    """timm's `NormMlp`: LayerNorm (`norm`), then ViT's MLP (`fc1`, GELU, `fc2`)."""

    epsilon: float = LAYER_NORM_EPSILON

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        x = nn.LayerNorm(epsilon=self.epsilon, dtype=self.dtype, name="norm")(x)
        return super().__call__(x, train)


class TinyVitBlock(nn.Module):
    """`x + drop_path(attn(x))` over windows, `local_conv(x)` (3x3 depthwise, BatchNorm), then
    `x + drop_path(mlp(x))`, on NHWC maps: timm's `TinyVitBlock`."""

    num_heads: int
    window: int
    layer: ModuleDef  # ConvNormAct with the network's conv, norm and padding
    mlp_ratio: float = 4.0
    drop_path_rate: float = 0.0
    epsilon: float = LAYER_NORM_EPSILON
    dtype: Any = jnp.float32
    attention: Implementation = "auto"

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        width = x.shape[-1]
        attn = Attention(
            self.num_heads, self.window, self.epsilon, self.dtype, self.attention, name="attn"
        )
        window = (self.window, self.window)
        y = shifted_windows(x, window, (0, 0), attn)
        x = x + drop_path(self, y, self.drop_path_rate, train)
        x = self.layer(width, 3, groups=width, act=None, name="local_conv")(x)
        mlp = NormMlp(
            int(width * self.mlp_ratio), dtype=self.dtype, epsilon=self.epsilon, name="mlp"
        )
        return x + drop_path(self, mlp(x, train), self.drop_path_rate, train)


class MBConv(nn.Module):
    """`act(x + drop_path(conv3(conv2(conv1(x)))))`: 1x1 expansion by `expand_ratio` and 3x3
    depthwise (each BatchNorm, GELU), 1x1 projection (BatchNorm); the activation after the sum."""

    expand_ratio: float
    layer: ModuleDef  # ConvNormAct with the network's conv, norm, activation and padding
    drop_path_rate: float = 0.0
    act: Callable = gelu

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        width = x.shape[-1]
        inner = int(width * self.expand_ratio)
        y = self.layer(inner, 1, name="conv1")(x)
        y = self.layer(inner, 3, groups=inner, name="conv2")(y)
        y = self.layer(width, 1, act=None, name="conv3")(y)
        return self.act(x + drop_path(self, y, self.drop_path_rate, train))


class PatchMerging(nn.Module):
    """1x1 to `features` (BatchNorm, GELU), 3x3/2 depthwise (BatchNorm, GELU), 1x1 (BatchNorm)."""

    features: int
    layer: ModuleDef

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = self.layer(self.features, 1, name="conv1")(x)
        x = self.layer(self.features, 3, strides=2, groups=self.features, name="conv2")(x)
        return self.layer(self.features, 1, act=None, name="conv3")(x)


class PatchEmbed(nn.Module):
    """Two 3x3/2 convolutions with BatchNorm (`conv1` to half of `features`, GELU; `conv2`)."""

    features: int
    layer: ModuleDef

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = self.layer(self.features // 2, 3, strides=2, name="conv1")(x)
        return self.layer(self.features, 3, strides=2, act=None, name="conv2")(x)


class TinyVit(nn.Module):
    """TinyViT with stages of `depths` blocks, `embed_dims[i]` wide; stage 0 of MBConv blocks,
    the others of window attention with `num_heads[i]` heads and windows of `window_sizes[i]`.

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the pooled features
    `[batch, embed_dims[-1]]` when `num_classes` is 0 or None. Parameter names are timm's:
    `patch_embed/conv{1,2}/{conv,bn}`, `stages_0/blocks_{j}/conv{1,2,3}/{conv,bn}`,
    `stages_{i}/downsample/conv{1,2,3}/{conv,bn}`, `stages_{i}/blocks_{j}/{attn/{norm,qkv,proj,
    attention_biases},local_conv/{conv,bn},mlp/{norm,fc1,fc2}}`, `head_norm`, `head`.
    """

    default_image_size: int = 224  # the weights' evaluation size (224, 384, 512)
    embed_dims: Sequence[int] = (64, 128, 160, 320)
    depths: Sequence[int] = (2, 2, 6, 2)
    num_heads: Sequence[int] = (2, 4, 5, 10)
    # Each stage's window; the first, of the convolutional stage, is never read (timm's table).
    window_sizes: Sequence[int] = (7, 7, 14, 7)
    mlp_ratio: float = 4.0
    mbconv_expand_ratio: float = 4.0
    num_classes: int | None = 1000
    dropout_rate: float = 0.0  # before the classifier (timm's `drop_rate`)
    # Stochastic depth of the residual branches, rising linearly from 0 at the first block to
    # this rate at the last (timm's schedule); training only, with the 'dropout' rng.
    drop_path_rate: float = 0.0
    epsilon: float = LAYER_NORM_EPSILON
    padding: PaddingLike = "SYMMETRIC"  # of the 3x3 convolutions: PyTorch's, the weights'
    dtype: Any = jnp.float32
    # 'auto': cuDNN's fused kernel on GPUs in half precision, else XLA's; 'xla' or 'cudnn' force.
    attention: Implementation = "auto"
    conv: ModuleDef = Conv
    remat: bool | str = False  # stem, blocks recomputed in backward (nets.layers.remat.POLICIES)

    @property
    def min_image_size(self) -> int:
        """Five 3x3/2 convolutions with a pixel of padding: one pixel stays one."""
        return smallest_input([(3, 2, 2)] * (len(self.depths) + 1))

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: each stage's map (`nets.features`)."""
        return {f"stage{i + 1}": 4 * 2**i for i in range(len(self.depths))}

    def layer_id(self, path: tuple[str, ...]) -> int:
        """The depth of the parameter under module `path`, for layer-wise learning-rate decay
        (timm's `group_matcher`): 0 for the stem, `1 + n` for the network's block `n` (a stage's
        patch merging with its first block), the head (its norm too) last."""
        if path[0] == "patch_embed":
            return 0
        if path[0].startswith("stages_"):
            return 1 + stage_block_index(self.depths, path)
        return sum(self.depths) + 1

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = True):
        self._check()
        conv = partial(self.conv, dtype=self.dtype)
        layer = partial(
            ConvNormAct,
            conv=conv,
            norm=batch_norm(TORCH, train, self.dtype),
            act=gelu,
            padding=self.padding,
        )
        end_points = {}
        x = jnp.asarray(x, self.dtype)
        stem = checkpointed(PatchEmbed, self.remat)  # the largest maps: one unit for remat
        x = end_points["stem"] = stem(self.embed_dims[0], layer, name="patch_embed")(x)
        rates = linear_drop_path_rates(self.drop_path_rate, sum(self.depths))
        for i, depth in enumerate(self.depths):
            x = end_points[f"stage{i + 1}"] = Stage(
                self.embed_dims[i],
                depth,
                self.num_heads[i],
                self.window_sizes[i],
                tuple(rates[sum(self.depths[:i]) : sum(self.depths[: i + 1])]),
                layer,
                convolutional=i == 0,
                mlp_ratio=self.mlp_ratio,
                mbconv_expand_ratio=self.mbconv_expand_ratio,
                epsilon=self.epsilon,
                dtype=self.dtype,
                attention=self.attention,
                remat=self.remat,
                name=f"stages_{i}",
            )(x, train)
        x = nn.LayerNorm(epsilon=self.epsilon, dtype=self.dtype, name="head_norm")(
            global_avg_pool(x)
        )
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
        per_stage = (self.embed_dims, self.num_heads, self.window_sizes)
        if not self.depths or any(len(v) != len(self.depths) for v in per_stage):
            raise ValueError(
                "TinyViT needs one width, head count and window per stage: depths "
                f"{tuple(self.depths)}, embed_dims {tuple(self.embed_dims)}, num_heads "
                f"{tuple(self.num_heads)}, window_sizes {tuple(self.window_sizes)}"
            )
        if min(self.window_sizes[1:], default=1) < 1:
            raise ValueError(f"window_sizes must be at least 1, got {tuple(self.window_sizes)}")
        check_drop_path_rate(self.drop_path_rate)


class Stage(nn.Module):
    """timm's `ConvLayer` (`convolutional`: MBConv blocks at the stem's width) or `TinyVitStage`
    (patch merging, `downsample`, to `features`, then TinyViT blocks)."""

    features: int
    depth: int
    num_heads: int
    window: int
    drop_path_rates: tuple[float, ...]
    layer: ModuleDef
    convolutional: bool = False
    mlp_ratio: float = 4.0
    mbconv_expand_ratio: float = 4.0
    epsilon: float = LAYER_NORM_EPSILON
    dtype: Any = jnp.float32
    attention: Implementation = "auto"
    remat: bool | str = False

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        if self.convolutional:
            block = checkpointed(MBConv, self.remat, takes_train=True)
            for j in range(self.depth):
                x = block(
                    self.mbconv_expand_ratio,
                    self.layer,
                    self.drop_path_rates[j],
                    name=f"blocks_{j}",
                )(x, train)
            return x
        x = PatchMerging(self.features, self.layer, name="downsample")(x)
        block = checkpointed(TinyVitBlock, self.remat, takes_train=True)
        for j in range(self.depth):
            x = block(
                self.num_heads,
                self.window,
                self.layer,
                self.mlp_ratio,
                self.drop_path_rates[j],
                self.epsilon,
                self.dtype,
                self.attention,
                name=f"blocks_{j}",
            )(x, train)
        return x


_21M = {"embed_dims": (96, 192, 384, 576), "num_heads": (3, 6, 12, 18)}

# timm's configurations (Wu et al. Table 2: TinyViT-5M, 11M, 21M; 21M fine-tuned at 384 and
# 512 px with larger windows).
tiny_vit_5m_224 = partial(TinyVit, embed_dims=(64, 128, 160, 320), num_heads=(2, 4, 5, 10))
tiny_vit_11m_224 = partial(TinyVit, embed_dims=(64, 128, 256, 448), num_heads=(2, 4, 8, 14))
tiny_vit_21m_224 = partial(TinyVit, **_21M)
tiny_vit_21m_384 = partial(TinyVit, **_21M, window_sizes=(12, 12, 24, 12), default_image_size=384)
tiny_vit_21m_512 = partial(TinyVit, **_21M, window_sizes=(16, 16, 32, 16), default_image_size=512)

"""BEiT and BEiT v2's ImageNet classifiers: a ViT with a relative position bias in every block.

Bao et al. 2021, "BEiT: BERT Pre-Training of Image Transformers" (arXiv:2106.08254), and Peng et
al. 2022, "BEiT v2: Masked Image Modeling with Vector-Quantized Visual Tokenizers"
(arXiv:2208.06366), as timm's `Beit` (`timm/models/beit.py`) builds its `beit_*` and `beitv2_*`
networks (the same network; v2's weights come from another pretraining): ViT's patch embedding
(`nets.vit.patchify`) and a class token, no absolute position embeddings; `depth` pre-norm blocks
whose attention adds a learnt bias per head to its logits, looked up by the relative position of
query and key (a `(2h - 1)(2w - 1) + 3` x heads table per block: one row per offset between two
patches, then three for the class token's query to the patches, the patches' queries to it, and
it to itself), with a bias on the query and value projections but none on the key's (EVA's
`nets.eva.biased_qkv`); LayerScale on both branches (0.1 at first for BEiT-B, 1e-5 for the
others; timm's `gamma_1`, `gamma_2`), an MLP with exact GELU. The patches' tokens are averaged,
then normalised (`fc_norm`, no final `norm`), then classified.

Where this differs from timm's `Beit`:
- The relative position tables are made for `img_size` (timm's field; None: `default_image_size`,
  224, 384 or 512). At another image size each block's table is resized every call, as timm's
  `checkpoint_filter_fn` resizes it when a file is loaded into a network built for another size
  (`resize_rel_pos_bias_table`, scipy-free path): the offsets' rows interpolated linearly from
  BEiT's geometric source positions (`table_positions`) onto the new offsets, the class token's
  three rows kept. So the logits at 384 px of a network made for 224 are those of timm's built
  for 384 holding the 224-px weights; in training, the gradient reaches the table of `img_size`
  through the resize, where timm's would train the resized one. timm refuses other sizes at
  call time.
- `dropout_rate` is timm's `drop_rate` (before the head) only; timm's `proj_drop_rate`,
  `attn_drop_rate` and `pos_drop_rate`, all 0 in its recipes, are not fields. timm's options
  that none of these networks sets (absolute position embeddings, a table shared by the blocks,
  SwiGLU, the MLP's LayerNorm, class-token pooling) are not fields either.
- `regularization_loss` covers the convolution and dense kernels only: not LayerNorm, biases
  (`q_bias` and `v_bias` included), the layer scales, `cls_token` or the relative position
  tables, as timm's `no_weight_decay()` and its optimizer factory (no decay for 1-D parameters).
"""

from functools import cache, partial
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from nets import swin
from nets.eva import Eva02, biased_qkv, blocks_then_head
from nets.layers import (
    Conv,
    DotProductAttention,
    LayerScale,
    ModuleDef,
    checkpointed,
    drop_path,
)
from nets.layers.attention import Implementation
from nets.layers.drop_path import check_drop_path_rate
from nets.vit import LAYER_NORM_EPSILON, Mlp, grid_size, head_shape, patchify

Window = tuple[int, int]
CLASS_ROWS = 3  # after the offsets' rows: class token to patches, patches to it, it to itself
_STD = 0.02  # timm's init of every Linear (truncated normal) and of the class token


def table_rows(window: Window) -> int:
    """The rows of a relative position table for a `window` of patches: one per offset, then the
    class token's three."""
    return (2 * window[0] - 1) * (2 * window[1] - 1) + CLASS_ROWS


@cache
def relative_position_index(window: Window) -> np.ndarray:
    """`[1 + N, 1 + N]` (N = h * w, the class token first): the table's row of the bias between
    query `i` and key `j`, timm's `gen_relative_position_index`. Between patches Swin's index of
    their offset (`nets.swin.relative_position_index`); the class token's query to any patch the
    row after the offsets', a patch's query to the class token the next, the class token to
    itself the last."""
    offsets = table_rows(window) - CLASS_ROWS
    patches = window[0] * window[1]
    index = np.empty((1 + patches, 1 + patches), np.int32)
    index[1:, 1:] = swin.relative_position_index(window)
    index[0, :] = offsets
    index[:, 0] = offsets + 1
    index[0, 0] = offsets + 2
    return index


def table_positions(source: int, target: int) -> np.ndarray:
    """Where timm's resize places the `source` rows of one axis of a table (`source` odd offsets
    `-(source // 2) .. source // 2`) among the `target` new offsets: spaced by the powers of a
    ratio `q` found by bisection so that half of them span about half of `target` (BEiT's
    fine-tuning code's `geometric_progression`), near offsets kept near, far ones spread out.
    Where nothing fits (`target <= source`), `q` stops at its floor 1.01: the positions are then
    not the offsets themselves, and an axis of the same length is resampled too, as timm's."""
    left, right = 1.01, 1.5
    while right - left > 1e-6:
        q = (left + right) / 2.0
        if (1.0 - q ** (source // 2)) / (1.0 - q) > target // 2:
            right = q
        else:
            left = q
    steps, position = [], 1.0
    for i in range(source // 2):
        steps.append(position)
        position += q ** (i + 1)
    return np.asarray([-s for s in reversed(steps)] + [0.0] + steps, np.float32)


def interpolation(points: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """`[targets, points]` float32 weights of timm's `RegularGridInterpolator` along one axis:
    linear between the two points around a target (PyTorch's `bucketize`), the end point's value
    beyond the ends."""
    right = np.minimum(np.searchsorted(points, targets, side="left"), len(points) - 1)
    left = np.clip(right - 1, 0, len(points) - 1)
    to_left = np.maximum(targets - points[left], np.float32(0))
    to_right = np.maximum(points[right] - targets, np.float32(0))
    both = (to_left == 0) & (to_right == 0)
    to_left[both] = to_right[both] = 1.0
    total = to_left + to_right
    weights = np.zeros((len(targets), len(points)), np.float32)
    rows = np.arange(len(targets))
    np.add.at(weights, (rows, left), to_right / total)
    np.add.at(weights, (rows, right), to_left / total)
    return weights


@cache
def resize_weights(window: Window, grid: Window) -> tuple[np.ndarray, np.ndarray]:
    """The row and column interpolation matrices, `[2 grid - 1, 2 window - 1]` each, that take a
    table made for `window` to one for `grid` (timm's `resize_rel_pos_bias_table`)."""
    out = []
    for source, target in zip(window, grid, strict=True):
        source, target = 2 * source - 1, 2 * target - 1
        offsets = np.arange(-(target // 2), target // 2 + 1, dtype=np.float32)
        out.append(interpolation(table_positions(source, target), offsets))
    return out[0], out[1]


def relative_position_bias(table: jax.Array, window: Window, grid: Window) -> jax.Array:
    """`[1, heads, 1 + N, 1 + N]`: the bias of each head between the tokens of a `grid` of
    patches (N of them) and the class token, from `table` `[table_rows(window), heads]` made for
    `window`, resized to `grid` first where they differ."""
    if tuple(grid) != tuple(window):
        rows, columns = resize_weights(tuple(window), tuple(grid))
        offsets = table[:-CLASS_ROWS].reshape(rows.shape[1], columns.shape[1], -1)
        offsets = jnp.einsum(
            "yi,xj,ijh->yxh", rows, columns, offsets, precision=jax.lax.Precision.HIGHEST
        )
        table = jnp.concatenate([offsets.reshape(-1, table.shape[-1]), table[-CLASS_ROWS:]])
    return table[relative_position_index(tuple(grid))].transpose(2, 0, 1)[None]


class Attention(nn.Module):
    """Multi-head self-attention with BEiT's relative position bias added to the logits; a bias
    on the query and value projections, none on the key's (timm's BEiT `Attention`)."""

    num_heads: int
    window: Window  # the patches' grid the table is made for
    grid: Window  # the images' grid of patches
    proj_scale: float = 1.0  # timm's `fix_init_weight` of `proj`
    dtype: Any = jnp.float32
    attention: Implementation = "auto"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        batch, tokens, width = x.shape
        init = nn.initializers.truncated_normal
        dense = partial(nn.Dense, dtype=self.dtype, kernel_init=init(_STD))
        q, k, v = biased_qkv(self, x, head_shape(width, self.num_heads), dense)
        table = self.param(
            "relative_position_bias_table",
            nn.initializers.zeros,
            (table_rows(self.window), self.num_heads),
        )
        bias = relative_position_bias(table, self.window, self.grid)
        x = DotProductAttention(self.attention, name="product")(q, k, v, bias)
        proj = partial(dense, kernel_init=init(_STD * self.proj_scale))(width, name="proj")
        return proj(x.reshape(batch, tokens, width))


class Block(nn.Module):
    """Pre-norm block with LayerScale: `x + ls1(attn(norm1(x)))`, then `x + ls2(mlp(norm2(x)))`."""

    num_heads: int
    window: Window
    grid: Window
    init_values: float
    mlp_ratio: float = 4.0
    drop_path_rate: float = 0.0
    init_scale: float = 1.0  # timm's `fix_init_weight`: 1 / sqrt(2 * (block + 1))
    epsilon: float = LAYER_NORM_EPSILON
    dtype: Any = jnp.float32
    attention: Implementation = "auto"

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        norm = partial(nn.LayerNorm, epsilon=self.epsilon, dtype=self.dtype)
        attn = Attention(
            self.num_heads,
            self.window,
            self.grid,
            self.init_scale,
            self.dtype,
            self.attention,
            name="attn",
        )
        branch = LayerScale(self.init_values, name="ls1")(attn(norm(name="norm1")(x)))
        x = x + drop_path(self, branch, self.drop_path_rate, train)
        hidden = int(x.shape[-1] * self.mlp_ratio)
        mlp = Mlp(hidden, dtype=self.dtype, fc2_scale=self.init_scale, name="mlp")
        branch = LayerScale(self.init_values, name="ls2")(mlp(norm(name="norm2")(x), train))
        return x + drop_path(self, branch, self.drop_path_rate, train)


class Beit(nn.Module):
    """BEiT with `depth` blocks of width `embed_dim`.

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the pooled features
    `[batch, embed_dim]` (the patches' tokens averaged, then `fc_norm`) when `num_classes` is 0 or
    None. End points: `stem` (the class token and the patches' tokens: `[batch, 1 + patches,
    embed_dim]`), `block1`..`block{depth}`, `pre_logits`, `logits`, `predictions`. Parameter
    names are timm's but for the layer scales: `patch_embed`, `cls_token`,
    `blocks_{i}/{norm1,attn/{qkv,q_bias,v_bias,relative_position_bias_table,proj},ls1,norm2,
    mlp/{fc1,fc2},ls2}` (timm's `blocks.{i}.gamma_1` and `gamma_2` are `ls1/gamma` and
    `ls2/gamma`), `fc_norm`, `head`.
    """

    default_image_size: int = 224  # the evaluation size of the weights' recipe

    patch_size: int = 16
    embed_dim: int = 768
    depth: int = 12
    num_heads: int = 12
    mlp_ratio: float = 4.0
    init_values: float = 0.1  # the layer scales' start: BEiT-B's 0.1, the others' 1e-5
    # The image size the relative position tables are made for (timm's field); None:
    # `default_image_size`.
    img_size: int | None = None
    num_classes: int | None = 1000
    dropout_rate: float = 0.0  # timm's drop_rate, before the head
    # Stochastic depth of the residual branches, rising linearly from 0 at the first block to
    # this rate at the last (timm's rule); training only, with the 'dropout' rng.
    drop_path_rate: float = 0.0
    epsilon: float = LAYER_NORM_EPSILON  # timm's `LayerNorm` default, 1e-6
    dtype: Any = jnp.float32
    # 'auto': cuDNN's fused kernel on GPUs in half precision, else XLA's; 'xla' or 'cudnn' force.
    attention: Implementation = "auto"
    conv: ModuleDef = Conv
    remat: bool | str = False  # blocks recomputed in backward (str: nets.layers.remat.POLICIES)

    # One patch at least; every block's tokens as features; timm's `group_matcher`, EVA's.
    min_image_size = Eva02.min_image_size
    feature_strides = Eva02.feature_strides
    layer_id = Eva02.layer_id

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = True):
        side = grid_size(self.img_size or self.default_image_size, self.patch_size)
        check_drop_path_rate(self.drop_path_rate)
        end_points = {}
        x = patchify(self, x)
        batch, height, width, dim = x.shape
        cls_token = self.param("cls_token", nn.initializers.truncated_normal(_STD), (1, 1, dim))
        cls_token = jnp.broadcast_to(cls_token.astype(self.dtype), (batch, 1, dim))
        x = end_points["stem"] = jnp.concatenate([cls_token, x.reshape(batch, -1, dim)], axis=1)

        block = partial(
            checkpointed(Block, self.remat, takes_train=True),
            self.num_heads,
            (side, side),
            (height, width),
            self.init_values,
            self.mlp_ratio,
            epsilon=self.epsilon,
            dtype=self.dtype,
            attention=self.attention,
        )
        return blocks_then_head(self, block, x, end_points, train)


# timm's configurations (Bao et al. 2021, Table 1 and its fine-tunes at 384 and 512 px): B's
# layer scales start at 0.1, L's at 1e-5. BEiT v2 (Peng et al. 2022) trains the same networks,
# B's layer scales from 1e-5: the registry maps beitv2_large_patch16_224 to BEiT-L's partial.
beit_base_patch16_224 = partial(Beit, embed_dim=768, depth=12, num_heads=12, init_values=0.1)
beit_base_patch16_384 = partial(beit_base_patch16_224, default_image_size=384)
beit_large_patch16_224 = partial(Beit, embed_dim=1024, depth=24, num_heads=16, init_values=1e-5)
beit_large_patch16_384 = partial(beit_large_patch16_224, default_image_size=384)
beit_large_patch16_512 = partial(beit_large_patch16_224, default_image_size=512)
beitv2_base_patch16_224 = partial(beit_base_patch16_224, init_values=1e-5)

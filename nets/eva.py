"""EVA-02's ImageNet classifiers: a ViT with 2-D rotary position embeddings and SwiGLU MLPs.

Fang et al. 2023, "EVA-02: A Visual Representation for Neon Genesis" (arXiv:2303.11331), as
timm's `Eva` (`timm/models/eva.py`) builds its `eva02_*_patch14_*` networks: ViT's patch
embedding, class token and learned position embeddings (`nets.vit`), then `depth` pre-norm blocks
whose attention rotates the patches' queries and keys by their row and column (RoPE, Su et al.
2021, made 2-D: `rotary_embedding`; the class token is left unrotated), with a bias on the query
and value projections but none on the key's, and a SwiGLU MLP (`silu(x W_g) * (x W_x)`, then
`fc2`; Shazeer 2020) with hidden width `int(embed_dim * 8 / 3)`. The patches' tokens are
averaged, then normalised (`fc_norm`, no final `norm`), then classified.

timm's two layouts of the same block are fields here, as its registry sets them: Ti and S
(`qkv_fused=True`, `scale_mlp=False`) have one `qkv` projection and its `q_bias` and `v_bias`,
and one `fc1` computing gate and value (first half the gate); B and L (`qkv_fused=False`,
`scale_mlp=True`) have `q_proj`, `k_proj`, `v_proj`, and split `fc1_g`, `fc1_x` with a LayerNorm
(`norm`, NormFormer's) on the MLP's hidden units before `fc2`.

Where this differs from timm's `Eva`:
- At another image size than `img_size`, the position embeddings are resampled (bicubic with
  antialiasing, `nets.vit.resample_position_embeddings`) and the rotary embedding computed for the
  new grid, both every call, as timm's `dynamic_img_size=True` does; timm without it refuses.
- `dropout_rate` is timm's `drop_rate` (before the head) only; timm's `proj_drop_rate`,
  `attn_drop_rate`, `pos_drop_rate` and `patch_drop_rate`, all 0 in its recipes, are not fields.
- `regularization_loss` covers the convolution and dense kernels only: not LayerNorm, biases
  (`q_bias` and `v_bias` included), `pos_embed` or `cls_token`, as timm's `no_weight_decay()`
  and its optimizer factory (no decay for 1-D parameters).
"""

from functools import cache, partial
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from nets.layers import Conv, DotProductAttention, ModuleDef, checkpointed, classify, drop_path
from nets.layers.attention import Implementation
from nets.layers.drop_path import check_drop_path_rate, linear_drop_path_rates
from nets.vit import LAYER_NORM_EPSILON, embed_patches, grid_size, head_shape

ROPE_TEMPERATURE = 10000.0  # timm's `rope_temperature`, the frequencies' base
_STD = 0.02  # timm's init of every Linear (truncated normal), the tokens and position embeddings


@cache
def rotary_embedding(
    grid: tuple[int, int], head_dim: int, ref_grid: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray]:
    """`(sin, cos)`, each `[grid[0] * grid[1], head_dim]` float32: timm's `RotaryEmbeddingCat`
    (`in_pixels=False`, 'ij' indexing, interleaved) for a `grid` of patches.

    A patch at row `i`, column `j` has the coordinates `(i * ref_grid[0] / grid[0], j * ref_grid[1]
    / grid[1])` (EVA's rescaling to the pretraining grid, timm's `ref_feat_shape`); each coordinate
    times `head_dim / 4` frequencies `10000 ** (-k / (head_dim / 4))` gives the angles, the row's
    then the column's, each repeated twice: channels `2m` and `2m + 1` rotate together by angle
    `m`. Computed in float32 with numpy, in timm's order of operations."""
    if head_dim % 4:
        raise ValueError(f"head_dim {head_dim} is not a multiple of 4: RoPE needs 2 axes x pairs")
    bands = head_dim // 4
    exponent = np.arange(bands, dtype=np.float32) / np.float32(bands)
    frequencies = np.float32(1.0) / (np.float32(ROPE_TEMPERATURE) ** exponent)
    axes = [
        np.arange(size, dtype=np.float32) / np.float32(size) * np.float32(ref)
        for size, ref in zip(grid, ref_grid, strict=True)
    ]
    coordinates = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1)  # [h, w, 2]
    angles = (coordinates[..., None] * frequencies).reshape(grid[0] * grid[1], 2 * bands)
    angles = np.repeat(angles, 2, axis=-1)
    return np.sin(angles).astype(np.float32), np.cos(angles).astype(np.float32)


def rotate(x: jax.Array, sin: np.ndarray, cos: np.ndarray, prefix: int) -> jax.Array:
    """timm's `apply_rot_embed_cat` on the tokens after the first `prefix` (the class token):
    `x * cos + rot(x) * sin`, `rot` taking each channel pair `(a, b)` to `(-b, a)`; computed in
    float32 and returned in `x`'s dtype, as timm. `x`: `[batch, tokens, heads, head_dim]`."""
    tokens = x[:, prefix:].astype(jnp.float32)
    turned = jnp.stack([-tokens[..., 1::2], tokens[..., ::2]], axis=-1).reshape(tokens.shape)
    sin, cos = sin[None, :, None], cos[None, :, None]  # over batch and heads
    rotated = (tokens * cos + turned * sin).astype(x.dtype)
    return jnp.concatenate([x[:, :prefix], rotated], axis=1)


def _dense(scale: float = 1.0, **kwargs: Any) -> partial:
    return partial(nn.Dense, kernel_init=nn.initializers.truncated_normal(_STD * scale), **kwargs)


def biased_qkv(
    module: nn.Module, x: jax.Array, heads: tuple[int, int], dense: partial
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """timm's fused projection whose query and value have a learnt bias and whose key has none
    (EVA's Ti and S, BEiT's), inside `module`'s compact call: `qkv`, a `dense` without bias, and
    `module`'s parameters `q_bias` and `v_bias` (zeros, as timm's). `x` `[batch, tokens, width]`
    -> `(q, k, v)`, each `[batch, tokens, *heads]`, in `module.dtype`."""
    batch, tokens, width = x.shape
    q_bias = module.param("q_bias", nn.initializers.zeros, (width,))
    v_bias = module.param("v_bias", nn.initializers.zeros, (width,))
    bias = jnp.concatenate([q_bias, jnp.zeros_like(q_bias), v_bias]).astype(module.dtype)
    qkv = dense(3 * width, use_bias=False, name="qkv")(x) + bias
    # timm's order of the 3 * width outputs: (q, k, v), then heads, then head_dim.
    qkv = qkv.reshape(batch, tokens, 3, *heads)
    return qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]


class Attention(nn.Module):
    """Multi-head self-attention with RoPE on the patches' queries and keys; a bias on the query
    and value projections, none on the key's (timm's `EvaAttention`)."""

    num_heads: int
    grid: tuple[int, int]  # the patches' grid, for the rotary embedding
    ref_grid: tuple[int, int]
    prefix: int = 1  # the tokens before the patches, left unrotated
    qkv_fused: bool = True
    proj_scale: float = 1.0  # timm's `fix_init_weight` of `proj`
    dtype: Any = jnp.float32
    attention: Implementation = "auto"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        batch, tokens, width = x.shape
        heads = head_shape(width, self.num_heads)
        dense = _dense(dtype=self.dtype)
        if self.qkv_fused:
            q, k, v = biased_qkv(self, x, heads, dense)
        else:
            q = dense(width, name="q_proj")(x).reshape(batch, tokens, *heads)
            k = dense(width, use_bias=False, name="k_proj")(x).reshape(batch, tokens, *heads)
            v = dense(width, name="v_proj")(x).reshape(batch, tokens, *heads)
        sin, cos = rotary_embedding(self.grid, heads[1], self.ref_grid)
        q, k = rotate(q, sin, cos, self.prefix), rotate(k, sin, cos, self.prefix)
        x = DotProductAttention(self.attention, name="product")(q, k, v)
        proj = _dense(self.proj_scale, dtype=self.dtype)(width, name="proj")
        return proj(x.reshape(batch, tokens, width))


class SwiGLU(nn.Module):
    """`fc2(silu(gate) * value)`: with `scale_mlp`, gate and value from `fc1_g` and `fc1_x` and a
    LayerNorm `norm` on their product (timm's `SwiGLU`); else both from one `fc1`, the gate its
    first half (timm's `GluMlp`, `gate_last=False`), or its second with `gate_last` (timm's
    `GluMlp` default, gMixer's)."""

    hidden: int
    scale_mlp: bool = False
    epsilon: float = LAYER_NORM_EPSILON
    fc2_scale: float = 1.0  # timm's `fix_init_weight` of `fc2`
    dtype: Any = jnp.float32
    gate_last: bool = False  # the packed `fc1`'s gate is its second half

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        dense = _dense(dtype=self.dtype)
        width = x.shape[-1]
        if self.scale_mlp:
            x = nn.silu(dense(self.hidden, name="fc1_g")(x)) * dense(self.hidden, name="fc1_x")(x)
            x = nn.LayerNorm(self.epsilon, dtype=self.dtype, name="norm")(x)
        else:
            halves = jnp.split(dense(2 * self.hidden, name="fc1")(x), 2, axis=-1)
            x, gate = halves if self.gate_last else halves[::-1]
            x = nn.silu(gate) * x
        return _dense(self.fc2_scale, dtype=self.dtype)(width, name="fc2")(x)


class Block(nn.Module):
    """Pre-norm block: `x + attn(norm1(x))`, then `x + mlp(norm2(x))`."""

    num_heads: int
    hidden: int
    grid: tuple[int, int]
    ref_grid: tuple[int, int]
    qkv_fused: bool = True
    scale_mlp: bool = False
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
            self.grid,
            self.ref_grid,
            qkv_fused=self.qkv_fused,
            proj_scale=self.init_scale,
            dtype=self.dtype,
            attention=self.attention,
            name="attn",
        )
        x = x + drop_path(self, attn(norm(name="norm1")(x)), self.drop_path_rate, train)
        mlp = SwiGLU(
            self.hidden, self.scale_mlp, self.epsilon, self.init_scale, self.dtype, name="mlp"
        )
        return x + drop_path(self, mlp(norm(name="norm2")(x)), self.drop_path_rate, train)


class Eva02(nn.Module):
    """EVA-02 with `depth` blocks of width `embed_dim`.

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the pooled features
    `[batch, embed_dim]` (the patches' tokens averaged, then `fc_norm`) when `num_classes` is 0 or
    None. End points: `stem` (the class token and the patches' tokens, position embeddings added:
    `[batch, 1 + patches, embed_dim]`), `block1`..`block{depth}`, `pre_logits`, `logits`,
    `predictions`. Parameter names are timm's: `patch_embed`, `cls_token`, `pos_embed` (`[1, 1 +
    (img_size / patch_size)**2, embed_dim]`), `blocks_{i}/{norm1,attn,norm2,mlp}` (the attention's
    and MLP's as the module docstring says), `fc_norm`, `head`.
    """

    default_image_size: int = 224  # the evaluation size of the weights' recipe

    patch_size: int = 14
    embed_dim: int = 768
    depth: int = 12
    num_heads: int = 12
    mlp_ratio: float = 4 * 2 / 3  # SwiGLU's hidden width, 8/3 of embed_dim (int() of it)
    qkv_fused: bool = True  # one `qkv` projection (Ti, S), or `q_proj`, `k_proj`, `v_proj`
    scale_mlp: bool = False  # split `fc1_g`, `fc1_x` and a LayerNorm on the hidden units (B, L)
    # The grid the rotary embedding's coordinates are scaled to (timm's `ref_feat_shape`):
    # EVA-02's pretraining grid, 224 / 14 = 16, at every fine-tuned size.
    ref_feat_shape: int = 16
    # The image size the position embeddings are made for (timm's field); None:
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

    @property
    def min_image_size(self) -> int:
        """One patch."""
        return self.patch_size

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: every block's tokens, on the patch grid (`nets.features`)."""
        return {f"block{i + 1}": self.patch_size for i in range(self.depth)}

    def layer_id(self, path: tuple[str, ...]) -> int:
        """The depth of the parameter under module `path`, for layer-wise learning-rate decay
        (timm's `group_matcher`): 0 for the patch embedding, class token and position
        embeddings, `i + 1` for `blocks_i`, `depth + 1` for `fc_norm` and `head`."""
        top = path[0] if path else ""  # the token and position embeddings have no module
        if top in ("", "patch_embed"):
            return 0
        if top.startswith("blocks_"):
            return int(top.removeprefix("blocks_")) + 1
        return self.depth + 1

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = True):
        grid = grid_size(self.img_size or self.default_image_size, self.patch_size)
        check_drop_path_rate(self.drop_path_rate)
        end_points = {}
        init = nn.initializers.truncated_normal(_STD)
        x, pos_embed, (height, width) = embed_patches(self, x, grid, 1, init)
        batch, _, dim = x.shape
        cls_token = self.param("cls_token", init, (1, 1, dim)) + pos_embed[:, :1]
        cls_token = jnp.broadcast_to(cls_token.astype(self.dtype), (batch, 1, dim))
        x = end_points["stem"] = jnp.concatenate([cls_token, x], axis=1)

        block = partial(
            checkpointed(Block, self.remat, takes_train=True),
            self.num_heads,
            int(dim * self.mlp_ratio),  # timm's int(): 192 * 8 / 3 -> 512
            (height, width),
            (self.ref_feat_shape, self.ref_feat_shape),
            self.qkv_fused,
            self.scale_mlp,
            epsilon=self.epsilon,
            dtype=self.dtype,
            attention=self.attention,
        )
        return blocks_then_head(self, block, x, end_points, train)


def blocks_then_head(
    module: nn.Module, block: partial, x: jax.Array, end_points: dict[str, jax.Array], train: bool
):
    """EVA-02's and BEiT's networks after the class token, inside `module`'s compact call (its
    `depth`, `drop_path_rate`, `epsilon`, `num_classes`, `dropout_rate` and `dtype`): `depth`
    blocks `block(drop_path_rate=..., init_scale=..., name='blocks_{i}')(x, train)`, stochastic
    depth rising linearly and timm's `fix_init_weight` scale `1 / sqrt(2 (i + 1))`, each recorded
    as `block{i + 1}`; the patches' tokens (after the class token) averaged, `fc_norm`, and the
    classifier `head`. Returns `classify`'s `(logits, end_points)`."""
    rates = linear_drop_path_rates(module.drop_path_rate, module.depth)
    for i in range(module.depth):
        scale = (2.0 * (i + 1)) ** -0.5
        layer = block(drop_path_rate=rates[i], init_scale=scale, name=f"blocks_{i}")
        x = end_points[f"block{i + 1}"] = layer(x, train)

    features = nn.LayerNorm(module.epsilon, dtype=module.dtype, name="fc_norm")(
        jnp.mean(x[:, 1:], axis=1)
    )
    # timm starts the classifier at a thousandth of its Linear init (`head_init_scale`).
    head_init = nn.initializers.truncated_normal(_STD * 1e-3)
    return classify(
        features,
        end_points,
        module.num_classes,
        train=train,
        dropout_rate=module.dropout_rate,
        dtype=module.dtype,
        name="head",
        kernel_init=head_init,
    )


# timm's configurations (Fang et al. 2023, Table 1: Ti, S, B, L), at their pretraining size (224,
# 16x16 patches of 14 pixels: the MIM encoders, published without a classifier) and at their
# ImageNet fine-tunes' (336 for Ti and S, 448 for B and L).
_BASE_LAYOUT = {"qkv_fused": False, "scale_mlp": True}
eva02_tiny_patch14_224 = partial(Eva02, embed_dim=192, depth=12, num_heads=3)
eva02_small_patch14_224 = partial(Eva02, embed_dim=384, depth=12, num_heads=6)
eva02_base_patch14_224 = partial(Eva02, embed_dim=768, depth=12, num_heads=12, **_BASE_LAYOUT)
eva02_large_patch14_224 = partial(Eva02, embed_dim=1024, depth=24, num_heads=16, **_BASE_LAYOUT)
eva02_tiny_patch14_336 = partial(eva02_tiny_patch14_224, default_image_size=336)
eva02_small_patch14_336 = partial(eva02_small_patch14_224, default_image_size=336)
eva02_base_patch14_448 = partial(eva02_base_patch14_224, default_image_size=448)
eva02_large_patch14_448 = partial(eva02_large_patch14_224, default_image_size=448)

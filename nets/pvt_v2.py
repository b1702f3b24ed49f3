"""Pyramid Vision Transformer v2: Wang et al. 2022, "PVT v2: Improved Baselines with Pyramid
Vision Transformer" (arXiv:2106.13797), as timm 1.0 builds it (`timm.models.pvt_v2`).

Four stages of NHWC maps at strides 4, 8, 16, 32, each opened by an overlapping patch embedding
(a strided convolution wider than its stride, PyTorch's symmetric padding `k // 2`, then a
LayerNorm: 7x7/4 into the first stage, 3x3/2 into the others), then blocks of LayerNorm,
spatial-reduction attention, residual; LayerNorm, an MLP with a 3x3 depthwise convolution between
its two linear layers, residual; each stage ends in a LayerNorm. The attention's queries are
every token; its keys and values come from the map reduced by a `sr x sr`/`sr` convolution and a
LayerNorm (`sr` 8, 4, 2, 1 per stage: 49 keys for 3,136 queries in the first stage at 224 px),
or, in the linear variant (`linear=True`, pvt_v2_b2_li), from the map average-pooled to 7x7
(PyTorch's adaptive bins), a 1x1 convolution, LayerNorm and GELU, whatever the image size; that
variant's MLP also puts a ReLU before the depthwise convolution. Average pooling of the last map
and the classifier. Parameter counts are timm's: 3,666,760 for B0 at 1000 classes.

Conventions of timm's that the weights need (each a field or constant below):
- LayerNorm epsilon: 1e-6 in the blocks and at the end of each stage (timm's `LayerNorm`), 1e-5
  in the patch embeddings and the attention's reduction (`torch.nn.LayerNorm`'s default).
- Symmetric padding of the patch embeddings and the depthwise convolution (TensorFlow's 'SAME'
  would shift the stride-4 and stride-2 windows by a pixel); the reduction is 'VALID', so a map
  that is not a multiple of `sr` loses its last rows and columns to it, as in timm.
- Exact (erf) GELU; keys and values from one `kv` projection, ordered (k, v), heads, head_dim.

Where this differs from timm's `PyramidVisionTransformerV2`:
- Regularisation: `drop_path_rate` rises linearly over all blocks from 0 (timm's schedule and
  default); `dropout_rate` is timm's `drop_rate`, before the classifier only. timm's
  `proj_drop_rate` and `attn_drop_rate` (0 in every published configuration) are not fields.
- Initialisation: dense kernels from a normal of standard deviation 0.02 cut at two, biases zero
  (timm's); convolutions ~N(0, 2 / fan_out) with fan_out `k * k * out / groups` (timm's); the
  LayerNorms ones and zeros.
- Weight decay (`NetworkFn.regularization_loss`) covers convolution and dense kernels only (timm's
  optimizer factory leaves out every 1-D parameter as well).

MACs: every convolution and dense layer, and the attention's two products (`q k^T` over the
reduced keys, then the values) as PyTorch's `FlopCounterMode` counts them; pooling and norms are
not multiply-accumulates.

End points: `stem` (the first patch embedding, `[batch, h/4, w/4, C0]`), `stage1`..`stage4` (each
stage's normed map, NHWC, timm's `stages.{i}` and its `feature_info`), `pre_logits`, `logits`,
`predictions`.
"""

from collections.abc import Sequence
from functools import partial
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from nets.layers import (
    Conv,
    DotProductAttention,
    ModuleDef,
    adaptive_avg_pool,
    checkpointed,
    classify,
    drop_path,
    global_avg_pool,
)
from nets.layers.attention import Implementation
from nets.layers.drop_path import check_drop_path_rate, linear_drop_path_rates
from nets.layers.padding import smallest_input
from nets.vit import ACTIVATIONS, head_shape

BLOCK_EPSILON = 1e-6  # timm's LayerNorm: the blocks' norm1 / norm2 and each stage's norm
TORCH_EPSILON = 1e-5  # torch.nn.LayerNorm's: the patch embeddings' and the reduction's norms
LINEAR_POOL = 7  # the linear variant's keys and values: the map average-pooled to 7x7
_DENSE_INIT = nn.initializers.truncated_normal(0.02)
_gelu = ACTIVATIONS["gelu"]  # exact (erf), torch.nn.GELU's default


def conv_init(groups: int = 1) -> nn.initializers.Initializer:
    """timm's `_init_weights` of a convolution: ~N(0, 2 / fan_out), fan_out `kh * kw * out /
    groups` (flax's fan_out of an HWIO kernel is `kh * kw * out`)."""
    return nn.initializers.variance_scaling(2.0 * groups, "fan_out", "normal")


class OverlapPatchEmbed(nn.Module):
    """`proj`, a `patch_size` convolution at `stride` padded by `patch_size // 2` on every side
    (PyTorch's), then `norm`, a LayerNorm."""

    features: int
    patch_size: int
    stride: int
    conv: ModuleDef
    epsilon: float = TORCH_EPSILON
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = self.conv(
            self.features,
            (self.patch_size, self.patch_size),
            strides=self.stride,
            padding=self.patch_size // 2,
            dtype=self.dtype,
            kernel_init=conv_init(),
            name="proj",
        )(x)
        return nn.LayerNorm(epsilon=self.epsilon, dtype=self.dtype, name="norm")(x)


class SpatialReductionAttention(nn.Module):
    """Multi-head attention of every token (`q`) over a reduced map's tokens (`kv`), then `proj`.

    The reduction: with `linear`, the map average-pooled to 7x7, `sr` a 1x1 convolution, `norm`,
    GELU; else, with `sr_ratio` > 1, `sr` an `sr x sr`/`sr` 'VALID' convolution and `norm`; else
    none (self-attention)."""

    num_heads: int
    sr_ratio: int = 1
    linear: bool = False
    conv: ModuleDef = Conv
    epsilon: float = TORCH_EPSILON
    dtype: Any = jnp.float32
    attention: Implementation = "auto"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """`x`: `[b, h, w, c]` -> the same shape."""
        batch, height, width, channels = x.shape
        heads, head_dim = head_shape(channels, self.num_heads)
        dense = partial(nn.Dense, dtype=self.dtype, kernel_init=_DENSE_INIT)
        conv = partial(self.conv, channels, dtype=self.dtype, kernel_init=conv_init(), name="sr")
        norm = partial(nn.LayerNorm, epsilon=self.epsilon, dtype=self.dtype, name="norm")
        q = dense(channels, name="q")(x).reshape(batch, height * width, heads, head_dim)
        if self.linear:
            x = _gelu(norm()(conv((1, 1))(adaptive_avg_pool(x, LINEAR_POOL))))
        elif self.sr_ratio > 1:
            sr = (self.sr_ratio, self.sr_ratio)
            x = norm()(conv(sr, strides=sr, padding="VALID")(x))
        kv = dense(2 * channels, name="kv")(x).reshape(batch, -1, 2, heads, head_dim)
        product = DotProductAttention(self.attention, name="product")
        x = product(q, kv[:, :, 0], kv[:, :, 1]).reshape(batch, height, width, channels)
        return dense(channels, name="proj")(x)


class MlpWithDepthwiseConv(nn.Module):
    """`fc1`, (ReLU, with `linear`), `dwconv` a 3x3 depthwise convolution padded by one, exact
    GELU, `fc2` (timm's dropouts after each linear layer are at its `proj_drop_rate`, 0 in every
    published configuration: not here)."""

    hidden: int
    linear: bool = False
    conv: ModuleDef = Conv
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        dense = partial(nn.Dense, dtype=self.dtype, kernel_init=_DENSE_INIT)
        width = x.shape[-1]
        x = dense(self.hidden, name="fc1")(x)
        if self.linear:
            x = nn.relu(x)
        x = self.conv(
            self.hidden,
            (3, 3),
            padding=1,
            feature_group_count=self.hidden,
            dtype=self.dtype,
            kernel_init=conv_init(self.hidden),
            name="dwconv",
        )(x)
        return dense(width, name="fc2")(_gelu(x))


class Block(nn.Module):
    """`x + drop_path(attn(norm1(x)))`, then `x + drop_path(mlp(norm2(x)))`, on NHWC maps."""

    num_heads: int
    sr_ratio: int
    linear: bool = False
    mlp_ratio: float = 4.0
    drop_path_rate: float = 0.0
    epsilon: float = BLOCK_EPSILON
    embed_epsilon: float = TORCH_EPSILON
    conv: ModuleDef = Conv
    dtype: Any = jnp.float32
    attention: Implementation = "auto"

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        norm = partial(nn.LayerNorm, epsilon=self.epsilon, dtype=self.dtype)
        attn = SpatialReductionAttention(
            self.num_heads,
            self.sr_ratio,
            self.linear,
            self.conv,
            self.embed_epsilon,
            self.dtype,
            self.attention,
            name="attn",
        )
        x = x + drop_path(self, attn(norm(name="norm1")(x)), self.drop_path_rate, train)
        mlp = MlpWithDepthwiseConv(
            int(x.shape[-1] * self.mlp_ratio), self.linear, self.conv, self.dtype, name="mlp"
        )
        return x + drop_path(self, mlp(norm(name="norm2")(x)), self.drop_path_rate, train)


class Stage(nn.Module):
    """timm's `PyramidVisionTransformerStage`: a 3x3/2 overlapping patch embedding to `features`
    channels (`downsample`, all stages but the first), `depth` blocks, then `norm`."""

    depth: int
    features: int
    num_heads: int
    sr_ratio: int
    mlp_ratio: float
    drop_path_rates: tuple[float, ...]
    downsample: bool = True
    linear: bool = False
    epsilon: float = BLOCK_EPSILON
    embed_epsilon: float = TORCH_EPSILON
    conv: ModuleDef = Conv
    dtype: Any = jnp.float32
    attention: Implementation = "auto"
    remat: bool | str = False

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        if self.downsample:
            x = OverlapPatchEmbed(
                self.features, 3, 2, self.conv, self.embed_epsilon, self.dtype, name="downsample"
            )(x)
        block = checkpointed(Block, self.remat, takes_train=True)
        for j in range(self.depth):
            x = block(
                self.num_heads,
                self.sr_ratio,
                self.linear,
                self.mlp_ratio,
                self.drop_path_rates[j],
                self.epsilon,
                self.embed_epsilon,
                self.conv,
                self.dtype,
                self.attention,
                name=f"blocks_{j}",
            )(x, train)
        return nn.LayerNorm(epsilon=self.epsilon, dtype=self.dtype, name="norm")(x)


class PyramidVisionTransformerV2(nn.Module):
    """PVT v2 with stages of `depths` blocks, `embed_dims[i]` wide in `num_heads[i]` heads, keys
    reduced by `sr_ratios[i]` (or pooled to 7x7 with `linear`), MLPs `mlp_ratios[i]` wide.

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the pooled features
    `[batch, embed_dims[-1]]` when `num_classes` is 0 or None. Parameter names are timm's:
    `patch_embed/{proj,norm}`, `stages_{i}/downsample/{proj,norm}` (stages 1-3),
    `stages_{i}/blocks_{j}/{norm1,attn/{q,kv,sr,norm,proj},norm2,mlp/{fc1,dwconv,fc2}}`,
    `stages_{i}/norm`, `head`.
    """

    default_image_size: ClassVar[int] = 224  # the paper's ImageNet-1k resolution

    depths: Sequence[int] = (2, 2, 2, 2)
    embed_dims: Sequence[int] = (32, 64, 160, 256)
    num_heads: Sequence[int] = (1, 2, 5, 8)
    sr_ratios: Sequence[int] = (8, 4, 2, 1)
    mlp_ratios: Sequence[float] = (8.0, 8.0, 4.0, 4.0)
    linear: bool = False  # keys and values pooled to 7x7 (pvt_v2_b2_li), MLPs with a ReLU
    num_classes: int | None = 1000
    dropout_rate: float = 0.0  # before the classifier (timm's `drop_rate`)
    # Stochastic depth of the residual branches, rising linearly from 0 at the first block to
    # this rate at the last (timm's schedule); training only, with the 'dropout' rng.
    drop_path_rate: float = 0.0
    epsilon: float = BLOCK_EPSILON
    embed_epsilon: float = TORCH_EPSILON
    dtype: Any = jnp.float32
    # 'auto': cuDNN's fused kernel on GPUs in half precision, else XLA's; 'xla' or 'cudnn' force.
    attention: Implementation = "auto"
    conv: ModuleDef = Conv
    remat: bool | str = False  # stem, blocks recomputed in backward (nets.layers.remat.POLICIES)

    @property
    def min_image_size(self) -> int:
        """Enough pixels for every stage's 'VALID' reduction to see one `sr x sr` window (29 for
        sr 8 after the 7x7/4 embedding); the linear variant's pooling takes any map."""
        if self.linear:
            return 1
        embeds = [(7, 4, 6)] + [(3, 2, 2)] * (len(self.depths) - 1)
        return max(
            smallest_input([*embeds[: i + 1], (sr, sr, 0)]) for i, sr in enumerate(self.sr_ratios)
        )

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: each stage's normed map (`nets.features`)."""
        return {f"stage{i + 1}": 4 * 2**i for i in range(len(self.depths))}

    def layer_id(self, path: tuple[str, ...]) -> int:
        """The depth of the parameter under module `path`, for layer-wise learning-rate decay
        (timm's `group_matcher`): 0 for the patch embedding, `1 + i` for stage `i`, the head
        last."""
        if path[0] == "patch_embed":
            return 0
        if path[0].startswith("stages_"):
            return 1 + int(path[0].removeprefix("stages_"))
        return len(self.depths) + 1

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = True):
        self._check()
        end_points = {}
        x = end_points["stem"] = checkpointed(OverlapPatchEmbed, self.remat)(  # one unit
            self.embed_dims[0], 7, 4, self.conv, self.embed_epsilon, self.dtype, name="patch_embed"
        )(jnp.asarray(x, self.dtype))
        rates = linear_drop_path_rates(self.drop_path_rate, sum(self.depths))
        for i, depth in enumerate(self.depths):
            first = sum(self.depths[:i])
            x = end_points[f"stage{i + 1}"] = Stage(
                depth,
                self.embed_dims[i],
                self.num_heads[i],
                self.sr_ratios[i],
                self.mlp_ratios[i],
                tuple(rates[first : first + depth]),
                downsample=i > 0,
                linear=self.linear,
                epsilon=self.epsilon,
                embed_epsilon=self.embed_epsilon,
                conv=self.conv,
                dtype=self.dtype,
                attention=self.attention,
                remat=self.remat,
                name=f"stages_{i}",
            )(x, train)
        return classify(
            global_avg_pool(x),
            end_points,
            self.num_classes,
            train=train,
            dropout_rate=self.dropout_rate,
            dtype=self.dtype,
            name="head",
            kernel_init=_DENSE_INIT,
        )

    def _check(self) -> None:
        per_stage = (self.embed_dims, self.num_heads, self.sr_ratios, self.mlp_ratios)
        if not self.depths or any(len(v) != len(self.depths) for v in per_stage):
            raise ValueError(
                "PVT v2 needs one embed_dim, num_heads, sr_ratio and mlp_ratio per stage: depths "
                f"{tuple(self.depths)}, embed_dims {tuple(self.embed_dims)}, num_heads "
                f"{tuple(self.num_heads)}, sr_ratios {tuple(self.sr_ratios)}, mlp_ratios "
                f"{tuple(self.mlp_ratios)}"
            )
        check_drop_path_rate(self.drop_path_rate)


# timm's configurations (Wang et al. Table 1): B0 ... B5, and B2 with linear spatial reduction.
_WIDE = {"embed_dims": (64, 128, 320, 512)}
pvt_v2_b0 = partial(PyramidVisionTransformerV2, depths=(2, 2, 2, 2), embed_dims=(32, 64, 160, 256))
pvt_v2_b1 = partial(PyramidVisionTransformerV2, depths=(2, 2, 2, 2), **_WIDE)
pvt_v2_b2 = partial(PyramidVisionTransformerV2, depths=(3, 4, 6, 3), **_WIDE)
pvt_v2_b2_li = partial(PyramidVisionTransformerV2, depths=(3, 4, 6, 3), linear=True, **_WIDE)
pvt_v2_b3 = partial(PyramidVisionTransformerV2, depths=(3, 4, 18, 3), **_WIDE)
pvt_v2_b4 = partial(PyramidVisionTransformerV2, depths=(3, 8, 27, 3), **_WIDE)
pvt_v2_b5 = partial(
    PyramidVisionTransformerV2, depths=(3, 6, 40, 3), mlp_ratios=(4.0,) * 4, **_WIDE
)

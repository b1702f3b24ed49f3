"""EfficientFormer: Li et al. 2022, "EfficientFormer: Vision Transformers at MobileNet Speed"
(arXiv:2206.01191), as timm 1.0 builds it (`timm.models.efficientformer`).

A stem of two 3x3/2 convolutions (biased, BatchNorm, ReLU each), four stages (each but the first
opened by a biased 3x3/2 convolution with BatchNorm), made of PoolFormer-like blocks on NHWC
maps (`MetaBlock2d`: `x + ls1(pool(x) - x)`, then `x + ls2(mlp(x))`, the MLP of biased 1x1
convolutions each followed by BatchNorm, exact GELU between), and, for the last `num_vit` blocks
of the last stage, Transformer blocks on its `h * w` tokens (`MetaBlock1d`: `x +
ls1(attn(norm1(x)))`, `x + ls2(mlp(norm2(x)))`, LayerNorm epsilon 1e-5). The attention is
LeViT's: 8 heads with keys of 32 channels and values of 128 (`attn_ratio` 4), so `qkv` gives
`heads * (32 + 32 + 128)` outputs (ordered heads, then q, k, v), and a learnt bias per head and
absolute offset `(|dh|, |dw|)` of two tokens (`attention_biases`, `[heads, r * r]` for the
`r x r` map, TinyViT's indexing: `nets.tiny_vit.attention_bias_index`). The tokens are
LayerNormed (`norm`), averaged, and classified by two heads, `head` and the distillation head
`head_dist`, whose logits are averaged. Every layer scale starts at 1e-5. Parameter counts are
timm's: 12,289,928 for efficientformer_l1 at 1000 classes.

The bias tables are made for a `attention_resolution` map (7: 224 px, as timm fixes them): the
last stage's map must be that size, so images of 193 to 224 px run (each 3x3/2 convolution
leaves `ceil(n / 2)` pixels) and others are refused in one line (timm's `fixed_input_size`).

Where this differs from timm's `EfficientFormer`:
- The two heads' mean is `logits` in training too, as timm returns it unless
  `set_distilled_training(True)`; each head's logits are always in `end_points` (`cls_logits`,
  `dist_logits`, as DeiT's in `nets.vit`), so distillation trains from there.
- Activations are NHWC, and the MLPs' 1x1 convolutions are dense layers (the same function;
  timm's `[out, in, 1, 1]` weights fill them).
- Initialisation: dense kernels truncated normal 0.02, biases zero (timm's); convolutions
  flax's default (timm: PyTorch's); `attention_biases` zero (timm's).
- Weight decay (`NetworkFn.regularization_loss`) covers the convolution and dense kernels only,
  not the norms, layer scales, biases or `attention_biases` (timm's `no_weight_decay()` names the
  last; its optimizer factory leaves out every 1-D parameter).
- `drop_path_rate` rises linearly over all blocks from 0 (timm's schedule); `dropout_rate` is
  timm's `drop_rate`, before the heads; timm's `proj_drop_rate` (0) is not a field.

End points: `stem` (`[batch, h/4, w/4, C0]`), `stage1`..`stage4` (NHWC at strides 4, 8, 16, 32,
the last stage's tokens as their map: timm's `stages.{i}`), `pre_logits` (the averaged,
normalised tokens), `cls_logits`, `dist_logits`, `logits`, `predictions`.
"""

from collections.abc import Sequence
from functools import partial
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from nets.layers import (
    TORCH,
    Conv,
    LayerScale,
    ModuleDef,
    batch_norm,
    checkpointed,
    classify_distilled,
    drop_path,
    gelu,
)
from nets.layers.attention import BiasedProduct
from nets.layers.drop_path import check_drop_path_rate, linear_drop_path_rates
from nets.layers.padding import smallest_input
from nets.metaformer import pooling
from nets.tiny_vit import attention_bias_index
from nets.vit import Mlp

LAYER_NORM_EPSILON = 1e-5  # torch.nn.LayerNorm's default, timm's EfficientFormer's
_INIT = nn.initializers.truncated_normal(0.02)


class Attention(nn.Module):
    """`qkv`, the product with a learnt bias per head and token offset, `proj` (timm's)."""

    resolution: int
    num_heads: int = 8
    key_dim: int = 32
    attn_ratio: int = 4
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """`x`: `[batch, r * r, C]`, the tokens of the `r x r` map, row-major."""
        batch, tokens, width = x.shape
        heads, key_dim, val_dim = self.num_heads, self.key_dim, self.attn_ratio * self.key_dim
        biases = self.param("attention_biases", nn.initializers.zeros, (heads, self.resolution**2))
        bias = biases[:, attention_bias_index(self.resolution)]
        dense = partial(nn.Dense, dtype=self.dtype, kernel_init=_INIT)
        qkv = dense(heads * (2 * key_dim + val_dim), name="qkv")(x)
        q, k, v = jnp.split(qkv.reshape(batch, tokens, heads, -1), [key_dim, 2 * key_dim], -1)
        x = BiasedProduct(name="product")(q, k, v, bias)
        return dense(width, name="proj")(x.reshape(batch, tokens, heads * val_dim))


class ConvMlpWithNorm(nn.Module):
    """`norm2(fc2(gelu(norm1(fc1(x)))))`, `fc1` to `hidden`, BatchNorm after each (timm's
    `ConvMlpWithNorm`; its 1x1 convolutions are dense layers on NHWC maps)."""

    hidden: int
    norm: ModuleDef  # BatchNorm
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        dense = partial(nn.Dense, dtype=self.dtype, kernel_init=_INIT)
        y = self.norm(name="norm1")(dense(self.hidden, name="fc1")(x))
        y = gelu(y)
        return self.norm(name="norm2")(dense(x.shape[-1], name="fc2")(y))


class MetaBlock2d(nn.Module):
    """`x + ls1(pool(x) - x)`, then `x + ls2(mlp(x))` on NHWC maps: timm's `MetaBlock2d`."""

    norm: ModuleDef  # BatchNorm
    mlp_ratio: float = 4.0
    layer_scale_init_value: float = 1e-5
    drop_path_rate: float = 0.0
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        branch = LayerScale(self.layer_scale_init_value, name="ls1")(pooling(x))
        x = x + drop_path(self, branch, self.drop_path_rate, train)
        mlp = ConvMlpWithNorm(int(x.shape[-1] * self.mlp_ratio), self.norm, self.dtype, name="mlp")
        branch = LayerScale(self.layer_scale_init_value, name="ls2")(mlp(x))
        return x + drop_path(self, branch, self.drop_path_rate, train)


class MetaBlock1d(nn.Module):
    """`x + ls1(attn(norm1(x)))`, then `x + ls2(mlp(norm2(x)))` on tokens: timm's
    `MetaBlock1d` (its attention is `token_mixer`)."""

    attention: ModuleDef  # Attention with the network's resolution, heads and widths
    mlp_ratio: float = 4.0
    layer_scale_init_value: float = 1e-5
    drop_path_rate: float = 0.0
    epsilon: float = LAYER_NORM_EPSILON
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        norm = partial(nn.LayerNorm, epsilon=self.epsilon, dtype=self.dtype)
        y = self.attention(name="token_mixer")(norm(name="norm1")(x))
        branch = LayerScale(self.layer_scale_init_value, name="ls1")(y)
        x = x + drop_path(self, branch, self.drop_path_rate, train)
        mlp = Mlp(int(x.shape[-1] * self.mlp_ratio), dtype=self.dtype, name="mlp")
        branch = LayerScale(self.layer_scale_init_value, name="ls2")(
            mlp(norm(name="norm2")(x), train)
        )
        return x + drop_path(self, branch, self.drop_path_rate, train)


def conv_norm(
    x: jax.Array, features: int, conv: ModuleDef, norm: ModuleDef, names: tuple[str, str]
) -> jax.Array:
    """A biased 3x3/2 convolution (padding 1), BatchNorm, named `names`, in the calling
    module's scope (timm's `Stem4` and `Downsample` hold them side by side)."""
    x = conv(features, (3, 3), (2, 2), padding=1, name=names[0])(x)
    return norm(name=names[1])(x)


class Stem(nn.Module):
    """`conv1` to half of `features`, `norm1`, ReLU, `conv2`, `norm2`, ReLU: timm's `Stem4`."""

    features: int
    conv: ModuleDef
    norm: ModuleDef

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = nn.relu(conv_norm(x, self.features // 2, self.conv, self.norm, ("conv1", "norm1")))
        return nn.relu(conv_norm(x, self.features, self.conv, self.norm, ("conv2", "norm2")))


class Stage(nn.Module):
    """`downsample` (`conv`, `norm`) if asked, `depth - num_vit` pooling blocks, then `num_vit`
    attention blocks on the map's tokens, returned as the map. timm flattens the map with a
    parameter-free module in the block list, so the attention blocks are `blocks_{j + 1}`."""

    features: int
    depth: int
    num_vit: int
    attention: ModuleDef  # Attention with the network's resolution, heads and widths
    drop_path_rates: tuple[float, ...]
    conv: ModuleDef
    norm: ModuleDef
    downsample: bool = True
    mlp_ratio: float = 4.0
    layer_scale_init_value: float = 1e-5
    epsilon: float = LAYER_NORM_EPSILON
    dtype: Any = jnp.float32
    remat: bool | str = False

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        if self.downsample:
            x = Downsample(self.features, self.conv, self.norm, name="downsample")(x)
        scales = {
            "mlp_ratio": self.mlp_ratio,
            "layer_scale_init_value": self.layer_scale_init_value,
        }
        pools = self.depth - self.num_vit
        block = checkpointed(MetaBlock2d, self.remat, takes_train=True)
        for j in range(pools):
            rate = self.drop_path_rates[j]
            x = block(
                self.norm, **scales, drop_path_rate=rate, dtype=self.dtype, name=f"blocks_{j}"
            )(x, train)
        if not self.num_vit:
            return x
        batch, height, width, channels = x.shape
        resolution = self.attention.keywords["resolution"]
        if (height, width) != (resolution, resolution):
            raise ValueError(
                f"EfficientFormer's attention biases are made for a {resolution}x{resolution} "
                f"map (attention_resolution), got {height}x{width}"
            )
        x = x.reshape(batch, height * width, channels)
        block = checkpointed(MetaBlock1d, self.remat, takes_train=True)
        for j in range(pools, self.depth):
            x = block(
                self.attention,
                **scales,
                drop_path_rate=self.drop_path_rates[j],
                epsilon=self.epsilon,
                dtype=self.dtype,
                name=f"blocks_{j + 1}",
            )(x, train)
        return x.reshape(batch, height, width, channels)


class Downsample(nn.Module):
    """timm's `Downsample`: a biased 3x3/2 convolution (`conv`), BatchNorm (`norm`)."""

    features: int
    conv: ModuleDef
    norm: ModuleDef

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return conv_norm(x, self.features, self.conv, self.norm, ("conv", "norm"))


def stage_layer_id(stages: int, path: tuple[str, ...]) -> int:
    """timm's `group_matcher` depths of both EfficientFormers (whole stages, not blocks): 0 for
    the stem, `1 + i` for stage `i`, the final `norm` with the last stage, the heads after it."""
    if path[0] == "stem":
        return 0
    if path[0].startswith("stages_"):
        return 1 + int(path[0].removeprefix("stages_"))
    return stages + (path[0] != "norm")


class EfficientFormer(nn.Module):
    """EfficientFormer (v1) with stages of `depths` blocks, `embed_dims[i]` wide, the last
    `num_vit` blocks of the last stage attention blocks.

    Returns `(logits, end_points)`: logits `[batch, num_classes]` (the mean of the two heads'),
    or the pooled features `[batch, embed_dims[-1]]` when `num_classes` is 0 or None. Parameter
    names are timm's: `stem/{conv1,norm1,conv2,norm2}`, `stages_{i}/downsample/{conv,norm}`,
    `stages_{i}/blocks_{j}/{ls1,mlp/{fc1,norm1,fc2,norm2},ls2}` (pooling blocks),
    `stages_3/blocks_{j}/{norm1,token_mixer/{qkv,attention_biases,proj},ls1,norm2,mlp/{fc1,fc2},
    ls2}` (attention blocks), `norm`, `head`, `head_dist`.
    """

    default_image_size: int = 224
    depths: Sequence[int] = (3, 2, 6, 4)
    embed_dims: Sequence[int] = (48, 96, 224, 448)
    num_vit: int = 1  # attention blocks at the end of the last stage
    # The last stage's map, for which the bias tables are made (timm fixes 7: 224 px).
    attention_resolution: int = 7
    # The attention's heads, their key width and the values' multiple of it (timm's defaults,
    # which every network keeps).
    num_heads: int = 8
    key_dim: int = 32
    attn_ratio: int = 4
    mlp_ratio: float = 4.0
    layer_scale_init_value: float = 1e-5
    num_classes: int | None = 1000
    dropout_rate: float = 0.0  # before the heads (timm's `drop_rate`)
    # Stochastic depth of the residual branches, rising linearly from 0 at the first block to
    # this rate at the last (timm's schedule); training only, with the 'dropout' rng.
    drop_path_rate: float = 0.0
    epsilon: float = LAYER_NORM_EPSILON
    dtype: Any = jnp.float32
    conv: ModuleDef = Conv
    remat: bool | str = False  # stem, blocks recomputed in backward (nets.layers.remat.POLICIES)

    # What builds the network for images of other sizes (`NetworkFn` says so when it refuses).
    resize_with: ClassVar[str] = "attention_resolution"

    @property
    def min_image_size(self) -> int:
        """The smallest image whose last map is `attention_resolution` wide (each 3x3/2
        convolution keeps `ceil(n / 2)`): 193 px for 7."""
        stages = len(self.depths) + 1
        if not self.num_vit:
            return smallest_input([(3, 2, 2)] * stages)
        return 2**stages * (self.attention_resolution - 1) + 1

    @property
    def max_image_size(self) -> int | None:
        """The largest such image (224 px for 7); None without attention, which takes any."""
        return 2 ** (len(self.depths) + 1) * self.attention_resolution if self.num_vit else None

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: each stage's map (`nets.features`)."""
        return {f"stage{i + 1}": 4 * 2**i for i in range(len(self.depths))}

    def layer_id(self, path: tuple[str, ...]) -> int:
        """The depth of the parameter under module `path`, for layer-wise learning-rate decay
        (`stage_layer_id`)."""
        return stage_layer_id(len(self.depths), path)

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = True):
        self._check()
        conv = partial(self.conv, dtype=self.dtype)
        norm = batch_norm(TORCH, train, self.dtype)
        end_points = {}
        x = jnp.asarray(x, self.dtype)
        stem = checkpointed(Stem, self.remat)  # the largest maps: one unit for remat
        x = end_points["stem"] = stem(self.embed_dims[0], conv, norm, name="stem")(x)
        rates = linear_drop_path_rates(self.drop_path_rate, sum(self.depths))
        attention = partial(
            Attention,
            resolution=self.attention_resolution,
            num_heads=self.num_heads,
            key_dim=self.key_dim,
            attn_ratio=self.attn_ratio,
            dtype=self.dtype,
        )
        last = len(self.depths) - 1
        for i, depth in enumerate(self.depths):
            start = sum(self.depths[:i])
            x = end_points[f"stage{i + 1}"] = Stage(
                self.embed_dims[i],
                depth,
                self.num_vit if i == last else 0,
                attention,
                tuple(rates[start : start + depth]),
                conv,
                norm,
                downsample=i > 0,
                mlp_ratio=self.mlp_ratio,
                layer_scale_init_value=self.layer_scale_init_value,
                epsilon=self.epsilon,
                dtype=self.dtype,
                remat=self.remat,
                name=f"stages_{i}",
            )(x, train)
        # timm normalises the tokens, then averages them.
        x = nn.LayerNorm(epsilon=self.epsilon, dtype=self.dtype, name="norm")(x)
        x = jnp.mean(x, axis=(1, 2))
        head = {"train": train, "dropout_rate": self.dropout_rate, "dtype": self.dtype}
        return classify_distilled(x, x, x, end_points, self.num_classes, **head, kernel_init=_INIT)

    def _check(self) -> None:
        if not self.depths or len(self.embed_dims) != len(self.depths):
            raise ValueError(
                "EfficientFormer needs one width per stage: depths "
                f"{tuple(self.depths)}, embed_dims {tuple(self.embed_dims)}"
            )
        if not 0 <= self.num_vit <= self.depths[-1]:
            raise ValueError(f"num_vit={self.num_vit}: the last stage has {self.depths[-1]} blocks")
        check_drop_path_rate(self.drop_path_rate)


# timm's configurations (Li et al. Table 1: L1, L3, L7).
efficientformer_l1 = partial(
    EfficientFormer, depths=(3, 2, 6, 4), embed_dims=(48, 96, 224, 448), num_vit=1
)
efficientformer_l3 = partial(
    EfficientFormer, depths=(4, 4, 12, 6), embed_dims=(64, 128, 320, 512), num_vit=4
)
efficientformer_l7 = partial(
    EfficientFormer, depths=(6, 6, 18, 8), embed_dims=(96, 192, 384, 768), num_vit=8
)

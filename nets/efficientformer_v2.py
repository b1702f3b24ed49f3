"""EfficientFormerV2: Li et al. 2022, "Rethinking Vision Transformers for MobileNet Size and
Speed" (arXiv:2212.08059), as timm 1.0 builds it (`timm.models.efficientformer_v2`).

All on NHWC maps, every convolution biased and followed by BatchNorm (epsilon 1e-5), GELU. A
stem of two 3x3/2 convolutions; four stages, each but the first opened by a 3x3/2 convolution
(`downsample/conv`), the last's with a strided attention beside it (`downsample/attn`, added).
Blocks: `x + ls1(attn(x))` (the last `num_vit` blocks of stages 3 and 4), then `x + ls2(mlp(x))`,
the MLP a 1x1 convolution to `mlp_ratio` times the width (GELU), a 3x3 depthwise one (`mid`,
GELU), a 1x1 back. Layer scales start at 1e-5.
- `Attention2d`: 8 heads, keys of 32 channels, values of 128; `q`, `k`, `v` 1x1 convolutions; a
  learnt bias per head and absolute offset of two tokens (`attention_biases`, TinyViT's index);
  talking heads: the heads' logits mixed by a 1x1 convolution (`talking_head1`) before the
  softmax and the weights by another (`talking_head2`) after; plus a 3x3 depthwise convolution of
  the values (`v_local`); GELU, then `proj`. In stage 3 it attends over the map subsampled by a
  3x3/2 depthwise convolution (`stride_conv`) and upsamples its output back (bilinear).
- `Attention2dDownsample` (stage 4's downsampling): queries from the map at stride 2 (a 3x3/2
  depthwise convolution plus the subsampled map, `q/local`, then `q/proj`), keys and values of
  the whole map, biases per query-key offset (`[heads, R * R]` for the `R x R` input), the
  values' 3x3/2 depthwise convolution added; no talking heads.
Head: BatchNorm (`norm`) of the last map, average pooling (`pre_logits`), the classifier and the
distillation head, their mean the logits (as `nets.efficientformer`).

The attention's bias tables are made for the maps of a `default_image_size` image (timm's
`img_size`, 224: stages 3 and 4 attend over 7x7 maps, the downsampling's keys are 14x14); other
image sizes are refused in one line.

Where this differs from timm's `EfficientFormerV2`: the two heads' mean is `logits` in training
too (timm's output unless `set_distilled_training(True)`; `cls_logits`, `dist_logits` in the end
points); `drop_path_rate` defaults to 0 (timm's networks: 0, 0, 0.02, 0.1), linear over all blocks;
initialisation (convolutions flax's default, timm's PyTorch's); weight decay covers the kernels
only, not `attention_biases` (timm's `no_weight_decay()`).

End points: `stem`, `stage1`..`stage4` (strides 4, 8, 16, 32), `pre_logits`, `cls_logits`,
`dist_logits`, `logits`, `predictions`.
"""

import math
from collections.abc import Sequence
from functools import partial
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from nets.efficientformer import stage_layer_id
from nets.layers import (
    TORCH,
    Conv,
    ConvNormAct,
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
from nets.tiny_vit import attention_bias_index

_INIT = nn.initializers.truncated_normal(0.02)


def over_heads(dense: nn.Module, x: jax.Array) -> jax.Array:
    """A 1x1 convolution over the heads of `[batch, heads, queries, keys]` (talking heads)."""
    return jnp.moveaxis(dense(jnp.moveaxis(x, 1, -1)), -1, 1)


class Attention2d(nn.Module):
    """timm's `Attention2d` over a `resolution`-sized map (after `stride_conv` when strided)."""

    resolution: int  # of the map it attends over
    layer: ModuleDef  # ConvNormAct: biased convolution, BatchNorm
    strided: bool = False
    num_heads: int = 8
    key_dim: int = 32
    attn_ratio: int = 4
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        batch, _, _, width = x.shape
        heads, key_dim, val_dim = self.num_heads, self.key_dim, self.attn_ratio * self.key_dim
        if self.strided:
            x = self.layer(width, 3, strides=2, groups=width, name="stride_conv")(x)
        height, wide = x.shape[1:3]
        if (height, wide) != (self.resolution, self.resolution):
            raise ValueError(
                f"EfficientFormerV2's attention biases are made for a {self.resolution}x"
                f"{self.resolution} map (default_image_size), got {height}x{wide}"
            )
        tokens = height * wide
        biases = self.param("attention_biases", nn.initializers.zeros, (heads, tokens))
        bias = biases[:, attention_bias_index(self.resolution)]
        q = self.layer(heads * key_dim, 1, name="q")(x).reshape(batch, tokens, heads, key_dim)
        k = self.layer(heads * key_dim, 1, name="k")(x).reshape(batch, tokens, heads, key_dim)
        v = self.layer(heads * val_dim, 1, name="v")(x)
        v_local = self.layer(heads * val_dim, 3, groups=heads * val_dim, name="v_local")(v)
        v = v.reshape(batch, tokens, heads, val_dim)
        dense = partial(nn.Dense, heads, dtype=self.dtype, kernel_init=_INIT)
        talk1, talk2 = dense(name="talking_head1"), dense(name="talking_head2")
        weigh = lambda a: over_heads(talk2, jax.nn.softmax(over_heads(talk1, a)))  # noqa: E731
        x = BiasedProduct(name="product")(q, k, v, bias, weigh)
        x = x.reshape(v_local.shape) + v_local
        if self.strided:
            x = jax.image.resize(x, (batch, 2 * height, 2 * wide, x.shape[-1]), "bilinear")
        return self.layer(width, 1, name="proj")(gelu(x))


class LocalGlobalQuery(nn.Module):
    """`proj(local(x) + x[::2, ::2])`, `local` a biased 3x3/2 depthwise convolution."""

    features: int
    conv: ModuleDef
    layer: ModuleDef

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        width = x.shape[-1]
        local = self.conv(width, (3, 3), (2, 2), padding=1, feature_group_count=width, name="local")
        q = local(x) + x[:, ::2, ::2]
        return self.layer(self.features, 1, name="proj")(q)


class Attention2dDownsample(nn.Module):
    """timm's `Attention2dDownsample`: queries at stride 2, keys and values of the whole
    `resolution`-sized map, to `features` channels at half the size."""

    features: int
    resolution: int  # of the input map
    conv: ModuleDef
    layer: ModuleDef
    num_heads: int = 8
    key_dim: int = 16
    attn_ratio: int = 4

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        batch, height, wide, _ = x.shape
        if (height, wide) != (self.resolution, self.resolution):
            raise ValueError(
                f"EfficientFormerV2's attention biases are made for a {self.resolution}x"
                f"{self.resolution} map (default_image_size), got {height}x{wide}"
            )
        heads, key_dim, val_dim = self.num_heads, self.key_dim, self.attn_ratio * self.key_dim
        biases = self.param("attention_biases", nn.initializers.zeros, (heads, height * wide))
        bias = biases[:, attention_bias_index(self.resolution, stride=2)]
        q = LocalGlobalQuery(heads * key_dim, self.conv, self.layer, name="q")(x)
        queries = q.shape[1] * q.shape[2]
        q = q.reshape(batch, queries, heads, key_dim)
        k = self.layer(heads * key_dim, 1, name="k")(x).reshape(batch, -1, heads, key_dim)
        v = self.layer(heads * val_dim, 1, name="v")(x)
        v_local = self.layer(heads * val_dim, 3, strides=2, groups=heads * val_dim, name="v_local")
        v_local = v_local(v)
        x = BiasedProduct(name="product")(q, k, v.reshape(batch, -1, heads, val_dim), bias)
        x = x.reshape(v_local.shape) + v_local
        return self.layer(self.features, 1, name="proj")(gelu(x))


class Downsample(nn.Module):
    """A 3x3/2 convolution with BatchNorm (`conv`), plus the strided attention (`attn`) if
    given."""

    features: int
    conv: ModuleDef
    layer: ModuleDef
    attention: ModuleDef | None = None  # Attention2dDownsample with its fields

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        out = self.layer(self.features, 3, strides=2, name="conv")(x)
        if self.attention is None:
            return out
        return out + self.attention(name="attn")(x)


class Mlp(nn.Module):
    """`fc2(mid(fc1(x)))`: 1x1 to `hidden` (GELU), 3x3 depthwise (GELU), 1x1 back; BatchNorm
    after each (timm's `ConvMlpWithNorm` with `mid_conv`)."""

    hidden: int
    layer: ModuleDef

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        y = self.layer(self.hidden, 1, act=gelu, name="fc1")(x)
        y = self.layer(self.hidden, 3, groups=self.hidden, act=gelu, name="mid")(y)
        return self.layer(x.shape[-1], 1, name="fc2")(y)


class Block(nn.Module):
    """`x + ls1(attn(x))` (with `attention`), then `x + ls2(mlp(x))`."""

    mlp_ratio: float
    layer: ModuleDef
    attention: ModuleDef | None = None  # Attention2d with its resolution and stride
    layer_scale_init_value: float = 1e-5
    drop_path_rate: float = 0.0

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        if self.attention is not None:
            branch = LayerScale(self.layer_scale_init_value, name="ls1")(
                self.attention(name="token_mixer")(x)
            )
            x = x + drop_path(self, branch, self.drop_path_rate, train)
        mlp = Mlp(int(x.shape[-1] * self.mlp_ratio), self.layer, name="mlp")
        branch = LayerScale(self.layer_scale_init_value, name="ls2")(mlp(x))
        return x + drop_path(self, branch, self.drop_path_rate, train)


class Stem(nn.Module):
    """Two biased 3x3/2 convolutions with BatchNorm and GELU (`conv1` to half of `features`)."""

    features: int
    layer: ModuleDef

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = self.layer(self.features // 2, 3, strides=2, act=gelu, name="conv1")(x)
        return self.layer(self.features, 3, strides=2, act=gelu, name="conv2")(x)


class Stage(nn.Module):
    """`downsample` if asked (with the strided attention for `downsample_resolution`), then the
    blocks, the last `num_vit` with `attention`."""

    features: int
    mlp_ratios: tuple[float, ...]
    drop_path_rates: tuple[float, ...]
    conv: ModuleDef
    layer: ModuleDef
    downsample: ModuleDef | None = None  # Downsample with its attention, if any
    attention: ModuleDef | None = None
    num_vit: int = 0
    layer_scale_init_value: float = 1e-5
    remat: bool | str = False

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        if self.downsample is not None:
            x = self.downsample(name="downsample")(x)
        block = checkpointed(Block, self.remat, takes_train=True)
        depth = len(self.mlp_ratios)
        for j in range(depth):
            x = block(
                self.mlp_ratios[j],
                self.layer,
                self.attention if j >= depth - self.num_vit else None,
                self.layer_scale_init_value,
                self.drop_path_rates[j],
                name=f"blocks_{j}",
            )(x, train)
        return x


class EfficientFormerV2(nn.Module):
    """EfficientFormerV2 with stages of `depths` blocks, `embed_dims[i]` wide, block `j` of
    stage `i` expanding by `mlp_ratios[i][j]`; the last `num_vit` blocks of stages 3 and 4
    attend.

    Returns `(logits, end_points)`: logits `[batch, num_classes]` (the two heads' mean), or the
    pooled features when `num_classes` is 0 or None. Parameter names are timm's:
    `stem/conv{1,2}/{conv,bn}`, `stages_{i}/downsample/{conv,attn}`, `stages_{i}/blocks_{j}/
    {token_mixer,ls1,mlp/{fc1,mid,fc2},ls2}`, `norm`, `head`, `head_dist`.
    """

    default_image_size: int = 224  # timm's `img_size`: the attention's maps are made for it
    depths: Sequence[int] = (2, 2, 6, 4)
    embed_dims: Sequence[int] = (32, 48, 96, 176)
    mlp_ratios: Sequence[Sequence[float]] = ((4,) * 2, (4,) * 2, (4, 3, 3, 3, 4, 4), (4, 3, 3, 4))
    num_vit: int = 2
    # The attention's heads, key widths (the blocks' and the downsampling's) and the values'
    # multiple of them: timm's fixed values.
    num_heads: int = 8
    key_dim: int = 32
    downsample_key_dim: int = 16
    attn_ratio: int = 4
    layer_scale_init_value: float = 1e-5
    num_classes: int | None = 1000
    dropout_rate: float = 0.0  # before the heads (timm's `drop_rate`)
    # Stochastic depth, rising linearly from 0 at the first block to this rate at the last.
    drop_path_rate: float = 0.0
    dtype: Any = jnp.float32
    conv: ModuleDef = Conv
    remat: bool | str = False  # stem, blocks recomputed in backward (nets.layers.remat.POLICIES)

    # What builds the network for images of other sizes (`NetworkFn` says so when it refuses).
    resize_with: ClassVar[str] = "default_image_size"

    @property
    def min_image_size(self) -> int:
        """The attention's maps are made for `default_image_size`: the smallest image whose
        maps are the same (each 3x3/2 convolution keeps `ceil(n / 2)`)."""
        maps = lambda n: [math.ceil(n / 2**s) for s in (4, 5)]  # noqa: E731
        want = maps(self.default_image_size)
        return next(n for n in range(1, self.default_image_size + 1) if maps(n) == want)

    @property
    def max_image_size(self) -> int:
        """The largest image whose maps are those (224 px for 224)."""
        return min(math.ceil(self.default_image_size / 2**s) * 2**s for s in (4, 5))

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: each stage's map (`nets.features`)."""
        return {f"stage{i + 1}": 4 * 2**i for i in range(len(self.depths))}

    def layer_id(self, path: tuple[str, ...]) -> int:
        """timm's `group_matcher` depths (`nets.efficientformer.stage_layer_id`)."""
        return stage_layer_id(len(self.depths), path)

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = True):
        self._check()
        conv = partial(self.conv, dtype=self.dtype)
        norm = batch_norm(TORCH, train, self.dtype)
        layer = partial(ConvNormAct, conv=conv, norm=norm, padding="SYMMETRIC", conv_bias=True)
        end_points = {}
        x = jnp.asarray(x, self.dtype)
        stem = checkpointed(Stem, self.remat)  # the largest maps: one unit for remat
        x = end_points["stem"] = stem(self.embed_dims[0], layer, name="stem")(x)
        rates = linear_drop_path_rates(self.drop_path_rate, sum(self.depths))
        size = self.default_image_size
        heads = {"num_heads": self.num_heads, "attn_ratio": self.attn_ratio}
        attention = partial(
            Attention2d,
            math.ceil(size / 32),
            layer,
            key_dim=self.key_dim,
            dtype=self.dtype,
            **heads,
        )
        for i, depth in enumerate(self.depths):
            start = sum(self.depths[:i])
            downsample = None
            if i > 0:
                downsample = partial(Downsample, self.embed_dims[i], conv, layer)
            if i == 3:  # keys and values of the 16-stride map, queries at 32
                downsample = partial(
                    downsample,
                    attention=partial(
                        Attention2dDownsample,
                        self.embed_dims[i],
                        math.ceil(size / 16),
                        conv,
                        layer,
                        key_dim=self.downsample_key_dim,
                        **heads,
                    ),
                )
            x = end_points[f"stage{i + 1}"] = Stage(
                self.embed_dims[i],
                tuple(self.mlp_ratios[i]),
                tuple(rates[start : start + depth]),
                conv,
                layer,
                downsample,
                partial(attention, strided=i == 2) if i >= 2 else None,
                self.num_vit,
                self.layer_scale_init_value,
                self.remat,
                name=f"stages_{i}",
            )(x, train)
        x = jnp.mean(norm(name="norm")(x), axis=(1, 2))
        head = {"train": train, "dropout_rate": self.dropout_rate, "dtype": self.dtype}
        return classify_distilled(x, x, x, end_points, self.num_classes, **head, kernel_init=_INIT)

    def _check(self) -> None:
        if len(self.depths) != 4 or any(len(v) != 4 for v in (self.embed_dims, self.mlp_ratios)):
            raise ValueError(
                "EfficientFormerV2 needs four stages: depths "
                f"{tuple(self.depths)}, embed_dims {tuple(self.embed_dims)}, mlp_ratios "
                f"{tuple(self.mlp_ratios)}"
            )
        if any(len(r) != d for r, d in zip(self.mlp_ratios, self.depths, strict=True)):
            raise ValueError(f"mlp_ratios needs one ratio per block of depths {self.depths}")
        check_drop_path_rate(self.drop_path_rate)


# timm's configurations (Li et al. 2022, Table 1: S0, S1, S2, L): widths, depths, each block's
# MLP expansion in stages 3 and 4, attention blocks per stage.
efficientformerv2_s0 = partial(
    EfficientFormerV2,
    depths=(2, 2, 6, 4),
    embed_dims=(32, 48, 96, 176),
    mlp_ratios=((4,) * 2, (4,) * 2, (4, 3, 3, 3, 4, 4), (4, 3, 3, 4)),
    num_vit=2,
)
efficientformerv2_s1 = partial(
    EfficientFormerV2,
    depths=(3, 3, 9, 6),
    embed_dims=(32, 48, 120, 224),
    mlp_ratios=((4,) * 3, (4,) * 3, (4, 4, 3, 3, 3, 3, 4, 4, 4), (4, 4, 3, 3, 4, 4)),
    num_vit=2,
)
efficientformerv2_s2 = partial(
    EfficientFormerV2,
    depths=(4, 4, 12, 8),
    embed_dims=(32, 64, 144, 288),
    mlp_ratios=((4,) * 4, (4,) * 4, (4, 4) + (3,) * 6 + (4,) * 4, (4, 4, 3, 3, 3, 3, 4, 4)),
    num_vit=4,
)
efficientformerv2_l = partial(
    EfficientFormerV2,
    depths=(5, 5, 15, 10),
    embed_dims=(40, 80, 192, 384),
    mlp_ratios=((4,) * 5, (4,) * 5, (4,) * 4 + (3,) * 7 + (4,) * 4, (4,) * 3 + (3,) * 4 + (4,) * 3),
    num_vit=6,
)

"""MetaFormer: PoolFormer (Yu et al. 2022, "MetaFormer Is Actually What You Need for Vision",
arXiv:2111.11418), and PoolFormerV2, ConvFormer and CAFormer (Yu et al. 2023, "MetaFormer
Baselines for Vision", arXiv:2210.13452), as timm's `MetaFormer` (`timm/models/metaformer.py`)
builds them.

One network, four token mixers: a 7x7/4 convolution stem (padding 2), four stages (each but the
first opened by a 3x3/2 convolution, padding 1), blocks of `x + mixer(norm1(x))` then `x +
mlp(norm2(x))`, global average pooling, a LayerNorm, and the classifier. The mixers:
- `'pooling'` (PoolFormer): a 3x3 average pool of stride 1 that counts only the pixels inside
  the map (PyTorch's `count_include_pad=False`), minus its input;
- `'sepconv'` (ConvFormer, CAFormer's first two stages): MobileNetV2's inverted separable
  convolution, a 1x1 convolution to twice the width, StarReLU, a 7x7 depthwise convolution, a
  1x1 convolution back, no biases;
- `'attention'` (CAFormer's last two stages): multi-head self-attention over the map's pixels,
  heads of `head_dim` = 32 channels, no biases (`nets.vit.Attention`).
StarReLU is `s * relu(x)**2 + b` with a learnt scalar `s` and `b` (the second paper's).

The variants differ in fields, as timm's registry sets them:
- PoolFormer (v1): GroupNorm of one group (statistics over the whole map) with a bias and
  epsilon 1e-5 (PyTorch's `GroupNorm` default: timm's `GroupNorm1`), no norm in the stem or
  the downsampling, an MLP of exact GELU with biases, a layer scale on every branch (1e-5, 1e-6
  for the deeper ones), a linear classifier.
- PoolFormerV2: GroupNorm of one group without a bias, epsilon 1e-6; the rest as ConvFormer but
  the linear classifier.
- ConvFormer, CAFormer: LayerNorm over the channels without a bias, epsilon 1e-6 (timm's
  `LayerNorm2dNoBias` and, over CAFormer's tokens, `LayerNormNoBias`: the same function on
  NHWC maps), and the same after the stem's convolution and before each downsampling one;
  an MLP of StarReLU without biases; a res scale (a learnt per-channel scale of the shortcut,
  Shleifer et al. 2021) in the last two stages; timm's `MlpHead` classifier: a 4x wider dense
  layer, squared ReLU, LayerNorm (with a bias, 1e-6), then the classes.
The head's LayerNorm after the pooling has a bias and epsilon 1e-6 in every variant.

Where this differs from timm's `MetaFormer`:
- Activations are NHWC throughout: timm's 1x1-convolution MLPs (`use_conv`) and CAFormer's
  linear ones are all dense layers here (the same function; their weights load into them).
- `dropout_rate` is timm's `drop_rate`, before the classifier (before the MLP head's first
  layer); timm's `proj_drop_rate` (0 in its recipes) is not a field.
- `pre_logits` is the pooled, normalised features (`[batch, dims[-1]]`) for the MLP head too,
  as timm's `forward_head(pre_logits=True)`; `num_classes` 0 leaves out the whole MLP head.
- Weight decay (`NetworkFn.regularization_loss`) covers the convolution and dense kernels only:
  not the norms, layer and res scales, StarReLU's scale and bias or the biases (timm's
  optimizer factory leaves out the same one-dimensional parameters).

End points: `stem`, `stage1`..`stage4`, `pre_logits`, `logits`, `predictions`.
"""

from collections.abc import Sequence
from functools import partial
from typing import Any, ClassVar, Literal, get_args

import flax.linen as nn
import jax
import jax.numpy as jnp

from nets.layers import (
    Conv,
    LayerScale,
    ModuleDef,
    avg_pool,
    checkpointed,
    classify,
    drop_path,
    gelu,
    global_avg_pool,
)
from nets.layers.attention import Implementation
from nets.layers.dilation import StageStride
from nets.layers.drop_path import check_drop_path_rate, linear_drop_path_rates
from nets.layers.padding import smallest_input
from nets.vit import Attention

Mixer = Literal["pooling", "sepconv", "attention"]
Norm = Literal["layer_norm", "group_norm"]
MlpActivation = Literal["star_relu", "gelu"]

_INIT = nn.initializers.truncated_normal(0.02)  # timm's init of every Conv2d and Linear
EPSILON = 1e-6  # timm's LayerNorm2d, LayerNorm and its no-bias norms; the heads' norms
GROUP_NORM_EPSILON = 1e-5  # PyTorch's GroupNorm default, PoolFormer v1's GroupNorm1


class StarReLU(nn.Module):
    """`scale * relu(x)**2 + bias`, `scale` and `bias` learnt scalars (shape `[1]`) started at 1
    and 0 (Yu et al. 2023); float32, applied in `x`'s dtype."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        scale = self.param("scale", nn.initializers.ones, (1,))
        bias = self.param("bias", nn.initializers.zeros, (1,))
        return scale.astype(x.dtype) * jnp.square(nn.relu(x)) + bias.astype(x.dtype)


def pooling(x: jax.Array) -> jax.Array:
    """PoolFormer's mixer: a 3x3 average of each pixel's neighbours inside the map, minus the
    pixel (the block adds it back: the branch is what pooling changes)."""
    return avg_pool(x, 3, 1, padding=1, count_include_pad=False) - x


class SepConv(nn.Module):
    """`pwconv2(dwconv(act1(pwconv1(x))))`: 1x1 to `expansion_ratio` times the width, StarReLU,
    a depthwise `kernel_size` convolution, 1x1 back; no biases (timm's `SepConv`)."""

    conv: ModuleDef
    expansion_ratio: float = 2.0
    kernel_size: int = 7

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        width = x.shape[-1]
        hidden = int(self.expansion_ratio * width)
        conv = partial(self.conv, use_bias=False)
        x = conv(hidden, (1, 1), name="pwconv1")(x)
        x = StarReLU(name="act1")(x)
        size = (self.kernel_size, self.kernel_size)
        pad = self.kernel_size // 2
        x = conv(hidden, size, padding=pad, feature_group_count=hidden, name="dwconv")(x)
        return conv(width, (1, 1), name="pwconv2")(x)


class Mlp(nn.Module):
    """`fc2(act(fc1(x)))`, `ratio` times wider inside: StarReLU (`act`) or exact GELU, biases or
    none."""

    activation: MlpActivation = "star_relu"
    use_bias: bool = False
    dtype: Any = jnp.float32
    ratio: float = 4.0  # InceptionNeXt's last stage: 3

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        width = x.shape[-1]
        dense = partial(nn.Dense, use_bias=self.use_bias, dtype=self.dtype, kernel_init=_INIT)
        x = dense(int(self.ratio * width), name="fc1")(x)
        x = StarReLU(name="act")(x) if self.activation == "star_relu" else gelu(x)
        return dense(width, name="fc2")(x)


class MlpHead(nn.Module):
    """timm's `MlpHead`: `fc1` to `mlp_ratio` times the width, squared ReLU, LayerNorm (`norm`),
    `fc2` to the `features` classes. Built as `nn.Dense` is, so `classify` takes it as its
    logits layer."""

    features: int
    dtype: Any = jnp.float32
    kernel_init: nn.initializers.Initializer = _INIT
    mlp_ratio: float = 4.0
    epsilon: float = EPSILON

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        dense = partial(nn.Dense, dtype=self.dtype, kernel_init=self.kernel_init)
        x = jnp.square(nn.relu(dense(int(self.mlp_ratio * x.shape[-1]), name="fc1")(x)))
        x = nn.LayerNorm(self.epsilon, dtype=self.dtype, name="norm")(x)
        return dense(self.features, name="fc2")(x)


def norm_layer(kind: Norm, epsilon: float, use_bias: bool, dtype: Any) -> partial:
    """A norm over the channels (`'layer_norm'`), or over the whole map (`'group_norm'`, one
    group), with a bias or without."""
    if kind not in ("layer_norm", "group_norm"):
        raise ValueError(f"norm must be 'layer_norm' or 'group_norm', got {kind!r}")
    if kind == "group_norm":
        return partial(nn.GroupNorm, num_groups=1, epsilon=epsilon, use_bias=use_bias, dtype=dtype)
    return partial(nn.LayerNorm, epsilon=epsilon, use_bias=use_bias, dtype=dtype)


class MetaFormerBlock(nn.Module):
    """`res_scale1(x) + layer_scale1(mixer(norm1(x)))`, then the same with the MLP (`norm2`,
    `mlp`, `res_scale2`, `layer_scale2`); each scale only where its initial value is given."""

    mixer: Mixer
    conv: ModuleDef
    norm: ModuleDef
    mlp_activation: MlpActivation = "star_relu"
    mlp_bias: bool = False
    head_dim: int = 32
    layer_scale_init_value: float | None = None
    res_scale_init_value: float | None = None
    drop_path_rate: float = 0.0
    dtype: Any = jnp.float32
    attention: Implementation = "auto"

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        def residual(x: jax.Array, branch: jax.Array, i: int) -> jax.Array:
            if self.res_scale_init_value is not None:
                x = LayerScale(self.res_scale_init_value, name=f"res_scale{i}")(x)
            branch = drop_path(self, branch, self.drop_path_rate, train)
            if self.layer_scale_init_value is not None:
                branch = LayerScale(self.layer_scale_init_value, name=f"layer_scale{i}")(branch)
            return x + branch

        x = residual(x, self.mix(self.norm(name="norm1")(x), train), 1)
        mlp = Mlp(self.mlp_activation, self.mlp_bias, self.dtype, name="mlp")
        return residual(x, mlp(self.norm(name="norm2")(x)), 2)

    def mix(self, x: jax.Array, train: bool) -> jax.Array:
        """The token mixer on the normalised map `[batch, height, width, c]`; attention sees its
        pixels as `height * width` tokens."""
        if self.mixer == "pooling":
            return pooling(x)
        if self.mixer == "sepconv":
            return SepConv(self.conv, name="token_mixer")(x)
        if self.mixer != "attention":
            raise ValueError(f"token mixer must be one of {get_args(Mixer)}, got {self.mixer!r}")
        batch, height, width, channels = x.shape
        if channels % self.head_dim:
            raise ValueError(
                f"attention over {channels} channels needs a multiple of head_dim={self.head_dim}"
            )
        attention = Attention(
            channels // self.head_dim,
            dtype=self.dtype,
            attention=self.attention,
            use_bias=False,
            name="token_mixer",
        )
        tokens = attention(x.reshape(batch, height * width, channels), train)
        return tokens.reshape(x.shape)


class MetaFormerStage(nn.Module):
    """timm's `MetaFormerStage`: with `downsample`, a norm (`downsample_norm`, if any) and a
    `downsample_kernel`-square convolution of stride 2 (`downsample_conv`: MetaFormer's 3x3,
    padding 1; InceptionNeXt's 2x2, none), the norm after the convolution where not
    `downsample_norm_first` (MambaOut's), then `depth` blocks. `stride` is InceptionNeXt's under
    an `output_stride` (timm's `MetaNeXtStage`): a dilated stage's convolution keeps the map, at
    stride 1 dilated by `first_dilation` and padded 'SAME' (timm's `padding='same'`); the
    blocks' own dilation is in `block`. MetaFormer's and MambaOut's stages keep the default."""

    depth: int
    features: int
    block: ModuleDef  # MetaFormerBlock with the stage's fields but the drop-path rate
    conv: ModuleDef
    downsample_norm: ModuleDef | None
    drop_path_rates: tuple[float, ...]
    downsample: bool = True
    downsample_kernel: int = 3
    downsample_norm_first: bool = True
    stride: StageStride = StageStride(2, 1, 1)

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        if self.downsample:
            norm = self.downsample_norm
            if norm is not None and self.downsample_norm_first:
                x = norm(name="downsample_norm")(x)
            stride, dilation, first_dilation = self.stride
            size, pad = (self.downsample_kernel,) * 2, (self.downsample_kernel - 1) // 2
            x = self.conv(
                self.features,
                size,
                stride,
                padding="SAME" if dilation > 1 else pad,
                kernel_dilation=first_dilation,
                name="downsample_conv",
            )(x)
            if norm is not None and not self.downsample_norm_first:
                x = norm(name="downsample_norm")(x)
        for j in range(self.depth):
            x = self.block(drop_path_rate=self.drop_path_rates[j], name=f"blocks_{j}")(x, train)
        return x


def stages(
    x: jax.Array,
    train: bool,
    end_points: dict[str, jax.Array],
    depths: Sequence[int],
    dims: Sequence[int],
    blocks: Sequence[ModuleDef],
    conv: ModuleDef,
    downsample_norm: ModuleDef | None,
    drop_path_rate: float,
    downsample_kernel: int = 3,
    downsample_norm_first: bool = True,
    strides: Sequence[StageStride] | None = None,
) -> jax.Array:
    """A `MetaFormerStage` (`stages_{i}`) per depth, of `blocks[i]`, each but the first opened by
    a downsampling, each's output the end point `stage{i + 1}`; drop-path rates rising linearly
    over all the blocks. `strides`: each stage's under an `output_stride` (InceptionNeXt's);
    None: stride 2, no dilation. A function, not a module, so that the stages join the caller's
    scope (MetaFormer's, InceptionNeXt's and MambaOut's)."""
    rates = linear_drop_path_rates(drop_path_rate, sum(depths))
    strides = strides or [StageStride(2, 1, 1)] * len(depths)
    for i, (depth, features, block) in enumerate(zip(depths, dims, blocks, strict=True)):
        start = sum(depths[:i])
        x = MetaFormerStage(
            depth,
            features,
            block,
            conv,
            downsample_norm,
            tuple(rates[start : start + depth]),
            downsample=i > 0,
            downsample_kernel=downsample_kernel,
            downsample_norm_first=downsample_norm_first,
            stride=strides[i],
            name=f"stages_{i}",
        )(x, train)
        end_points[f"stage{i + 1}"] = x
    return x


class MetaFormer(nn.Module):
    """MetaFormer for ImageNet-sized inputs (any size of at least `min_image_size`).

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the pooled, normalised
    features `[batch, dims[-1]]` when `num_classes` is 0 or None. Parameter names are timm's:
    `stem_conv`, `stem_norm`, `stages_{i}/downsample_norm` / `downsample_conv`,
    `stages_{i}/blocks_{j}/norm1` / `token_mixer` / `layer_scale1` / `res_scale1` / `norm2` /
    `mlp` / `layer_scale2` / `res_scale2`, `head_norm`, `head` (with the MLP head: `head/fc1`,
    `head/norm`, `head/fc2`).
    """

    default_image_size: ClassVar[int] = 224  # the papers' ImageNet-1k resolution

    depths: Sequence[int] = (2, 2, 6, 2)
    dims: Sequence[int] = (64, 128, 320, 512)
    token_mixers: Sequence[Mixer] = ("pooling",) * 4
    # The blocks' norms: LayerNorm over the channels, or GroupNorm of one group over the map;
    # with a bias or without, and their epsilon.
    norm: Norm = "layer_norm"
    norm_bias: bool = False
    norm_epsilon: float = EPSILON
    # A LayerNorm without a bias (epsilon 1e-6) after the stem's convolution and before each
    # downsampling convolution; False: none (PoolFormer v1).
    downsample_norm: bool = True
    mlp_activation: MlpActivation = "star_relu"
    mlp_bias: bool = False
    head_dim: int = 32  # the attention mixer's channels per head
    # Each stage's initial layer scale (of the residual branches) and res scale (of the
    # shortcuts); None: none.
    layer_scale_init_values: Sequence[float | None] = (None,) * 4
    res_scale_init_values: Sequence[float | None] = (None, None, 1.0, 1.0)
    mlp_head: bool = True  # timm's MlpHead; False: one dense layer
    num_classes: int | None = 1000
    dropout_rate: float = 0.0  # before the classifier (timm's `drop_rate`)
    # Stochastic depth of the residual branches, rising linearly from 0 at the first block to
    # this rate at the last (timm's rule); training only, with the 'dropout' rng.
    drop_path_rate: float = 0.0
    dtype: Any = jnp.float32
    # 'auto': cuDNN's fused kernel on GPUs in half precision, else XLA's; 'xla' or 'cudnn' force.
    attention: Implementation = "auto"
    conv: ModuleDef = Conv
    remat: bool | str = False  # stem, blocks recomputed in backward (nets.layers.remat.POLICIES)

    @property
    def min_image_size(self) -> int:
        """The 7x7/4 stem with 2 pixels of padding needs 3; the 3x3/2 downsamplings (padding 1)
        keep a pixel of one."""
        return smallest_input([(7, 4, 4)] + [(3, 2, 2)] * (len(self.depths) - 1))

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: each stage's output, from the stride-4 stem."""
        return {f"stage{i + 1}": 4 * 2**i for i in range(len(self.depths))}

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = True):
        self._check()
        check_drop_path_rate(self.drop_path_rate)
        conv = partial(self.conv, dtype=self.dtype, kernel_init=_INIT)
        downsample_norm = None
        if self.downsample_norm:
            downsample_norm = partial(nn.LayerNorm, EPSILON, use_bias=False, dtype=self.dtype)
        end_points = {}

        def stem(module: nn.Module, x: jax.Array) -> jax.Array:
            # The largest maps: one unit for `remat`, its layers at timm's flat paths.
            x = conv(self.dims[0], (7, 7), (4, 4), padding=2, name="stem_conv")(x)
            return x if downsample_norm is None else downsample_norm(name="stem_norm")(x)

        x = end_points["stem"] = checkpointed(stem, self.remat)(self, jnp.asarray(x, self.dtype))

        norm = norm_layer(self.norm, self.norm_epsilon, self.norm_bias, self.dtype)
        blocks = [
            partial(
                checkpointed(MetaFormerBlock, self.remat, takes_train=True),
                self.token_mixers[i],
                conv,
                norm,
                self.mlp_activation,
                self.mlp_bias,
                self.head_dim,
                self.layer_scale_init_values[i],
                self.res_scale_init_values[i],
                dtype=self.dtype,
                attention=self.attention,
            )
            for i in range(len(self.depths))
        ]
        x = stages(
            x,
            train,
            end_points,
            self.depths,
            self.dims,
            blocks,
            conv,
            downsample_norm,
            self.drop_path_rate,
        )

        x = nn.LayerNorm(EPSILON, dtype=self.dtype, name="head_norm")(global_avg_pool(x))
        return classify(
            x,
            end_points,
            self.num_classes,
            train=train,
            dropout_rate=self.dropout_rate,
            dtype=self.dtype,
            name="head",
            kernel_init=_INIT,
            dense=MlpHead if self.mlp_head else nn.Dense,
        )

    def _check(self) -> None:
        per_stage = (
            self.dims,
            self.token_mixers,
            self.layer_scale_init_values,
            self.res_scale_init_values,
        )
        if not self.depths or any(len(field) != len(self.depths) for field in per_stage):
            raise ValueError(
                "MetaFormer needs one entry per stage in dims, token_mixers, "
                "layer_scale_init_values and res_scale_init_values: depths "
                f"{tuple(self.depths)}, dims {tuple(self.dims)}, token_mixers "
                f"{tuple(self.token_mixers)}"
            )


# The variants' conventions (timm's registry): PoolFormer v1's norms, MLP and classifier, then
# PoolFormerV2's (ConvFormer's and CAFormer's but the norm and the classifier).
POOLFORMER_V1 = {
    "norm": "group_norm",
    "norm_bias": True,
    "norm_epsilon": GROUP_NORM_EPSILON,
    "downsample_norm": False,
    "mlp_activation": "gelu",
    "mlp_bias": True,
    "res_scale_init_values": (None,) * 4,
    "mlp_head": False,
}
POOLFORMER_V2 = {"norm": "group_norm", "mlp_head": False}
_S12 = {"depths": (2, 2, 6, 2), "dims": (64, 128, 320, 512)}
_S24 = {"depths": (4, 4, 12, 4), "dims": (64, 128, 320, 512)}
_S36 = {"depths": (6, 6, 18, 6), "dims": (64, 128, 320, 512)}
_M36 = {"depths": (6, 6, 18, 6), "dims": (96, 192, 384, 768)}
_M48 = {"depths": (8, 8, 24, 8), "dims": (96, 192, 384, 768)}
_V1_SCALE_5, _V1_SCALE_6 = ((1e-5,) * 4, (1e-6,) * 4)  # v1's layer scales: small, deeper sizes

poolformer_s12 = partial(MetaFormer, **_S12, **POOLFORMER_V1, layer_scale_init_values=_V1_SCALE_5)
poolformer_s24 = partial(MetaFormer, **_S24, **POOLFORMER_V1, layer_scale_init_values=_V1_SCALE_5)
poolformer_s36 = partial(MetaFormer, **_S36, **POOLFORMER_V1, layer_scale_init_values=_V1_SCALE_6)
poolformer_m36 = partial(MetaFormer, **_M36, **POOLFORMER_V1, layer_scale_init_values=_V1_SCALE_6)
poolformer_m48 = partial(MetaFormer, **_M48, **POOLFORMER_V1, layer_scale_init_values=_V1_SCALE_6)
poolformerv2_s12 = partial(MetaFormer, **_S12, **POOLFORMER_V2)
poolformerv2_s24 = partial(MetaFormer, **_S24, **POOLFORMER_V2)
poolformerv2_s36 = partial(MetaFormer, **_S36, **POOLFORMER_V2)
poolformerv2_m36 = partial(MetaFormer, **_M36, **POOLFORMER_V2)
poolformerv2_m48 = partial(MetaFormer, **_M48, **POOLFORMER_V2)

# ConvFormer and CAFormer: timm's sizes; CAFormer's last two stages attend.
_CONV = {"token_mixers": ("sepconv",) * 4}
_CA = {"token_mixers": ("sepconv", "sepconv", "attention", "attention")}
_F18 = {"depths": (3, 3, 9, 3), "dims": (64, 128, 320, 512)}
_F36 = {"depths": (3, 12, 18, 3), "dims": (64, 128, 320, 512)}
_FM36 = {"depths": (3, 12, 18, 3), "dims": (96, 192, 384, 576)}
_FB36 = {"depths": (3, 12, 18, 3), "dims": (128, 256, 512, 768)}
convformer_s18 = partial(MetaFormer, **_F18, **_CONV)
convformer_s36 = partial(MetaFormer, **_F36, **_CONV)
convformer_m36 = partial(MetaFormer, **_FM36, **_CONV)
convformer_b36 = partial(MetaFormer, **_FB36, **_CONV)
caformer_s18 = partial(MetaFormer, **_F18, **_CA)
caformer_s36 = partial(MetaFormer, **_F36, **_CA)
caformer_m36 = partial(MetaFormer, **_FM36, **_CA)
caformer_b36 = partial(MetaFormer, **_FB36, **_CA)

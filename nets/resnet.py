"""ResNet family.

- ResNet v1.5: He et al. 2015, "Deep Residual Learning for Image Recognition" (arXiv:1512.03385),
  with the stride on the bottleneck's 3x3 convolution and the last BatchNorm scale of each block
  initialised to zero, exactly as the Flax ImageNet example builds it. Module names follow that
  example (`conv_init`, `bn_init`, `ResNetBlock_N`/`BottleneckResNetBlock_N`, `Dense_0`), so its
  checkpoints restore into ours.
- ResNet v2: He et al. 2016, "Identity Mappings in Deep Residual Networks" (arXiv:1603.05027), as
  TF-Slim's `resnet_v2` builds it: a biased stem convolution without BatchNorm, pre-activation
  bottlenecks, and a final BatchNorm + ReLU before pooling.
- CIFAR ResNets: 1512.03385 section 4.2 (3x3 stem, 16/32/64 filters, option-A identity shortcuts).
- Wide ResNet-50-2: Zagoruyko & Komodakis 2016 (arXiv:1605.07146), torchvision's layout.
- ResNeXt: Xie et al. 2017, "Aggregated Residual Transformations" (arXiv:1611.05431).
- ResNet-D: He et al. 2019, "Bag of Tricks for Image Classification" (arXiv:1812.01187): a deep
  stem of three 3x3 convolutions (`stem_widths`) and projection shortcuts that average-pool before
  their 1x1 convolution (`avg_down`), so no pixel is skipped; timm's `resnet*d` (and its `*t`,
  a tiered stem of 24 and 32 filters).
- Channel attention on the bottleneck's output (`attention`), as timm places it: squeeze-and-excite
  (Hu et al. 2018, arXiv:1709.01507; timm's `seresnet*`, `seresnext*`) or ECA (Wang et al. 2020,
  arXiv:1910.03151; timm's `ecaresnet*`).
- Other bottlenecks in the same network: ResNeSt's split attention (`nets.resnest`) and Res2Net's
  hierarchical splits (`nets.res2net`), on `PoolingBottleneck`'s fields.
"""

import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from nets.features import deepest_per_stride
from nets.layers import (
    TORCH,
    Conv,
    ModuleDef,
    SqueezeExcite,
    avg_pool,
    batch_norm,
    checkpointed,
    classify,
    drop_path,
    global_avg_pool,
    make_divisible,
    max_pool,
)
from nets.layers.dilation import StageStride, capped_strides, stage_strides
from nets.layers.drop_path import check_drop_path_rate, linear_drop_path_rates


def average_down(
    x: jax.Array, strides: tuple[int, int], avg_down: bool, dilated: bool = False
) -> tuple[jax.Array, tuple[int, int]]:
    """ResNet-D's shortcut input: with `avg_down` and a stride, `x` averaged over 2x2 windows at
    `strides` (timm's: ceil mode, padding not counted) and stride 1 left for the 1x1 convolution,
    which would otherwise read one pixel in four; else `x` and `strides` as they are. A block of
    a dilated stage (`output_stride`) averages 2x2 windows at stride 1, a row and a column of
    zeros after the map counted (timm's `AvgPool2dSame` there)."""
    if avg_down and strides != (1, 1):
        return avg_pool(x, (2, 2), strides, padding="SAME", count_include_pad=False), (1, 1)
    if avg_down and dilated:
        return avg_pool(x, (2, 2), (1, 1), padding="SAME"), strides
    return x, strides


def projection_shortcut(
    x: jax.Array,
    features: int,
    strides: tuple[int, int],
    conv: ModuleDef,
    norm: ModuleDef,
    avg_down: bool,
    dilated: bool = False,
) -> jax.Array:
    """A 1x1 convolution and BatchNorm to `features` channels at `strides`, after
    `average_down` (ResNet-D) with `avg_down`; `dilated`: the block's stage is."""
    x, strides = average_down(x, strides, avg_down, dilated)
    x = conv(features, (1, 1), strides, name="conv_proj")(x)
    return norm(name="norm_proj")(x)


def add_shortcut(block: nn.Module, y: jax.Array, x: jax.Array) -> jax.Array:
    """A bottleneck's end: `act(shortcut(x) + drop_path(y))` for its input `x` and branch `y`,
    the shortcut a projection (`projection_shortcut`, with the block's `avg_down`) where their
    shapes differ. `block`: its fields `strides`, `conv`, `norm`, `act`, `avg_down`,
    `dilation`, `drop_path_rate`, `deterministic`; the call is in its `__call__`."""
    if x.shape != y.shape:
        x = projection_shortcut(
            x,
            y.shape[-1],
            block.strides,
            block.conv,
            block.norm,
            block.avg_down,
            block.dilation > 1,
        )
    y = drop_path(block, y, block.drop_path_rate, not block.deterministic)
    return block.act(x + y)


class EfficientChannelAttention(nn.Module):
    """ECA's gate: `x * sigmoid(conv1d(mean(x)))`, a 1-D convolution without bias across the
    pooled channels, its kernel size `k` from their number `c` (odd, at least 3, nearest to
    `(log2(c) + 1) / 2`: 5 for 256 to 1024 channels, 7 for 2048), as timm's `EcaModule`."""

    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        t = int(abs(math.log2(x.shape[-1]) + 1) / 2)
        k = max(t if t % 2 else t + 1, 3)
        pooled = global_avg_pool(x)[..., None]  # [n, c, 1]: the channels as a sequence
        gate = nn.Conv(
            1, (k,), padding=[((k - 1) // 2,) * 2], use_bias=False, dtype=self.dtype, name="conv"
        )(pooled)
        return x * nn.sigmoid(gate)[:, None, None, :, 0]


def channel_attention(
    kind: str | None, channels: int, conv: ModuleDef, dtype: Any
) -> nn.Module | None:
    """The gate a bottleneck applies to its `channels` outputs, named `se` as timm names both:
    None, 'se' (timm's SEModule: a sixteenth of the channels, rounded to a multiple of 8 and
    never up by the 10% rule, ReLU, a logistic gate, biased 1x1 convolutions) or 'eca'."""
    if kind is None:
        return None
    if kind == "se":
        squeeze = make_divisible(channels / 16, 8, round_limit=0.0)
        return SqueezeExcite(
            conv, squeeze_channels=squeeze, gate=nn.sigmoid, layer_names=("fc1", "fc2"), name="se"
        )
    if kind == "eca":
        return EfficientChannelAttention(dtype, name="se")
    raise ValueError(f"attention={kind!r}: expected None, 'se' or 'eca'")


class ResNetBlock(nn.Module):
    """Basic block: two 3x3 convolutions; `filters` output channels."""

    filters: int
    conv: ModuleDef
    norm: ModuleDef
    act: Callable
    strides: tuple[int, int] = (1, 1)
    # False: He et al.'s option A for CIFAR (subsample and zero-pad channels; no parameters).
    projection_shortcut: bool = True
    # Where option A's zero channels go: 'after' the input's, or half on 'both' sides (the
    # community's PyTorch CIFAR ResNets, whose weights need it).
    shortcut_padding: str = "after"
    avg_down: bool = False  # a strided projection averages first (ResNet-D; `ResNet`'s)
    # Of a dilated stage (`ResNet.output_stride`, timm's rule): its 3x3 convolutions', the
    # first block's first one at the stage before's (`first_dilation`).
    dilation: int = 1
    first_dilation: int = 1
    drop_path_rate: float = 0.0  # stochastic depth of the residual branch (`ResNet`'s)
    deterministic: bool = True  # False: training, where drop path is active

    @nn.compact
    def __call__(self, x):
        residual = x
        y = self.conv(self.filters, (3, 3), self.strides, kernel_dilation=self.first_dilation)(x)
        y = self.norm()(y)
        y = self.act(y)
        y = self.conv(self.filters, (3, 3), kernel_dilation=self.dilation)(y)
        y = self.norm(scale_init=nn.initializers.zeros_init())(y)
        if residual.shape != y.shape:
            residual = self._shortcut(residual)
        y = drop_path(self, y, self.drop_path_rate, not self.deterministic)
        return self.act(residual + y)

    def _shortcut(self, x):
        if self.projection_shortcut:
            return projection_shortcut(
                x,
                self.filters,
                self.strides,
                self.conv,
                self.norm,
                self.avg_down,
                self.dilation > 1,
            )
        x = x[:, :: self.strides[0], :: self.strides[1], :]
        new = self.filters - x.shape[-1]
        sides = {"after": (0, new), "both": (new // 2, new - new // 2)}
        if self.shortcut_padding not in sides:
            raise ValueError(
                f"shortcut_padding={self.shortcut_padding!r}: expected one of {sorted(sides)}"
            )
        return jnp.pad(x, ((0, 0), (0, 0), (0, 0), sides[self.shortcut_padding]))


class BottleneckResNetBlock(nn.Module):
    """1x1 -> 3x3 (strided, optionally grouped) -> 1x1 with `4 * filters` output channels.

    The inner width is `filters * width_per_group / 64 * groups`, torchvision's formula: 64 and 1
    give ResNet, 128 gives Wide ResNet-*-2, `groups=32, width_per_group=4` gives ResNeXt-32x4d.
    `attention` ('se' or 'eca') gates the last BatchNorm's output, before the residual sum.
    """

    filters: int
    conv: ModuleDef
    norm: ModuleDef
    act: Callable
    strides: tuple[int, int] = (1, 1)
    groups: int = 1
    width_per_group: int = 64
    attention: str | None = None
    avg_down: bool = False
    dilation: int = 1  # of a dilated stage (`ResNet.output_stride`)
    first_dilation: int = 1  # of the 3x3 convolution: the stage before's in its first block
    drop_path_rate: float = 0.0
    deterministic: bool = True

    @nn.compact
    def __call__(self, x):
        width = self.filters * self.width_per_group // 64 * self.groups
        y = self.conv(width, (1, 1))(x)
        y = self.norm()(y)
        y = self.act(y)
        y = self.conv(
            width,
            (3, 3),
            self.strides,
            kernel_dilation=self.first_dilation,
            feature_group_count=self.groups,
        )(y)
        y = self.norm()(y)
        y = self.act(y)
        y = self.conv(self.filters * 4, (1, 1))(y)
        y = self.norm(scale_init=nn.initializers.zeros_init())(y)
        if (gate := channel_attention(self.attention, y.shape[-1], self.conv, y.dtype)) is not None:
            y = gate(y)
        return add_shortcut(self, y, x)


class PoolingBottleneck(nn.Module):
    """The fields `ResNet` gives a block that average-pools inside (ResNeSt's and Res2Net's
    bottlenecks subclass it): its own, and the network's `padding` for its pools."""

    pools: ClassVar[bool] = True

    filters: int
    conv: ModuleDef
    norm: ModuleDef
    act: Callable
    strides: tuple[int, int] = (1, 1)
    padding: str = "SAME"  # the network's (`ResNet.padding`), of the pools as of its convolutions
    avg_down: bool = False
    dilation: int = 1  # of a dilated stage (`ResNet.output_stride`)
    first_dilation: int = 1  # of the 3x3 convolutions: the stage before's in its first block
    drop_path_rate: float = 0.0
    deterministic: bool = True


class PreActivationBlock(nn.Module):
    """A pre-activation block (ResNet v2): `shortcut(x) + residual(act(norm(x)))`, the shortcut
    `x` itself where the shape stays, else a 1x1 convolution `shortcut` of the pre-activated
    input to the block's outputs (after `average_down` with `avg_down`), biased with `use_bias`
    as the residual branch's last convolution (Slim's have biases there, timm's none). The
    subclasses' `residual` is the branch, `expansion` its outputs per filter."""

    pre_activation: ClassVar[bool] = True
    expansion: ClassVar[int] = 1

    filters: int
    conv: ModuleDef
    norm: ModuleDef
    act: Callable
    strides: tuple[int, int] = (1, 1)
    use_bias: bool = True
    avg_down: bool = False  # the projection averages first (ResNet-D; `ResNet`'s)
    # Of a dilated stage (`ResNet.output_stride`, timm's rule): its 3x3 convolutions', the
    # first block's first one at the stage before's (`first_dilation`).
    dilation: int = 1
    first_dilation: int = 1
    drop_path_rate: float = 0.0
    deterministic: bool = True

    @nn.compact
    def __call__(self, x):
        preact = self.act(self.norm(name="preact")(x))
        shortcut, features = x, self.filters * self.expansion
        if (
            x.shape[-1] != features
            or self.strides != (1, 1)
            or self.first_dilation != self.dilation
        ):
            pooled, strides = average_down(preact, self.strides, self.avg_down, self.dilation > 1)
            shortcut = self.conv(
                features, (1, 1), strides, use_bias=self.use_bias, name="shortcut"
            )(pooled)
        y = self.residual(preact)
        return shortcut + drop_path(self, y, self.drop_path_rate, not self.deterministic)

    def residual(self, preact: jax.Array) -> jax.Array:
        raise NotImplementedError


class PreActBottleneckBlock(PreActivationBlock):
    """Pre-activation bottleneck (ResNet v2): BN-ReLU before each convolution, clean identity path.

    As in Slim, the shortcut projection (when shapes change) reads the pre-activated input, and the
    last 1x1 convolution and the projection carry biases, no BatchNorm following them directly
    (`use_bias=False`: timm's `PreActBottleneck`, which has none).
    """

    expansion: ClassVar[int] = 4

    def residual(self, preact: jax.Array) -> jax.Array:
        y = self.conv(self.filters, (1, 1))(preact)
        y = self.act(self.norm()(y))
        y = self.conv(self.filters, (3, 3), self.strides, kernel_dilation=self.first_dilation)(y)
        y = self.act(self.norm()(y))
        return self.conv(self.filters * 4, (1, 1), use_bias=self.use_bias)(y)


class PreActBasicBlock(PreActivationBlock):
    """Pre-activation basic block (timm's `PreActBasic`, its ResNetV2-18/34): two 3x3
    convolutions of `filters` channels, the first strided, each after BN-ReLU."""

    def residual(self, preact: jax.Array) -> jax.Array:
        y = self.conv(self.filters, (3, 3), self.strides, kernel_dilation=self.first_dilation)(
            preact
        )
        y = self.act(self.norm()(y))
        return self.conv(
            self.filters, (3, 3), kernel_dilation=self.dilation, use_bias=self.use_bias
        )(y)


def _is_pre_activation(block_cls) -> bool:
    return getattr(getattr(block_cls, "func", block_cls), "pre_activation", False)


def _pools(block_cls) -> bool:
    """Whether the blocks average-pool inside (ResNeSt's, Res2Net's), padded as the network's
    3x3 convolutions: they then take the network's `padding`."""
    return getattr(getattr(block_cls, "func", block_cls), "pools", False)


class Stem(nn.Module):
    """The layers before the first block: a deep stem's convolutions, `conv_init` with its
    BatchNorm and activation (none in pre-activation networks), the max pool. Returns
    `conv_init`'s map and the pooled one.

    One unit for `remat`: at the largest maps of the network it holds a third of ResNet-50's
    activations when the blocks are recomputed and it is not. The network shares its scope with
    it (`nn.share_scope`), so its layers keep their paths (the Flax example's `conv_init`,
    `bn_init`; timm's deep stem at `stem_conv_i`, `stem_bn_i`)."""

    widths: Sequence[int]  # a deep stem's convolutions (ResNet-D), before `conv_init`
    features: int
    kernel_size: int
    strides: int
    pre_activation: bool  # no norm or activation after `conv_init`
    bias: bool  # on `conv_init`
    pool: bool  # a 3x3/2 max pool
    pool_zeros: bool  # padded with one pixel of zeros on each side (BiT's), else as `padding`
    padding: str
    conv: ModuleDef
    norm: ModuleDef
    act: Callable

    @nn.compact
    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        k, strides = self.kernel_size, (self.strides, self.strides)
        for i, width in enumerate(self.widths):
            x = self.conv(width, (k, k), strides if i == 0 else (1, 1), name=f"stem_conv_{i}")(x)
            x = self.act(self.norm(name=f"stem_bn_{i}")(x))
        x = self.conv(
            self.features,
            (k, k),
            (1, 1) if self.widths else strides,
            padding=[(k // 2, k // 2)] * 2,
            use_bias=self.bias,
            name="conv_init",
        )(x)
        if not self.pre_activation:
            x = self.act(self.norm(name="bn_init")(x))
        if not self.pool:
            return x, x
        y, padding = x, self.padding
        if self.pool_zeros:
            y, padding = jnp.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0))), "VALID"
        return x, max_pool(y, (3, 3), strides=(2, 2), padding=padding)


def resnet_stages(network: "ResNet") -> list[StageStride]:
    """Each stage's stride and dilations (`output_stride`); the first stage strides 1."""
    strides = [1] + [2] * (len(network.stage_sizes) - 1)
    start = network.stem_strides * (2 if network.stem_pool else 1)
    return stage_strides(strides, network.output_stride, start)


class ResNet(nn.Module):
    """ResNet for ImageNet-sized inputs.

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the pooled features
    `[batch, channels]` when `num_classes` is 0 or None. End points: `conv_init` (the stem
    convolution's activations), `stem`, `block1`..`blockN`, `pre_logits`, and
    `logits`/`predictions` when there is a head.
    """

    default_image_size: ClassVar[int] = 224

    stage_sizes: Sequence[int]
    block_cls: ModuleDef
    num_classes: int | None = 1000
    num_filters: int = 64
    # The stem convolutions' kernel size; None: 7 for a single convolution, 3 for each of a
    # deep stem's.
    stem_kernel_size: int | None = None
    stem_strides: int = 2
    stem_pool: bool = True
    # The stem pool's padding: False, the network's `padding` with -inf (no pixel of it wins
    # the max); True, one pixel of zeros on each side, which may (BiT's: timm's 'fixed' stem,
    # whose pool reads a pre-activation stem's signed outputs).
    stem_pool_zeros: bool = False
    # A deep stem (ResNet-D): convolutions of these widths, the first strided, each with
    # BatchNorm and ReLU, before the stem convolution (timm's `stem_type='deep'` is (32, 32),
    # 'deep_tiered' (24, 32)); () for the single stem convolution.
    stem_widths: Sequence[int] = ()
    # The stem convolution's width; None: `num_filters` (timm's ResNeSt-*e: 128 after a deep
    # stem of 64 and 64, where the first stage is 64 wide).
    stem_features: int | None = None
    # Projection shortcuts average-pool before their 1x1 convolution, which then has stride 1
    # (ResNet-D; timm's `avg_down`).
    avg_down: bool = False
    dtype: Any = jnp.float32
    act: Callable = nn.relu
    conv: ModuleDef = Conv
    # A reparametrisation of every convolution's kernel at each call (`Conv.kernel_transform`:
    # BiT's `WeightStandardization`); a field of its own, so an injected `conv` keeps it.
    kernel_transform: Callable | None = None
    # The normalisation, called with `dtype`: None, BatchNorm with PyTorch's convention (batch
    # statistics in training); GroupNorm or EvoNorm (`nets.resnetv2`), the same in both modes.
    norm: ModuleDef | None = None
    # Of the 3x3 convolutions and the stem's max pool: 'SAME' as the Flax example and Slim pad
    # (after, on even maps), 'SYMMETRIC' as torchvision and timm do (their weights need it).
    padding: str = "SAME"
    # Biases on the convolutions no BatchNorm follows directly: the stem and each block's last and
    # projection convolutions of pre-activation networks (Slim's have them, timm's resnetv2 has
    # none); v1 networks have no such convolution.
    bias_without_norm: bool = True
    # Stochastic depth (Huang et al. 2016) of each block's residual branch, rising linearly from 0
    # at the first block to this rate at the last (timm's rule, "ResNet strikes back" trains
    # ResNet-50 with 0.05); training only, from the 'dropout' rng.
    drop_path_rate: float = 0.0
    remat: bool | str = False  # stem, blocks recomputed in backward (nets.layers.remat.POLICIES)
    # Dilation for dense prediction (`nets.layers.dilation`): None, every stage strides; 8 or 16,
    # the stages past that stride dilate their 3x3 convolutions instead (timm's rule exactly).
    output_stride: int | None = None

    def feature_strides(self) -> dict[str, int]:
        """The stem convolution's map (timm's `act1`) and each stage's (`nets.features`)."""
        stem = self.stem_strides * (2 if self.stem_pool else 1)
        stages = [(f"block{i + 1}", stem * 2**i) for i in range(len(self.stage_sizes))]
        strides = deepest_per_stride([("conv_init", self.stem_strides), *stages])
        resnet_stages(self)  # a bad value's error, here too
        return capped_strides(strides, self.output_stride)

    @nn.compact
    def __call__(self, x, train: bool = True):
        check_drop_path_rate(self.drop_path_rate)
        conv = partial(self.conv, use_bias=False, dtype=self.dtype, padding=self.padding)
        if self.kernel_transform is not None:
            conv = partial(conv, kernel_transform=self.kernel_transform)
        norm = batch_norm(TORCH, train, self.dtype)
        if self.norm is not None:
            norm = partial(self.norm, dtype=self.dtype)
        pre_activation = _is_pre_activation(self.block_cls)
        end_points = {}

        x = jnp.asarray(x, self.dtype)
        k = self.stem_kernel_size or (3 if self.stem_widths else 7)
        stem = checkpointed(Stem, self.remat)(
            self.stem_widths,
            self.stem_features or self.num_filters,
            k,
            self.stem_strides,
            pre_activation,
            pre_activation and self.bias_without_norm,
            self.stem_pool,
            self.stem_pool_zeros,
            self.padding,
            conv,
            norm,
            self.act,
            name="stem",
        )
        nn.share_scope(self, stem)  # its layers at the Flax example's paths (its docstring)
        end_points["conv_init"], x = stem(x)
        end_points["stem"] = x

        block = self.blocks()
        if pre_activation:
            block = partial(block, use_bias=self.bias_without_norm)
        if _pools(self.block_cls):
            block = partial(block, padding=self.padding)
        if self.avg_down:
            block = partial(block, avg_down=True)
        # The blocks' names are the ones flax gives them (`BottleneckResNetBlock_3`, the Flax
        # example's), written out: a checkpointed block's class has another name.
        kind = getattr(block, "func", block).__name__
        block = checkpointed(block, self.remat)
        rates = iter(linear_drop_path_rates(self.drop_path_rate, sum(self.stage_sizes)))
        n = 0
        for i, (block_size, stage) in enumerate(
            zip(self.stage_sizes, resnet_stages(self), strict=True)
        ):
            for j in range(block_size):
                first = j == 0
                x = block(
                    self.num_filters * 2**i,
                    strides=(stage.stride,) * 2 if first else (1, 1),
                    dilation=stage.dilation,
                    first_dilation=stage.first_dilation if first else stage.dilation,
                    conv=conv,
                    norm=norm,
                    act=self.act,
                    drop_path_rate=next(rates),
                    deterministic=not train,
                    name=f"{kind}_{n}",
                )(x)
                n += 1
            end_points[f"block{i + 1}"] = x
        if pre_activation:
            x = self.act(norm(name="postnorm")(x))

        x = global_avg_pool(x)
        return classify(x, end_points, self.num_classes, train=train, dtype=self.dtype)

    def blocks(self) -> ModuleDef:
        """The block constructor, with the fields a subclass adds to every block."""
        return self.block_cls


class CifarResNet(ResNet):
    """He et al.'s CIFAR-10 ResNet-(6n+2): a 3x3 stem, three stages of 16/32/64 filters."""

    default_image_size: ClassVar[int] = 32

    num_classes: int | None = 10
    num_filters: int = 16
    stem_kernel_size: int = 3
    stem_strides: int = 1
    stem_pool: bool = False
    # Where the option-A shortcuts' zero channels go: 'after' the input's, or 'both' sides
    # (`planes // 4` before and after, as the community's PyTorch checkpoints were trained).
    shortcut_padding: str = "after"

    def blocks(self) -> ModuleDef:
        return partial(self.block_cls, shortcut_padding=self.shortcut_padding)


# ResNet v1.5, the Flax ImageNet example's and torchvision's.
resnet18 = partial(ResNet, stage_sizes=(2, 2, 2, 2), block_cls=ResNetBlock)
resnet34 = partial(ResNet, stage_sizes=(3, 4, 6, 3), block_cls=ResNetBlock)
resnet50 = partial(ResNet, stage_sizes=(3, 4, 6, 3), block_cls=BottleneckResNetBlock)
resnet101 = partial(ResNet, stage_sizes=(3, 4, 23, 3), block_cls=BottleneckResNetBlock)
resnet152 = partial(ResNet, stage_sizes=(3, 8, 36, 3), block_cls=BottleneckResNetBlock)
resnet200 = partial(ResNet, stage_sizes=(3, 24, 36, 3), block_cls=BottleneckResNetBlock)

# Pre-activation ResNet v2 (Slim's resnet_v2_*).
resnet_v2_50 = partial(ResNet, stage_sizes=(3, 4, 6, 3), block_cls=PreActBottleneckBlock)
resnet_v2_101 = partial(ResNet, stage_sizes=(3, 4, 23, 3), block_cls=PreActBottleneckBlock)
resnet_v2_152 = partial(ResNet, stage_sizes=(3, 8, 36, 3), block_cls=PreActBottleneckBlock)
resnet_v2_200 = partial(ResNet, stage_sizes=(3, 24, 36, 3), block_cls=PreActBottleneckBlock)

# CIFAR ResNet-(6n+2) with parameter-free option-A shortcuts.
_cifar_block = partial(ResNetBlock, projection_shortcut=False)
resnet20 = partial(CifarResNet, stage_sizes=(3, 3, 3), block_cls=_cifar_block)
resnet32 = partial(CifarResNet, stage_sizes=(5, 5, 5), block_cls=_cifar_block)
resnet44 = partial(CifarResNet, stage_sizes=(7, 7, 7), block_cls=_cifar_block)
resnet56 = partial(CifarResNet, stage_sizes=(9, 9, 9), block_cls=_cifar_block)
resnet110 = partial(CifarResNet, stage_sizes=(18, 18, 18), block_cls=_cifar_block)

# ResNet-D (timm's `resnet*d`; `*t`: the tiered stem).
_deep = {"stem_widths": (32, 32), "avg_down": True}
_tiered = {"stem_widths": (24, 32), "avg_down": True}
resnet18d = partial(ResNet, stage_sizes=(2, 2, 2, 2), block_cls=ResNetBlock, **_deep)
resnet34d = partial(ResNet, stage_sizes=(3, 4, 6, 3), block_cls=ResNetBlock, **_deep)
resnet26d = partial(ResNet, stage_sizes=(2, 2, 2, 2), block_cls=BottleneckResNetBlock, **_deep)
resnet26t = partial(ResNet, stage_sizes=(2, 2, 2, 2), block_cls=BottleneckResNetBlock, **_tiered)
resnet50d = partial(ResNet, stage_sizes=(3, 4, 6, 3), block_cls=BottleneckResNetBlock, **_deep)
resnet101d = partial(ResNet, stage_sizes=(3, 4, 23, 3), block_cls=BottleneckResNetBlock, **_deep)
resnet152d = partial(ResNet, stage_sizes=(3, 8, 36, 3), block_cls=BottleneckResNetBlock, **_deep)
resnet200d = partial(ResNet, stage_sizes=(3, 24, 36, 3), block_cls=BottleneckResNetBlock, **_deep)

# Squeeze-and-excite and ECA bottlenecks (timm's `seresnet*`, `seresnext*`, `ecaresnet*`).
_se = partial(BottleneckResNetBlock, attention="se")
_se_32x4d = partial(BottleneckResNetBlock, groups=32, width_per_group=4, attention="se")
_se_32x8d = partial(BottleneckResNetBlock, groups=32, width_per_group=8, attention="se")
_eca = partial(BottleneckResNetBlock, attention="eca")
seresnet50 = partial(ResNet, stage_sizes=(3, 4, 6, 3), block_cls=_se)
seresnet152d = partial(ResNet, stage_sizes=(3, 8, 36, 3), block_cls=_se, **_deep)
seresnext26d_32x4d = partial(ResNet, stage_sizes=(2, 2, 2, 2), block_cls=_se_32x4d, **_deep)
seresnext50_32x4d = partial(ResNet, stage_sizes=(3, 4, 6, 3), block_cls=_se_32x4d)
seresnext101_32x4d = partial(ResNet, stage_sizes=(3, 4, 23, 3), block_cls=_se_32x4d)
seresnext101_32x8d = partial(ResNet, stage_sizes=(3, 4, 23, 3), block_cls=_se_32x8d)
seresnext101d_32x8d = partial(ResNet, stage_sizes=(3, 4, 23, 3), block_cls=_se_32x8d, **_deep)
ecaresnet26t = partial(ResNet, stage_sizes=(2, 2, 2, 2), block_cls=_eca, **_tiered)
ecaresnet50d = partial(ResNet, stage_sizes=(3, 4, 6, 3), block_cls=_eca, **_deep)
ecaresnet101d = partial(ResNet, stage_sizes=(3, 4, 23, 3), block_cls=_eca, **_deep)

# Wide and aggregated (grouped) bottlenecks.
wide_resnet50_2 = partial(
    ResNet, stage_sizes=(3, 4, 6, 3), block_cls=partial(BottleneckResNetBlock, width_per_group=128)
)
wide_resnet101_2 = partial(
    ResNet, stage_sizes=(3, 4, 23, 3), block_cls=partial(BottleneckResNetBlock, width_per_group=128)
)
resnext50_32x4d = partial(
    ResNet,
    stage_sizes=(3, 4, 6, 3),
    block_cls=partial(BottleneckResNetBlock, groups=32, width_per_group=4),
)
resnext101_32x8d = partial(
    ResNet,
    stage_sizes=(3, 4, 23, 3),
    block_cls=partial(BottleneckResNetBlock, groups=32, width_per_group=8),
)

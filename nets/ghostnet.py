"""GhostNet and GhostNetV2, as timm builds them (`timm.models.ghostnet`).

GhostNet: Han et al. 2020, "GhostNet: More Features from Cheap Operations" (arXiv:1911.11907).
GhostNetV2: Tang et al. 2022, "GhostNetV2: Enhance Cheap Operation with Long-Range Attention"
(arXiv:2211.12905).

A Ghost module makes half its output with a 1x1 convolution (the primary features) and the other
half from those by a cheap 3x3 depthwise convolution, both with BatchNorm and (in the expanding
module) ReLU; the two are concatenated and cut to the width asked for. A Ghost bottleneck is an
expanding Ghost module, a strided depthwise convolution with BatchNorm (stride-2 blocks only),
an optional squeeze-excite (a quarter of the inner width rounded to a multiple of 4, ReLU, hard
sigmoid), a projecting Ghost module without activation, plus the input, or, when stride or width
changes, the input through a depthwise kxk and a 1x1 convolution, each with BatchNorm. The network
(the paper's Table 1, timm's `cfgs`): a 3x3 stride-2 stem to 16, sixteen bottlenecks in nine
stages of timm's, a 1x1 convolution with BatchNorm and ReLU to 960, average pooling, then a biased
1x1 convolution to 1280 with ReLU (timm's `conv_head`, after the pool), dropout and the logits.
Widths scale by `width_multiplier`, rounded to multiples of 4; the head stays 1280.

GhostNetV2 gives each expanding Ghost module but the first two a DFC attention: the input, average
pooled 2x2, through a 1x1 convolution, a 1x5 and a 5x1 depthwise convolution (each with
BatchNorm), a sigmoid, upsampled (nearest) to the module's output, which it multiplies.

Where this differs from timm: nothing in the function. timm's features tap the stem's
convolution before its BatchNorm; ours is the stem's output (as every family's `stem`), and the
strides 16 and 32 are timm's stages (`blocks_5`, `blocks_7`: the first of their strides), not
the deepest. Parameters are named by scope (`stem`, `blocks_{s}_{b}/ghost1/primary_conv`, ...,
`conv_final`, `head`, `classifier`; `nets_weights/ghostnet.py` maps them to timm's). Parameters
at 1000 classes are timm's: 5,182,508 (ghostnet_100); 6,156,908, 8,960,404 and 12,392,698
(ghostnetv2_100/130/160).
"""

import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from nets.layers import (
    BatchNormConvention,
    Conv,
    ConvNormAct,
    ModuleDef,
    SqueezeExcite,
    avg_pool,
    batch_norm,
    checkpointed,
    classify,
    global_avg_pool,
    make_divisible,
)


class BlockDef(NamedTuple):
    """A Ghost bottleneck: a row of the paper's Table 1 (timm's `[k, t, c, SE, s]`)."""

    kernel_size: int
    inner: int  # the expanded width ("#exp")
    filters: int
    se_ratio: float
    strides: int


# The paper's Table 1 in timm's nine stages (each a tuple of bottlenecks).
GHOSTNET = (
    (BlockDef(3, 16, 16, 0, 1),),
    (BlockDef(3, 48, 24, 0, 2),),
    (BlockDef(3, 72, 24, 0, 1),),
    (BlockDef(5, 72, 40, 0.25, 2),),
    (BlockDef(5, 120, 40, 0.25, 1),),
    (BlockDef(3, 240, 80, 0, 2),),
    (
        BlockDef(3, 200, 80, 0, 1),
        BlockDef(3, 184, 80, 0, 1),
        BlockDef(3, 184, 80, 0, 1),
        BlockDef(3, 480, 112, 0.25, 1),
        BlockDef(3, 672, 112, 0.25, 1),
    ),
    (BlockDef(5, 672, 160, 0.25, 2),),
    (
        BlockDef(5, 960, 160, 0, 1),
        BlockDef(5, 960, 160, 0.25, 1),
        BlockDef(5, 960, 160, 0, 1),
        BlockDef(5, 960, 160, 0.25, 1),
    ),
)


def upsample_nearest(x: jax.Array, size: tuple[int, int]) -> jax.Array:
    """PyTorch's `interpolate(mode='nearest')` of `[n, h, w, c]` to `size`: output pixel `i`
    reads input pixel `floor(i * in / out)` (not the centre-aligned 'nearest-exact')."""
    for axis, out in zip((1, 2), size, strict=True):
        n = x.shape[axis]
        index = np.minimum(np.floor(np.arange(out) * np.float32(n / out)).astype(int), n - 1)
        x = jnp.take(x, index, axis=axis)
    return x


class GhostModule(nn.Module):
    """`filters` channels: `ceil(filters / 2)` from a 1x1 convolution, as many again from those by
    a 3x3 depthwise convolution, concatenated and cut to `filters`; `act` after both BatchNorms.

    `attention=True` is GhostNetV2's DFC attention (module docstring): its gate, computed at half
    resolution from the input, multiplies the output.
    """

    filters: int
    conv: ModuleDef
    norm: ModuleDef
    act: Callable | None
    attention: bool = False
    padding: str = "SYMMETRIC"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """`[n, h, w, c] -> [n, h, w, filters]`."""
        layer = partial(ConvNormAct, conv=self.conv, norm=self.norm, padding=self.padding)
        primary = math.ceil(self.filters / 2)
        y = layer(primary, 1, act=self.act, name="primary_conv")(x)
        cheap = layer(primary, 3, act=self.act, groups=primary, name="cheap_operation")(y)
        out = jnp.concatenate([y, cheap], axis=-1)[..., : self.filters]
        if not self.attention:
            return out
        gate = avg_pool(x, 2, 2)
        gate = layer(self.filters, 1, name="short_conv_0")(gate)
        gate = layer(self.filters, (1, 5), groups=self.filters, name="short_conv_1")(gate)
        gate = layer(self.filters, (5, 1), groups=self.filters, name="short_conv_2")(gate)
        return out * upsample_nearest(nn.sigmoid(gate), out.shape[1:3])


class GhostBottleneck(nn.Module):
    """Ghost bottleneck (module docstring): `[n, h, w, c] -> [n, h / s, w / s, filters]`."""

    block: BlockDef
    inner: int
    filters: int
    conv: ModuleDef
    norm: ModuleDef
    act: Callable
    attention: bool = False
    padding: str = "SYMMETRIC"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        b, channels = self.block, x.shape[-1]
        common = {"conv": self.conv, "norm": self.norm, "padding": self.padding}
        layer = partial(ConvNormAct, **common)
        ghost = partial(GhostModule, **common)
        inputs = x
        x = ghost(self.inner, act=self.act, attention=self.attention, name="ghost1")(x)
        if b.strides > 1:
            x = layer(self.inner, b.kernel_size, strides=b.strides, groups=self.inner, name="dw")(x)
        if b.se_ratio:
            # timm's: the width a multiple of 4, the block's ReLU, a hard sigmoid gate.
            squeeze = make_divisible(self.inner * b.se_ratio, 4)
            names = ("conv_reduce", "conv_expand")
            se = {"squeeze_channels": squeeze, "act": self.act, "gate": nn.hard_sigmoid}
            x = SqueezeExcite(self.conv, **se, layer_names=names, name="se")(x)
        x = ghost(self.filters, act=None, name="ghost2")(x)
        if channels != self.filters or b.strides > 1:
            k, s = b.kernel_size, b.strides
            inputs = layer(channels, k, strides=s, groups=channels, name="shortcut_0")(inputs)
            inputs = layer(self.filters, 1, name="shortcut_1")(inputs)
        return x + inputs


class GhostNet(nn.Module):
    """GhostNet (V1, and V2 with `attention`): `stages` of Ghost bottlenecks scaled by
    `width_multiplier`.

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the pooled 1280-wide
    features when `num_classes` is 0 or None. End points: `stem`, `blocks_{s}` (timm's
    `blocks.{s}`), `conv_final` (the 1x1 convolution to 960, timm's last `blocks`), `global_pool`,
    `head` (the 1x1 convolution after the pool), `pre_logits`, `logits`, `predictions`.
    """

    default_image_size: int = 224
    width_multiplier: float = 1.0
    stages: Sequence[tuple[BlockDef, ...]] = GHOSTNET
    attention: bool = False  # GhostNetV2's DFC attention in every block but the first two
    stem_filters: int = 16
    head_filters: int = 1280  # not scaled, as timm's
    num_classes: int | None = 1000
    dropout_rate: float = 0.2
    act: Callable = nn.relu
    dtype: Any = jnp.float32
    conv: ModuleDef = Conv
    # timm's (the original PyTorch code's) conventions: symmetric padding, BatchNorm epsilon 1e-5.
    padding: str = "SYMMETRIC"
    bn_epsilon: float = 1e-5
    bn_momentum: float = 0.9
    remat: bool | str = False  # stem, blocks recomputed in backward (nets.layers.remat.POLICIES)

    def width(self, channels: int) -> int:
        """timm's `make_divisible(channels * width, 4)`."""
        return make_divisible(channels * self.width_multiplier, 4)

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: the stem and each stage ending in a stride-2 block."""
        strides, levels = 2, {"stem": 2}
        for s, stage in enumerate(self.stages):
            if stage[-1].strides > 1:
                strides *= stage[-1].strides
                levels[f"blocks_{s}"] = strides
        return levels

    @nn.compact
    def __call__(self, x, train: bool = True):
        if self.width_multiplier <= 0:
            raise ValueError(f"width_multiplier must be positive, got {self.width_multiplier}")
        conv = partial(self.conv, dtype=self.dtype)
        convention = BatchNormConvention(momentum=self.bn_momentum, epsilon=self.bn_epsilon)
        norm = batch_norm(convention, train, self.dtype)
        layer = partial(ConvNormAct, conv=conv, norm=norm, act=self.act, padding=self.padding)
        stem = checkpointed(layer, self.remat)  # the largest maps: one unit for remat
        x = stem(self.width(self.stem_filters), 3, strides=2, name="stem")(
            jnp.asarray(x, self.dtype)
        )
        end_points = {"stem": x}
        index = 0
        for s, stage in enumerate(self.stages):
            for j, b in enumerate(stage):
                x = checkpointed(GhostBottleneck, self.remat)(
                    b,
                    self.width(b.inner),
                    self.width(b.filters),
                    conv,
                    norm,
                    self.act,
                    attention=self.attention and index > 1,
                    padding=self.padding,
                    name=f"blocks_{s}_{j}",
                )(x)
                index += 1
            end_points[f"blocks_{s}"] = x
        # timm's last stage: a 1x1 convolution to the last bottleneck's inner width (960).
        x = layer(self.width(self.stages[-1][-1].inner), 1, name="conv_final")(x)
        end_points["conv_final"] = x
        x = end_points["global_pool"] = global_avg_pool(x, keepdims=True)
        head = conv(self.head_filters, (1, 1), use_bias=True, name="head")
        x = end_points["head"] = self.act(head(x))
        fc = partial(classify, train=train, dropout_rate=self.dropout_rate, dtype=self.dtype)
        return fc(x[:, 0, 0, :], end_points, self.num_classes, name="classifier")


ghostnet_100 = partial(GhostNet)
ghostnetv2_100 = partial(GhostNet, attention=True)
ghostnetv2_130 = partial(GhostNet, attention=True, width_multiplier=1.3)
ghostnetv2_160 = partial(GhostNet, attention=True, width_multiplier=1.6)

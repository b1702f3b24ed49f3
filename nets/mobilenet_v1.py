"""MobileNet V1: Howard et al. 2017, "MobileNets: Efficient Convolutional Neural Networks for
Mobile Vision Applications" (arXiv:1704.04861), as TF-Slim's `nets/mobilenet_v1.py` builds it.

A 3x3 stride-2 convolution, then 13 depthwise-separable layers (3x3 depthwise, 1x1 pointwise),
each convolution followed by BatchNorm (decay 0.9997, epsilon 0.001) and ReLU6; average pooling,
dropout (keep 0.999) and the logits. Widths are `max(int(depth * depth_multiplier), min_depth)`.
Module names and end_points are Slim's: `Conv2d_0`, `Conv2d_1_depthwise`, `Conv2d_1_pointwise`,
..., `Conv2d_13_pointwise`, `AvgPool_1a`, `Logits`.
"""

from functools import partial
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from nets.features import cumulative_strides, deepest_per_stride
from nets.layers import (
    SLIM,
    Conv,
    ConvNormAct,
    ModuleDef,
    batch_norm,
    checkpointed,
    classify,
    global_avg_pool,
)
from nets.layers.dilation import (
    STANDARD_OUTPUT_STRIDES,
    StageStride,
    capped_strides,
    stage_strides,
)
from nets.layers.padding import PaddingLike, pads, smallest_input

# Slim's _CONV_DEFS after the 32-filter stem: (stride, pointwise depth) of each separable layer.
_SEPARABLE_LAYERS = (
    (1, 64),
    (2, 128),
    (1, 128),
    (2, 256),
    (1, 256),
    (2, 512),
    (1, 512),
    (1, 512),
    (1, 512),
    (1, 512),
    (1, 512),
    (2, 1024),
    (1, 1024),
)


class SeparableLayer(nn.Module):
    """Slim's depthwise-separable layer `index`: a 3x3 depthwise convolution
    (`Conv2d_<index>_depthwise`), then a 1x1 one to `filters` (`Conv2d_<index>_pointwise`), each
    a `layer` (the network's `ConvNormAct`: BatchNorm, ReLU6). Returns both maps (end points).

    The network shares its scope with it (`nn.share_scope`), so the two layers keep Slim's paths
    beside the stem's while `remat` recomputes them as one block (timm's `dsa` block)."""

    index: int
    filters: int
    strides: int
    padding: PaddingLike  # of the depthwise convolution
    layer: ModuleDef
    dilation: int = 1  # of the depthwise convolution (`MobileNetV1.output_stride`)

    @nn.compact
    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        """`[n, h, w, c]` -> `[n, h / strides, w / strides, c]`, `[..., filters]`."""
        channels, name = x.shape[-1], f"Conv2d_{self.index}"
        depthwise = self.layer(
            channels,
            3,
            strides=self.strides,
            padding=self.padding,
            groups=channels,
            dilation=self.dilation,
            name=f"{name}_depthwise",
        )(x)
        return depthwise, self.layer(self.filters, 1, name=f"{name}_pointwise")(depthwise)


class MobileNetV1(nn.Module):
    """MobileNet V1 for 224x224 images.

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the pooled features
    `[batch, channels]` when `num_classes` is 0 or None. End points: `stem` (= `Conv2d_0`),
    Slim's `Conv2d_<i>_depthwise` / `Conv2d_<i>_pointwise`, `AvgPool_1a` (`[batch, 1, 1, c]`),
    `pre_logits`, and `logits`/`predictions` when there is a head.
    """

    default_image_size: ClassVar[int] = 224

    num_classes: int | None = 1000
    depth_multiplier: float = 1.0
    min_depth: int = 8  # only binds when depth_multiplier < 1
    dropout_rate: float = 0.001  # Slim's dropout_keep_prob=0.999
    dtype: Any = jnp.float32
    conv: ModuleDef = Conv
    # Of the stride-2 depthwise convolutions (`nets.layers.padding`): Slim's 'SAME', or Keras's
    # `ZeroPadding2D(((0, 1), (0, 1)))` then 'valid', `((0, 1), (0, 1))`: the same on even
    # maps, one output fewer on odd ones (Keras's MobileNet at 56 px sees 7 and 3 pixel maps).
    downsample_padding: PaddingLike = "SAME"
    # The decay of BatchNorm's running averages: Slim's 0.9997 suits ImageNet's long runs; short
    # ones (a few thousand steps) need less, or evaluation sees mostly their initial values.
    bn_momentum: float = SLIM.momentum
    remat: bool | str = False  # stem, blocks recomputed in backward (nets.layers.remat.POLICIES)
    # Slim's `output_stride` (8, 16 or 32; None: no dilation): past it, a stride-2 layer strides 1
    # at the dilation so far and the layers after it dilate their depthwise convolutions by 2 more.
    output_stride: int | None = None

    def layer_strides(self) -> list[StageStride]:
        """Each separable layer's stride and dilations (its depthwise convolution's is the
        `first_dilation`): Slim's rule per layer, `stage_strides`'s for one-layer stages."""
        strides = [strides for strides, _ in _SEPARABLE_LAYERS]
        return stage_strides(strides, self.output_stride, 2, taken=STANDARD_OUTPUT_STRIDES)

    @property
    def min_image_size(self) -> int:
        """1 under 'SAME'; 31 under Keras's padding, which takes a pixel from odd maps."""
        downsample = (1, 2, 0)  # 'SAME': ceil(n / 2) pixels
        if self.downsample_padding != "SAME":
            (top, bottom), _ = pads(self.downsample_padding, (3, 3), (3, 3), (2, 2))
            downsample = (3, 2, top + bottom)
        downsamples = [downsample for strides, _ in _SEPARABLE_LAYERS if strides == 2]
        return smallest_input([(1, 2, 0), *downsamples])  # the 'SAME' stem, then those

    def depth(self, channels: int) -> int:
        """Slim's width rule: truncate, then clamp to `min_depth`."""
        return max(int(channels * self.depth_multiplier), self.min_depth)

    def feature_strides(self) -> dict[str, int]:
        """The deepest map at each stride (`nets.features`)."""
        names = [f"Conv2d_{i}_pointwise" for i in range(1, len(_SEPARABLE_LAYERS) + 1)]
        strides = [strides for strides, _ in _SEPARABLE_LAYERS]
        levels = deepest_per_stride([("Conv2d_0", 2), *cumulative_strides(names, strides, 2)])
        self.layer_strides()  # a bad `output_stride`'s error, here too
        return capped_strides(levels, self.output_stride)

    @nn.compact
    def __call__(self, x, train: bool = True):
        if self.depth_multiplier <= 0:
            raise ValueError(f"depth_multiplier must be positive, got {self.depth_multiplier}")
        conv = partial(self.conv, dtype=self.dtype)
        norm = batch_norm(SLIM._replace(momentum=self.bn_momentum), train, self.dtype)
        layer = partial(ConvNormAct, conv=conv, norm=norm, act=nn.relu6)

        stem = checkpointed(layer, self.remat)  # the largest maps: one unit for remat
        x = stem(self.depth(32), 3, strides=2, name="Conv2d_0")(jnp.asarray(x, self.dtype))
        end_points = {"Conv2d_0": x, "stem": x}
        layers = zip(_SEPARABLE_LAYERS, self.layer_strides(), strict=True)
        for i, ((_, depth), plan) in enumerate(layers, start=1):
            padding = self.downsample_padding if plan.stride == 2 else "SAME"
            separable = checkpointed(SeparableLayer, self.remat)(
                i,
                self.depth(depth),
                plan.stride,
                padding,
                layer,
                plan.first_dilation,
                name=f"Conv2d_{i}",
            )
            nn.share_scope(self, separable)  # its variables at Slim's paths (its docstring)
            end_points[f"Conv2d_{i}_depthwise"], x = separable(x)
            end_points[f"Conv2d_{i}_pointwise"] = x

        # Slim pools with a 7x7 VALID window (shrunk for smaller inputs): global at 224x224. We
        # always pool globally so that any input size gives `[batch, channels]` features.
        x = end_points["AvgPool_1a"] = global_avg_pool(x, keepdims=True)
        head = partial(classify, train=train, dropout_rate=self.dropout_rate, dtype=self.dtype)
        return head(x[:, 0, 0, :], end_points, self.num_classes, name="Logits")


mobilenet_v1 = partial(MobileNetV1)
mobilenet_v1_075 = partial(MobileNetV1, depth_multiplier=0.75)
mobilenet_v1_050 = partial(MobileNetV1, depth_multiplier=0.50)
mobilenet_v1_025 = partial(MobileNetV1, depth_multiplier=0.25)

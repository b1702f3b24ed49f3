"""Inception v2 (BN-Inception), as TF-Slim's `inception_v2` builds it.

Ioffe & Szegedy 2015, "Batch Normalization: Accelerating Deep Network Training by Reducing
Internal Covariate Shift" (arXiv:1502.03167), section 4.2 and its appendix: Inception v1 with
BatchNorm, the 5x5 convolutions replaced by two 3x3 ones, and strided reduction blocks
(`Mixed_4a`, `Mixed_5a`). Slim's first layer is a separable 7x7 convolution (depthwise multiplier
8); `use_separable_conv=False` makes it an ordinary one.
"""

import functools
from typing import ClassVar

import flax.linen as nn
import jax

from nets.inception_utils import (
    AvgPool,
    Builder,
    Conv2d,
    MaxPool,
    Mixed,
    ThinnableInception,
)
from nets.layers import ModuleDef


class SeparableConv(nn.Module):
    """Slim's `separable_conv2d`: a strided depthwise convolution, then a 1x1 one, bias, ReLU.

    Slim's inception arg_scope sets BatchNorm for `conv2d` only, so this layer -- alone in the
    network -- has a bias and no BatchNorm, like Slim's checkpoint (`depthwise_weights`
    `[7, 7, 3, 8]` is our `depthwise/kernel` `[7, 7, 1, 24]` reshaped; `pointwise_weights` and
    `biases` are `pointwise/kernel` and `pointwise/bias`).
    """

    features: int
    kernel_size: tuple[int, int]
    multiplier: int
    strides: int
    conv: ModuleDef

    @nn.compact
    def __call__(self, x):
        channels = x.shape[-1]
        x = self.conv(
            channels * self.multiplier,
            self.kernel_size,
            (self.strides, self.strides),
            feature_group_count=channels,
            use_bias=False,
            name="depthwise",
        )(x)
        x = self.conv(self.features, (1, 1), use_bias=True, name="pointwise")(x)
        return nn.relu(x)


class SeparableConv2d:
    """The table entry for Slim's first layer, `Conv2d_1a_7x7`."""

    name = "Conv2d_1a_7x7"

    def __call__(self, x: jax.Array, builder: Builder) -> jax.Array:
        features = builder.depth(64)
        # Slim: "in_channels * depthwise_multiplier <= out_channels", written for RGB input.
        multiplier = min(int(features / 3), 8)
        layer = SeparableConv(features, (7, 7), multiplier, 2, builder.conv, name=self.name)
        return layer(x)


def _mixed(name: str, w0: int, w1: tuple[int, int], w2: tuple[int, int], w3: int, pool=AvgPool):
    """An Inception v2 block: 1x1 | 1x1-3x3 | 1x1-3x3-3x3 | pool-1x1."""
    pool_name = "AvgPool_0a_3x3" if pool is AvgPool else "MaxPool_0a_3x3"
    return Mixed(
        name,
        (
            (Conv2d("Conv2d_0a_1x1", w0, 1),),
            (Conv2d("Conv2d_0a_1x1", w1[0], 1), Conv2d("Conv2d_0b_3x3", w1[1], 3)),
            (
                Conv2d("Conv2d_0a_1x1", w2[0], 1),
                Conv2d("Conv2d_0b_3x3", w2[1], 3),
                Conv2d("Conv2d_0c_3x3", w2[1], 3),
            ),
            (pool(pool_name, 3), Conv2d("Conv2d_0b_1x1", w3, 1)),
        ),
    )


def _reduction(name: str, w0: tuple[int, int], w1: tuple[int, int]) -> Mixed:
    """A strided block: 1x1-3x3/2 | 1x1-3x3-3x3/2 | max pool 3x3/2 (all SAME)."""
    return Mixed(
        name,
        (
            (Conv2d("Conv2d_0a_1x1", w0[0], 1), Conv2d("Conv2d_1a_3x3", w0[1], 3, stride=2)),
            (
                Conv2d("Conv2d_0a_1x1", w1[0], 1),
                Conv2d("Conv2d_0b_3x3", w1[1], 3),
                Conv2d("Conv2d_1a_3x3", w1[1], 3, stride=2),
            ),
            (MaxPool("MaxPool_1a_3x3", 3, stride=2),),
        ),
    )


# Slim's inception_v2_base after its first layer; SAME padding throughout.
_INCEPTION_V2 = (
    MaxPool("MaxPool_2a_3x3", 3, stride=2),
    Conv2d("Conv2d_2b_1x1", 64, 1),
    Conv2d("Conv2d_2c_3x3", 192, 3),
    MaxPool("MaxPool_3a_3x3", 3, stride=2),
    _mixed("Mixed_3b", 64, (64, 64), (64, 96), 32),
    _mixed("Mixed_3c", 64, (64, 96), (64, 96), 64),
    _reduction("Mixed_4a", (128, 160), (64, 96)),
    _mixed("Mixed_4b", 224, (64, 96), (96, 128), 128),
    _mixed("Mixed_4c", 192, (96, 128), (96, 128), 128),
    _mixed("Mixed_4d", 160, (128, 160), (128, 160), 96),
    _mixed("Mixed_4e", 96, (128, 192), (160, 192), 96),
    _reduction("Mixed_5a", (128, 192), (192, 256)),
    _mixed("Mixed_5b", 352, (192, 320), (160, 224), 128),
    _mixed("Mixed_5c", 352, (192, 320), (192, 224), 128, pool=MaxPool),
)


class InceptionV2(ThinnableInception):
    """Slim's Inception v2, default image size 224.

    Returns `(logits, end_points)`; end points are Slim's (`Conv2d_1a_7x7` ... `Mixed_5c`) plus
    `stem` (`MaxPool_3a_3x3`), `pre_logits`, `logits`, `predictions`. Dropout (keep_prob 0.8)
    precedes the 1x1 logits convolution `Logits/Conv2d_1c_1x1`. `depth_multiplier` and
    `min_depth` thin every convolution as Slim does. Slim's `inception_v2()` always builds the
    separable first layer; `use_separable_conv` (an argument of Slim's `inception_v2_base`)
    reaches it here.
    """

    default_image_size: ClassVar[int] = 224

    use_separable_conv: bool = True

    # The deepest map at each stride (`nets.features`).
    pyramid: ClassVar[dict[str, int]] = {
        "Conv2d_1a_7x7": 2,
        "Conv2d_2c_3x3": 4,
        "Mixed_3c": 8,
        "Mixed_4e": 16,
        "Mixed_5c": 32,
    }

    @nn.compact
    def __call__(self, x, train: bool = True):
        if self.use_separable_conv:
            first = SeparableConv2d()
        else:
            first = Conv2d("Conv2d_1a_7x7", 64, 7, stride=2)
        layers = (first, *_INCEPTION_V2)
        stem = ("MaxPool_2a_3x3", "MaxPool_3a_3x3")  # units of recomputation: 224 -> 56, 56 -> 28
        return self.forward(layers, x, train, stem, "Conv2d_1c_1x1")


inception_v2 = functools.partial(InceptionV2)

"""MobileNet V2: Sandler et al. 2018, "MobileNetV2: Inverted Residuals and Linear Bottlenecks"
(arXiv:1801.04381), as TF-Slim's `nets/mobilenet/mobilenet_v2.py` (`V2_DEF`) builds it.

A 3x3 stride-2 convolution to 32 channels, 17 inverted-residual bottlenecks (expansion 6, linear
projection), a 1x1 convolution to 1280, average pooling, dropout and the logits. Every
convolution has BatchNorm (decay 0.997, epsilon 0.001) and all activations are ReLU6.

The depth multiplier scales every layer's width with `make_divisible(width * multiplier, 8)`;
`finegrain_classification_mode` keeps the last 1280-wide layer unscaled when the multiplier is
below 1 (Slim sets it for `mobilenet_v2_035`). Parameter paths and end_points follow Slim's scopes:
`Conv` (stem), `expanded_conv`, `expanded_conv_1`, ..., `Conv_1`, `Logits`; `layer_1` ...
`layer_19`, `global_pool`.
"""

from functools import partial
from typing import Any, ClassVar

import flax.linen as nn
import jax.numpy as jnp

from nets.layers import Conv
from nets.mobilenet_blocks import ConvBN, ExpandedConv, classify, make_divisible

ModuleDef = Any

# The paper's Table 2 after the stem: expansion t, output channels c, repeats n, first stride s.
_BOTTLENECKS = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


class MobileNetV2(nn.Module):
    """MobileNet V2 for 224x224 images.

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the pooled features
    `[batch, channels]` when `num_classes` is 0 or None. End points: Slim's `layer_1` (the stem,
    also `stem`) to `layer_19` (the 1x1 convolution to 1280), `global_pool` (`[batch, 1, 1, c]`),
    `pre_logits`, and `logits`/`predictions` when there is a head.
    """

    default_image_size: ClassVar[int] = 224

    num_classes: int | None = 1000
    depth_multiplier: float = 1.0
    finegrain_classification_mode: bool = False
    dropout_rate: float = 0.2  # Slim's mobilenet training_scope: dropout_keep_prob=0.8
    dtype: Any = jnp.float32
    conv: ModuleDef = Conv

    def depth(self, channels: int) -> int:
        """Slim's `depth_multiplier` op: `make_divisible(channels * multiplier, 8)`, at least 8."""
        return make_divisible(channels * self.depth_multiplier, 8)

    @nn.compact
    def __call__(self, x, train: bool = True):
        if self.depth_multiplier <= 0:
            raise ValueError(f"depth_multiplier must be positive, got {self.depth_multiplier}")
        conv = partial(self.conv, padding="SAME", dtype=self.dtype)
        norm = partial(
            nn.BatchNorm,
            use_running_average=not train,
            momentum=0.997,
            epsilon=0.001,
            dtype=self.dtype,
        )
        layer = partial(ConvBN, conv=conv, norm=norm, act=nn.relu6)
        block = partial(ExpandedConv, conv=conv, norm=norm, act=nn.relu6)

        x = layer(self.depth(32), 3, strides=2, name="Conv")(jnp.asarray(x, self.dtype))
        end_points = {"layer_1": x, "stem": x}
        index = 0
        for expansion, channels, repeats, first_stride in _BOTTLENECKS:
            for j in range(repeats):
                name = f"expanded_conv_{index}" if index else "expanded_conv"
                strides = first_stride if j == 0 else 1
                x = block(self.depth(channels), expansion, strides=strides, name=name)(x)
                index += 1
                end_points[f"layer_{index + 1}"] = x

        last = 1280
        if self.finegrain_classification_mode and self.depth_multiplier < 1:
            last = 1280 / self.depth_multiplier  # Slim's trick: the multiplier then gives 1280
        x = layer(self.depth(last), 1, name="Conv_1")(x)
        end_points[f"layer_{index + 2}"] = x

        x = jnp.mean(x, axis=(1, 2), keepdims=True)
        end_points["global_pool"] = x
        x = x[:, 0, 0, :]
        return classify(x, end_points, self.num_classes, self.dropout_rate, train, self.dtype)


mobilenet_v2 = partial(MobileNetV2)
mobilenet_v2_140 = partial(MobileNetV2, depth_multiplier=1.4)
mobilenet_v2_035 = partial(MobileNetV2, depth_multiplier=0.35, finegrain_classification_mode=True)

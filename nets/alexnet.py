"""AlexNet: TF-Slim's `alexnet_v2` and torchvision's `alexnet`.

Krizhevsky et al. 2012, "ImageNet Classification with Deep Convolutional Neural Networks"
(NeurIPS), as refined in Krizhevsky 2014, "One weird trick for parallelizing convolutional neural
networks" (arXiv:1404.5997): one tower, no LRN, 64/192 filters in the first two layers. Both
libraries build that single-tower net, with different convolution widths and first-layer padding.

The head is Slim's: `fc6` is a `k x k` 'VALID' convolution over the `k x k` pooled map (`k` = 5
for Slim, 6 for torchvision at 224), `fc7` and `fc8` are 1x1 convolutions, so a Slim checkpoint
maps one-to-one; torchvision's `Linear(256 * 6 * 6, 4096)` weight `[4096, 256, 6, 6]` becomes
the `fc6` kernel by `transpose(2, 3, 1, 0)`. Before `fc6` the map is brought to `k x k` by
torchvision's adaptive average pooling: the identity at 224, and what lets both nets run at other
image sizes (Slim's `alexnet_v2` classifies only at 224).
"""

from collections.abc import Sequence
from functools import partial
from typing import Any, ClassVar

import flax.linen as nn
import jax.numpy as jnp

from nets.layers import Conv, ModuleDef, fully_connected_head, max_pool
from nets.layers.padding import smallest_input

_HEAD_LAYERS = ("fc6", "fc7", "fc8")


class AlexNet(nn.Module):
    """Single-tower AlexNet: five convolutions, three max pools, three fully connected layers.

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the `fc7` features
    `[batch, fc_width]` (the input of the logits layer, before dropout) when `num_classes` is 0
    or None. End points, Slim's names: `conv1`, `pool1` (also `stem`), `conv2`, `pool2`,
    `conv3`..`conv5`, `pool5`, `fc6`, `fc7` (`[batch, 1, 1, fc_width]`), `pre_logits`, and
    `logits`/`predictions` when there is a head.
    """

    default_image_size: ClassVar[int] = 224

    widths: Sequence[int]  # output channels of conv1..conv5
    conv1_padding: int  # Slim: 0 ('VALID'); torchvision: 2
    pool_size: int  # side of the map fc6 reads: 5 (Slim), 6 (torchvision) at 224
    # Layers whose input is dropped out: Slim drops out the inputs of fc7 and fc8, torchvision
    # those of fc6 and fc7 (its classifier begins with Dropout and ends with a bare Linear).
    dropout_inputs: Sequence[str] = ("fc7", "fc8")
    num_classes: int | None = 1000
    fc_width: int = 4096
    dropout_rate: float = 0.5
    dtype: Any = jnp.float32
    conv: ModuleDef = Conv

    @property
    def min_image_size(self) -> int:
        """conv1 (11x11/4) and the three 3x3/2 'VALID' max pools: 67 (Slim), 63 (torchvision)."""
        return smallest_input([(11, 4, 2 * self.conv1_padding)] + [(3, 2, 0)] * 3)

    def feature_strides(self) -> dict[str, int]:
        """The last map before each pool, and the last pool (timm's choice for VGG)."""
        return {"conv1": 4, "conv2": 8, "conv5": 16, "pool5": 32}

    @nn.compact
    def __call__(self, x, train: bool = True):
        unknown = set(self.dropout_inputs) - set(_HEAD_LAYERS)
        if unknown:
            raise ValueError(f"dropout_inputs must name layers of {_HEAD_LAYERS}, got {unknown}")
        conv = partial(self.conv, dtype=self.dtype)
        end_points = {}

        pad = self.conv1_padding
        x = conv(self.widths[0], (11, 11), (4, 4), padding=[(pad, pad)] * 2, name="conv1")(
            jnp.asarray(x, self.dtype)
        )
        x = end_points["conv1"] = nn.relu(x)
        x = end_points["pool1"] = max_pool(x, (3, 3), strides=(2, 2))
        end_points["stem"] = x
        x = end_points["conv2"] = nn.relu(conv(self.widths[1], (5, 5), name="conv2")(x))
        x = end_points["pool2"] = max_pool(x, (3, 3), strides=(2, 2))
        for i, width in enumerate(self.widths[2:], start=3):
            x = end_points[f"conv{i}"] = nn.relu(conv(width, (3, 3), name=f"conv{i}")(x))
        x = end_points["pool5"] = max_pool(x, (3, 3), strides=(2, 2))

        widths, drop = (self.fc_width, self.fc_width), self.dropout_inputs
        head = partial(fully_connected_head, train=train, dropout_rate=self.dropout_rate)
        return head(
            x, end_points, self.num_classes, conv, self.pool_size, widths, dropout_inputs=drop
        )


# TF-Slim's alexnet_v2: 'VALID' 11x11/4 first layer (224 -> 54 -> pools to 26, 12, 5).
alexnet_v2 = partial(AlexNet, widths=(64, 192, 384, 384, 256), conv1_padding=0, pool_size=5)
# torchvision's alexnet: padding 2 (224 -> 55 -> pools to 27, 13, 6).
alexnet = partial(
    AlexNet,
    widths=(64, 192, 384, 256, 256),
    conv1_padding=2,
    pool_size=6,
    dropout_inputs=("fc6", "fc7"),
)

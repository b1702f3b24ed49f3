"""OverFeat, as TF-Slim's `overfeat` builds it.

Sermanet et al. 2014, "OverFeat: Integrated Recognition, Localization and Detection using
Convolutional Networks" (arXiv:1312.6229), the "fast" model of Table 1: five convolutions
(64, 256, 512, 1024, 1024), 2x2 max pools, fully connected 3072 and 4096, 231x231 input.

As in Slim, the fully connected layers are convolutions (`fc6` 6x6 'VALID', `fc7`/`fc8` 1x1), so
Slim checkpoints map one-to-one. Before `fc6` the map is brought to 6x6 by adaptive average
pooling (`nets.layers`): the identity at 231, and what lets the network classify other image
sizes with the same parameters (Slim's own answer, `global_pool`, averages fc7's map instead).
"""

from functools import partial
from typing import Any, ClassVar

import flax.linen as nn
import jax.numpy as jnp

from nets.layers import Conv, ModuleDef, fully_connected_head, max_pool
from nets.layers.padding import smallest_input


class OverFeat(nn.Module):
    """OverFeat's fast model.

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the `fc7` features
    `[batch, 4096]` (the input of the logits layer, before dropout) when `num_classes` is 0 or
    None. End points, Slim's names: `conv1`, `pool1` (also `stem`), `conv2`, `pool2`,
    `conv3`..`conv5`, `pool5`, `fc6`, `fc7` (`[batch, 1, 1, channels]`), `pre_logits`, and
    `logits`/`predictions` when there is a head.
    """

    default_image_size: ClassVar[int] = 231
    # The 'VALID' layers: conv1 11x11/4, pool1 2x2/2, conv2 5x5, pool2 and pool5 2x2/2: 71.
    min_image_size: ClassVar[int] = smallest_input(
        [(11, 4, 0), (2, 2, 0), (5, 1, 0), (2, 2, 0), (2, 2, 0)]
    )

    num_classes: int | None = 1000
    dropout_rate: float = 0.5  # Slim's dropout_keep_prob=0.5, on the inputs of fc7 and fc8
    dtype: Any = jnp.float32
    conv: ModuleDef = Conv

    def feature_strides(self) -> dict[str, int]:
        """The last map before each pool, and the last pool (timm's choice for VGG)."""
        return {"conv1": 4, "conv2": 8, "conv5": 16, "pool5": 32}

    @nn.compact
    def __call__(self, x, train: bool = True):
        conv = partial(self.conv, dtype=self.dtype)
        pool = partial(max_pool, window_shape=(2, 2), strides=(2, 2))
        end_points = {}

        x = conv(64, (11, 11), (4, 4), padding="VALID", name="conv1")(jnp.asarray(x, self.dtype))
        x = end_points["conv1"] = nn.relu(x)  # 231 -> 56
        x = end_points["pool1"] = pool(x)  # 28
        end_points["stem"] = x
        x = end_points["conv2"] = nn.relu(conv(256, (5, 5), padding="VALID", name="conv2")(x))
        x = end_points["pool2"] = pool(x)  # 24 -> 12
        for i, width in enumerate((512, 1024, 1024), start=3):
            x = end_points[f"conv{i}"] = nn.relu(conv(width, (3, 3), name=f"conv{i}")(x))
        x = end_points["pool5"] = pool(x)  # 6

        head = partial(fully_connected_head, train=train, dropout_rate=self.dropout_rate)
        return head(x, end_points, self.num_classes, conv, 6, (3072, 4096))


overfeat = partial(OverFeat)

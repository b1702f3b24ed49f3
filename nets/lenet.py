"""LeNet, as TF-Slim's `lenet` builds it.

LeCun et al. 1998, "Gradient-Based Learning Applied to Document Recognition" (Proc. IEEE 86(11)).
Slim's variant is wider than LeNet-5 and uses ReLU and max pooling: conv 5x5/32 -> pool 2x2 ->
conv 5x5/64 -> pool 2x2 -> fully connected 1024 -> dropout -> logits. No BatchNorm.
"""

from functools import partial
from typing import Any, ClassVar

import flax.linen as nn
import jax.numpy as jnp

from nets.layers import Conv, ModuleDef, classify, max_pool
from nets.layers.padding import smallest_input


class LeNet(nn.Module):
    """Slim's LeNet for 28x28 digits, with any number of input channels.

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the `fc3` features
    `[batch, 1024]` (the input of the logits layer, before dropout) when `num_classes` is 0 or
    None. End points, Slim's names: `conv1`, `pool1` (also `stem`), `conv2`, `pool2`, `Flatten`,
    `fc3` (also `pre_logits`), and `logits`/`predictions` when there is a head.
    """

    default_image_size: ClassVar[int] = 28
    min_image_size: ClassVar[int] = smallest_input([(2, 2, 0)] * 2)  # the two max pools

    num_classes: int | None = 10  # Slim's default: the ten MNIST digits
    dropout_rate: float = 0.5  # Slim's dropout_keep_prob=0.5
    dtype: Any = jnp.float32
    conv: ModuleDef = Conv

    def feature_strides(self) -> dict[str, int]:
        """The last map before each pool, and the last pool (timm's choice for VGG)."""
        return {"conv1": 1, "conv2": 2, "pool2": 4}

    @nn.compact
    def __call__(self, x, train: bool = True):
        conv = partial(self.conv, kernel_size=(5, 5), padding="SAME", dtype=self.dtype)
        end_points = {}

        x = jnp.asarray(x, self.dtype)
        for i, width in enumerate((32, 64), start=1):
            x = end_points[f"conv{i}"] = nn.relu(conv(width, name=f"conv{i}")(x))
            x = end_points[f"pool{i}"] = max_pool(x, (2, 2), strides=(2, 2))
            if i == 1:
                end_points["stem"] = x
        x = end_points["Flatten"] = x.reshape((x.shape[0], -1))  # NHWC order, as slim.flatten
        x = end_points["fc3"] = nn.relu(nn.Dense(1024, dtype=self.dtype, name="fc3")(x))
        head = partial(classify, train=train, dropout_rate=self.dropout_rate, dtype=self.dtype)
        return head(x, end_points, self.num_classes, name="fc4")


lenet = partial(LeNet)

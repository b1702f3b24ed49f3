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


class LeNet(nn.Module):
    """Slim's LeNet for 28x28 digits, with any number of input channels.

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the `fc3` features
    `[batch, 1024]` (the input of the logits layer, before dropout) when `num_classes` is 0 or
    None. End points, Slim's names: `conv1`, `pool1` (also `stem`), `conv2`, `pool2`, `Flatten`,
    `fc3` (also `pre_logits`), and `logits`/`predictions` when there is a head.
    """

    default_image_size: ClassVar[int] = 28

    num_classes: int | None = 10  # Slim's default: the ten MNIST digits
    dropout_rate: float = 0.5  # Slim's dropout_keep_prob=0.5
    dtype: Any = jnp.float32
    conv: ModuleDef = Conv

    @nn.compact
    def __call__(self, x, train: bool = True):
        conv = partial(self.conv, kernel_size=(5, 5), padding="SAME", dtype=self.dtype)
        dense = partial(nn.Dense, dtype=self.dtype)
        end_points = {}

        x = end_points["conv1"] = nn.relu(conv(32, name="conv1")(jnp.asarray(x, self.dtype)))
        x = end_points["pool1"] = max_pool(x, (2, 2), strides=(2, 2))
        end_points["stem"] = x
        x = end_points["conv2"] = nn.relu(conv(64, name="conv2")(x))
        x = end_points["pool2"] = max_pool(x, (2, 2), strides=(2, 2))
        x = end_points["Flatten"] = x.reshape((x.shape[0], -1))  # NHWC order, as slim.flatten
        x = end_points["fc3"] = nn.relu(dense(1024, name="fc3")(x))
        head = partial(classify, train=train, dropout_rate=self.dropout_rate, dtype=self.dtype)
        return head(x, end_points, self.num_classes, name="fc4")


lenet = partial(LeNet)

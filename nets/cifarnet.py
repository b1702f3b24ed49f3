"""CifarNet, as TF-Slim's `cifarnet` builds it.

The CIFAR-10 model of TensorFlow's convolutional-network tutorial, itself after Krizhevsky's
cuda-convnet `layers-18pct` network (Krizhevsky 2009, "Learning Multiple Layers of Features from
Tiny Images"): conv 5x5/64 -> pool -> LRN -> conv 5x5/64 -> LRN -> pool -> fully connected 384
-> dropout -> fully connected 192 -> logits.

Slim's variant pools 2x2 with stride 2 ('VALID'), where the tutorial pooled 3x3 with stride 2
('SAME'); we follow Slim, so a 32x32 image flattens to 8 * 8 * 64 = 4,096 features.
"""

from functools import partial
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from nets.layers import Conv, ModuleDef, classify, max_pool
from nets.layers.padding import smallest_input


def local_response_normalization(
    x: jax.Array,
    depth_radius: int = 4,
    bias: float = 1.0,
    alpha: float = 0.001 / 9.0,
    beta: float = 0.75,
) -> jax.Array:
    """TensorFlow's `tf.nn.lrn` over the channel (last) axis of `x`.

    `out[..., d] = x[..., d] / (bias + alpha * sum(x[..., d - r : d + r + 1] ** 2)) ** beta`, the
    window clipped at the first and last channel. Unlike `torch.nn.LocalResponseNorm`, `alpha` is
    not divided by the window size. The defaults are CifarNet's.
    """
    window = 2 * depth_radius + 1
    squared_sums = jax.lax.reduce_window(
        jnp.square(x),
        np.zeros((), x.dtype),  # concrete, so JAX sees a differentiable windowed sum
        jax.lax.add,
        window_dimensions=(1,) * (x.ndim - 1) + (window,),
        window_strides=(1,) * x.ndim,
        padding=((0, 0),) * (x.ndim - 1) + ((depth_radius, depth_radius),),
    )
    return x / (bias + alpha * squared_sums) ** beta


class CifarNet(nn.Module):
    """Slim's CifarNet for 32x32 images.

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the `fc4` features
    `[batch, 192]` (the input of the logits layer) when `num_classes` is 0 or None. End points,
    Slim's names: `conv1`, `pool1` (also `stem`), `conv2`, `pool2`, `Flatten`, `fc3`, `fc4` (also
    `pre_logits`), and `logits`/`predictions` when there is a head.
    """

    default_image_size: ClassVar[int] = 32
    min_image_size: ClassVar[int] = smallest_input([(2, 2, 0)] * 2)  # the two max pools

    num_classes: int | None = 10  # Slim's default: CIFAR-10
    dropout_rate: float = 0.5  # Slim's dropout_keep_prob=0.5, after fc3
    dtype: Any = jnp.float32
    conv: ModuleDef = Conv

    def feature_strides(self) -> dict[str, int]:
        """The last map before each pool, and the last pool (timm's choice for VGG)."""
        return {"conv1": 1, "conv2": 2, "pool2": 4}

    @nn.compact
    def __call__(self, x, train: bool = True):
        conv = partial(self.conv, kernel_size=(5, 5), padding="SAME", dtype=self.dtype)
        dense = partial(nn.Dense, dtype=self.dtype)
        end_points = {}

        x = end_points["conv1"] = nn.relu(conv(64, name="conv1")(jnp.asarray(x, self.dtype)))
        x = end_points["pool1"] = max_pool(x, (2, 2), strides=(2, 2))
        end_points["stem"] = x
        x = local_response_normalization(x)  # Slim's norm1
        x = end_points["conv2"] = nn.relu(conv(64, name="conv2")(x))
        x = local_response_normalization(x)  # Slim's norm2
        x = end_points["pool2"] = max_pool(x, (2, 2), strides=(2, 2))
        x = end_points["Flatten"] = x.reshape((x.shape[0], -1))  # NHWC order, as slim.flatten
        x = end_points["fc3"] = nn.relu(dense(384, name="fc3")(x))
        x = nn.Dropout(self.dropout_rate, deterministic=not train)(x)
        x = end_points["fc4"] = nn.relu(dense(192, name="fc4")(x))
        return classify(
            x, end_points, self.num_classes, train=train, dtype=self.dtype, name="logits"
        )


cifarnet = partial(CifarNet)

"""Pooling shared by the families whose heads are fully connected on a fixed-size map.

AlexNet, OverFeat and VGG end in a fully connected layer over a `k x k` map (`k` = 5, 6 or 7 at
the default image size). `adaptive_avg_pool` brings any feature map to that size first, as
torchvision's `nn.AdaptiveAvgPool2d` does, so these networks run at any image size with the same
parameters; at the default size it is the identity.
"""

import jax
import jax.numpy as jnp
import numpy as np


def _averaging_matrix(size_in: int, size_out: int) -> np.ndarray:
    """`[size_out, size_in]` rows averaging torch's bins `[floor(i*n/m), ceil((i+1)*n/m))`."""
    weights = np.zeros((size_out, size_in), np.float32)
    for i in range(size_out):
        start = (i * size_in) // size_out
        end = -(-((i + 1) * size_in) // size_out)  # ceil division
        weights[i, start:end] = 1.0 / (end - start)
    return weights


def adaptive_avg_pool(x: jax.Array, output_size: tuple[int, int]) -> jax.Array:
    """torch.nn.AdaptiveAvgPool2d for NHWC: `[n, h, w, c] -> [n, *output_size, c]`.

    Output cell `(i, j)` averages input rows `[floor(i*h/p), ceil((i+1)*h/p))` and the columns
    likewise, so bins overlap when `h` is not a multiple of `p` and a map smaller than the output
    is upsampled by repetition. Returns `x` itself when it already has `output_size`.
    """
    height, width = x.shape[1:3]
    if (height, width) == tuple(output_size):
        return x
    rows = jnp.asarray(_averaging_matrix(height, output_size[0]), x.dtype)
    cols = jnp.asarray(_averaging_matrix(width, output_size[1]), x.dtype)
    return jnp.einsum("ph,qw,nhwc->npqc", rows, cols, x)

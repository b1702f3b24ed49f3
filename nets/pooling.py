"""Pooling layers the families share.

`max_pool` is `flax.linen.max_pool` with a gradient XLA:CPU runs fast. JAX differentiates a max
pool through `select_and_gather_add`, which XLA:CPU runs as a reduce-window over index maps and a
scatter: ~200 ms of a 2.9 s ResNet-50 train step at batch 8. Written as the maximum of strided
slices, with the gradient sent to the first maximum of each window (XLA's own tie-break), it
is a few elementwise loops.

AlexNet, OverFeat and VGG end in a fully connected layer over a `k x k` map (`k` = 5, 6 or 7 at
the default image size). `adaptive_avg_pool` brings any feature map to that size first, as
torchvision's `nn.AdaptiveAvgPool2d` does, so these networks run at any image size with the same
parameters; at the default size it is the identity.
"""

from collections.abc import Sequence
from functools import partial

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from nets import windows


def max_pool(
    x: jax.Array,
    window_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: str | Sequence[tuple[int, int]] = "VALID",
) -> jax.Array:
    """`flax.linen.max_pool` for `[batch, height, width, channels]`, same arguments and result.

    On CPU (JAX's default backend) it runs the slices-and-mask form above; elsewhere XLA's own.
    """
    window = tuple(window_shape)
    strides = tuple(strides) if strides is not None else (1,) * len(window)
    if x.ndim != 4 or len(window) != 2 or len(strides) != 2:
        raise ValueError(
            f"max_pool is 2-D over [batch, height, width, channels]: got input {x.shape}, "
            f"window {window}, strides {strides}"
        )
    if jax.default_backend() != "cpu":
        return nn.max_pool(x, window, strides, padding)
    if isinstance(padding, str):
        if padding.upper() not in ("SAME", "VALID"):
            raise ValueError(f"max_pool padding must be 'SAME', 'VALID' or pairs, got {padding!r}")
        padding = lax.padtype_to_pads(x.shape[1:3], window, strides, padding.upper())
    padding = tuple((int(lo), int(hi)) for lo, hi in padding)
    return _max_pool(x, window, strides, padding)


@partial(jax.custom_vjp, nondiff_argnums=(1, 2, 3))
def _max_pool(x, window, strides, padding):
    return _max_pool_fwd(x, window, strides, padding)[0]


def _max_pool_fwd(x, window, strides, padding):
    taps = _taps(x, window, strides, padding)
    y = taps[0]
    for tap in taps[1:]:
        y = jnp.maximum(y, tap)
    return y, (x, y)


def _max_pool_bwd(window, strides, padding, residuals, dy):
    x, y = residuals
    taken = jnp.zeros(y.shape, bool)
    grads = []
    for tap in _taps(x, window, strides, padding):  # row-major: the first maximum takes it all
        hit = (tap == y) & ~taken
        grads.append(jnp.where(hit, dy, jnp.zeros((), dy.dtype)))
        taken = taken | hit
    return (windows.col2im(grads, window, x.shape[1:3], strides, padding),)


_max_pool.defvjp(_max_pool_fwd, _max_pool_bwd)


def _taps(x, window, strides, padding):
    (pt, pb), (pl, pr) = padding
    ho = (x.shape[1] + pt + pb - window[0]) // strides[0] + 1
    wo = (x.shape[2] + pl + pr - window[1]) // strides[1] + 1
    xp = windows.pad(x, padding, -jnp.inf)
    return windows.window_slices(xp, window, strides, (ho, wo))


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

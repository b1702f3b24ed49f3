"""Pooling layers every family takes: max, average, adaptive average, global average.

Padding is any form `nets.layers.padding` knows: 'SAME' (TensorFlow's), 'VALID', an int
(PyTorch's symmetric padding), or explicit pairs; `ceil_mode` is PyTorch's.

- `max_pool` pads with -inf. `impl='slices'` runs `nets.layers.cpu.max_pool`, the maximum of
  strided slices with an elementwise gradient, written for XLA:CPU; `'xla'` XLA's own
  (`reduce_window`, its gradient a `select_and_scatter`); `'auto'` the first on a CPU or a GPU
  (on an H200 ResNet-50's train step at batch 256 ran 1.005x faster with it, 6,935-6,962 img/s
  against 6,923-6,928 alternated; its stem's pooling alone 1.11x), the second elsewhere (TPUs:
  not measured). Both send a window's gradient to its first maximum.
- `avg_pool` divides by the window's area (`count_include_pad=True`, PyTorch's default), or by the
  number of pixels of the window inside the input (`False`: TensorFlow's 'SAME' average pooling,
  what Slim's networks were trained with). The divisors depend on shapes alone, so numpy computes
  them while tracing.
- `adaptive_avg_pool` is PyTorch's `AdaptiveAvgPool2d`: AlexNet, OverFeat and VGG end in a fully
  connected layer over a `k x k` map; adaptive pooling brings any map to that size first, so they
  run at any image size with the same parameters (the identity at the default size).
"""

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from nets.layers import padding as pad
from nets.layers.cpu import max_pool as cpu_max_pool

MAX_POOL_IMPLS = ("auto", "slices", "xla")


def max_pool(
    x: jax.Array,
    window_shape: int | Sequence[int],
    strides: int | Sequence[int] | None = None,
    padding: pad.PaddingLike = "VALID",
    ceil_mode: bool = False,
    impl: str = "auto",
) -> jax.Array:
    """`flax.linen.max_pool` for `[batch, height, width, channels]`, same arguments and result;
    `impl`: 'auto', 'slices' or 'xla' (above)."""
    if impl not in MAX_POOL_IMPLS:
        raise ValueError(f"max_pool: impl={impl!r}; valid: {', '.join(MAX_POOL_IMPLS)}")
    window, strides = _window(x, window_shape, strides)
    pads = pad.pads(padding, x.shape[1:3], window, strides, ceil_mode)
    if impl == "slices" or (impl == "auto" and jax.default_backend() in ("cpu", "gpu")):
        return cpu_max_pool.max_pool(x, window, strides, pads)
    return nn.max_pool(x, window, strides, pads)


def avg_pool(
    x: jax.Array,
    window_shape: int | Sequence[int],
    strides: int | Sequence[int] | None = None,
    padding: pad.PaddingLike = "VALID",
    count_include_pad: bool = True,
) -> jax.Array:
    """Average pooling of `[batch, height, width, channels]`; padding counted or not (above)."""
    window, strides = _window(x, window_shape, strides)
    pads = pad.pads(padding, x.shape[1:3], window, strides)
    sums = lax.reduce_window(
        x,
        np.zeros((), x.dtype),
        lax.add,
        (1, *window, 1),
        (1, *strides, 1),
        ((0, 0), *pads, (0, 0)),
    )
    if count_include_pad:
        return sums / np.prod(window)
    rows, cols = (
        _inside_counts(n, k, s, p)
        for n, k, s, p in zip(x.shape[1:3], window, strides, pads, strict=True)
    )
    return sums / jnp.asarray(np.outer(rows, cols)[None, :, :, None], x.dtype)


def global_avg_pool(x: jax.Array, keepdims: bool = False) -> jax.Array:
    """The mean over height and width: `[n, h, w, c] -> [n, c]` (`[n, 1, 1, c]` with keepdims)."""
    return jnp.mean(x, axis=(1, 2), keepdims=keepdims)


def adaptive_avg_pool(x: jax.Array, output_size: int | tuple[int, int]) -> jax.Array:
    """torch.nn.AdaptiveAvgPool2d for NHWC: `[n, h, w, c] -> [n, *output_size, c]`.

    Output cell `(i, j)` averages input rows `[floor(i*h/p), ceil((i+1)*h/p))` and the columns
    likewise, so bins overlap when `h` is not a multiple of `p` and a map smaller than the output
    is upsampled by repetition. Returns `x` itself when it already has `output_size`.
    """
    output_size = pad.pair(output_size, "output_size")
    height, width = x.shape[1:3]
    if (height, width) == output_size:
        return x
    rows = jnp.asarray(_averaging_matrix(height, output_size[0]), x.dtype)
    cols = jnp.asarray(_averaging_matrix(width, output_size[1]), x.dtype)
    return jnp.einsum("ph,qw,nhwc->npqc", rows, cols, x)


def _window(x, window_shape, strides) -> tuple[tuple[int, int], tuple[int, int]]:
    if x.ndim != 4:
        raise ValueError(f"pooling is 2-D over [batch, height, width, channels], got {x.shape}")
    window = pad.pair(window_shape, "window_shape")
    return window, pad.pair(strides if strides is not None else 1, "strides")


def _inside_counts(size: int, window: int, stride: int, pads: tuple[int, int]) -> np.ndarray:
    """How many of each window's taps fall inside the unpadded input, along one axis."""
    starts = np.arange(pad.output_size(size, window, stride, pads)) * stride - pads[0]
    return np.minimum(starts + window, size) - np.maximum(starts, 0)


def _averaging_matrix(size_in: int, size_out: int) -> np.ndarray:
    """`[size_out, size_in]` rows averaging torch's bins `[floor(i*n/m), ceil((i+1)*n/m))`."""
    weights = np.zeros((size_out, size_in), np.float32)
    for i in range(size_out):
        start = (i * size_in) // size_out
        end = -(-((i + 1) * size_in) // size_out)  # ceil division
        weights[i, start:end] = 1.0 / (end - start)
    return weights

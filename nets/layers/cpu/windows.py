"""The strided windows of a padded feature map, and their adjoint.

A convolution or a pooling layer with a `kh x kw` window reads, for each window offset, one
strided view of the padded input (`window_slices`). The adjoint (`col2im`) places each view's
gradient back where it was read from. XLA fuses both into plain loops, which XLA:CPU runs far
faster than its own windowed gradients; the CPU convolution and max pool build their gradients
from them. Layouts are NHWC; `padding` is explicit `((top, bottom), (left, right))`.
"""

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jax import lax

from nets.layers.padding import Pads


def pad(x: jax.Array, padding: Pads, value: float = 0.0) -> jax.Array:
    """`x` `[n, h, w, c]` padded spatially with `value`."""
    (pt, pb), (pl, pr) = padding
    fill = jnp.asarray(value, x.dtype)
    return lax.pad(x, fill, ((0, 0, 0), (pt, pb, 0), (pl, pr, 0), (0, 0, 0)))


def window_slices(
    xp: jax.Array, window: tuple[int, int], strides: tuple[int, int], out_size: tuple[int, int]
) -> list[jax.Array]:
    """The `kh * kw` strided views of the padded input `xp`, each `[n, ho, wo, c]`, row-major."""
    (kh, kw), (sh, sw), (ho, wo) = window, strides, out_size
    n, _, _, c = xp.shape
    span_h, span_w = sh * (ho - 1) + 1, sw * (wo - 1) + 1
    return [
        lax.slice(xp, (0, i, j, 0), (n, i + span_h, j + span_w, c), (1, sh, sw, 1))
        for i in range(kh)
        for j in range(kw)
    ]


def col2im(
    taps: Sequence[jax.Array],
    window: tuple[int, int],
    in_size: tuple[int, int],
    strides: tuple[int, int],
    padding: Pads,
) -> jax.Array:
    """Adjoint of `window_slices`, cropped to the unpadded input: `[n, h, w, c]`.

    `taps` are the `kh * kw` gradients `[n, ho, wo, c]`, row-major. Each is placed with one
    `lax.pad` (interior padding for the stride, negative edges to crop the padding) and XLA
    fuses the sum into one loop.
    """
    (kh, kw), (h, w), (sh, sw), ((pt, _), (pl, _)) = window, in_size, strides, padding
    if len(taps) != kh * kw:
        raise ValueError(f"col2im: {len(taps)} taps for a {kh}x{kw} window")
    _, ho, wo, _ = taps[0].shape
    zero = jnp.zeros((), taps[0].dtype)
    total = None
    for index, tap in enumerate(taps):
        lo_h, lo_w = index // kw - pt, index % kw - pl
        placed = lax.pad(
            tap,
            zero,
            (
                (0, 0, 0),
                (lo_h, h - lo_h - sh * (ho - 1) - 1, sh - 1),
                (lo_w, w - lo_w - sw * (wo - 1) - 1, sw - 1),
                (0, 0, 0),
            ),
        )
        total = placed if total is None else total + placed
    return total

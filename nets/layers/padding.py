"""Padding conventions, in one place: how a window of `k` taps at stride `s` pads a map of `n`.

- `'SAME'` (TensorFlow, Slim, Keras, the Flax examples): `ceil(n / s)` outputs; the total
  padding `max((out - 1) * s + k - n, 0)` is split with the extra pixel at the end (bottom/right).
- `'SYMMETRIC'` (PyTorch's `padding=k // 2`, timm and torchvision): `(k - 1) // 2` pixels on both
  sides. It equals 'SAME' at stride 1 for odd `k`; at stride 2 on an even map 'SAME' pads
  `(k // 2 - 1, k // 2)`, which shifts every window by a pixel: weights trained with one
  convention compute another function under the other.
- an int `p` (PyTorch): `p` pixels on both sides.
- `'VALID'`: none.
- explicit pairs `((top, bottom), (left, right))`.

PyTorch's `ceil_mode=True` pooling keeps a last, partial window as long as it starts inside the
input or its left padding; `pads(..., ceil_mode=True)` adds that window's overhang to the end.
"""

from collections.abc import Sequence

Pads = tuple[tuple[int, int], tuple[int, int]]
PaddingLike = str | int | Sequence[int | tuple[int, int]]


def pair(value: int | Sequence[int], name: str = "value") -> tuple[int, int]:
    """`3` -> `(3, 3)`; a two-element sequence -> a tuple; anything else is refused."""
    value = (value, value) if isinstance(value, int) else tuple(value)
    if len(value) != 2:
        raise ValueError(f"layers are 2-D: {name} needs one or two entries, got {value}")
    return value


def output_size(size: int, window: int, stride: int, pads: tuple[int, int]) -> int:
    """Outputs of a `window`-tap filter at `stride` over `size` pixels padded by `pads`."""
    return (size + pads[0] + pads[1] - window) // stride + 1


def smallest_input(windows: Sequence[tuple[int, int, int]]) -> int:
    """The smallest map that `windows` applied in order, each `(taps, stride, total padding)`,
    leave at least one pixel of (a network's minimum image size). A 'SAME' layer of stride `s`
    is `(1, s, 0)`: it keeps `ceil(n / s)` pixels."""
    size = 1
    for window, stride, padding in reversed(windows):
        size = (size - 1) * stride + window - padding
    return max(size, 1)


def pads(
    padding: PaddingLike,
    in_size: Sequence[int],
    window: Sequence[int],
    strides: Sequence[int],
    ceil_mode: bool = False,
) -> Pads:
    """Any padding form above as explicit `((top, bottom), (left, right))`."""
    result = []
    for axis, (n, k, s) in enumerate(zip(in_size, window, strides, strict=True)):
        lo, hi = _axis_pads(padding, axis, n, k, s)
        if ceil_mode:
            hi += _ceil_overhang(n, k, s, lo, hi)
        result.append((lo, hi))
    return tuple(result)


def _axis_pads(padding: PaddingLike, axis: int, n: int, k: int, s: int) -> tuple[int, int]:
    if isinstance(padding, str):
        mode = padding.upper()
        if mode == "VALID":
            return 0, 0
        if mode == "SYMMETRIC":
            return (k - 1) // 2, (k - 1) // 2
        if mode != "SAME":
            raise ValueError(
                f"padding must be 'SAME', 'SYMMETRIC', 'VALID', an int or pairs, got {padding!r}"
            )
        total = max((-(-n // s) - 1) * s + k - n, 0)
        return total // 2, total - total // 2
    if isinstance(padding, int):
        return padding, padding
    if len(padding) != 2:
        raise ValueError(f"layers are 2-D: padding needs two entries, got {padding}")
    entry = padding[axis]
    return (entry, entry) if isinstance(entry, int) else (int(entry[0]), int(entry[1]))


def _ceil_overhang(n: int, k: int, s: int, lo: int, hi: int) -> int:
    """The end padding ceil mode adds: one more window if it starts before the end padding."""
    floor_out = output_size(n, k, s, (lo, hi))
    ceil_out = -(-(n + lo + hi - k) // s) + 1
    if ceil_out > floor_out and (ceil_out - 1) * s < n + lo:
        return (ceil_out - 1) * s + k - (n + lo + hi)
    return 0

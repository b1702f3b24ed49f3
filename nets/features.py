"""Feature pyramids: each network's stage maps, with their strides and channels.

Detection and segmentation heads read a backbone's stage outputs (timm's `features_only` and
`feature_info`, keras-hub's pyramid outputs). Every network here names those stages among its
end_points with a `feature_strides()` method: end_point -> stride (input pixels per map pixel),
shallowest first. The choice follows timm's `feature_info` wherever timm has the network: the
deepest map at each stride, from the stem's first stride-2 map to the last stage, excluding the
classifier's own layers (EfficientNet's and MobileNet V2's 1x1 head convolution, VGG's fc6/fc7).

Strides are nominal: they are what the layers' strides multiply to. Under 'SAME' padding a map
has `ceil(size / stride)` pixels; 'VALID' layers (Slim's Inception stems, AlexNet) leave a few
less, never half. Channels are read from the traced network (`NetworkFn.feature_info`).
"""

from collections.abc import Iterable, Mapping
from typing import NamedTuple

import jax


class FeatureInfo(NamedTuple):
    """One level of a network's feature pyramid."""

    name: str  # the end_point holding the map
    stride: int  # input pixels per map pixel
    channels: int


def deepest_per_stride(levels: Iterable[tuple[str, int]]) -> dict[str, int]:
    """Of end_points in network order with their strides, the last one at each stride."""
    deepest: dict[int, str] = {}
    for name, stride in levels:
        deepest[stride] = name
    return {name: stride for stride, name in sorted(deepest.items())}


def cumulative_strides(names: Iterable[str], strides: Iterable[int], start: int) -> list:
    """`(name, stride)` for layers applied in order, each multiplying the stride so far."""
    levels = []
    for name, stride in zip(names, strides, strict=True):
        start *= stride
        levels.append((name, start))
    return levels


def feature_info(strides: Mapping[str, int], shapes: Mapping[str, tuple]) -> tuple:
    """`FeatureInfo` for each pyramid level, channels read from the end_points' `shapes`."""
    return tuple(FeatureInfo(name, stride, shapes[name][-1]) for name, stride in strides.items())


def as_map(x: jax.Array, stride: int, image_shape: tuple[int, ...]) -> jax.Array:
    """An end_point as an NHWC map: transformers' token sequences `[batch, tokens, c]` lose their
    class (and distillation) tokens and take the patch grid's shape, as timm's
    `forward_intermediates` does; maps pass through."""
    if x.ndim == 4:
        return x
    height, width = image_shape[1] // stride, image_shape[2] // stride
    prefix = x.shape[1] - height * width
    if x.ndim != 3 or prefix < 0:
        raise ValueError(
            f"expected an NHWC map or [batch, tokens, channels] with a {height}x{width} patch "
            f"grid, got shape {tuple(x.shape)}"
        )
    return x[:, prefix:].reshape(x.shape[0], height, width, x.shape[-1])

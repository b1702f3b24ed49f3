"""The image size a run trains at, when `data.image_size` does not say: the dataset's own size
for in-memory datasets (digits 8 px, CIFAR 32 px), raised to what the network needs; the
network's `default_image_size` for image files, which are cropped and resized anyway.

A network needs at least its total stride: below it, its last stages see 1x1 maps made mostly
of padding (MobileNet on 8 px digits stays at chance), or it cannot run at all (VGG's five
pools, Inception's 'VALID' stem).
"""

import math

import jax
import jax.numpy as jnp

import nets_factory
import nets_summary
from training.errors import UserError
from training.sources import Dataset


def minimum_image_size(network_fn: nets_factory.NetworkFn) -> int:
    """The smallest image side `network_fn` is built for: the side that leaves its last feature
    map 1x1 (its total stride), or the smallest it runs on where 'VALID' layers need more.

    Measured with `jax.eval_shape` (nothing is compiled): the last map is the smallest end point
    wider than 1 pixel at `default_image_size`. A stand-in until `nets_factory` states each
    network's minimum itself.
    """
    default = network_fn.default_image_size
    maps = nets_summary.profile(network_fn).end_points.values()
    widths = [shape[1] for shape in maps if len(shape) == 4 and shape[1] > 1]
    low = math.ceil(default / min(widths)) if widths else 1
    if _runs_at(network_fn, low):
        return low
    high = default  # runs; bisect for the smallest size that does (running is monotonic)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if _runs_at(network_fn, middle) else (middle, high)
    return high


def _runs_at(network_fn: nets_factory.NetworkFn, size: int) -> bool:
    images = jax.ShapeDtypeStruct((1, size, size, 3), jnp.float32)
    try:
        jax.eval_shape(network_fn.init, jax.random.key(0), images)
    except Exception:  # whatever fails to build at this size is too small for it
        return False
    return True


def image_size(requested: int | None, dataset: Dataset, network_fn: nets_factory.NetworkFn) -> int:
    """`data.image_size` resolved: `requested` if the network can use it (else a one-line
    error naming the minimum), or the dataset's own size raised to the network's minimum, or
    the network's default size for variable-size images."""
    default = network_fn.default_image_size
    if requested is None and dataset.fixed_size is None:
        return default
    if requested is not None and requested >= default:
        return requested
    minimum = minimum_image_size(network_fn)
    if requested is None:
        return max(dataset.fixed_size, minimum)
    if requested < minimum:
        raise UserError(
            f"data.image_size={requested}: {network_fn.name} needs images of at least {minimum} "
            f"px; set data.image_size={minimum} or more, or leave it unset"
        )
    return requested

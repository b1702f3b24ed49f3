"""Classifying image files with published weights, using the weights' own preprocessing.

timm's and torchvision's evaluation transform: resize the shorter side to
`image_size / crop_fraction` with the weights' interpolation, take the centred `image_size`
square, scale to [0, 1], normalise with their mean and std.
"""

import math
from collections.abc import Sequence
from pathlib import Path

import jax
import numpy as np
from PIL import Image, UnidentifiedImageError

from nets_weights.architectures import Pretrained
from nets_weights.files import WeightFileError

_FILTERS = {
    "bilinear": Image.BILINEAR,
    "bicubic": Image.BICUBIC,
    "nearest": Image.NEAREST,
    "lanczos": Image.LANCZOS,
}


def crop(image: Image.Image, info: Pretrained) -> Image.Image:
    """The weights' evaluation crop of an image: the `image_size` RGB square."""
    size = info.image_size
    scale = math.floor(size / info.crop_fraction) / min(image.size)
    resized = (max(size, round(image.width * scale)), max(size, round(image.height * scale)))
    image = image.convert("RGB").resize(resized, _FILTERS.get(info.interpolation, Image.BILINEAR))
    left, top = (image.width - size) // 2, (image.height - size) // 2
    return image.crop((left, top, left + size, top + size))


def preprocess(image: Image.Image, info: Pretrained) -> np.ndarray:
    """An RGB image -> float32 `[image_size, image_size, 3]`, as the weights were evaluated."""
    pixels = np.asarray(crop(image, info), np.float32) / 255.0
    return (pixels - np.asarray(info.mean, np.float32)) / np.asarray(info.std, np.float32)


def read_images(paths: Sequence[str | Path], info: Pretrained) -> np.ndarray:
    """`[len(paths), size, size, 3]`; an unreadable file is a one-line error naming it."""
    images = []
    for path in paths:
        try:
            with Image.open(path) as image:
                images.append(preprocess(image, info))
        except (OSError, UnidentifiedImageError) as e:
            raise WeightFileError(f"cannot read image {path}: {e}") from None
    return np.stack(images)


def top_k(network_fn, variables: dict, images: np.ndarray, k: int = 5) -> list[list[tuple]]:
    """For each image, the `k` most probable `(class name, probability)`, most probable first."""
    _, end_points = jax.jit(network_fn.apply)(variables, images)
    probabilities = np.asarray(end_points["predictions"], np.float64)
    names = network_fn.pretrained.class_names or tuple(map(str, range(probabilities.shape[-1])))
    best = np.argsort(-probabilities, axis=-1)[:, :k]
    return [
        [(names[i], float(p[i])) for i in row] for p, row in zip(probabilities, best, strict=True)
    ]

"""Classifying image files with published weights, using the weights' own preprocessing.

timm's and torchvision's evaluation transform, to the pixel: resize the shorter side to
`floor(image_size / crop_fraction)` with the weights' interpolation (both sides, for timm's
`crop_mode='squash'`), take the centred `image_size` square, scale to [0, 1], normalise with their
mean and std. Files are decoded as the training pipeline decodes them
(`nets_weights.images.decode`: upright, 16-bit samples scaled).
"""

import math
from collections.abc import Sequence
from pathlib import Path

import jax
import numpy as np
from PIL import Image

from nets_weights.architectures import Pretrained
from nets_weights.files import WeightFileError
from nets_weights.images import ImageError, decode, to_rgb

_FILTERS = {
    "bilinear": Image.BILINEAR,
    "bicubic": Image.BICUBIC,
    "nearest": Image.NEAREST,
    "lanczos": Image.LANCZOS,
}


def resized_size(width: int, height: int, shorter: int) -> tuple[int, int]:
    """The (width, height) that torchvision's `Resize(shorter)` gives a width x height image."""
    # torchvision/transforms/functional.py, `_compute_resized_output_size`
    # (torchvision 0.29, lines 359-381):
    #   short, long = (w, h) if w <= h else (h, w)
    #   new_short, new_long = requested_new_short, int(requested_new_short * long / short)
    #   new_w, new_h = (new_short, new_long) if w <= h else (new_long, new_short)
    longer = int(shorter * max(width, height) / min(width, height))  # truncated, not rounded
    return (shorter, longer) if width <= height else (longer, shorter)


def crop_box(width: int, height: int, size: int) -> tuple[int, int, int, int]:
    """The (left, top, right, bottom) of torchvision's `center_crop(image, size)` of a
    width x height image; beyond the image's edges (a side shorter than `size`) it is black."""

    # torchvision/transforms/functional.py, `center_crop` (torchvision 0.29, lines 580-593): a
    # side shorter than the crop is padded with (crop - side) // 2 zeros before (the rest after),
    # then `crop_top = int(round((image_height - crop_height) / 2.0))`. Python's round halves to
    # even: an excess of 1, 3, 5, 7 pixels starts at 0, 2, 2, 4 (`//` would give 0, 1, 2, 3).
    def start(side: int) -> int:
        return -((size - side) // 2) if size > side else int(round((side - size) / 2.0))

    left, top = start(width), start(height)
    return left, top, left + size, top + size


def crop(image: Image.Image, info: Pretrained) -> Image.Image:
    """The weights' evaluation crop of an image: the `image_size` RGB square, as timm's
    `transforms_imagenet_eval` (crop_mode 'center' or 'squash') and torchvision's presets make
    it."""
    size = info.image_size
    # timm/data/transforms_factory.py, `transforms_imagenet_eval` (lines 313-360 at timm 1.0.31):
    # `scale_size = math.floor(img_size / crop_pct)`, `Resize(scale_size)` ('center') or
    # `Resize((scale_size, scale_size))` ('squash'), then `CenterCrop(img_size)`. torchvision's
    # presets resize to `resize_size`; ours store it as crop_fraction = crop / resize. Pillow's
    # resize to the image's own size is a copy, as torchvision then returns the image.
    image = to_rgb(image)
    scale_size = math.floor(size / info.crop_fraction)
    if info.crop_mode == "squash":
        resized = (scale_size, scale_size)
    elif info.crop_mode == "center":
        resized = resized_size(*image.size, scale_size)
    else:
        raise WeightFileError(
            f"{info.source}'s weights are evaluated with timm's crop_mode {info.crop_mode!r}, "
            "which is not implemented here ('center' and 'squash' are)"
        )
    image = image.resize(resized, _FILTERS.get(info.interpolation, Image.BILINEAR))
    return image.crop(crop_box(*image.size, size))


def preprocess(image: Image.Image, info: Pretrained) -> np.ndarray:
    """An RGB image -> float32 `[image_size, image_size, 3]`, as the weights were evaluated."""
    pixels = np.asarray(crop(image, info), np.float32) / 255.0
    return (pixels - np.asarray(info.mean, np.float32)) / np.asarray(info.std, np.float32)


def read_images(paths: Sequence[str | Path], info: Pretrained) -> np.ndarray:
    """`[len(paths), size, size, 3]`; an unreadable file is a one-line error naming it."""
    batch = []
    for path in paths:
        try:
            batch.append(preprocess(decode(path), info))
        except ImageError as e:
            raise WeightFileError(str(e)) from None
    return np.stack(batch)


def classify_files(
    network_fn, variables: dict, paths: Sequence[str | Path], k: int = 5
) -> list[list[tuple] | ImageError]:
    """For each file, its `top_k`, or the `ImageError` that names it where it cannot be read: one
    bad file among many costs only its own result. Weights without a classifier are refused."""
    if not network_fn.module.num_classes:
        raise ValueError(without_classifier(network_fn.pretrained.source))
    images, results = [], []
    for path in paths:
        try:
            images.append(preprocess(decode(path), network_fn.pretrained))
            results.append(None)
        except ImageError as e:
            results.append(e)
    best = iter(top_k(network_fn, variables, np.stack(images), k) if images else ())
    return [next(best) if result is None else result for result in results]


def without_classifier(source: str) -> str:
    """The one line for weights that hold no classifier (DINOv2's, SigLIP's), asked for classes."""
    return (
        f"{source}'s weights hold no classifier: they give features (`pre_logits`), not "
        "classes; fine-tune a classifier on them (nets-train --set finetune.init_from=...), or "
        "take weights with one"
    )


def top_k(network_fn, variables: dict, images: np.ndarray, k: int = 5) -> list[list[tuple]]:
    """For each image, the `k` most probable `(class name, probability)`, most probable first."""
    _, end_points = jax.jit(network_fn.apply)(variables, images)
    probabilities = np.asarray(end_points["predictions"], np.float64)
    names = network_fn.pretrained.class_names or tuple(map(str, range(probabilities.shape[-1])))
    best = np.argsort(-probabilities, axis=-1)[:, :k]
    return [
        [(names[i], float(p[i])) for i in row] for p, row in zip(probabilities, best, strict=True)
    ]

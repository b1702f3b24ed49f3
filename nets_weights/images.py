"""Decoding image files: one function, `decode`, for every program that reads them (train and
eval's image folders, `check_images`, classify's files), so all of them see the same pixels. It
lives beside the published weights' preprocessing (`predict`), which the data pipeline imports
too: the packages' arrows run one way (training -> weights).

Pillow's own `convert("RGB")` is not enough: it clips 16-bit samples to 255 (a 16-bit grayscale
PNG becomes white), and it ignores the EXIF orientation that phone cameras record instead of
rotating the pixels. Here the orientation is applied first, then 16-bit samples keep their high
byte, as Pillow itself reads 48-bit RGB and 64-bit RGBA PNGs: a 16-bit value v becomes v >> 8,
the uint8 that the pipelines carry (v / 65535 in [0, 1], to 8 bits). Pixels with no defined white
(32-bit integers, floats) are refused rather than guessed.
"""

import os
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

_SIXTEEN_BIT = ("I;16", "I;16B", "I;16L", "I;16N")  # unsigned 16-bit grayscale (PNG, TIFF)
# Formats whose 32-bit mode "I" holds 16-bit samples: Pillow 10.0 (pyproject's oldest) reads 16-bit
# grayscale PNGs as "I" (10.4 as "I;16"), and the PPM reader scales a 16-bit maxval to 0..65535.
_SIXTEEN_BIT_AS_I = ("PNG", "PPM")


class ImageError(ValueError):
    """An image file that cannot be decoded; the message is one line naming the file."""


def decode(path: str | bytes | Path) -> Image.Image:
    """The upright RGB (uint8) image of the file at `path`.

    EXIF orientation applied; grayscale, palette and alpha images converted to RGB (alpha
    dropped); 16-bit samples scaled to 8 bits (their high byte). Raises `ImageError`
    ("cannot read image PATH: why") for a file Pillow cannot read or whose pixels have no
    defined range.
    """
    try:
        with Image.open(path) as image:
            ImageOps.exif_transpose(image, in_place=True)  # in place: no copy, `format` kept
            return to_rgb(image)
    except (OSError, UnidentifiedImageError, ValueError) as e:
        raise ImageError(f"cannot read image {os.fsdecode(path)}: {e}") from None


def to_rgb(image: Image.Image) -> Image.Image:
    """`image` in RGB (a new image), 16-bit samples scaled to 8 bits. Raises ValueError for
    pixels with no defined range (32-bit integers but those of a 16-bit file, floats)."""
    if image.mode in _SIXTEEN_BIT or (image.mode == "I" and image.format in _SIXTEEN_BIT_AS_I):
        high_byte = (np.asarray(image).astype(np.uint32) >> 8).astype(np.uint8)
        return Image.fromarray(high_byte).convert("RGB")
    if image.mode in ("I", "F") or image.mode.startswith("I;"):
        # ValueError: `decode` reports it with the file's name.
        raise ValueError(
            f"{image.format or 'its'} pixels of mode {image.mode} (32-bit integer, float or signed "
            "samples) have no defined white; save it as an 8- or 16-bit PNG"
        )
    return image.convert("RGB")

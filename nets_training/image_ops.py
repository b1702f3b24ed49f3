"""The PIL operations of the image policies, each with its library's magnitude mapping.

Two sources, followed call for call so that an operation at a fixed magnitude gives the library's
pixels exactly (tests/test_image_policies.py checks every one on a photograph):

- timm's `timm/data/auto_augment.py` (RandAugment, AutoAugment): `TIMM_OPS`, magnitudes on timm's
  0-10 scale, through `timm_args` (timm's `LEVEL_TO_ARG`), fill = the data's mean colour.
- torchvision's `torchvision/transforms/autoaugment.py` (TrivialAugment Wide): `TA_OPS`,
  magnitudes already in the operation's units (31 bins), geometric ones through torchvision's
  `_get_inverse_affine_matrix`, fill black.

Where the library draws at random inside an operation (timm's sign of a signed magnitude, its
'random' interpolation, GaussianBlurRand's radius), the caller passes the draw in: the policies
(`nets_training.image_policies`) draw from the example's own generator.
"""

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from PIL import Image, ImageEnhance, ImageFilter, ImageOps

LEVEL_DENOM = 10.0  # timm's magnitude scale: 'm9' is 9 / 10 of each operation's range
TRANSLATE_PCT = 0.45  # timm's relative translation at magnitude 10, of the image side
TRANSLATE_CONST = 0.45  # timm's absolute translation at magnitude 10, of the training size


class Fill(NamedTuple):
    """What an operation needs beyond its magnitude."""

    color: tuple[int, ...]  # fill of the area a geometric op uncovers, per channel
    resample: int  # PIL's interpolation of a geometric op


def _fill(img: Image.Image, color: tuple[int, ...]) -> Any:
    return color[0] if img.mode == "L" else color  # PIL wants an int for one-band images


def _affine(img: Image.Image, matrix, fill: Fill) -> Image.Image:
    return img.transform(
        img.size, Image.AFFINE, matrix, resample=fill.resample, fillcolor=_fill(img, fill.color)
    )


# ---------------------------------------------------------------------------------------------
# timm's operations: `op(img, arg, fill)`, `arg` from `timm_args`.


def _shear_x(img, factor, fill):
    return _affine(img, (1, factor, 0, 0, 1, 0), fill)


def _shear_y(img, factor, fill):
    return _affine(img, (1, 0, 0, factor, 1, 0), fill)


def _translate_x(img, pixels, fill):
    return _affine(img, (1, 0, pixels, 0, 1, 0), fill)


def _translate_y(img, pixels, fill):
    return _affine(img, (1, 0, 0, 0, 1, pixels), fill)


def _translate_x_rel(img, pct, fill):
    return _translate_x(img, pct * img.size[0], fill)


def _translate_y_rel(img, pct, fill):
    return _translate_y(img, pct * img.size[1], fill)


def _rotate(img, degrees, fill):
    return img.rotate(degrees, resample=fill.resample, fillcolor=_fill(img, fill.color))


def _solarize_add(img, add, fill, thresh=128):
    lut = [min(255, i + add) if i < thresh else i for i in range(256)]
    return img.point(lut * len(img.getbands())) if img.mode in ("L", "RGB") else img


def _posterize(img, bits, fill):
    if bits >= 8:
        return img
    if bits <= 0:  # timm's PosterizeIncreasing at magnitude 10: Pillow before 13 kept no bits
        return img.point([0] * 256 * len(img.getbands()))  # (black); Pillow 13 raises instead
    return ImageOps.posterize(img, bits)


def _enhance(enhancer: type) -> Callable:
    return lambda img, factor, fill: enhancer(img).enhance(factor)


def _desaturate(img, factor, fill):
    return ImageEnhance.Color(img).enhance(min(1.0, max(0.0, 1.0 - factor)))


def _gaussian_blur(img, radius, fill):
    return img.filter(ImageFilter.GaussianBlur(radius=radius))


def _no_arg(op: Callable) -> Callable:
    return lambda img, fill: op(img)


# timm's level -> argument functions, on magnitude `m` in [0, 10] (or to `mmax`): each returns
# the operation's arguments; `negate` is timm's coin flip for the signed ones.
def _signed(scale: float) -> Callable:
    def level(m, negate, size):
        value = m / LEVEL_DENOM * scale
        return (-value if negate else value,)

    return level


def _enhance_level(m, negate, size):
    return (m / LEVEL_DENOM * 1.8 + 0.1,)


def _enhance_increasing_level(m, negate, size):
    level = m / LEVEL_DENOM * 0.9
    return (max(0.1, 1.0 + (-level if negate else level)),)


def _minmax_level(lo: float, hi: float) -> Callable:
    def level(m, negate, size):
        return (max(lo, min(hi, lo + (hi - lo) * (m / LEVEL_DENOM))),)

    return level


def _posterize_level(m, negate, size):
    return (int(m / LEVEL_DENOM * 4),)


def _translate_abs_level(m, negate, size):
    pixels = m / LEVEL_DENOM * float(int(size * TRANSLATE_CONST))
    return (-pixels if negate else pixels,)


def _constant(value: Callable) -> Callable:
    return lambda m, negate, size: (value(m),)


class TimmOp(NamedTuple):
    op: Callable  # op(img, *args, fill)
    level: Callable | None  # level(magnitude, negate, image_size) -> args; None: no argument
    signed: bool  # whether timm flips the argument's sign at random
    geometric: bool  # whether it resamples (draws an interpolation when it is 'random')


def _op(op, level=None, signed=False, geometric=False) -> TimmOp:
    return TimmOp(op, level, signed, geometric)


_SOLARIZE = _constant(lambda m: min(256, int(m / LEVEL_DENOM * 256)))

TIMM_OPS: dict[str, TimmOp] = {
    "AutoContrast": _op(_no_arg(ImageOps.autocontrast)),
    "Equalize": _op(_no_arg(ImageOps.equalize)),
    "Invert": _op(_no_arg(ImageOps.invert)),
    "Rotate": _op(_rotate, _signed(30.0), signed=True, geometric=True),
    "Posterize": _op(_posterize, _posterize_level),
    "PosterizeIncreasing": _op(_posterize, _constant(lambda m: 4 - int(m / LEVEL_DENOM * 4))),
    "PosterizeOriginal": _op(_posterize, _constant(lambda m: int(m / LEVEL_DENOM * 4) + 4)),
    "Solarize": _op(lambda img, t, fill: ImageOps.solarize(img, t), _SOLARIZE),
    "SolarizeIncreasing": _op(
        lambda img, t, fill: ImageOps.solarize(img, t),
        _constant(lambda m: 256 - min(256, int(m / LEVEL_DENOM * 256))),
    ),
    "SolarizeAdd": _op(_solarize_add, _constant(lambda m: min(128, int(m / LEVEL_DENOM * 110)))),
    "Color": _op(_enhance(ImageEnhance.Color), _enhance_level),
    "ColorIncreasing": _op(_enhance(ImageEnhance.Color), _enhance_increasing_level, signed=True),
    "Contrast": _op(_enhance(ImageEnhance.Contrast), _enhance_level),
    "ContrastIncreasing": _op(
        _enhance(ImageEnhance.Contrast), _enhance_increasing_level, signed=True
    ),
    "Brightness": _op(_enhance(ImageEnhance.Brightness), _enhance_level),
    "BrightnessIncreasing": _op(
        _enhance(ImageEnhance.Brightness), _enhance_increasing_level, signed=True
    ),
    "Sharpness": _op(_enhance(ImageEnhance.Sharpness), _enhance_level),
    "SharpnessIncreasing": _op(
        _enhance(ImageEnhance.Sharpness), _enhance_increasing_level, signed=True
    ),
    "ShearX": _op(_shear_x, _signed(0.3), signed=True, geometric=True),
    "ShearY": _op(_shear_y, _signed(0.3), signed=True, geometric=True),
    "TranslateX": _op(_translate_x, _translate_abs_level, signed=True, geometric=True),
    "TranslateY": _op(_translate_y, _translate_abs_level, signed=True, geometric=True),
    "TranslateXRel": _op(_translate_x_rel, _signed(TRANSLATE_PCT), signed=True, geometric=True),
    "TranslateYRel": _op(_translate_y_rel, _signed(TRANSLATE_PCT), signed=True, geometric=True),
    "Desaturate": _op(_desaturate, _minmax_level(0.5, 1.0)),
    "GaussianBlur": _op(_gaussian_blur, _minmax_level(0.1, 2.0)),
    # timm draws the radius in [0.1, 2 * level] inside the op: `timm_op` takes it as `radius`.
    "GaussianBlurRand": _op(_gaussian_blur, _minmax_level(0.0, 1.0)),
}


def timm_op(
    img: Image.Image,
    name: str,
    magnitude: float,
    negate: bool,
    fill: Fill,
    image_size: int,
    radius_draw: float = 0.0,
) -> Image.Image:
    """timm's operation `name` at `magnitude` (already noised and clipped, as timm's `AugmentOp`
    does before its level function): `negate` is its sign flip, `radius_draw` in [0, 1) places
    GaussianBlurRand's radius in timm's uniform [0.1, 2 * level]. `image_size` is the training
    size, which timm's absolute translations scale with."""
    spec = TIMM_OPS[name]
    args = () if spec.level is None else spec.level(magnitude, negate, image_size)
    if name == "GaussianBlurRand":
        args = (0.1 + radius_draw * (2.0 * args[0] - 0.1),)
    return spec.op(img, *args, fill)


# ---------------------------------------------------------------------------------------------
# torchvision's TrivialAugment Wide: `ta_op(img, name, magnitude, fill)`, magnitude in op units.

TA_BINS = 31


def _float32s(text: str) -> tuple[float, ...]:
    return tuple(float(np.float32(v)) for v in text.split())


# The bins of torch.linspace(0, 0.99, 31) and (0, 32, 31), float32, as torch 2.13 computes them
# on x86-64: its vectorised kernel rounds some bins apart from the plain formula (TranslateX's bin
# 15 is 15.999999, which torchvision truncates to 15 pixels). tests/fixtures/augment checks them.
_UNIT_BINS = _float32s(
    "0.0 0.033 0.066 0.099 0.132 0.16499999 0.198 0.231 0.264 0.297 0.32999998 0.363 0.396 "
    "0.429 0.462 0.495 0.528 0.561 0.594 0.62700003 0.66 0.693 0.726 0.759 0.792 0.825 "
    "0.85800004 0.89100003 0.924 0.957 0.99"
)
_PIXEL_BINS = _float32s(
    "0.0 1.0666667 2.1333334 3.2000003 4.266667 5.3333335 6.4000006 7.466667 8.533334 9.6 "
    "10.666667 11.733334 12.800001 13.866668 14.933334 15.999999 17.066666 18.133333 19.199999 "
    "20.266666 21.333332 22.4 23.466667 24.533333 25.6 26.666666 27.733334 28.8 29.866667 "
    "30.933332 32.0"
)
_DEGREE_BINS = tuple(4.5 * i for i in range(TA_BINS))  # linspace(0, 135, 31): exact
_SOLARIZE_BINS = tuple(255.0 - 8.5 * i for i in range(TA_BINS))  # linspace(255, 0, 31): exact
# torchvision: 8 - (arange(31) / 5).round().int()
_POSTERIZE_BINS = tuple(
    float(8 - int(np.round(np.float32(i) / np.float32(5)))) for i in range(TA_BINS)
)

# name -> (magnitudes, signed); an empty tuple: no magnitude (torchvision's 0.0).
TA_SPACE: dict[str, tuple[tuple[float, ...], bool]] = {
    "Identity": ((), False),
    "ShearX": (_UNIT_BINS, True),
    "ShearY": (_UNIT_BINS, True),
    "TranslateX": (_PIXEL_BINS, True),
    "TranslateY": (_PIXEL_BINS, True),
    "Rotate": (_DEGREE_BINS, True),
    "Brightness": (_UNIT_BINS, True),
    "Color": (_UNIT_BINS, True),
    "Contrast": (_UNIT_BINS, True),
    "Sharpness": (_UNIT_BINS, True),
    "Posterize": (_POSTERIZE_BINS, False),
    "Solarize": (_SOLARIZE_BINS, False),
    "AutoContrast": ((), False),
    "Equalize": ((), False),
}


def _inverse_affine(center, angle, translate, shear) -> list[float]:
    """torchvision's `_get_inverse_affine_matrix` (scale 1), operation for operation."""
    rot, sx, sy = math.radians(angle), math.radians(shear[0]), math.radians(shear[1])
    (cx, cy), (tx, ty) = center, translate
    a = math.cos(rot - sy) / math.cos(sy)
    b = -math.cos(rot - sy) * math.tan(sx) / math.cos(sy) - math.sin(rot)
    c = math.sin(rot - sy) / math.cos(sy)
    d = -math.sin(rot - sy) * math.tan(sx) / math.cos(sy) + math.cos(rot)
    matrix = [x / 1.0 for x in (d, -b, 0.0, -c, a, 0.0)]
    matrix[2] += matrix[0] * (-cx - tx) + matrix[1] * (-cy - ty)
    matrix[5] += matrix[3] * (-cx - tx) + matrix[4] * (-cy - ty)
    matrix[2] += cx
    matrix[5] += cy
    return matrix


def _tv_affine(img, fill, translate=(0, 0), shear=(0.0, 0.0), center=None):
    w, h = img.size
    center = [w * 0.5, h * 0.5] if center is None else center
    return _affine(img, _inverse_affine(center, 0.0, list(translate), list(shear)), fill)


def ta_op(img: Image.Image, name: str, magnitude: float, fill: Fill) -> Image.Image:
    """torchvision's `_apply_op` on a PIL image: `name` at `magnitude` (signed, op units)."""
    shear = math.degrees(math.atan(magnitude)) if name in ("ShearX", "ShearY") else 0.0
    if name == "ShearX":
        return _tv_affine(img, fill, shear=(shear, 0.0), center=[0, 0])
    if name == "ShearY":
        return _tv_affine(img, fill, shear=(0.0, shear), center=[0, 0])
    if name == "TranslateX":
        return _tv_affine(img, fill, translate=(int(magnitude), 0))
    if name == "TranslateY":
        return _tv_affine(img, fill, translate=(0, int(magnitude)))
    if name == "Rotate":
        return _rotate(img, magnitude, fill)
    enhancers = {
        "Brightness": ImageEnhance.Brightness,
        "Color": ImageEnhance.Color,
        "Contrast": ImageEnhance.Contrast,
        "Sharpness": ImageEnhance.Sharpness,
    }
    if name in enhancers:
        return enhancers[name](img).enhance(1.0 + magnitude)
    if name == "Posterize":
        return ImageOps.posterize(img, int(magnitude))
    if name == "Solarize":
        return ImageOps.solarize(img, magnitude)
    if name == "AutoContrast":
        return ImageOps.autocontrast(img)
    if name == "Equalize":
        return ImageOps.equalize(img)
    return img  # Identity

"""Training image policies on the host's PIL images: timm's RandAugment and AutoAugment,
torchvision's TrivialAugment Wide, and torchvision's colour jitter (timm's `--color-jitter`).

`parse(text)` reads timm's policy strings (`data.auto_augment`): 'rand-m9-mstd0.5-inc1' is
RandAugment (Cubuk et al. 2020) at magnitude 9 of 10 with Gaussian noise of std 0.5 on the
magnitude and the operations whose severity increases with it; 'original' is AutoAugment's
ImageNet policy (Cubuk et al. 2019); 'ta_wide' is TrivialAugment Wide (Mueller & Hutter 2021) as
torchvision defines it (timm has none). The operations are `nets_training.image_ops`'; every
random draw comes from the example's own generator (grain's, from the seed and the example's place
in the stream), never from a global one, so the pipeline is the same in any worker and on resume.
"""

import dataclasses
import math
import re
from typing import NamedTuple

import numpy as np
from PIL import Image, ImageEnhance

from nets_training.image_ops import LEVEL_DENOM, TA_SPACE, TIMM_OPS, Fill, ta_op, timm_op

GRAMMAR = (
    "'rand' followed by any of -m<int magnitude, 0-10> -n<int ops per image> -p<probability "
    "of each> -mstd<magnitude std; above 100: uniform> -mmax<int magnitude bound> -inc<0|1> "
    "-t<weights|3aw|3a> (timm's RandAugment, e.g. rand-m9-mstd0.5-inc1); 'original', "
    "'originalr', 'v0', 'v0r' or '3a' with an optional -mstd<std> (timm's AutoAugment, e.g. "
    "original-mstd0.5); or 'ta_wide' (torchvision's TrivialAugment Wide)"
)

RESAMPLE = {
    "bilinear": (Image.BILINEAR,),
    "bicubic": (Image.BICUBIC,),
    "random": (Image.BILINEAR, Image.BICUBIC),  # timm's 'random': one of the two per draw
}


class Context(NamedTuple):
    """What the operations need from the run: timm's `hparams` and its interpolation."""

    color: tuple[int, ...]  # timm's img_mean: the data's mean colour, 0-255, fills uncovered area
    resample: tuple[int, ...]  # PIL interpolations, one drawn per geometric op
    image_size: int  # the training size (timm's absolute translations scale with it)


def context(mean: tuple[float, ...], interpolation: str, image_size: int) -> Context:
    return Context(
        tuple(min(255, round(255 * m)) for m in mean), RESAMPLE[interpolation], image_size
    )


@dataclasses.dataclass(frozen=True)
class Op:
    """timm's `AugmentOp`: `name` applied with probability `prob` at `magnitude` (0-10)."""

    name: str
    prob: float
    magnitude: float

    def __call__(
        self, img: Image.Image, rng: np.random.Generator, ctx: Context, std: float, mmax: float
    ) -> Image.Image:
        if self.prob < 1.0 and rng.random() > self.prob:
            return img
        magnitude = self.magnitude
        if std == math.inf:
            magnitude = rng.uniform(0.0, magnitude)
        elif std > 0:
            magnitude = rng.normal(magnitude, std)
        magnitude = max(0.0, min(magnitude, mmax))
        spec = TIMM_OPS[self.name]
        negate = spec.signed and rng.random() > 0.5
        fill = Fill(ctx.color, pick(ctx.resample, rng) if spec.geometric else ctx.resample[0])
        radius = rng.random() if self.name == "GaussianBlurRand" else 0.0
        return timm_op(img, self.name, magnitude, negate, fill, ctx.image_size, radius)


def pick(choices: tuple[int, ...], rng: np.random.Generator) -> int:
    """One of `choices` (PIL interpolations), drawn only when there are several."""
    return choices[rng.integers(len(choices))] if len(choices) > 1 else choices[0]


@dataclasses.dataclass(frozen=True)
class RandAugment:
    """timm's `RandAugment`: `num_layers` of `ops` drawn per image (without replacement when
    weighted), each applied with its probability."""

    ops: tuple[Op, ...]
    num_layers: int
    weights: tuple[float, ...] | None  # choice probabilities; None: uniform, with replacement
    std: float  # magnitude noise (timm's mstd); inf: uniform in [0, magnitude]
    mmax: float  # the magnitude's upper bound (timm's mmax, default 10)

    def __call__(self, img: Image.Image, rng: np.random.Generator, ctx: Context) -> Image.Image:
        p = None if self.weights is None else np.asarray(self.weights)
        chosen = rng.choice(len(self.ops), self.num_layers, replace=p is None, p=p)
        for i in chosen:
            img = self.ops[i](img, rng, ctx, self.std, self.mmax)
        return img


@dataclasses.dataclass(frozen=True)
class AutoAugment:
    """timm's `AutoAugment`: one sub-policy drawn per image, its ops applied in turn."""

    policy: tuple[tuple[Op, ...], ...]
    std: float

    def __call__(self, img: Image.Image, rng: np.random.Generator, ctx: Context) -> Image.Image:
        for op in self.policy[rng.integers(len(self.policy))]:
            img = op(img, rng, ctx, self.std, LEVEL_DENOM)
        return img


@dataclasses.dataclass(frozen=True)
class TrivialAugment:
    """torchvision's `TrivialAugmentWide`: one op, one of its 31 magnitudes, a random sign; the
    fill is torchvision's default (black), the interpolation the run's."""

    def __call__(self, img: Image.Image, rng: np.random.Generator, ctx: Context) -> Image.Image:
        names = list(TA_SPACE)
        name = names[rng.integers(len(names))]
        magnitudes, signed = TA_SPACE[name]
        magnitude = magnitudes[rng.integers(len(magnitudes))] if magnitudes else 0.0
        if signed and rng.integers(2):
            magnitude = -magnitude
        return ta_op(img, name, magnitude, Fill((0, 0, 0), pick(ctx.resample, rng)))


Policy = RandAugment | AutoAugment | TrivialAugment


# ---------------------------------------------------------------------------------------------
# timm's operation sets and AutoAugment policies (timm/data/auto_augment.py).

RAND_OPS = ["AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize"]
RAND_OPS += ["SolarizeAdd", "Color", "Contrast", "Brightness", "Sharpness", "ShearX", "ShearY"]
RAND_OPS += ["TranslateXRel", "TranslateYRel"]
# The same with the operations whose severity increases with the magnitude ('-inc1').
RAND_INCREASING_OPS = ["AutoContrast", "Equalize", "Invert", "Rotate", "PosterizeIncreasing"]
RAND_INCREASING_OPS += ["SolarizeIncreasing", "SolarizeAdd", "ColorIncreasing"]
RAND_INCREASING_OPS += ["ContrastIncreasing", "BrightnessIncreasing", "SharpnessIncreasing"]
RAND_INCREASING_OPS += ["ShearX", "ShearY", "TranslateXRel", "TranslateYRel"]
RAND_3A_OPS = ["SolarizeIncreasing", "Desaturate", "GaussianBlur"]
RAND_WEIGHTS = {  # 't<name>': weighted choice
    "weights": {
        **{"Rotate": 3, "ShearX": 2, "ShearY": 2, "TranslateXRel": 1, "TranslateYRel": 1},
        **{"ColorIncreasing": 0.25, "SharpnessIncreasing": 0.25, "AutoContrast": 0.25},
        **{"SolarizeIncreasing": 0.05, "SolarizeAdd": 0.05, "ContrastIncreasing": 0.05},
        **{"BrightnessIncreasing": 0.05, "Equalize": 0.05, "PosterizeIncreasing": 0.05},
        "Invert": 0.05,
    },
    "3aw": {
        **{"SolarizeIncreasing": 6, "Desaturate": 6, "GaussianBlur": 6, "Rotate": 3},
        **{"ShearX": 2, "ShearY": 2, "PosterizeIncreasing": 1, "AutoContrast": 1},
        **{"ColorIncreasing": 1, "SharpnessIncreasing": 1, "ContrastIncreasing": 1},
        **{"BrightnessIncreasing": 1, "Equalize": 1, "Invert": 1},
    },
}


def _table(text: str) -> tuple[tuple[Op, ...], ...]:
    """'Name prob magnitude, Name prob magnitude; ...': sub-policies of ops."""
    return tuple(
        tuple(Op(n, float(p), float(m)) for n, p, m in (op.split() for op in sub.split(",")))
        for sub in text.split(";")
    )


_ORIGINAL = """PosterizeOriginal 0.4 8, Rotate 0.6 9; Solarize 0.6 5, AutoContrast 0.6 5;
Equalize 0.8 8, Equalize 0.6 3; PosterizeOriginal 0.6 7, PosterizeOriginal 0.6 6;
Equalize 0.4 7, Solarize 0.2 4; Equalize 0.4 4, Rotate 0.8 8; Solarize 0.6 3, Equalize 0.6 7;
PosterizeOriginal 0.8 5, Equalize 1.0 2; Rotate 0.2 3, Solarize 0.6 8;
Equalize 0.6 8, PosterizeOriginal 0.4 6; Rotate 0.8 8, Color 0.4 0; Rotate 0.4 9, Equalize 0.6 2;
Equalize 0.0 7, Equalize 0.8 8; Invert 0.6 4, Equalize 1.0 8; Color 0.6 4, Contrast 1.0 8;
Rotate 0.8 8, Color 1.0 2; Color 0.8 8, Solarize 0.8 7; Sharpness 0.4 7, Invert 0.6 8;
ShearX 0.6 5, Equalize 1.0 9; Color 0.4 0, Equalize 0.6 3; Equalize 0.4 7, Solarize 0.2 4;
Solarize 0.6 5, AutoContrast 0.6 5; Invert 0.6 4, Equalize 1.0 8; Color 0.6 4, Contrast 1.0 8;
Equalize 0.8 8, Equalize 0.6 3"""
_V0 = """Equalize 0.8 1, ShearY 0.8 4; Color 0.4 9, Equalize 0.6 3; Color 0.4 1, Rotate 0.6 8;
Solarize 0.8 3, Equalize 0.4 7; Solarize 0.4 2, Solarize 0.6 2; Color 0.2 0, Equalize 0.8 8;
Equalize 0.4 8, SolarizeAdd 0.8 3; ShearX 0.2 9, Rotate 0.6 8; Color 0.6 1, Equalize 1.0 2;
Invert 0.4 9, Rotate 0.6 0; Equalize 1.0 9, ShearY 0.6 3; Color 0.4 7, Equalize 0.6 0;
Posterize 0.4 6, AutoContrast 0.4 7; Solarize 0.6 8, Color 0.6 9; Solarize 0.2 4, Rotate 0.8 9;
Rotate 1.0 7, TranslateYRel 0.8 9; ShearX 0.0 0, Solarize 0.8 4; ShearY 0.8 0, Color 0.6 4;
Color 1.0 0, Rotate 0.6 2; Equalize 0.8 4, Equalize 0.0 8; Equalize 1.0 4, AutoContrast 0.6 2;
ShearY 0.4 7, SolarizeAdd 0.6 7; Posterize 0.8 2, Solarize 0.6 10;
Solarize 0.6 8, Equalize 0.6 1; Color 0.8 6, Rotate 0.4 5"""
# The 'r' variants: the research code's posterize, whose severity increases with the magnitude.
AUTO_AUGMENT = {
    "original": _table(_ORIGINAL),
    "originalr": _table(_ORIGINAL.replace("PosterizeOriginal", "PosterizeIncreasing")),
    "v0": _table(_V0),
    "v0r": _table(_V0.replace("Posterize ", "PosterizeIncreasing ")),
    "3a": _table("Solarize 1.0 5; Desaturate 1.0 10; GaussianBlurRand 1.0 10"),
}


# ---------------------------------------------------------------------------------------------
# Parsing timm's strings.


def parse(text: str) -> Policy:
    """The policy a timm string names; a ValueError gives the valid grammar (`GRAMMAR`)."""
    name, *sections = text.split("-")
    if name == "ta_wide" and not sections:
        return TrivialAugment()
    if name not in ("rand", *AUTO_AUGMENT):
        raise ValueError(f"unknown image policy {name!r} in {text!r}; valid: {GRAMMAR}")
    settings = _settings(sections, text)
    if name == "rand":
        return _rand_augment(settings)
    if name in AUTO_AUGMENT and set(settings) <= {"mstd"}:
        return AutoAugment(AUTO_AUGMENT[name], _std(settings.get("mstd", "0")))
    raise ValueError(f"{text!r}: AutoAugment takes -mstd<std> only; valid: {GRAMMAR}")


_SECTION = re.compile(r"(mstd|mmax|inc|m|n|p)(\d.*)|t(\w+)")


def _settings(sections: list[str], text: str) -> dict[str, str]:
    """{key: value} of '-m9-mstd0.5-tweights' sections; a section that is no key refused."""
    settings = {}
    for section in sections:
        match = _SECTION.fullmatch(section)
        if not match:
            raise ValueError(f"unknown image policy {text!r} (at {section!r}); valid: {GRAMMAR}")
        key, value = (match[1], match[2]) if match[1] else ("t", match[3])
        settings[key] = value
    return settings


def _number(settings: dict[str, str], key: str, kind: type, default):
    try:
        return kind(settings[key]) if key in settings else default
    except ValueError:
        raise ValueError(
            f"-{key}{settings[key]}: expected {kind.__name__}; valid: {GRAMMAR}"
        ) from None


def _std(text: str) -> float:
    std = float(text)
    return math.inf if std > 100 else std  # timm: above 100 means uniform in [0, magnitude]


def _rand_augment(settings: dict[str, str]) -> RandAugment:
    magnitude = _number(settings, "m", int, int(LEVEL_DENOM))
    increasing = bool(_number(settings, "inc", int, 0))
    names = RAND_INCREASING_OPS if increasing else RAND_OPS
    weights = None
    choice = settings.get("t")
    if choice == "3a":
        names = RAND_3A_OPS
    elif choice in RAND_WEIGHTS:
        names, raw = zip(*RAND_WEIGHTS[choice].items(), strict=True)
        weights = tuple(float(w) for w in np.asarray(raw) / np.sum(raw))
    elif choice is not None:
        raise ValueError(f"-t{choice}: unknown operation set; valid: {GRAMMAR}")
    prob = _number(settings, "p", float, 0.5)
    ops = tuple(Op(n, prob, float(magnitude)) for n in names)
    return RandAugment(
        ops,
        _number(settings, "n", int, 2),
        weights,
        _std(settings.get("mstd", "0")),
        float(_number(settings, "mmax", int, 0) or LEVEL_DENOM),
    )


# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ColorJitter:
    """torchvision's `ColorJitter(s, s, s)` (timm's `--color-jitter s`): brightness, contrast and
    saturation factors each uniform in [max(0, 1 - s), 1 + s], applied in a random order."""

    strength: float

    def __call__(self, img: Image.Image, rng: np.random.Generator) -> Image.Image:
        factors = rng.uniform(max(0.0, 1.0 - self.strength), 1.0 + self.strength, size=3)
        for i in rng.permutation(3):
            img = JITTER_ENHANCERS[i](img).enhance(float(factors[i]))
        return img


# torchvision's adjust_brightness, adjust_contrast and adjust_saturation on PIL images.
JITTER_ENHANCERS = (ImageEnhance.Brightness, ImageEnhance.Contrast, ImageEnhance.Color)


@dataclasses.dataclass(frozen=True)
class HostAugment:
    """`data.auto_augment`'s policy, then `data.color_jitter`'s jitter: what timm applies after
    the crop and flip, before the image becomes a tensor."""

    policy: Policy | None
    jitter: ColorJitter | None
    ctx: Context

    def __call__(self, img: Image.Image, rng: np.random.Generator) -> Image.Image:
        if self.policy is not None:
            img = self.policy(img, rng, self.ctx)
        if self.jitter is not None:
            img = self.jitter(img, rng)
        return img


def host_augment(
    auto_augment: str | None,
    color_jitter: float,
    mean: tuple[float, ...],
    interpolation: str,
    image_size: int,
) -> HostAugment | None:
    """The host's image policy for these `data` settings; None when they ask for none."""
    if auto_augment is None and not color_jitter:
        return None
    return HostAugment(
        parse(auto_augment) if auto_augment else None,
        ColorJitter(color_jitter) if color_jitter else None,
        context(mean, interpolation, image_size),
    )

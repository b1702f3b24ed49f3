"""Which published architectures load into which of our networks, and with which conventions.

One table: a timm or torchvision architecture name -> our registry name, the constructor fields
the weights were trained with (their padding convention, ...), the family's state-dict layout,
and the preprocessing the weights expect when the file does not say (torchvision's: resize to
256, centre crop 224, bilinear). Our registry names are accepted too: each maps to the
architecture of the same function.
"""

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import flax.linen as nn

from pretrained import resnet
from pretrained.convert import Layout
from pretrained.files import WeightFileError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
_CLASSES_FILE = Path(__file__).with_name("imagenet_classes.txt")


@dataclasses.dataclass(frozen=True)
class Pretrained:
    """What a network's weights expect of its inputs, and what its logits mean."""

    source: str  # the weights' architecture, as their source names it
    file: str
    image_size: int = 224
    crop_fraction: float = 0.875  # resize the shorter side to image_size / crop_fraction
    interpolation: str = "bilinear"
    mean: tuple[float, ...] = IMAGENET_MEAN  # of [0, 1] RGB
    std: tuple[float, ...] = IMAGENET_STD
    class_names: tuple[str, ...] = ()  # one per logit; empty when the head was replaced


@dataclasses.dataclass(frozen=True)
class Architecture:
    network: str  # our registry name
    convention: Mapping[str, Any]  # constructor fields the weights need
    layout: Callable[[nn.Module], Layout]  # the built module -> our paths to the file's keys
    head: tuple[str, ...]  # our classifier's module path
    source_head: str  # the file's classifier prefix


# torchvision's and timm's ResNets pad 3x3 convolutions and the stem pool on both sides.
_TORCH_RESNET = {"padding": "SYMMETRIC"}


def _resnet(network: str) -> Architecture:
    return Architecture(
        network,
        _TORCH_RESNET,
        lambda module: resnet.layout(module.stage_sizes),
        resnet.HEAD,
        "fc",
    )


ARCHITECTURES: dict[str, Architecture] = {
    name: _resnet(name)
    for name in (
        "resnet18",
        "resnet34",
        "resnet50",
        "resnet101",
        "resnet152",
        "wide_resnet50_2",
        "wide_resnet101_2",
        "resnext50_32x4d",
        "resnext101_32x8d",
    )
}


def find(name: str, file_architecture: str | None) -> tuple[str, Architecture]:
    """The architecture for `load_pretrained(name, ...)`, checked against the file's config."""
    if name not in ARCHITECTURES:
        known = ", ".join(sorted(ARCHITECTURES))
        raise ValueError(f"no published weights load into {name!r} yet; those that do: {known}")
    if file_architecture is not None:
        theirs = ARCHITECTURES.get(file_architecture)
        if theirs is None or theirs.network != ARCHITECTURES[name].network:
            raise WeightFileError(
                f"the file's config.json is for {file_architecture!r}, not {name!r}"
            )
        name = file_architecture
    return name, ARCHITECTURES[name]


def preprocessing(config: Mapping[str, Any]) -> dict[str, Any]:
    """`Pretrained` fields from a Hub config.json's `pretrained_cfg` (timm's names)."""
    cfg = config.get("pretrained_cfg", {})
    out = {}
    if "input_size" in cfg:
        out["image_size"] = int(cfg["input_size"][-1])
    if "crop_pct" in cfg:
        out["crop_fraction"] = float(cfg["crop_pct"])
    if "interpolation" in cfg:
        out["interpolation"] = str(cfg["interpolation"])
    for key in ("mean", "std"):
        if key in cfg:
            out[key] = tuple(float(v) for v in cfg[key])
    return out


def imagenet_class_names() -> tuple[str, ...]:
    """The 1000 ImageNet-1k class names, in logit order (the first lemma of each synset)."""
    lines = _CLASSES_FILE.read_text().splitlines()
    return tuple(line.split("\t")[1].split(",")[0] for line in lines if not line.startswith("#"))

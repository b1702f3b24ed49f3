"""Which published architectures load into which of our networks, and with which conventions.

Each family's module (`nets_weights/resnet.py`, ...) has a table from a timm, torchvision or
Keras architecture name to an `Architecture`: our registry name, the constructor fields the weights
were trained with (their padding convention, ...), the family's state-dict layout. Our registry
names are keys too, where ours is the same function. `Pretrained` defaults to the preprocessing
torchvision's weights expect (resize to 256, centre crop 224, bilinear) when a file does not say.
"""

import dataclasses
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from nets.names import closest
from nets_weights import (
    beit,
    cait,
    convnext,
    cspnet,
    densenet,
    dla,
    dpn,
    edgenext,
    efficientformer,
    efficientnet,
    efficientvit_mit,
    efficientvit_msra,
    eva,
    fastvit,
    ghostnet,
    hrnet,
    inception,
    inception_next,
    inception_v4,
    keras_inception,
    levit,
    mambaout,
    maxvit,
    metaformer,
    mlp_mixer,
    mobilenet,
    mobilenet_v1,
    mobilenet_v4,
    mobilevit,
    nasnet,
    nfnet,
    pit,
    pvt_v2,
    regnet,
    repvgg,
    repvit,
    resnest,
    resnet,
    resnetv2,
    rexnet,
    swin,
    swinv2,
    tiny_vit,
    vgg,
    vit,
    xception,
    xcit,
)
from nets_weights.convert import IMAGENET_MEAN, IMAGENET_STD, Architecture
from nets_weights.files import WeightFileError

_CLASSES_FILE = Path(__file__).with_name("imagenet_classes.txt")


@dataclasses.dataclass(frozen=True)
class Pretrained:
    """What a network's weights expect of its inputs, and what its logits mean."""

    source: str  # the weights' architecture, as their source names it
    file: str
    image_size: int = 224
    crop_fraction: float = 0.875  # resize the shorter side to image_size / crop_fraction
    # timm's `crop_mode`: 'center' keeps the aspect ratio (the shorter side resized, as above);
    # 'squash' resizes both sides to image_size / crop_fraction (ConvNeXt's and EVA-02's
    # ImageNet-22k fine-tunes at 384 and 448 px, tf_efficientnetv2_m/l).
    crop_mode: str = "center"
    interpolation: str = "bilinear"
    mean: tuple[float, ...] = IMAGENET_MEAN  # of [0, 1] RGB
    std: tuple[float, ...] = IMAGENET_STD
    # The image channels the variables take: 3 (RGB) as published, or others through input
    # convolutions adapted as timm's `in_chans` (mean and std then per adapted channel).
    in_chans: int = 3
    class_names: tuple[str, ...] = ()  # one per logit; empty when the head was replaced


# One table per family (`nets_weights/<family>.py`), merged.
ARCHITECTURES: dict[str, Architecture] = {
    **resnet.ARCHITECTURES,
    **resnest.ARCHITECTURES,
    **dla.ARCHITECTURES,
    **cspnet.ARCHITECTURES,
    **convnext.ARCHITECTURES,
    **edgenext.ARCHITECTURES,
    **resnetv2.ARCHITECTURES,
    **vgg.ARCHITECTURES,
    **inception.ARCHITECTURES,
    **inception_v4.ARCHITECTURES,
    **keras_inception.ARCHITECTURES,
    **mobilenet.ARCHITECTURES,
    **mobilenet_v1.ARCHITECTURES,
    **mobilenet_v4.ARCHITECTURES,
    **ghostnet.ARCHITECTURES,
    **hrnet.ARCHITECTURES,
    **rexnet.ARCHITECTURES,
    **mobilevit.ARCHITECTURES,
    **nasnet.ARCHITECTURES,
    **densenet.ARCHITECTURES,
    **dpn.ARCHITECTURES,
    **regnet.ARCHITECTURES,
    **repvgg.ARCHITECTURES,
    **fastvit.ARCHITECTURES,
    **repvit.ARCHITECTURES,
    **vit.ARCHITECTURES,
    **eva.ARCHITECTURES,
    **beit.ARCHITECTURES,
    **cait.ARCHITECTURES,
    **pit.ARCHITECTURES,
    **xcit.ARCHITECTURES,
    **metaformer.ARCHITECTURES,
    **inception_next.ARCHITECTURES,
    **mambaout.ARCHITECTURES,
    **mlp_mixer.ARCHITECTURES,
    **swin.ARCHITECTURES,
    **swinv2.ARCHITECTURES,
    **nfnet.ARCHITECTURES,
    **tiny_vit.ARCHITECTURES,
    **levit.ARCHITECTURES,
    **efficientformer.ARCHITECTURES,
    **efficientvit_mit.ARCHITECTURES,
    **efficientvit_msra.ARCHITECTURES,
    **maxvit.ARCHITECTURES,
    **pvt_v2.ARCHITECTURES,
    **efficientnet.ARCHITECTURES,
    **xception.ARCHITECTURES,
}


def no_weights_for(name: str, networks: Collection[str]) -> str:
    """One line for a network name no published weights load into: a network without any
    (`lenet`), or a misspelt one, with the architectures closest to it (not all of them)."""
    if name in networks:  # only its other spelling (Slim's resnet_v2_50, timm's resnetv2_50)
        close = [a for a in ARCHITECTURES if a.replace("_", "") == name.replace("_", "")]
        what = "a network without published weights yet"
    else:
        close = closest(name, ARCHITECTURES)
        what = "unknown"
    if close:
        what += f": did you mean {' or '.join(map(repr, close))}?"
    return (
        f"no published weights load into {name!r} ({what}); docs/pretrained.md lists the "
        f"{len(ARCHITECTURES)} architectures that have them (nets_weights.ARCHITECTURES)"
    )


def find(
    name: str, file_architecture: str | None, networks: Mapping[str, Any]
) -> tuple[str, Architecture]:
    """The architecture for loading a file whose config names `file_architecture` into `name`.
    `networks` is the registry: a file of one network loads under any name bound to the same
    constructor (torchvision's `swin_t` and timm's `swin_tiny_patch4_window7_224`, DeiT's and
    ViT's), with its own file's conventions."""
    if name not in ARCHITECTURES:
        raise ValueError(no_weights_for(name, networks))
    # A name with a tag (`inception_v3.tf_in1k`) says which weights an untagged config's are.
    if file_architecture is not None and not name.startswith(f"{file_architecture}."):
        theirs = ARCHITECTURES.get(file_architecture)
        ours = ARCHITECTURES[name].network
        constructor = networks.get(ours)
        one_network = theirs is not None and (
            theirs.network == ours
            or (constructor is not None and networks.get(theirs.network) is constructor)
        )
        if not one_network:
            hint = f" (they load into {theirs.network!r})" if theirs is not None else ""
            raise WeightFileError(
                f"the file's config.json is for {file_architecture!r}, not {name!r}{hint}"
            )
        name = file_architecture
    return name, ARCHITECTURES[name]


def names_for(network: str, keys: Collection[str]) -> list[str]:
    """The names under which a file with `keys` loads into `network` or its `tf_` twin (the same
    network under TensorFlow's conventions): a Keras file given as `efficientnet_b0` loads as
    `keras_efficientnet_b0` or `tf_efficientnet_b0`."""
    ours = network.removeprefix("tf_")
    return sorted(
        name
        for name, arch in ARCHITECTURES.items()
        for a in (arch, *arch.alternatives)
        if a.network.removeprefix("tf_") == ours and a.head_kernel in a.stable(dict.fromkeys(keys))
    )


def file_architecture(config: Mapping[str, Any]) -> str | None:
    """A Hub config.json's architecture, with timm's pretrained tag (`inception_v3.tf_in1k`)
    where the table has an entry for the tagged weights (they need other conventions)."""
    name = config.get("architecture")
    tag = config.get("pretrained_cfg", {}).get("tag")
    return f"{name}.{tag}" if f"{name}.{tag}" in ARCHITECTURES else name


def preprocessing(config: Mapping[str, Any]) -> dict[str, Any]:
    """`Pretrained` fields from a Hub config.json's `pretrained_cfg` (timm's names)."""
    cfg = config.get("pretrained_cfg", {})
    out = {}
    if "input_size" in cfg:
        out["image_size"] = int(cfg["input_size"][-1])
    if "crop_pct" in cfg:
        out["crop_fraction"] = float(cfg["crop_pct"])
    if cfg.get("crop_mode"):
        out["crop_mode"] = str(cfg["crop_mode"])
    if "interpolation" in cfg:
        out["interpolation"] = str(cfg["interpolation"])
    for key in ("mean", "std"):
        if key in cfg:
            out[key] = tuple(float(v) for v in cfg[key])
    return out


def imagenet_synsets() -> tuple[str, ...]:
    """The ImageNet-1k WordNet ids (`n01440764`, ...) in logit order: the folder names of
    ImageNet's image-folder layout."""
    lines = _CLASSES_FILE.read_text().splitlines()
    return tuple(line.split("\t")[0] for line in lines if not line.startswith("#"))


def imagenet_class_names(num_classes: int = 1000) -> tuple[str, ...]:
    """The ImageNet-1k class names in logit order (the first lemma of each synset): 1000, or
    Slim's 1001 with `background` first; `()` for any other count."""
    lines = _CLASSES_FILE.read_text().splitlines()
    names = tuple(line.split("\t")[1].split(",")[0] for line in lines if not line.startswith("#"))
    return {1000: names, 1001: ("background", *names)}.get(num_classes, ())

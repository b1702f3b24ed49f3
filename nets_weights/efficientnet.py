"""timm's EfficientNet B0-B7 and V2-S/M/L state dicts (`efficientnet_b*`, `tf_efficientnet_b*`,
`efficientnetv2_*`, `tf_efficientnetv2_*`) and torchvision's, as our `nets.efficientnet`.

timm's keys: `conv_stem`, `bn1`, then `blocks.{stage}.{block}`: the first stage's blocks (no
expansion) are `DepthwiseSeparableConv`s (`conv_dw`, `bn1`, `se`, `conv_pw`, `bn2`), the others
`InvertedResidual`s (`conv_pw`, `bn1`, `conv_dw`, `bn2`, `se`, `conv_pwl`, `bn3`), with
squeeze-excite `se.conv_reduce` / `se.conv_expand`; then `conv_head`, `bn2`, `classifier`. Ours
are the same tree under scope names: `stem`, `blocks_{stage}_{block}/{expand, depthwise,
squeeze_excite, project}`, `head`, `classifier`. The block kinds are MobileNet's
(`nets_weights/mobilenet.py`), whose tables this module shares. V2's Fused-MBConv blocks are timm's
`EdgeResidual`s (`conv_exp`, `bn1`, `conv_pwl`, `bn2`; ours `expand`, `project`) and, without
expansion, its `ConvBnAct`s (`conv`, `bn1`; ours `conv`).

torchvision's files (`efficientnet_b0` ... `efficientnet_b7`, its names and ours) number the
layers instead: `features.0.{0,1}` the stem, `features.{stage + 1}.{block}.block.{k}` a block's
layers in order (expansion where there is one, depthwise, squeeze-excite `fc1` / `fc2`,
projection; a conv-norm layer `.0` / `.1`), `features.8.{0,1}` the head, `classifier.1` the
logits. Its squeeze width `max(1, c_in // 4)` is ours for every width a multiple of 4 (all of
B0-B7's); its head width `4 * c_last` is timm's `round_channels(1280)` at B0-B7's multipliers.
Those files are told from timm's by their classifier key (`classifier.1.weight`). torchvision's
B5-B7 were ported from TensorFlow but run with symmetric padding and BatchNorm epsilon 1e-3.
Its `efficientnet_v2_s/m/l` (our names too) number their blocks the same way (a Fused-MBConv's
expansion `.0` and projection `.1`, or its one convolution `.0`), with epsilon 1e-3 and
symmetric padding.

Both of timm's flavours hold the same tensors; they differ in the conventions the weights were
trained with: timm's own in PyTorch (symmetric padding, BatchNorm epsilon 1e-5), the `tf_` ports
of the TF checkpoints with TensorFlow's 'SAME' padding and epsilon 1e-3. The registry's two names
carry those conventions, and loading states them so that a contradicting field raises.

Keras Applications' files (`efficientnetb0.h5` ... `efficientnetb7.h5`) name a layer per
convolution and per BatchNorm: `stem_conv` / `stem_bn`, block `{stage + 1}{letter}_` (`block2a_`,
`block2b_`: `a` for a stage's first block) `expand_conv`, `expand_bn`, `dwconv`, `bn`, `se_reduce`,
`se_expand`, `project_conv`, `project_bn`, then `top_conv` / `top_bn` and the Dense `predictions`.
Their function is the TF checkpoints', our `tf_` conventions: every stride-2 layer pads with
`correct_pad` (TensorFlow's 'SAME'), BatchNorm epsilon 1e-3, SiLU; widths `round_filters`
(`make_divisible(c * width, 8)`), repeats `ceil(n * depth)`, expansion convolutions
`c_in * 6` wide (a multiple of 8, as ours), squeeze-excite `int(c_in / 4)` wide (our quarter of
the block's input), the head `round_filters(1280)`, the paper's dropout rates. Keras's model holds
its preprocessing: `Rescaling(1 / 255)`, a `Normalization` layer whose weights the file holds, and
for `weights='imagenet'` a `Rescaling(1 / sqrt(std))`. The published files' Normalization holds
ImageNet's mean and, as its *variance*, ImageNet's std (tensorflow/tensorflow#49930): the extra
rescaling makes that `(x / 255 - mean) / std`, the TF reference's normalization, which the
`Pretrained` record states (our default mean and std, of [0, 1] inputs) and `check_normalization`
verifies on each file (Keras builds a file's model without that rescaling when given the file's
path, and then computes another function: `(x / 255 - mean) / sqrt(std)`).

Keras's EfficientNetV2 files (`efficientnetv2-s.h5`, `-m.h5`, `-l.h5`) name their layers as V1's
but for the depthwise `dwconv2`; a Fused-MBConv block is `expand_conv` (kxk, strided),
`expand_bn`, `project_conv` (1x1), `project_bn`, and without expansion (the first stage) one kxk
strided `project_conv` / `project_bn` with the activation, our `conv`. Their function is the
`tf_efficientnetv2_*` one: every convolution pads 'same' (TensorFlow's 'SAME'), BatchNorm epsilon
1e-3 (Keras's default), SiLU; the stages are timm's tables (V2-M's and V2-L's 24 and 32 stems,
which Keras takes from the first stage's input), squeeze-excite `int(c_in / 4)` wide in the
MBConv stages only, the head 1280 wide, the residual wherever the stride is 1 and the widths
agree (the unexpanded Fused-MBConv's too). Keras's dropout (0.2 for all three) is a training
setting and loading leaves ours. The model's preprocessing for S/M/L (not for its B0-B3, which
get V1's normalization) is `Rescaling(1 / 128, offset=-1)`: `(x / 255 - 128 / 255) / (128 / 255)`,
the `Pretrained` record's mean and std, 7e-4 from timm's `x / 127.5 - 1` on the fixture. Sizes:
Keras's `default_size` (384, 480, 480), the reference's evaluation of the whole image.
"""

import dataclasses
import re
from collections.abc import Callable, Collection, Mapping

import flax.linen as nn
import numpy as np

from nets_weights.convert import KERAS, Architecture, Layout, same_layout
from nets_weights.files import WeightFileError
from nets_weights.mobilenet import _DEPTHWISE_SEPARABLE, _INVERTED_RESIDUAL, _SQUEEZE_EXCITE

_TOP = {
    "stem/conv": "conv_stem",
    "stem/bn": "bn1",
    "head/conv": "conv_head",
    "head/bn": "bn2",
    "classifier": "classifier",
}


# timm's Fused-MBConv (`EdgeResidual`) and, without expansion, its `ConvBnAct`.
_EDGE_RESIDUAL = {
    "expand/conv": "conv_exp",
    "expand/bn": "bn1",
    "project/conv": "conv_pwl",
    "project/bn": "bn2",
}
_CONV_BN_ACT = {"conv/conv": "conv", "conv/bn": "bn1"}
# timm's block of each (kind, whether it expands).
_TIMM_BLOCKS = {
    ("mbconv", True): _INVERTED_RESIDUAL,
    ("mbconv", False): _DEPTHWISE_SEPARABLE,
    ("fused", True): _EDGE_RESIDUAL,
    ("fused", False): _CONV_BN_ACT,
}


def timm_layout(module: nn.Module) -> Layout:
    """Our module paths -> timm's prefixes, for a built `nets.efficientnet.EfficientNet`: an
    MBConv stage of expansion 1 is timm's depthwise-separable kind (EfficientNet's first), the
    others its inverted residuals; a Fused-MBConv stage its `EdgeResidual`s, or without
    expansion its `ConvBnAct`s (V2's first)."""

    def source(path: tuple[str, ...]) -> str:
        if not path[0].startswith("blocks_"):
            return _TOP["/".join(path)]
        _, stage, block = path[0].split("_")
        kind = module.stages[int(stage)]
        layers = {**_TIMM_BLOCKS[kind.kind, kind.expansion != 1], **_SQUEEZE_EXCITE}
        return f"blocks.{stage}.{block}.{layers['/'.join(path[1:])]}"

    return source


def torchvision_layout(module: nn.Module) -> Layout:
    """Our module paths -> torchvision's prefixes, for a built `nets.efficientnet.EfficientNet`."""
    head = len(module.stages) + 1
    top = {
        "stem/conv": "features.0.0",
        "stem/bn": "features.0.1",
        "head/conv": f"features.{head}.0",
        "head/bn": f"features.{head}.1",
        "classifier": "classifier.1",
    }
    leaves = {"conv": "0", "bn": "1", "Conv": "fc1", "Conv_1": "fc2"}

    def source(path: tuple[str, ...]) -> str:
        if not path[0].startswith("blocks_"):
            return top["/".join(path)]
        _, stage, block = path[0].split("_")
        kind = module.stages[int(stage)]
        if kind.kind == "fused" and kind.expansion == 1:
            layers = ["conv"]
        else:
            layers = ["expand"] * (kind.expansion != 1)
            layers += ["depthwise"] * (kind.kind == "mbconv")
            layers += ["squeeze_excite"] * (kind.se_ratio > 0) + ["project"]
        k = layers.index(path[1])
        return f"features.{int(stage) + 1}.{block}.block.{k}.{leaves[path[2]]}"

    return source


# What each architecture's default weights expect, for files without a config.json (timm's
# pretrained_cfg of the default tag): image size, crop fraction; all are bicubic.
_INPUTS = {
    "efficientnet_b0": (224, 0.875),
    "efficientnet_b1": (240, 0.9),  # ra4_e3600_r240_in1k: inputs in [-1, 1]
    "efficientnet_b2": (256, 0.875),
    "efficientnet_b3": (288, 0.875),
    "efficientnet_b4": (320, 0.875),
    "efficientnet_b5": (448, 1.0),
    "efficientnet_b6": (528, 0.942),
    "efficientnet_b7": (600, 0.949),
    "tf_efficientnet_b0": (224, 0.875),
    "tf_efficientnet_b1": (240, 0.882),
    "tf_efficientnet_b2": (260, 0.89),
    "tf_efficientnet_b3": (300, 0.904),
    "tf_efficientnet_b4": (380, 0.922),
    "tf_efficientnet_b5": (456, 0.934),
    "tf_efficientnet_b6": (528, 0.942),
    "tf_efficientnet_b7": (600, 0.949),
    # V2: timm's train sizes (its evaluation sizes, `test_input_size`, are the networks'
    # `default_image_size`); timm has no weights of its own `efficientnetv2_*` (untrained cfgs).
    # The TF checkpoints' default tag (`in21k_ft_in1k`) takes inputs in [-1, 1]; M's and L's
    # `crop_mode='squash'` (a resize to the square, no crop) is timm's, not represented here.
    "efficientnetv2_s": (288, 1.0),
    "efficientnetv2_m": (320, 1.0),
    "efficientnetv2_l": (384, 1.0),
    "tf_efficientnetv2_s": (300, 1.0),
    "tf_efficientnetv2_m": (384, 1.0),
    "tf_efficientnetv2_l": (384, 1.0),
}
_TF = {"padding": "SAME", "bn_epsilon": 1e-3}
_TORCH = {"padding": "SYMMETRIC", "bn_epsilon": 1e-5}


# torchvision's default weights: (crop size, resize size, interpolation), BatchNorm epsilon.
_TORCHVISION = {
    "efficientnet_b0": ((224, 256, "bicubic"), 1e-5),
    "efficientnet_b1": ((240, 255, "bilinear"), 1e-5),  # IMAGENET1K_V2
    "efficientnet_b2": ((288, 288, "bicubic"), 1e-5),
    "efficientnet_b3": ((300, 320, "bicubic"), 1e-5),
    "efficientnet_b4": ((380, 384, "bicubic"), 1e-5),
    "efficientnet_b5": ((456, 456, "bicubic"), 1e-3),
    "efficientnet_b6": ((528, 528, "bicubic"), 1e-3),
    "efficientnet_b7": ((600, 600, "bicubic"), 1e-3),
    "efficientnet_v2_s": ((384, 384, "bilinear"), 1e-3),
    "efficientnet_v2_m": ((480, 480, "bilinear"), 1e-3),
    "efficientnet_v2_l": ((480, 480, "bicubic"), 1e-3),  # ported from TF: inputs in [-1, 1]
}


def _torchvision(name: str) -> Architecture:
    (crop, resize, interpolation), epsilon = _TORCHVISION[name]
    preprocessing = {
        "image_size": crop,
        "crop_fraction": crop / resize,
        "interpolation": interpolation,
    }
    if name == "efficientnet_v2_l":
        preprocessing |= {"mean": (0.5,) * 3, "std": (0.5,) * 3}
    return Architecture(
        name,
        {"padding": "SYMMETRIC", "bn_epsilon": epsilon},
        torchvision_layout,
        head=("classifier",),
        source_head="classifier.1",
        preprocessing=preprocessing,
    )


def _timm(name: str) -> Architecture:
    size, crop = _INPUTS[name]
    preprocessing = {"image_size": size, "crop_fraction": crop, "interpolation": "bicubic"}
    if name == "efficientnet_b1" or name.startswith("tf_efficientnetv2_"):
        preprocessing |= {"mean": (0.5,) * 3, "std": (0.5,) * 3}
    return Architecture(
        name,
        _TF if name.startswith("tf_") else _TORCH,
        timm_layout,
        head=("classifier",),
        source_head="classifier",
        preprocessing=preprocessing,
        alternatives=(_torchvision(name),) if name in _TORCHVISION else (),
    )


_KERAS_TOP = {
    "stem/conv": "stem_conv",
    "stem/bn": "stem_bn",
    "head/conv": "top_conv",
    "head/bn": "top_bn",
    "classifier": "predictions",
}
_KERAS_BLOCK = {
    "expand/conv": "expand_conv",
    "expand/bn": "expand_bn",
    "depthwise/conv": "dwconv",
    "depthwise/bn": "bn",
    "squeeze_excite/Conv": "se_reduce",
    "squeeze_excite/Conv_1": "se_expand",
    "project/conv": "project_conv",
    "project/bn": "project_bn",
}


def _keras_layout(blocks: Mapping[str, str]) -> Callable[[nn.Module], Layout]:
    """Our module paths -> Keras's layer names, a block's layers named by `blocks` (the same for
    every variant)."""

    def source(path: tuple[str, ...]) -> str:
        if not path[0].startswith("blocks_"):
            return _KERAS_TOP["/".join(path)]
        _, stage, block = path[0].split("_")
        letter = chr(ord("a") + int(block))  # Keras's `block2a_`, `block2b_`, ... `block6y_`
        return f"block{int(stage) + 1}{letter}_{blocks['/'.join(path[1:])]}"

    return same_layout(source)


keras_layout = _keras_layout(_KERAS_BLOCK)


# Keras's in-model input normalization: a layer named by Keras's session counter.
_NORMALIZATION = re.compile(r"normalization(?:_\d+)?/")
KERAS_MEAN, KERAS_VARIANCE = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _keras_rename(keys: Collection[str]) -> dict[str, str]:
    """`normalization_3/mean:0` -> `normalization/mean:0`; other keys as they are."""
    return {key: _NORMALIZATION.sub("normalization/", key, count=1) for key in keys}


def check_normalization(tensors: Mapping[str, np.ndarray], what: str) -> None:
    """Raises unless the file's Normalization layer is the published files' (ImageNet's mean and
    std, the std as its variance), the one Keras's `weights='imagenet'` pipeline and our
    `Pretrained` record turn into `(x / 255 - mean) / std`."""
    for leaf, published in (("mean", KERAS_MEAN), ("variance", KERAS_VARIANCE)):
        key = f"normalization/{leaf}:0"
        if key not in tensors:
            raise WeightFileError(f"{what} has no input normalization {key!r}")
        found = np.asarray(tensors[key], np.float64).reshape(-1)
        if found.shape != (3,) or not np.allclose(found, published, rtol=0, atol=1e-6):
            raise WeightFileError(
                f"{what}'s input normalization {key!r} is {found.round(6).tolist()}, not the "
                f"published {list(published)}: its inputs would need other preprocessing"
            )


def _keras(name: str) -> Architecture:
    size, crop = _INPUTS[f"tf_{name}"]  # the TF reference's evaluation: crop size / (size + 32)
    return Architecture(
        f"tf_{name}",
        _TF,
        keras_layout,
        head=("classifier",),
        source_head="predictions",
        dropped=("normalization",),
        preprocessing={"image_size": size, "crop_fraction": crop, "interpolation": "bicubic"},
        framework=KERAS,
        rename=_keras_rename,
        check=check_normalization,
    )


_KERAS = {f"keras_efficientnet_b{i}": _keras(f"efficientnet_b{i}") for i in range(8)}

# Keras's V2 blocks: V1's names but the depthwise `dwconv2`, and a Fused-MBConv without expansion
# (our `conv`) is its `project_conv` / `project_bn`, a kxk strided convolution with activation.
_KERAS_V2_BLOCK = {
    **_KERAS_BLOCK,
    "depthwise/conv": "dwconv2",
    "conv/conv": "project_conv",
    "conv/bn": "project_bn",
}


keras_v2_layout = _keras_layout(_KERAS_V2_BLOCK)


# Keras's EfficientNetV2S/M/L preprocessing, `Rescaling(1 / 128, offset=-1)` of [0, 255] inputs:
# `(x / 255 - 128 / 255) / (128 / 255)`, not quite timm's [-1, 1] (`x / 127.5 - 1`).
KERAS_V2_INPUTS = (128 / 255,) * 3


def _keras_v2(name: str, size: int) -> Architecture:
    # `size`: Keras's `default_size`, the reference's evaluation size, with its full-image crop.
    return Architecture(
        f"tf_{name}",
        _TF,
        keras_v2_layout,
        head=("classifier",),
        source_head="predictions",
        preprocessing={
            "image_size": size,
            "crop_fraction": 1.0,
            "interpolation": "bicubic",
            "mean": KERAS_V2_INPUTS,
            "std": KERAS_V2_INPUTS,
        },
        framework=KERAS,
    )


_KERAS |= {
    f"keras_efficientnetv2_{v}": _keras_v2(f"efficientnetv2_{v}", size)
    for v, size in (("s", 384), ("m", 480), ("l", 480))
}

# timm's names, which are ours (and torchvision's for B0-B7: its files are the alternative
# layout); torchvision's V2 names, which timm's differ from. Keras's files load as
# `keras_efficientnet_b*` / `keras_efficientnetv2_*` or under the `tf_` names, whose timm entries
# take a file whose classifier is `predictions` as Keras's.
ARCHITECTURES = {
    **{name: _timm(name) for name in _INPUTS},
    **{name: _torchvision(name) for name in _TORCHVISION if name.startswith("efficientnet_v2")},
}
ARCHITECTURES |= {
    f"tf_{name}": dataclasses.replace(
        ARCHITECTURES[f"tf_{name}"], alternatives=(_KERAS[f"keras_{name}"],)
    )
    for name in (keras.removeprefix("keras_") for keras in _KERAS)
}
ARCHITECTURES |= _KERAS

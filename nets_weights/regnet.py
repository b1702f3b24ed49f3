"""timm's and torchvision's RegNet state dicts, as our `nets.regnet` (timm's module names).

timm's keys are ours: `stem.conv` / `stem.bn`, `s{i}.b{j}.conv{1,2,3}.conv` / `.bn`,
`s{i}.b{j}.se.fc1` / `fc2`, `s{i}.b{j}.downsample.conv` / `.bn`, `head.fc`. torchvision's:
`stem.0` / `stem.1`, `trunk_output.block{i}.block{i}-{j - 1}` followed by `f.a.0` / `f.a.1`
(conv1), `f.b.*` (conv2), `f.se.fc1` / `fc2`, `f.c.*` (conv3) and `proj.0` / `proj.1`
(downsample), then `fc`. Each architecture takes either; the file's classifier says which.

The networks are the same function under both libraries' names: timm's `regnetx_008` is
torchvision's `regnet_x_800mf`, and so on, except where pycls's width rounding differs from
torchvision's (`nets/regnet.py`): timm's `regnetx_004_tv`, `regnety_008_tv` and
`regnety_080_tv` hold torchvision's weights for `regnet_x_400mf`, `regnet_y_800mf` and
`regnet_y_8gf`, and its `regnetx_004`, `regnety_008` and `regnety_080` (pycls's weights) load
into our networks of those names.

Keras Applications' files (`regnetx004.h5`, `regnety008.h5`, `regnety080.h5`, ...; Keras 2's
`tf.keras.applications.RegNetX004`, ..., not in Keras 3) name layers after the model
(`regnety008_`): `stem_conv` / `stem_bn`, block `j` of stage `i` `Stage_{i - 1}_YBlock_{j - 1}_`
(`XBlock` in RegNet-X) `conv_1x1_1`, `conv_3x3`, `conv_1x1_2` (each with `_bn`), `skip_1x1` /
`skip_bn`, `squeeze_and_excite_squeeze` / `_excite`, and the classifier `head_dense`, prefixed by
Keras's session counter (`1head_dense`: `keras_rename` drops it). Twelve of its configurations are
ours (`_KERAS_NETWORKS`: timm's `regnetx_004`, `regnety_008` and `regnety_080` with pycls's widths,
torchvision's others): widths, depths, groups, squeeze-excite `int(c_in / 4)`, stem 32,
bottleneck ratio 1, BatchNorm epsilon 1e-5; the stem and the strided 3x3 convolutions pad 'same',
TensorFlow's 'SAME' (our `padding` field). The model rescales its inputs itself, `Rescaling(1 /
255)` and nothing else: [0, 1] inputs with mean 0 and std 1 (`preprocess_input` does nothing).
"""

import dataclasses
import re
from collections.abc import Callable, Collection

from nets_weights.convert import KERAS, Architecture, Layout, same_layout

_TORCHVISION_BLOCK = {
    "conv1": "f.a",
    "conv2": "f.b",
    "conv3": "f.c",
    "downsample": "proj",
    "se": "f.se",
}
_TORCHVISION_LEAF = {"conv": "0", "bn": "1", "fc1": "fc1", "fc2": "fc2"}


def torchvision_layout(path: tuple[str, ...]) -> str:
    """Our module path -> its torchvision prefix."""
    if path[0] == "stem":
        return f"stem.{_TORCHVISION_LEAF[path[1]]}"
    if path[0] == "head":
        return "fc"
    stage, block, layer, leaf = path[0][1:], int(path[1][1:]) - 1, *path[2:]
    return (
        f"trunk_output.block{stage}.block{stage}-{block}."
        f"{_TORCHVISION_BLOCK[layer]}.{_TORCHVISION_LEAF[leaf]}"
    )


# Our block's layers -> Keras's, after `{model}_Stage_{i}_YBlock_{j}_`.
_KERAS_BLOCK = {
    "conv1/conv": "conv_1x1_1",
    "conv1/bn": "conv_1x1_1_bn",
    "conv2/conv": "conv_3x3",
    "conv2/bn": "conv_3x3_bn",
    "conv3/conv": "conv_1x1_2",
    "conv3/bn": "conv_1x1_2_bn",
    "downsample/conv": "skip_1x1",
    "downsample/bn": "skip_bn",
    "se/fc1": "squeeze_and_excite_squeeze",
    "se/fc2": "squeeze_and_excite_excite",
}
# The classifier, named by Keras's session counter: `1head_dense`, `7head_dense`.
_KERAS_HEAD = re.compile(r"^\d*head_dense/")


def keras_rename(keys: Collection[str]) -> dict[str, str]:
    """`1head_dense/kernel:0` -> `head_dense/kernel:0`; other keys as they are."""
    return {key: _KERAS_HEAD.sub("head_dense/", key, count=1) for key in keys}


def keras_layout(model: str) -> Callable[[object], Layout]:
    """Our module paths -> the Keras layers of the model named `model` (`regnety008`)."""

    def layout(module) -> Layout:
        block = "YBlock" if module.se_ratio else "XBlock"

        def source(path: tuple[str, ...]) -> str:
            if path[0] == "stem":
                return f"{model}_stem_{path[1]}"
            if path[0] == "head":
                return "head_dense"
            stage, index = int(path[0][1:]) - 1, int(path[1][1:]) - 1
            return f"{model}_Stage_{stage}_{block}_{index}_{_KERAS_BLOCK['/'.join(path[2:])]}"

        return source

    return layout


def _keras(network: str, model: str) -> Architecture:
    # Keras's pipeline says nothing of a crop: our default, 224 px of 256.
    return Architecture(
        network,
        {"padding": "SAME"},
        keras_layout(model),
        head=("head", "fc"),
        source_head="head_dense",
        preprocessing={"mean": (0.0,) * 3, "std": (1.0,) * 3},
        framework=KERAS,
        rename=keras_rename,
    )


# Keras's models -> our networks with their widths, depths and groups (Keras's X002, X006, X040,
# X064, X120, X320, Y002, Y006, Y040, Y064, Y120, Y320 are other networks).
_KERAS_NETWORKS = {
    "regnetx004": "regnetx_004",
    "regnetx008": "regnet_x_800mf",
    "regnetx016": "regnet_x_1_6gf",
    "regnetx032": "regnet_x_3_2gf",
    "regnetx080": "regnet_x_8gf",
    "regnetx160": "regnet_x_16gf",
    "regnety004": "regnet_y_400mf",
    "regnety008": "regnety_008",
    "regnety016": "regnet_y_1_6gf",
    "regnety032": "regnet_y_3_2gf",
    "regnety080": "regnety_080",
    "regnety160": "regnet_y_16gf",
}
_KERAS = {
    f"keras_{model[:7]}_{model[7:]}": _keras(network, model)
    for model, network in _KERAS_NETWORKS.items()
}


def _architecture(network: str, timm_first: bool) -> Architecture:
    timm = Architecture(
        network,
        {"padding": "SYMMETRIC"},
        same_layout(".".join),  # timm's prefixes: our names, dotted
        head=("head", "fc"),
        source_head="head.fc",
    )
    tv_layout = same_layout(torchvision_layout)
    torchvision = dataclasses.replace(timm, layout=tv_layout, source_head="fc")
    first, other = (timm, torchvision) if timm_first else (torchvision, timm)
    keras = tuple(arch for arch in _KERAS.values() if arch.network == network)
    return dataclasses.replace(first, alternatives=(other, *keras))


# timm's name -> ours (torchvision's).
_TIMM = {
    "regnetx_004_tv": "regnet_x_400mf",
    "regnetx_008": "regnet_x_800mf",
    "regnetx_016": "regnet_x_1_6gf",
    "regnetx_032": "regnet_x_3_2gf",
    "regnetx_080": "regnet_x_8gf",
    "regnetx_160": "regnet_x_16gf",
    "regnety_004": "regnet_y_400mf",
    "regnety_008_tv": "regnet_y_800mf",
    "regnety_016": "regnet_y_1_6gf",
    "regnety_032": "regnet_y_3_2gf",
    "regnety_080_tv": "regnet_y_8gf",
    "regnety_160": "regnet_y_16gf",
    # pycls's rounding: networks of their own (timm's names are ours).
    "regnetx_004": "regnetx_004",
    "regnety_008": "regnety_008",
    "regnety_080": "regnety_080",
}
ARCHITECTURES = {name: _architecture(ours, timm_first=True) for name, ours in _TIMM.items()}
ARCHITECTURES |= {
    ours: _architecture(ours, timm_first=False)
    for ours in _TIMM.values()
    if ours not in ARCHITECTURES
}
# Keras's files load as `keras_regnetx_004`, ... or under our names (their `head_dense` tells
# their layout).
ARCHITECTURES |= _KERAS

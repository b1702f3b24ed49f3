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
"""

import dataclasses

from pretrained.convert import Architecture, Layout

_TORCHVISION_BLOCK = {
    "conv1": "f.a",
    "conv2": "f.b",
    "conv3": "f.c",
    "downsample": "proj",
    "se": "f.se",
}
_TORCHVISION_LEAF = {"conv": "0", "bn": "1", "fc1": "fc1", "fc2": "fc2"}


def timm_layout(module) -> Layout:
    """Our module paths -> timm's prefixes: the same names, dotted."""
    del module
    return ".".join


def torchvision_layout(module) -> Layout:
    """Our module paths -> torchvision's prefixes."""
    del module

    def source(path: tuple[str, ...]) -> str:
        if path[0] == "stem":
            return f"stem.{_TORCHVISION_LEAF[path[1]]}"
        if path[0] == "head":
            return "fc"
        stage, block, layer, leaf = path[0][1:], int(path[1][1:]) - 1, *path[2:]
        return (
            f"trunk_output.block{stage}.block{stage}-{block}."
            f"{_TORCHVISION_BLOCK[layer]}.{_TORCHVISION_LEAF[leaf]}"
        )

    return source


def _architecture(network: str, timm_first: bool) -> Architecture:
    timm = Architecture(network, {}, timm_layout, head=("head", "fc"), source_head="head.fc")
    torchvision = dataclasses.replace(timm, layout=torchvision_layout, source_head="fc")
    first, other = (timm, torchvision) if timm_first else (torchvision, timm)
    return dataclasses.replace(first, alternatives=(other,))


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

"""timm's CSPNet, DarkNet and CS3 state dicts (`cspresnet50.ra_in1k`, `darknet53.c2ns_in1k`,
`cs3darknet_l.c2ns_in1k`, ...), as our `nets.cspnet`.

timm's keys: `stem.conv{k}.conv` / `.bn`, `stages.{i}.conv_down` (DarkNet-AA's Sequential:
`conv_down.1`), `conv_exp`, `blocks.{j}.conv{k}`, `blocks.{j}.attn.fc1` (`attn2` in bottlenecks),
`conv_transition_b`, `conv_transition`, then `head.fc`. Ours are the same with `stages_{i}`,
`blocks_{j}` and `conv_down_1`. The weights were trained with PyTorch's symmetric padding, our
default for the family. Their preprocessing (timm's `pretrained_cfg`): 256 px at crop 0.887,
bilinear but for DarkNet-53's and the CS3 networks' bicubic; `cs3darknet_x` and
`cs3se_edgenet_x` at crop 0.95; `cs3darknet_focus_s` in [-1, 1].
"""

import re

from nets_weights.convert import Architecture, same_layout

_INDEXED = re.compile(r"^(stages|blocks|conv_down)_(\d+)$")


def layout(path: tuple[str, ...]) -> str:
    """Our module path -> timm's prefix: `stages_0/blocks_1/attn/fc1` ->
    `stages.0.blocks.1.attn.fc1`."""
    return ".".join(_INDEXED.sub(r"\1.\2", part) for part in path)


_BICUBIC = {"interpolation": "bicubic"}
_PREPROCESSING = {
    "darknet53": _BICUBIC,
    "cs3darknet_x": {**_BICUBIC, "crop_fraction": 0.95},
    "cs3se_edgenet_x": {**_BICUBIC, "crop_fraction": 0.95},
    "cs3darknet_focus_s": {**_BICUBIC, "mean": (0.5,) * 3, "std": (0.5,) * 3},
}
_NAMES = (
    *("cspresnet50", "cspresnet50d", "cspresnet50w", "cspresnext50", "cspdarknet53"),
    *("darknet17", "darknet21", "sedarknet21", "darknet53", "darknetaa53"),
    *(f"cs3darknet_{s}" for s in "smlx"),
    *(f"cs3darknet_focus_{s}" for s in "smlx"),
    *("cs3sedarknet_l", "cs3sedarknet_x", "cs3sedarknet_xdw", "cs3edgenet_x", "cs3se_edgenet_x"),
)
# timm's names, which are ours.
ARCHITECTURES = {
    name: Architecture(
        name,
        {"padding": "SYMMETRIC"},
        same_layout(layout),
        head=("head", "fc"),
        source_head="head.fc",
        preprocessing={
            "image_size": 256,
            "crop_fraction": 0.887,
            **(_BICUBIC if name.startswith("cs3") else {}),
            **_PREPROCESSING.get(name, {}),
        },
    )
    for name in _NAMES
}

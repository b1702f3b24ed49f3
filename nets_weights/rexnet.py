"""timm's ReXNet state dicts (`rexnet_100.nav_in1k` ... `rexnet_300.nav_in1k`,
`rexnetr_200.sw_in12k_ft_in1k`, `rexnetr_300.sw_in12k`, ...), as our `nets.rexnet`.

timm's keys: `stem.conv` / `.bn`, then its flat `features.{i}`: a bottleneck's `conv_exp`,
`conv_dw`, `se.fc1` / `se.bn` / `se.fc2`, `conv_pwl` (each `.conv` / `.bn`), the last 1x1
convolution `features.{blocks}.conv` / `.bn`; then `head.fc`. Ours are the same with `features_{i}`.
The weights were trained with PyTorch's symmetric padding and BatchNorm epsilon 1e-5, the family's
defaults, stated so that a contradicting field raises. Their preprocessing (timm's
`pretrained_cfg`): 224 px at crop 0.875, bicubic, ImageNet's mean and std; the `rexnetr_200/300`
ImageNet-12k weights at crop 0.95. `rexnetr_100/130/150` have none (timm's `untrained`).
"""

import re

from nets_weights.convert import IMAGENET_MEAN, IMAGENET_STD, Architecture, same_layout

_INDEXED = re.compile(r"^features_(\d+)$")


def layout(path: tuple[str, ...]) -> str:
    """Our module path -> timm's prefix: `features_3/se/fc1` -> `features.3.se.fc1`."""
    return ".".join(_INDEXED.sub(r"features.\1", part) for part in path)


_NAMES = (
    *(f"rexnet_{m}" for m in (100, 130, 150, 200, 300)),
    *(f"rexnetr_{m}" for m in (100, 130, 150, 200, 300)),
)
# timm's names, which are ours.
ARCHITECTURES = {
    name: Architecture(
        name,
        {"padding": "SYMMETRIC", "bn_epsilon": 1e-5},
        same_layout(layout),
        head=("head", "fc"),
        source_head="head.fc",
        preprocessing={
            "image_size": 224,
            "crop_fraction": 0.95 if name in ("rexnetr_200", "rexnetr_300") else 0.875,
            "interpolation": "bicubic",
            "mean": IMAGENET_MEAN,
            "std": IMAGENET_STD,
        },
    )
    for name in _NAMES
}

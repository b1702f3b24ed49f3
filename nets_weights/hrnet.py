"""timm's HRNet state dicts, as our `nets.hrnet`.

Our module paths are timm's keys with their indices joined by `_` (`stage3_1/branches_2_0`:
`stage3.1.branches.2.0`; `transition1_1_0`: `transition1.1.0`), `nn.Sequential` positions as
`layers_{i}` (`final_layer/layers_1`: `final_layer.1`), and the ResNet blocks' layers as
`nets.resnet` names them: `Conv_{k}` / `BatchNorm_{k}` are timm's `conv{k+1}` / `bn{k+1}`,
`conv_proj` / `norm_proj` its `downsample.0` / `.1`. The SSLD files' head convolutions have no
biases: their networks (`hrnet_w18_ssld`, `hrnet_w48_ssld`) have none. Preprocessing where a file
states none: timm's default, 224 px, crop 0.875, bilinear, ImageNet's mean and std.
"""

import re

from nets_weights.convert import Architecture, same_layout

_BLOCK = {"conv_proj": "downsample.0", "norm_proj": "downsample.1"}


def _part(name: str) -> str:
    if name in _BLOCK:
        return _BLOCK[name]
    if numbered := re.fullmatch(r"(Conv|BatchNorm)_(\d+)", name):
        kind, k = numbered.groups()
        return f"{'conv' if kind == 'Conv' else 'bn'}{int(k) + 1}"
    return re.sub(r"_(\d+)", r".\1", re.sub(r"^layers_", "", name))


def layout(path: tuple[str, ...]) -> str:
    """Our module path -> timm's prefix: `('stage2_0', 'fuse_layers_1_0_0', 'layers_1')` ->
    `stage2.0.fuse_layers.1.0.0.1`; `('layer1_0', 'conv_proj')` -> `layer1.0.downsample.0`."""
    return ".".join(map(_part, path))


def _architecture(network: str) -> Architecture:
    # The function is timm's at our defaults (symmetric padding, PyTorch's BatchNorm epsilon).
    return Architecture(
        network,
        {},
        same_layout(layout),
        head=("classifier",),
        source_head="classifier",
        preprocessing={"image_size": 224, "crop_fraction": 0.875, "interpolation": "bilinear"},
    )


# timm's names, which are ours.
ARCHITECTURES = {
    name: _architecture(name)
    for name in (
        *("hrnet_w18_small", "hrnet_w18_small_v2", "hrnet_w18", "hrnet_w30", "hrnet_w32"),
        *("hrnet_w40", "hrnet_w44", "hrnet_w48", "hrnet_w64", "hrnet_w18_ssld", "hrnet_w48_ssld"),
    )
}

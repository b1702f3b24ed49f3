"""timm's InceptionNeXt state dicts (`inception_next_{atto,tiny,small,base}.sail_in1k`), as our
`nets.inception_next`.

timm's keys: `stem.0` / `stem.1` (convolution, BatchNorm), `stages.{i}.downsample.0` / `.1`
(BatchNorm, convolution; stages 1-3), `stages.{i}.blocks.{j}.token_mixer.dwconv_{hw,w,h}` /
`norm` / `mlp.fc1` / `mlp.fc2` / `gamma`, `head.fc1` / `head.norm` / `head.fc2`. Ours are the
same with `stem_conv`, `stem_norm`, `downsample_norm`, `downsample_conv`, `head_fc1`, `head_norm`
and `head_fc2`; the MLP's 1x1 convolutions `[out, in, 1, 1]` fill our dense kernels. `head.fc1`
and `head.norm` are layers of the network with any class count (timm keeps them at 0 classes),
so only `head.fc2` is the classifier. Every file expects ImageNet's mean and std, bicubic
resizing, a crop of 0.875 (base's 0.95) at 224 px.
"""

from nets_weights.convert import Architecture, module_index, same_layout
from nets_weights.convnext import FRAMEWORK  # PyTorch's names and the layer scale's `gamma`

_TOP = {
    "stem_conv": "stem.0",
    "stem_norm": "stem.1",
    "head_fc1": "head.fc1",
    "head_norm": "head.norm",
    "head_fc2": "head.fc2",
}
_DOWNSAMPLE = {"downsample_norm": "downsample.0", "downsample_conv": "downsample.1"}


def layout(path: tuple[str, ...]) -> str:
    """Our module path -> timm's prefix: `('stages_1', 'downsample_conv')` ->
    `stages.1.downsample.1`; `('stages_2', 'blocks_3', 'mlp', 'fc1')` ->
    `stages.2.blocks.3.mlp.fc1`."""
    top, rest = path[0], path[1:]
    if top in _TOP:
        return _TOP[top]
    stage = f"stages.{module_index(top, 'stages')}"
    if rest[0] in _DOWNSAMPLE:
        return f"{stage}.{_DOWNSAMPLE[rest[0]]}"
    return ".".join((stage, f"blocks.{module_index(rest[0], 'blocks')}", *rest[1:]))


# timm's names, which are ours -> the crop of their `sail_in1k` weights.
_CROPS = {
    "inception_next_atto": 0.875,
    "inception_next_tiny": 0.875,
    "inception_next_small": 0.875,
    "inception_next_base": 0.95,
}
ARCHITECTURES = {
    name: Architecture(
        name,
        {},
        same_layout(layout),
        head=("head_fc2",),
        source_head="head.fc2",
        framework=FRAMEWORK,
        preprocessing={"crop_fraction": crop, "interpolation": "bicubic"},
    )
    for name, crop in _CROPS.items()
}

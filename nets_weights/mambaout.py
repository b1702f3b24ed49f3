"""timm's MambaOut state dicts (`mambaout_{femto,kobe,tiny,small,base}.in1k` and its `_rw`
experiments'), as our `nets.mambaout`.

timm's keys: `stem.conv1` / `stem.norm1` / `stem.conv2` / `stem.norm2`,
`stages.{i}.downsample.conv` / `.norm` (stages 1-3), `stages.{i}.blocks.{j}.norm` / `fc1` /
`conv` / `fc2` / `ls.gamma`, `head.norm`, `head.pre_logits.fc` / `.norm`, `head.fc`. Ours are
the same with `_` for the dots above the stage and `downsample_conv` / `downsample_norm`.
`head.norm` and `head.pre_logits` are layers of the network with any class count (timm keeps
them at 0 classes), so only `head.fc` is the classifier. Files without a config.json: ImageNet's
mean and std, bicubic resizing, a crop of 1.0 at 224 px (the `_rw` bases' `sw_e500_in1k`: 0.95).
"""

from nets_weights.convert import Architecture, module_index, same_layout
from nets_weights.convnext import FRAMEWORK  # PyTorch's names and the layer scale's `gamma`

_DOWNSAMPLE = {"downsample_conv": "downsample.conv", "downsample_norm": "downsample.norm"}


def layout(path: tuple[str, ...]) -> str:
    """Our module path -> timm's prefix: `('stem_conv1',)` -> `stem.conv1`,
    `('head_pre_logits_fc',)` -> `head.pre_logits.fc`; `('stages_1', 'downsample_conv')` ->
    `stages.1.downsample.conv`; `('stages_2', 'blocks_3', 'fc1')` -> `stages.2.blocks.3.fc1`."""
    top, rest = path[0], path[1:]
    if not top.startswith("stages_"):
        return top.replace("_", ".").replace("pre.logits", "pre_logits")
    stage = f"stages.{module_index(top, 'stages')}"
    if rest[0] in _DOWNSAMPLE:
        return f"{stage}.{_DOWNSAMPLE[rest[0]]}"
    return ".".join((stage, f"blocks.{module_index(rest[0], 'blocks')}", *rest[1:]))


# timm's names, which are ours -> the crop of their weights without a config.json.
_CROPS = {
    "mambaout_femto": 1.0,
    "mambaout_kobe": 1.0,
    "mambaout_tiny": 1.0,
    "mambaout_small": 1.0,
    "mambaout_base": 1.0,
    "mambaout_small_rw": 1.0,
    "mambaout_base_short_rw": 0.95,
    "mambaout_base_tall_rw": 0.95,
    "mambaout_base_wide_rw": 0.95,
    "mambaout_base_plus_rw": 1.0,
}
ARCHITECTURES = {
    name: Architecture(
        name,
        {},
        same_layout(layout),
        head=("head_fc",),
        source_head="head.fc",
        framework=FRAMEWORK,
        preprocessing={"crop_fraction": crop, "interpolation": "bicubic"},
    )
    for name, crop in _CROPS.items()
}

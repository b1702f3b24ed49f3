"""timm's MaxViT state dicts (`maxvit_*_tf_*`, ported from Google's TensorFlow weights), as our
`nets.maxvit`.

timm's keys are ours with dots: `stem.conv1` / `norm1` / `conv2`, `stages.{i}.blocks.{j}.conv.`
`shortcut.expand` (strided blocks that widen) / `pre_norm` / `conv1_1x1` / `norm1` /
`conv2_kxk` / `norm2` / `se.fc1` / `se.fc2` / `conv3_1x1`, `...attn_block.` and `...attn_grid.`
`norm1` / `attn.qkv` / `attn.rel_pos.relative_position_bias_table` / `attn.proj` / `norm2` /
`mlp.fc1` / `mlp.fc2`; then `head.norm`, `head.pre_logits.fc` and `head.fc` (ours `head_norm`,
`head_pre_logits`, `head`). The tables `[heads, 2p - 1, 2p - 1]` are the files' as they are, for
the windows of the network's `img_size` (7 at 224, 12 at 384, 16 at 512): a file of another
size is refused, naming the table and both shapes (timm's loader resizes them; not here).

The weights were trained with TensorFlow's 'SAME' padding and BatchNorm epsilon 1e-3, our
defaults for the family, stated so that a contradicting field raises. Their preprocessing, as
timm's configs say (files without a config.json get the name's default weights'): bicubic; at
224 px a crop of 0.95, ImageNet's mean and std for the ImageNet-1k weights, 0.5 for the
ImageNet-21k ones (21,843 classes: `maxvit_xlarge_tf_224`'s only weights); at 384 and 512 px
the whole image squashed (crop 1.0, timm's `crop_mode='squash'`), mean and std 0.5.
"""

import re

from nets_weights.convert import IMAGENET_MEAN, IMAGENET_STD, Architecture, same_layout
from nets_weights.swin import FRAMEWORK  # PyTorch's names, and `relative_position_bias_table`

_HEAD = {"head_norm": "head.norm", "head_pre_logits": "head.pre_logits.fc", "head": "head.fc"}


def layout(path: tuple[str, ...]) -> str:
    """Our module path -> timm's prefix: `('stages_1', 'blocks_0', 'conv', 'se', 'fc1')` ->
    `stages.1.blocks.0.conv.se.fc1`; the head's three layers by name."""
    if path[0] in _HEAD:
        return _HEAD[path[0]]
    return ".".join(re.sub(r"^(stages|blocks)_(\d+)$", r"\1.\2", part) for part in path)


_HALF = ((0.5,) * 3, (0.5,) * 3)
_IMAGENET = (IMAGENET_MEAN, IMAGENET_STD)


def _preprocessing(name: str) -> dict:
    """timm's default weights' of `name`: ImageNet-21k's at 224 px for the extra-large one."""
    size = int(name.rpartition("_")[2])
    if size == 224:
        mean, std = _HALF if name.startswith("maxvit_xlarge") else _IMAGENET
        crop = {"crop_fraction": 0.95, "crop_mode": "center"}
    else:
        (mean, std), crop = _HALF, {"crop_fraction": 1.0, "crop_mode": "squash"}
    return {"image_size": size, **crop, "interpolation": "bicubic", "mean": mean, "std": std}


# timm's names, which are ours.
ARCHITECTURES = {
    name: Architecture(
        name,
        {"padding": "SAME", "bn_epsilon": 1e-3},
        same_layout(layout),
        head=("head",),
        source_head="head.fc",
        framework=FRAMEWORK,
        preprocessing=_preprocessing(name),
    )
    for name in (
        f"maxvit_{size}_tf_{res}"
        for size in ("tiny", "small", "base", "large", "xlarge")
        for res in (224, 384, 512)
    )
}

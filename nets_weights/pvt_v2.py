"""timm's PVT v2 state dicts, as our `nets.pvt_v2`.

timm's keys are ours with dots for `stages_{i}` and `blocks_{j}`: `patch_embed.proj` /
`patch_embed.norm`, `stages.{i}.downsample.proj` / `.norm` (stages 1-3), `stages.{i}.blocks.{j}.`
`norm1` / `attn.q` / `attn.kv` / `attn.sr` / `attn.norm` / `attn.proj` / `norm2` / `mlp.fc1` /
`mlp.dwconv` / `mlp.fc2`, `stages.{i}.norm`, `head`. The depthwise convolution's `[C, 1, 3, 3]`
weight is our `[3, 3, 1, C]` kernel, PyTorch's usual transpose. The original repository's files
(`patch_embed1`, `block1.0`, `norm1`, `dwconv.dwconv`), which timm renames as it loads them, are
not read: timm's published safetensors hold its own names. The weights expect ImageNet's mean and
std, bicubic resizing, crop 0.9 (timm's `pretrained_cfg`).
"""

import re

from nets_weights.convert import TORCH, Architecture, same_layout


def layout(path: tuple[str, ...]) -> str:
    """Our module path -> timm's prefix: `('stages_1', 'blocks_0', 'attn', 'kv')` ->
    `stages.1.blocks.0.attn.kv`."""
    return ".".join(re.sub(r"^(stages|blocks)_(\d+)$", r"\1.\2", part) for part in path)


# timm's names, which are ours.
ARCHITECTURES = {
    name: Architecture(
        name,
        {},
        same_layout(layout),
        head=("head",),
        source_head="head",
        framework=TORCH,
        preprocessing={"crop_fraction": 0.9, "interpolation": "bicubic"},
    )
    for name in (
        "pvt_v2_b0",
        "pvt_v2_b1",
        "pvt_v2_b2",
        "pvt_v2_b2_li",
        "pvt_v2_b3",
        "pvt_v2_b4",
        "pvt_v2_b5",
    )
}

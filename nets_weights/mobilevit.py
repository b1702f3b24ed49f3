"""timm's MobileViT state dicts (`mobilevit_xxs`, `mobilevit_xs`, `mobilevit_s` and
`mobilevitv2_050` ... `mobilevitv2_200`: Apple's ml-cvnets weights), as our `nets.mobilevit`.

timm's keys: `stem.conv` / `stem.bn`; `stages.{i}.{j}` for each block of a stage, an inverted
residual's `conv1_1x1`, `conv2_kxk`, `conv3_1x1` (ours `expand`, `depthwise`, `project`, each
`.conv` and `.bn`), a MobileViT block's `conv_kxk`, `conv_1x1`, `transformer.{k}.norm1` /
`attn.qkv` / `attn.proj` / `norm2` / `mlp.fc1` / `mlp.fc2`, `norm`, `conv_proj`, `conv_fusion`
(ours with underscores: `transformer_0`); v2's blocks have no fusion, and their Transformer blocks
`norm1` / `norm2` (GroupNorms of one group), `attn.qkv_proj` / `attn.out_proj` and `mlp.fc1` /
`mlp.fc2` (1x1 convolutions `[out, in, 1, 1]`, which fill our dense kernels); then `final_conv`
(v1 only) and `head.fc` (ours `head`).
The weights were trained with PyTorch's symmetric padding and LayerNorm epsilon 1e-5, our
defaults for the family, stated so that a contradicting field raises. They expect inputs in
[0, 1] (mean 0, std 1), bicubic resizing to 256 px and a crop of 0.9 (v2's 0.888), as timm's
configs say.
"""

import re

from nets_weights.convert import Architecture, same_layout

_INVERTED = {"expand": "conv1_1x1", "depthwise": "conv2_kxk", "project": "conv3_1x1"}


def layout(path: tuple[str, ...]) -> str:
    """Our module path -> timm's prefix: `('stages_2_1', 'transformer_0', 'attn', 'qkv')` ->
    `stages.2.1.transformer.0.attn.qkv`; `('stages_1_0', 'expand', 'bn')` ->
    `stages.1.0.conv1_1x1.bn`."""
    if path[0] == "head":
        return ".".join(("head.fc", *path[1:]))
    top = re.sub(r"^stages_(\d+)_(\d+)$", r"stages.\1.\2", path[0])
    rest = [
        re.sub(r"^transformer_(\d+)$", r"transformer.\1", _INVERTED.get(p, p)) for p in path[1:]
    ]
    return ".".join((top, *rest))


ARCHITECTURES = {
    name: Architecture(
        name,
        {"padding": "SYMMETRIC", "epsilon": 1e-5},
        same_layout(layout),
        head=("head",),
        source_head="head.fc",
        preprocessing={
            "image_size": 256,
            "crop_fraction": 0.888 if name.startswith("mobilevitv2") else 0.9,
            "interpolation": "bicubic",
            "mean": (0.0, 0.0, 0.0),
            "std": (1.0, 1.0, 1.0),
        },
    )
    for name in (
        "mobilevit_xxs",
        "mobilevit_xs",
        "mobilevit_s",
        *(f"mobilevitv2_{m}" for m in ("050", "075", "100", "125", "150", "175", "200")),
    )
}

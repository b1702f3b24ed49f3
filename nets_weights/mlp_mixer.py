"""timm's MLP-Mixer, gMixer, ResMLP and gMLP state dicts, as our `nets.mlp_mixer`.

timm's keys are ours with dots (`nets_weights.vit.layout`) but for two: the patch embedding,
ours `patch_embed`, is timm's `stem.proj`; and ResMLP's layer scales, parameters of the block
itself in timm (`blocks.{i}.ls1`, `ls2`), are our shared `LayerScale` modules (renamed to
`ls1.gamma`, `ls2.gamma` before the layout). The rest: `blocks.{i}.norm1` / `mlp_tokens.fc1` /
`.fc2` / `norm2` / `mlp_channels.fc1` / `.fc2` (MLP-Mixer, gMixer), `blocks.{i}.norm1.alpha` /
`.beta` / `linear_tokens` / `norm2` / `mlp_channels` (ResMLP: `Affine`'s alpha and beta keep
timm's `[1, 1, dim]`), `blocks.{i}.norm` / `mlp_channels.fc1` / `.gate.norm` / `.gate.proj` /
`.fc2` (gMLP), `norm`, `head`. Google's MLP-Mixer weights and gMLP's expect inputs scaled by mean
= std = 0.5, the MIIL ImageNet-21k ones [0, 1] inputs (mean 0, std 1) resized bilinearly,
gMixer's and ResMLP's ImageNet's mean and std; the others bicubic resizing, all at 224 px, crop
0.875 (their config.json says so; files without one get timm's default weights'
preprocessing).
"""

import dataclasses
import re
from collections.abc import Collection

from nets_weights.convert import IMAGENET_MEAN, IMAGENET_STD, Architecture, same_layout
from nets_weights.vit import TIMM_VIT
from nets_weights.vit import layout as vit_layout

# ViT's leaves (LayerScale's gamma) and ResMLP's Affine's.
FRAMEWORK = dataclasses.replace(
    TIMM_VIT, leaves={**TIMM_VIT.leaves, "alpha": ("alpha",), "beta": ("beta",)}
)
_LAYER_SCALE = re.compile(r"^(blocks\.\d+\.ls[12])$")


def rename(keys: Collection[str]) -> dict[str, str]:
    """timm's `blocks.{i}.ls1` / `ls2` -> `blocks.{i}.ls1.gamma` / `ls2.gamma`; every other key
    as it is."""
    return {key: _LAYER_SCALE.sub(r"\1.gamma", key) for key in keys}


def layout(path: tuple[str, ...]) -> str:
    """Our module path -> timm's prefix: `('patch_embed',)` -> `stem.proj`, the others ViT's."""
    return "stem.proj" if path == ("patch_embed",) else vit_layout(path)


_HALF = {"mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5)}  # Google's MLP-Mixer, gMLP
_IMAGENET = {"mean": IMAGENET_MEAN, "std": IMAGENET_STD}  # gMixer, ResMLP
# timm's names, which are ours -> the normalisation of timm's default weights, for files
# without a config.json (bicubic, 224 px, crop 0.875 for all).
_NORMALISATION = {
    **{f"mixer_{size}_224": _HALF for size in ("s32", "s16", "b32", "b16", "l32", "l16")},
    "gmixer_12_224": _IMAGENET,
    "gmixer_24_224": _IMAGENET,
    **{f"resmlp_{depth}_224": _IMAGENET for depth in ("12", "24", "36", "big_24")},
    **{f"gmlp_{size}16_224": _HALF for size in ("ti", "s", "b")},
}
ARCHITECTURES = {
    name: Architecture(
        name,
        {},
        same_layout(layout),
        head=("head",),
        source_head="head",
        framework=FRAMEWORK,
        rename=rename,
        preprocessing={"crop_fraction": 0.875, "interpolation": "bicubic", **normalisation},
    )
    for name, normalisation in _NORMALISATION.items()
}

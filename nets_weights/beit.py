"""timm's BEiT and BEiT v2 state dicts, as our `nets.beit`.

timm's keys are ours with dots, as its ViT's (`nets_weights.vit.layout`): `patch_embed.proj`,
`cls_token`, `blocks.{i}.norm1` / `attn.qkv` / `attn.q_bias` / `attn.v_bias` /
`attn.relative_position_bias_table` / `attn.proj` / `norm2` / `mlp.fc1` / `mlp.fc2`, `fc_norm`,
`head`; but for the layer scales, parameters of the block itself in timm (`blocks.{i}.gamma_1`,
`gamma_2`), which are our shared `LayerScale` modules `blocks_{i}/ls1` and `ls2` (renamed to
`ls1.gamma`, `ls2.gamma`, ViT's names, before the layout). The key projection's bias is timm's
zero buffer and the tables' index is computed: files that hold them (`k_bias`,
`relative_position_index`, which timm's own loading drops too) have them skipped. The tables keep
timm's shape `[(2h - 1)(2w - 1) + 3, heads]` and are copied as they are; a network used at another
size resizes them as timm's loading does (`nets.beit`). BEiT's weights expect inputs scaled by
mean = std = 0.5, BEiT v2's ImageNet's mean and std, bicubic resizing (their config.json says so;
files without one get timm's default weights' preprocessing).
"""

import dataclasses
import re
from collections.abc import Collection

from nets_weights.convert import IMAGENET_MEAN, IMAGENET_STD
from nets_weights.eva import TIMM_EVA
from nets_weights.swin import FRAMEWORK as SWIN
from nets_weights.vit import timm_architecture

# EVA's leaves (q_bias, v_bias, ViT's gamma and tokens) and Swin's table, its index skipped.
TIMM_BEIT = dataclasses.replace(
    TIMM_EVA,
    leaves={**SWIN.leaves, **TIMM_EVA.leaves},
    dropped=(*SWIN.dropped, "k_bias"),
)
# CaiT's class-attention blocks (`blocks_token_only.{j}`) keep theirs so too.
_GAMMA = re.compile(r"^(blocks(?:_token_only)?\.\d+)\.gamma_([12])$")


def rename(keys: Collection[str]) -> dict[str, str]:
    """timm's `blocks.{i}.gamma_1` / `gamma_2` (and CaiT's `blocks_token_only.{j}.gamma_1` /
    `gamma_2`) -> `blocks.{i}.ls1.gamma` / `ls2.gamma`; every other key as it is."""
    return {key: _GAMMA.sub(r"\1.ls\2.gamma", key) for key in keys}


# timm's names, which are ours -> the preprocessing of files without a config.json: timm's
# default weights' (image size, crop fraction, mean and std).
_HALF = {"mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5)}  # BEiT's
_IMAGENET = {"mean": IMAGENET_MEAN, "std": IMAGENET_STD}  # BEiT v2's
_PREPROCESSING = {
    "beit_base_patch16_224": (224, 0.9, _HALF),
    "beit_base_patch16_384": (384, 1.0, _HALF),
    "beit_large_patch16_224": (224, 0.9, _HALF),
    "beit_large_patch16_384": (384, 1.0, _HALF),
    "beit_large_patch16_512": (512, 1.0, _HALF),
    "beitv2_base_patch16_224": (224, 0.9, _IMAGENET),
    "beitv2_large_patch16_224": (224, 0.95, _IMAGENET),
}
ARCHITECTURES = {
    name: timm_architecture(
        name,
        framework=TIMM_BEIT,
        rename=rename,
        preprocessing={
            "image_size": size,
            "crop_fraction": crop,
            "interpolation": "bicubic",
            **normalisation,
        },
    )
    for name, (size, crop, normalisation) in _PREPROCESSING.items()
}

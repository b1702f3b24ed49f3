"""timm's XCiT state dicts, as our `nets.xcit`.

timm's keys are ours with dots, as its ViT's (`nets_weights.vit.layout`): `pos_embed.
token_projection`, `cls_token`, `blocks.{i}.norm1` / `attn.qkv` / `attn.temperature` /
`attn.proj` / `norm3` / `local_mp.conv1` / `local_mp.bn` / `local_mp.conv2` / `norm2` /
`mlp.fc1` / `mlp.fc2`, `cls_attn_blocks.{j}.norm1` / `attn.q` / `attn.k` / `attn.v` /
`attn.proj` / `norm2` / `mlp.*`, `norm`, `head`; ours are `blocks_{i}`, `cls_attn_blocks_{j}`.
But for three things: the stem is timm's `Sequential` of `Sequential(conv, BatchNorm)` with the
activations between (`patch_embed.proj.{0,2,4,6}.{0,1}`), ours `patch_embed/conv{n}/{conv,bn}`;
the layer scales are parameters of the blocks in timm (`gamma1`, `gamma3`, `gamma2`), our
`LayerScale` modules `ls1`, `ls3`, `ls2` (renamed, as BEiT's); timm's temperatures
`[heads, 1, 1]` are our `[heads]`. The weights expect ImageNet's mean and std, bicubic
resizing, no crop (their config.json says so; files without one get timm's default weights'
preprocessing). timm's default weights are the undistilled `fb_in1k` at 224 px, the distilled
`fb_dist_in1k` (from a RegNetY-16GF, as DeiT's) at 384: the same keys.
"""

import dataclasses
import re
from collections.abc import Collection

from nets_weights.convert import IMAGENET_MEAN, IMAGENET_STD, torch_layout_viewing
from nets_weights.vit import TIMM_VIT, layout, timm_architecture

TIMM_XCIT = dataclasses.replace(
    TIMM_VIT,
    leaves={**TIMM_VIT.leaves, "temperature": ("temperature",)},
    layout=torch_layout_viewing("temperature"),
)
_GAMMA = re.compile(r"^((?:cls_attn_)?blocks\.\d+)\.gamma([123])$")
_STEM = "patch_embed"


def rename(keys: Collection[str]) -> dict[str, str]:
    """timm's `blocks.{i}.gamma1` / `gamma2` / `gamma3` (and `cls_attn_blocks.{j}.gamma1`,
    `gamma2`) -> `blocks.{i}.ls1.gamma` / ...; every other key as it is."""
    return {key: _GAMMA.sub(r"\1.ls\2.gamma", key) for key in keys}


def keys(path: tuple[str, ...]) -> str:
    """Our module path -> timm's prefix: `('patch_embed', 'conv2', 'bn')` ->
    `patch_embed.proj.2.1`; the rest as ViT's (`layout`: `cls_attn_blocks_1` ->
    `cls_attn_blocks.1`)."""
    if path and path[0] == _STEM:
        conv, layer = path[1:]
        index = 2 * (int(conv.removeprefix("conv")) - 1)
        return f"{_STEM}.proj.{index}.{0 if layer == 'conv' else 1}"
    return layout(path)


def _preprocessing(name: str) -> dict:
    return {
        "image_size": int(name.rpartition("_")[2]),
        "crop_fraction": 1.0,
        "interpolation": "bicubic",
        "mean": IMAGENET_MEAN,
        "std": IMAGENET_STD,
    }


# timm's names, which are ours.
_NAMES = [
    f"xcit_{size}_p{patch}_{pixels}"
    for patch in (16, 8)
    for size in ("nano_12", "tiny_12", "small_12", "tiny_24", "small_24", "medium_24", "large_24")
    for pixels in (224, 384)
]
ARCHITECTURES = {
    name: timm_architecture(
        name,
        # The nano networks normalise only the class token in their class-attention blocks, the
        # others all tokens: weights of one compute another function under the other.
        {"tokens_norm": not name.startswith("xcit_nano")},
        framework=TIMM_XCIT,
        keys=keys,
        rename=rename,
        preprocessing=_preprocessing(name),
    )
    for name in _NAMES
}

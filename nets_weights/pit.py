"""timm's PiT state dicts (`pit_ti_224.in1k`, ...), as our `nets.pit`.

timm's keys are ours with dots: `patch_embed.conv`, `pos_embed`, `cls_token`,
`transformers.{i}.pool.conv` / `pool.fc`, `transformers.{i}.blocks.{j}.norm1` / `attn.qkv` /
`attn.proj` / `norm2` / `mlp.fc1` / `mlp.fc2` (ViT's blocks), `norm`, `head`, `head_dist`;
ours are `transformers_{i}`, `blocks_{j}`. The position embeddings are timm's `[1, C, h, w]` map
transposed to ours `[1, h, w, C]`; the class tokens `[1, tokens, C]` are copied as they are, the
pooling's depthwise kernel `[2c, 1, 3, 3]` as any PyTorch convolution's (its outputs are
channel-major in both). The distilled files' `head_dist` is another classifier over the same
classes. The weights expect ImageNet's mean and std, bicubic resizing, a crop of 0.9 at 224 px,
as timm's configs say.
"""

import dataclasses
import re

from nets_weights.convert import IMAGENET_MEAN, IMAGENET_STD, Architecture, same_layout
from nets_weights.vit import TIMM_VIT


def layout(path: tuple[str, ...]) -> str:
    """Our module path -> timm's prefix: `('transformers_1', 'blocks_0', 'attn', 'qkv')` ->
    `transformers.1.blocks.0.attn.qkv`; `()` (the network's own parameters) -> `''`."""
    if path == ("patch_embed",):
        return "patch_embed.conv"
    return ".".join(re.sub(r"^(transformers|blocks)_(\d+)$", r"\1.\2", part) for part in path)


def _layout(leaf: str, got: tuple[int, ...], shape: tuple[int, ...]):
    """PyTorch's layouts, and the position embeddings' NCHW map as our NHWC one."""
    if leaf == "pos_embed":
        return None, (0, 2, 3, 1)
    return TIMM_VIT.layout(leaf, got, shape)


TIMM_PIT = dataclasses.replace(TIMM_VIT, layout=_layout)


def _architecture(network: str) -> Architecture:
    return Architecture(
        network,
        {},
        same_layout(layout),
        head=("head",),
        source_head="head",
        other_heads=((("head_dist",), "head_dist"),) if "distilled" in network else (),
        framework=TIMM_PIT,
        preprocessing={
            "image_size": 224,
            "crop_fraction": 0.9,
            "interpolation": "bicubic",
            "mean": IMAGENET_MEAN,
            "std": IMAGENET_STD,
        },
    )


# timm's names, which are ours.
ARCHITECTURES = {
    f"pit_{size}{kind}_224": _architecture(f"pit_{size}{kind}_224")
    for size in ("ti", "xs", "s", "b")
    for kind in ("", "_distilled")
}

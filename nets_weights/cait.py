"""timm's CaiT state dicts, as our `nets.cait`.

timm's keys are ours with dots, as its ViT's (`nets_weights.vit.layout`): `patch_embed.proj`,
`pos_embed`, `cls_token`, `blocks.{i}.norm1` / `attn.qkv` / `attn.proj_l` / `attn.proj_w` /
`attn.proj` / `norm2` / `mlp.fc1` / `mlp.fc2`, `blocks_token_only.{j}.norm1` / `attn.q` /
`attn.k` / `attn.v` / `attn.proj` / `norm2` / `mlp.*`, `norm`, `head`; ours are `blocks_{i}`,
`blocks_token_only_{j}`. The layer scales are parameters of the blocks themselves in timm
(`gamma_1`, `gamma_2`), our shared `LayerScale` modules `ls1` and `ls2` (renamed as BEiT's,
`nets_weights.beit.rename`). The weights (distilled from a RegNetY-16GF, as DeiT's) expect
ImageNet's mean and std, bicubic resizing, no crop (their config.json says so; files without one
get timm's default weights' preprocessing).
"""

from nets_weights.beit import rename
from nets_weights.convert import IMAGENET_MEAN, IMAGENET_STD
from nets_weights.vit import layout, timm_architecture

_CLASS_BLOCKS = "blocks_token_only_"


def keys(path: tuple[str, ...]) -> str:
    """Our module path -> timm's prefix: `('blocks_token_only_1', 'attn', 'q')` ->
    `blocks_token_only.1.attn.q`; the rest as ViT's (`layout`)."""
    if path and path[0].startswith(_CLASS_BLOCKS):
        index = path[0].removeprefix(_CLASS_BLOCKS)
        return ".".join((f"blocks_token_only.{index}", *path[1:]))
    return layout(path)


# timm's names, which are ours -> the image size of files without a config.json.
_IMAGE_SIZES = {
    "cait_xxs24_224": 224,
    "cait_xxs24_384": 384,
    "cait_xxs36_224": 224,
    "cait_xxs36_384": 384,
    "cait_xs24_384": 384,
    "cait_s24_224": 224,
    "cait_s24_384": 384,
    "cait_s36_384": 384,
    "cait_m36_384": 384,
    "cait_m48_448": 448,
}
ARCHITECTURES = {
    name: timm_architecture(
        name,
        keys=keys,
        rename=rename,
        preprocessing={
            "image_size": size,
            "crop_fraction": 1.0,
            "interpolation": "bicubic",
            "mean": IMAGENET_MEAN,
            "std": IMAGENET_STD,
        },
    )
    for name, size in _IMAGE_SIZES.items()
}

"""timm's Swin Transformer V2 state dicts, as our `nets.swinv2`.

timm's keys (`swinv2_tiny_window8_256.ms_in1k`, ...) are Swin's (`nets_weights.swin`): ours with
dots for `layers_{i}`, `blocks_{j}` and `cpb_mlp_{k}`, the classifier `head.fc`. V2's own leaves:
`attn.q_bias`, `attn.v_bias` and `attn.logit_scale` (`[heads, 1, 1]`, copied as it is), and
`attn.cpb_mlp.0` / `.2` (dense layers). `relative_coords_table`, `relative_position_index`,
`attn_mask` and `k_bias` are buffers the network computes from the window: files that hold them
have them skipped.
"""

import dataclasses
import re

from nets_weights.convert import IMAGENET_MEAN, IMAGENET_STD, Architecture, same_layout
from nets_weights.swin import FRAMEWORK as SWIN

FRAMEWORK = dataclasses.replace(
    SWIN,
    leaves={**SWIN.leaves, **{leaf: (leaf,) for leaf in ("q_bias", "v_bias", "logit_scale")}},
    dropped=(*SWIN.dropped, "relative_coords_table", "k_bias"),
)


def layout(path: tuple[str, ...]) -> str:
    """Our module path -> timm's prefix: `('layers_1', 'blocks_0', 'attn', 'cpb_mlp_2')` ->
    `layers.1.blocks.0.attn.cpb_mlp.2`; `('head',)` -> `head.fc`."""
    if path == ("head",):
        return "head.fc"
    return ".".join(re.sub(r"^(layers|blocks|cpb_mlp)_(\d+)$", r"\1.\2", part) for part in path)


def _architecture(network: str, size: int, crop: float) -> Architecture:
    return Architecture(
        network,
        {},
        same_layout(layout),
        head=("head",),
        source_head="head.fc",
        framework=FRAMEWORK,
        preprocessing={
            "image_size": size,
            "crop_fraction": crop,
            "interpolation": "bicubic",
            "mean": IMAGENET_MEAN,
            "std": IMAGENET_STD,
        },
    )


# timm's names, which are ours -> the preprocessing of files without a config.json: timm's
# default weights' (image size and crop fraction; bicubic, ImageNet's mean and std).
_PREPROCESSING = {
    **{
        f"swinv2_{size}_window{window}_256": (256, 0.9)
        for size in ("tiny", "small", "base")
        for window in (8, 16)
    },
    "swinv2_base_window12_192": (192, 0.9),
    "swinv2_large_window12_192": (192, 0.9),
    "swinv2_base_window12to16_192to256": (256, 0.9),
    "swinv2_large_window12to16_192to256": (256, 0.9),
    "swinv2_base_window12to24_192to384": (384, 1.0),
    "swinv2_large_window12to24_192to384": (384, 1.0),
}
ARCHITECTURES = {
    name: _architecture(name, size, crop) for name, (size, crop) in _PREPROCESSING.items()
}

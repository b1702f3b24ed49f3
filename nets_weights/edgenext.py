"""timm's EdgeNeXt state dicts, as our `nets.edgenext`.

ConvNeXt's keys (`nets_weights.convnext.timm_layout`): `stem.0` / `stem.1`,
`stages.{i}.downsample.0` / `.1`, `stages.{i}.blocks.{j}.conv_dw` / `norm` / `mlp.fc1` /
`mlp.fc2` and `gamma`, `head.norm`, `head.fc`. An SDTA block's own modules are ours with dots:
`convs.{k}`, `pos_embd.token_projection`, `norm_xca`, `xca.qkv` / `xca.proj`, `mlp.fc1`, and
its parameters `gamma_xca`, `gamma` and `xca.temperature` (timm's `[heads, 1, 1]`, our
`[heads]`). The weights expect ImageNet's mean and std, bicubic resizing to 256 px, a crop of 0.9
(`in1k`, `sw_in1k`) or 0.95 (the USI-distilled `edgenext_small` and `edgenext_base`), as timm's
default weights' configs say.
"""

import dataclasses

from nets_weights import convnext
from nets_weights.convert import Architecture, same_layout, torch_layout_viewing

FRAMEWORK = dataclasses.replace(
    convnext.FRAMEWORK,
    leaves={
        **convnext.FRAMEWORK.leaves,
        "gamma_xca": ("gamma_xca",),
        "temperature": ("temperature",),
    },
    layout=torch_layout_viewing("gamma", "temperature"),
)
_SDTA = ("convs_", "pos_embd", "norm_xca", "xca", "mlp")


def timm_layout(path: tuple[str, ...]) -> str:
    """Our module path -> timm's prefix: ConvNeXt's, and an SDTA block's modules with dots
    (`('stages_1', 'blocks_2', 'convs_0')` -> `stages.1.blocks.2.convs.0`)."""
    if len(path) > 2 and path[2].startswith(_SDTA):
        inner = (part.replace("convs_", "convs.", 1) for part in path[2:])
        return ".".join([convnext.timm_layout(path[:2]), *inner])
    return convnext.timm_layout(path)


def _architecture(network: str, crop_fraction: float) -> Architecture:
    return Architecture(
        network,
        {},
        same_layout(timm_layout),
        head=("head",),
        source_head="head.fc",
        framework=FRAMEWORK,
        preprocessing={
            "image_size": 256,
            "crop_fraction": crop_fraction,
            "interpolation": "bicubic",
        },
    )


ARCHITECTURES = {
    "edgenext_xx_small": _architecture("edgenext_xx_small", 0.9),
    "edgenext_x_small": _architecture("edgenext_x_small", 0.9),
    "edgenext_small": _architecture("edgenext_small", 0.95),
    "edgenext_base": _architecture("edgenext_base", 0.95),
    "edgenext_small_rw": _architecture("edgenext_small_rw", 0.9),
}

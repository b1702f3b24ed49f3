"""timm's MobileNetV4 state dicts (`mobilenetv4_conv_*`), as our `nets.mobilenet_v4`.

timm's keys: `conv_stem`, `bn1`, then `blocks.{stage}.{block}`: a Universal Inverted Bottleneck's
`dw_start`, `pw_exp`, `dw_mid`, `pw_proj` (each `.conv` and `.bn`: our names, dotted), a Fused
IB's `conv_exp`, `bn1`, `conv_pwl`, `bn2` (timm's `EdgeResidual`; ours `expand`, `project`), a
plain convolution's `conv`, `bn1` (its `ConvBnAct`), a hybrid's Mobile MQA block's `norm`,
`attn.query.proj`, `attn.key.down_conv` / `norm` / `proj`, `attn.value.*`, `attn.output.proj`
(ours flat: `query_proj`, `key_down_conv`, ...), and the hybrids' `layer_scale.gamma`; then
`conv_head`, `norm_head` (the 1x1 convolution after the pool and its BatchNorm) and `classifier`.
The weights were trained with PyTorch's symmetric padding and BatchNorm epsilon 1e-5, our
defaults for the family, stated so that a contradicting field raises.
"""

import dataclasses

from nets_weights.convert import IMAGENET_MEAN, IMAGENET_STD, TORCH, Architecture, same_layout

# PyTorch's names, and the hybrids' layer scale (timm's `LayerScale2d.gamma`).
TIMM_MOBILENET_V4 = dataclasses.replace(TORCH, leaves={**TORCH.leaves, "gamma": ("gamma",)})

_TOP = {
    "stem/conv": "conv_stem",
    "stem/bn": "bn1",
    "head/conv": "conv_head",
    "head/bn": "norm_head",
    "classifier": "classifier",
}
# The layers whose names differ from timm's: the Fused IB's and the plain convolution's BatchNorm.
_RENAMED = {
    "expand/conv": "conv_exp",
    "expand/bn": "bn1",
    "project/conv": "conv_pwl",
    "project/bn": "bn2",
    "bn": "bn1",
}
# The Mobile MQA block's attention layers, ours flat (`key_down_conv`), timm's nested.
_ATTENTION = {
    f"{part}_{layer}"
    for part in ("query", "key", "value", "output")
    for layer in ("proj", "down_conv", "norm")
}


def layout(path: tuple[str, ...]) -> str:
    """Our module path -> timm's prefix (the same for every variant)."""
    if not path[0].startswith("blocks_"):
        return _TOP["/".join(path)]
    _, stage, block = path[0].split("_")
    inner = "/".join(path[1:])
    if inner in _ATTENTION:
        return f"blocks.{stage}.{block}.attn.{inner.replace('_', '.', 1)}"
    return f"blocks.{stage}.{block}.{_RENAMED.get(inner, inner.replace('/', '.'))}"


# timm's names, which are ours -> its default weights' preprocessing (for files without a
# config.json): image size, crop fraction, mean and std (all bicubic).
_IMAGENET = (IMAGENET_MEAN, IMAGENET_STD)
_PREPROCESSING = {
    "mobilenetv4_conv_small": (224, 0.875, _IMAGENET),
    "mobilenetv4_conv_small_050": (224, 0.875, ((0.5,) * 3, (0.5,) * 3)),
    "mobilenetv4_conv_medium": (256, 0.95, _IMAGENET),
    "mobilenetv4_conv_large": (384, 0.95, _IMAGENET),
    "mobilenetv4_hybrid_medium": (256, 0.95, _IMAGENET),
    "mobilenetv4_hybrid_large": (384, 0.95, _IMAGENET),
}
ARCHITECTURES = {
    name: Architecture(
        name,
        {"padding": "SYMMETRIC", "bn_epsilon": 1e-5},
        same_layout(layout),
        head=("classifier",),
        source_head="classifier",
        framework=TIMM_MOBILENET_V4,
        preprocessing={
            "image_size": size,
            "crop_fraction": crop,
            "interpolation": "bicubic",
            "mean": mean,
            "std": std,
        },
    )
    for name, (size, crop, (mean, std)) in _PREPROCESSING.items()
}

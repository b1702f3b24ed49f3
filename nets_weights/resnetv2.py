"""timm's ResNetV2 state dicts (pre-activation ResNets, BiT), as our `nets.resnetv2`.

timm's keys: `stem.conv` (or the deep stem's `stem.conv1` / `norm1` / `conv2` / `norm2` /
`conv3`), `stages.{s}.blocks.{j}.norm1` (the pre-activation) / `conv1` / `norm2` / `conv2` /
`norm3` / `conv3` / `downsample.conv` (after `downsample.pool`, which holds nothing), the final
`norm`, and `head.fc`, a 1x1 convolution that `nets_weights.convert` views as our dense layer.
Ours: `conv_init` (`stem_conv_{i}` / `stem_bn_{i}` before it), `{Block}_{n}/preact` /
`Conv_{k}` / `{Norm}_{k}` / `shortcut` with `n` counted over the whole network and the norm
named by its class (`BatchNorm_0`, `GroupNorm_0`, `EvoNormS0_0`), `postnorm`, `Dense_0`.
EvoNorm-S0's `v` is ours by the same name; its `weight` is our `scale`, as GroupNorm's.

The weights need PyTorch's symmetric padding and no biases where Slim's `resnet_v2_*` have them
(the stem, each block's last and projection convolutions); BiT's are the same conventions with
its own layers. All expect inputs scaled by mean = std = 0.5.
"""

import dataclasses
import re

from nets.resnet import ResNet
from nets_weights.convert import TORCH, Architecture, Layout

# EvoNorm-S0's parameter of the activation, beside PyTorch's weight and bias.
TIMM_EVONORM = dataclasses.replace(TORCH, leaves={**TORCH.leaves, "v": ("v",)})

_OUTSIDE = {"postnorm": "norm", "Dense_0": "head.fc"}
_IN_BLOCK = {"preact": "norm1", "shortcut": "downsample.conv"}


def layout(module: ResNet) -> Layout:
    """Our module paths -> timm's prefixes, for the built network `module`."""
    blocks = [(stage, j) for stage, size in enumerate(module.stage_sizes) for j in range(size)]
    outside = {**_OUTSIDE, "conv_init": "stem.conv"}
    if deep := len(module.stem_widths):
        outside["conv_init"] = f"stem.conv{deep + 1}"
        outside |= {f"stem_conv_{i}": f"stem.conv{i + 1}" for i in range(deep)}
        outside |= {f"stem_bn_{i}": f"stem.norm{i + 1}" for i in range(deep)}

    def source(path: tuple[str, ...]) -> str:
        if len(path) == 1:
            return outside[path[0]]
        block, layer = path
        stage, j = blocks[int(block.rsplit("_", 1)[1])]
        prefix = f"stages.{stage}.blocks.{j}"
        if layer in _IN_BLOCK:
            return f"{prefix}.{_IN_BLOCK[layer]}"
        kind, index = re.fullmatch(r"(\w+)_(\d+)", layer).groups()
        # Conv_k is timm's conv{k+1}; the k-th norm inside the block is norm{k+2}.
        return (
            f"{prefix}.conv{int(index) + 1}" if kind == "Conv" else f"{prefix}.norm{int(index) + 2}"
        )

    return source


def _architecture(network: str, size: int, crop: float, interpolation: str) -> Architecture:
    return Architecture(
        network,
        {"padding": "SYMMETRIC", "bias_without_norm": False},
        layout,
        head=("Dense_0",),
        source_head="head.fc",
        framework=TIMM_EVONORM,
        preprocessing={
            "image_size": size,
            "crop_fraction": crop,
            "interpolation": interpolation,
            "mean": (0.5, 0.5, 0.5),
            "std": (0.5, 0.5, 0.5),
        },
    )


# timm's names, which are ours -> the preprocessing of timm's default weights of each, for files
# without a config.json (BiT's ImageNet-21k fine-tunes at 448 or 480 px, uncropped).
_PREPROCESSING = {
    "resnetv2_18": (224, 0.9, "bicubic"),
    "resnetv2_18d": (224, 0.9, "bicubic"),
    "resnetv2_34": (224, 0.9, "bicubic"),
    "resnetv2_34d": (224, 0.9, "bicubic"),
    "resnetv2_50": (224, 0.95, "bicubic"),
    "resnetv2_101": (224, 0.95, "bicubic"),
    "resnetv2_50d_gn": (224, 0.95, "bicubic"),
    "resnetv2_50d_evos": (224, 0.95, "bicubic"),
    "resnetv2_50x1_bit": (224, 0.875, "bicubic"),  # the distilled goog_distilled_in1k
    "resnetv2_50x3_bit": (448, 1.0, "bilinear"),
    "resnetv2_101x1_bit": (448, 1.0, "bilinear"),
    "resnetv2_101x3_bit": (448, 1.0, "bilinear"),
    "resnetv2_152x2_bit": (224, 0.875, "bicubic"),  # the teacher, goog_teacher_in21k_ft_in1k
    "resnetv2_152x4_bit": (480, 1.0, "bilinear"),
}
ARCHITECTURES = {name: _architecture(name, *inputs) for name, inputs in _PREPROCESSING.items()}

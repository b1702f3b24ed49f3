"""timm's pre-activation `resnetv2_50` / `resnetv2_101` (BatchNorm, 7x7 stem) as our
`resnet_v2_50` / `resnet_v2_101`.

timm's keys: `stem.conv`, `stages.{s}.blocks.{j}.norm1` (the pre-activation) / `conv1` / `norm2`
/ `conv2` / `norm3` / `conv3` / `downsample.conv`, the final `norm`, and `head.fc`, a 1x1
convolution that `nets_weights.convert` views as our dense layer. Ours: `conv_init`,
`PreActBottleneckBlock_{n}/preact` / `Conv_{k}` / `BatchNorm_{k}` / `shortcut` with `n` counted
over the whole network, `postnorm`, `Dense_0`.

The functions are the same (stride on the first block's 3x3 convolution, projection from the
pre-activated input, final BatchNorm + ReLU) under two conventions: PyTorch's symmetric padding,
and no biases where ours (Slim's) have them. The BiT models (`resnetv2_50x1_bit`, ...) are
another function: weight-standardised convolutions and GroupNorm.
"""

from collections.abc import Sequence

from nets_weights.convert import Architecture, Layout

_OUTSIDE = {"conv_init": "stem.conv", "postnorm": "norm", "Dense_0": "head.fc"}
_IN_BLOCK = {
    "preact": "norm1",
    "Conv_0": "conv1",
    "BatchNorm_0": "norm2",
    "Conv_1": "conv2",
    "BatchNorm_1": "norm3",
    "Conv_2": "conv3",
    "shortcut": "downsample.conv",
}


def layout(stage_sizes: Sequence[int]) -> Layout:
    """Our module paths -> timm's prefixes, for a network of these stage sizes."""
    blocks = [(stage, j) for stage, size in enumerate(stage_sizes) for j in range(size)]

    def source(path: tuple[str, ...]) -> str:
        if len(path) == 1:
            return _OUTSIDE[path[0]]
        block, layer = path
        stage, j = blocks[int(block.rsplit("_", 1)[1])]
        return f"stages.{stage}.blocks.{j}.{_IN_BLOCK[layer]}"

    return source


def _architecture(network: str) -> Architecture:
    return Architecture(
        network,
        {"padding": "SYMMETRIC", "bias_without_norm": False},
        lambda module: layout(module.stage_sizes),
        head=("Dense_0",),
        source_head="head.fc",
    )


# timm's names; ours (Slim's resnet_v2_*) differ, as Slim's checkpoints would.
ARCHITECTURES = {
    "resnetv2_50": _architecture("resnet_v2_50"),
    "resnetv2_101": _architecture("resnet_v2_101"),
}

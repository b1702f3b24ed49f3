"""torchvision's and timm's ResNet / Wide ResNet / ResNeXt state dicts, timm's ResNet-D and
squeeze-and-excite / ECA ResNets', and the community's PyTorch CIFAR ResNets' (Idelbayev's
`pytorch_resnet_cifar10`), as our `nets.resnet`.

Their keys are the same: `conv1`, `bn1`, `layer{stage}.{block}.conv{k}` / `bn{k}` /
`downsample.{0,1}`, `fc` (`linear` in the CIFAR ones). Ours are the Flax ImageNet example's:
`conv_init`, `bn_init`, `{Block}_{n}/Conv_{k-1}` / `BatchNorm_{k-1}` / `conv_proj` / `norm_proj`
with `n` counted over the whole network, `Dense_0`. timm's deep stem is one `conv1` sequence
(`conv1.0`, `.1` its BatchNorm, `.3`, `.4`, then `.6`: our `stem_conv_{i}`, `stem_bn_{i}`,
`conv_init`), its averaging shortcut `downsample.{1,2}` (`.0` is the pooling), and a block's
gate `se.fc1` / `se.fc2` (squeeze-and-excite) or `se.conv` (ECA), ours by the same names, as
are ResNeSt's and Res2Net's blocks' layers (`nets_weights.resnest`).
"""

import re

from nets.resnet import ResNet
from nets_weights.convert import Architecture, Layout

_STEM = {"conv_init": "conv1", "bn_init": "bn1", "Dense_0": "fc"}
_IN_BLOCK = {"conv_proj": "downsample.0", "norm_proj": "downsample.1"}
_AVG_DOWN = {"conv_proj": "downsample.1", "norm_proj": "downsample.2"}  # `.0`: the pooling


def layout(module: ResNet, classifier: str = "fc") -> Layout:
    """Our module paths -> torch prefixes, for the built network `module`."""
    blocks = [(stage, j) for stage, size in enumerate(module.stage_sizes, 1) for j in range(size)]
    stem = {**_STEM, "Dense_0": classifier}
    if deep := len(module.stem_widths):  # timm's `conv1`: (conv, bn, act) * deep, then a conv
        stem["conv_init"] = f"conv1.{3 * deep}"
        stem |= {f"stem_conv_{i}": f"conv1.{3 * i}" for i in range(deep)}
        stem |= {f"stem_bn_{i}": f"conv1.{3 * i + 1}" for i in range(deep)}
    in_block = _AVG_DOWN if module.avg_down else _IN_BLOCK

    def source(path: tuple[str, ...]) -> str:
        if len(path) == 1 and path[0] in stem:
            return stem[path[0]]
        block, layer, *inner = path
        stage, j = blocks[int(block.rsplit("_", 1)[1])]
        if layer in in_block:
            return f"layer{stage}.{j}.{in_block[layer]}"
        if numbered := re.fullmatch(r"(Conv|BatchNorm)_(\d+)", layer):
            kind, index = numbered.groups()
            return f"layer{stage}.{j}.{'conv' if kind == 'Conv' else 'bn'}{int(index) + 1}"
        # Layers named as timm's: the gates (`se/fc1`), ResNeSt's split attention
        # (`conv2/fc1`), Res2Net's lists (`convs_0`: `convs.0`).
        return ".".join((f"layer{stage}.{j}", re.sub(r"_(\d+)$", r".\1", layer), *inner))

    return source


def timm_architecture(network: str, **preprocessing) -> Architecture:
    """torchvision's and timm's ResNets pad 3x3 convolutions and the stem pool on both sides;
    `preprocessing`: the weights' where they are not torchvision's ResNets'."""
    return Architecture(
        network,
        {"padding": "SYMMETRIC"},
        layout,
        head=("Dense_0",),
        source_head="fc",
        preprocessing=preprocessing,
    )


# timm's and torchvision's names, which are ours too. Slim's resnet_v1_* are not here: Slim
# strides the last block of a stage, these networks its first.
ARCHITECTURES = {
    name: timm_architecture(name)
    for name in (
        "resnet18",
        "resnet34",
        "resnet50",
        "resnet101",
        "resnet152",
        "wide_resnet50_2",
        "wide_resnet101_2",
        "resnext50_32x4d",
        "resnext101_32x8d",
        # timm's alone.
        "resnet18d",
        "resnet34d",
        "resnet26d",
        "resnet26t",
        "resnet50d",
        "resnet101d",
        "resnet152d",
        "resnet200d",
        "seresnet50",
        "seresnet152d",
        "seresnext26d_32x4d",
        "seresnext50_32x4d",
        "seresnext101_32x4d",
        "seresnext101_32x8d",
        "seresnext101d_32x8d",
        "ecaresnet26t",
        "ecaresnet50d",
        "ecaresnet101d",
    )
}

CIFAR10_CLASSES = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)


def _cifar_architecture(network: str) -> Architecture:
    # github.com/akamaster/pytorch_resnet_cifar10: 3x3 convolutions padded on both sides,
    # option-A shortcuts padded `planes // 4` on both sides, ImageNet's mean and std on 32 px.
    return Architecture(
        network,
        {"padding": "SYMMETRIC", "shortcut_padding": "both"},
        lambda module: layout(module, classifier="linear"),
        head=("Dense_0",),
        source_head="linear",
        preprocessing={"image_size": 32, "crop_fraction": 1.0, "class_names": CIFAR10_CLASSES},
    )


ARCHITECTURES |= {
    name: _cifar_architecture(name)
    for name in ("resnet20", "resnet32", "resnet44", "resnet56", "resnet110")
}

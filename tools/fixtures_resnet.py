"""Parity fixtures of the ResNet family (see tools/parity.py for how to run it)."""

import sys

import torch
from parity import (  # noqa: F401  (timm first: it applies the shims)
    timm,
    write_case,
    write_index,
    write_output_strides,
)
from timm.models.resnet import BasicBlock, Bottleneck, ResNet, make_blocks  # noqa: E402


def small_resnet(block, layers, channels, **block_args) -> ResNet:
    """timm's ResNet with a stem of `channels[0]` filters (timm's is always 64 wide, as is ours
    at full size; ours is `num_filters` wide, so small tests shrink it too)."""
    model = ResNet(block, layers, num_classes=10, channels=channels, **block_args)
    model.conv1 = torch.nn.Conv2d(3, channels[0], 7, stride=2, padding=3, bias=False)
    model.bn1 = torch.nn.BatchNorm2d(channels[0])
    stages, _ = make_blocks(
        (block,) * len(channels),
        channels,
        layers,
        channels[0],
        act_layer=torch.nn.ReLU,
        norm_layer=torch.nn.BatchNorm2d,
        aa_layer=None,
        **block_args,
    )
    for name, stage in stages:
        setattr(model, name, stage)
    return model


def deep_resnet(block, layers, **args) -> ResNet:
    """timm's ResNet-D (deep stem of width 4, 8 filters out; averaging shortcuts) at 8-64 wide."""
    return ResNet(
        block, layers, num_classes=10, channels=(8, 16, 32, 64), stem_width=4, avg_down=True, **args
    )


# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments.
CASES = {
    "resnet_basic": (
        "resnet18",
        lambda: small_resnet(BasicBlock, (2, 1, 1, 1), (8, 16, 32, 64)),
        48,
    ),
    "resnet_bottleneck": (
        "resnet50",
        lambda: small_resnet(Bottleneck, (2, 1, 1, 1), (8, 16, 32, 64)),
        40,
    ),
    "resnext": (
        "resnext50_32x4d",
        lambda: small_resnet(
            Bottleneck, (1, 1, 1, 1), (8, 16, 32, 64), cardinality=4, base_width=16
        ),
        44,
    ),
    # timm's deep stems are `stem_width * 2` wide, the first stage's width: no surgery. Their
    # sizes leave odd maps before strided blocks (3 -> 2, 11 -> 6), where the averaging
    # shortcut's ceil mode counts.
    "resnet_d": (
        "resnet18d",
        lambda: deep_resnet(BasicBlock, (2, 1, 1, 1), stem_type="deep"),
        48,
    ),
    "seresnext_d": (
        "seresnext26d_32x4d",
        lambda: deep_resnet(
            Bottleneck,
            (1, 1, 1, 1),
            stem_type="deep",
            cardinality=4,
            base_width=16,
            block_args={"attn_layer": "se"},
        ),
        44,
    ),
    "ecaresnet_t": (
        "ecaresnet26t",
        lambda: deep_resnet(
            Bottleneck, (2, 1, 1, 1), stem_type="deep_tiered", block_args={"attn_layer": "eca"}
        ),
        40,
    ),
}

# Full-size networks whose state-dict index (keys and shapes) the tests convert.
# The full-size architectures of nets_weights/resnet.py's table (which torch's environment cannot
# import: it needs JAX).
FULL_SIZE = "resnet18 resnet34 resnet50 resnet101 resnet152 wide_resnet50_2".split()  # noqa: SIM905
FULL_SIZE += ["wide_resnet101_2", "resnext50_32x4d", "resnext101_32x8d"]
FULL_SIZE += [
    *("resnet18d", "resnet34d", "resnet26d", "resnet26t", "resnet50d", "resnet101d"),
    *("resnet152d", "resnet200d", "seresnet50", "seresnet152d", "seresnext26d_32x4d"),
    *("seresnext50_32x4d", "seresnext101_32x4d", "seresnext101_32x8d", "seresnext101d_32x8d"),
    *("ecaresnet26t", "ecaresnet50d", "ecaresnet101d"),
]


# Cases whose network is also written dilated (`output_stride` 8 and 16): basic blocks and
# bottlenecks, with averaging shortcuts (timm's `AvgPool2dSame` where a stage stops striding).
DILATED = {
    "resnet_d": lambda s: deep_resnet(BasicBlock, (2, 1, 1, 1), stem_type="deep", output_stride=s),
    "ecaresnet_t": lambda s: deep_resnet(
        Bottleneck,
        (2, 1, 1, 1),
        stem_type="deep_tiered",
        block_args={"attn_layer": "eca"},
        output_stride=s,
    ),
}


if __name__ == "__main__" and sys.argv[1:] == ["output_stride"]:
    for case, build in DILATED.items():
        write_output_strides(case, build)
elif __name__ == "__main__":
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size)
    write_index("resnet", FULL_SIZE)

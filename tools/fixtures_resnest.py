"""Parity fixtures of the ResNeSt and Res2Net families (see tools/parity.py for how to run it)."""

import sys

from parity import (  # noqa: F401  (timm first: it applies the shims)
    timm,
    write_case,
    write_index,
    write_output_strides,
)
from timm.models.res2net import Bottle2neck  # noqa: E402
from timm.models.resnest import ResNestBottleneck  # noqa: E402
from timm.models.resnet import ResNet  # noqa: E402


def small(block, layers, stem_width=2, channels=(4, 8, 16, 32), **args) -> ResNet:
    """timm's ResNet of `block`s 4-32 wide (16-128 out), its deep stem `stem_width` wide
    (`2 * stem_width` out: 4, the first stage's width, or 8 as ResNeSt-*e's is twice it),
    averaging shortcuts."""
    return ResNet(
        block,
        layers,
        num_classes=10,
        channels=channels,
        stem_type="deep",
        stem_width=stem_width,
        avg_down=True,
        **args,
    )


# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments. The sizes leave odd maps before strided blocks,
# where the pools' padding counts.
CASES = {
    # resnest14d's block: radix 2, the pool after the split attention.
    "resnest_2s1x": (
        "resnest14d",
        lambda: small(ResNestBottleneck, (2, 1, 1, 1), block_args={"radix": 2, "avd": True}),
        40,
    ),
    # resnest50d_4s2x40d's block (the pool first, several groups of several splits: here radix 2
    # in 2 groups, so small) under an `e` stem.
    "resnest_4s2x_e": (
        "resnest50d_4s2x40d",
        lambda: small(
            ResNestBottleneck,
            (1, 1, 1, 1),
            stem_width=4,
            cardinality=2,
            base_width=32,
            block_args={"radix": 2, "avd": True, "avd_first": True},
        ),
        36,
    ),
    # resnest50d_1s4x24d's: radix 1 (a sigmoid gate) in 4 groups.
    "resnest_1s4x": (
        "resnest50d_1s4x24d",
        lambda: small(
            ResNestBottleneck,
            (1, 2, 1, 1),
            cardinality=4,
            base_width=32,
            block_args={"radix": 1, "avd": True, "avd_first": True},
        ),
        36,
    ),
    # res2net50_26w_4s's block (here splits 2, 4, 8, 16 wide) on the plain stem (timm's: 64
    # wide); two blocks in the first two stages, whose second sums the splits.
    "res2net_4s": (
        "res2net50_26w_4s",
        lambda: ResNet(
            Bottle2neck,
            (2, 2, 1, 1),
            num_classes=10,
            channels=(4, 8, 16, 32),
            base_width=32,
            block_args={"scale": 4},
        ),
        36,
    ),
    # Res2NeXt (2 groups of a split), 3 splits, ResNet-D's stem and shortcuts.
    "res2next_d": (
        "res2net50d",
        lambda: small(
            Bottle2neck, (2, 1, 1, 1), cardinality=2, base_width=32, block_args={"scale": 3}
        ),
        36,
    ),
}

FULL_SIZE = [
    *("resnest14d", "resnest26d", "resnest50d", "resnest101e", "resnest200e", "resnest269e"),
    *("resnest50d_4s2x40d", "resnest50d_1s4x24d", "res2net50_26w_4s", "res2net101_26w_4s"),
    *("res2net50_26w_6s", "res2net50_26w_8s", "res2net50_48w_2s", "res2net50_14w_8s"),
    *("res2next50", "res2net50d", "res2net101d"),
]


# Cases whose network is also written dilated (`output_stride` 8 and 16): split attention with
# its pool after (no pool where a stage stops striding), Res2NeXt with averaging shortcuts.
DILATED = {
    "resnest_2s1x": lambda s: small(
        ResNestBottleneck, (2, 1, 1, 1), block_args={"radix": 2, "avd": True}, output_stride=s
    ),
    "res2next_d": lambda s: small(
        Bottle2neck,
        (2, 1, 1, 1),
        cardinality=2,
        base_width=32,
        block_args={"scale": 3},
        output_stride=s,
    ),
}


if __name__ == "__main__" and sys.argv[1:] == ["output_stride"]:
    for case, build in DILATED.items():
        write_output_strides(case, build)
elif __name__ == "__main__":
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size)
    write_index("resnest", FULL_SIZE)

"""Parity fixtures of the Xception family (see tools/parity.py for how to run it).

timm's legacy `Xception` has its widths written in its constructor: the small network is timm's
own, its layers replaced by timm's `Block` and `SeparableConv2d` at small widths (all twelve
blocks, which its `forward_features` calls by name).
"""

import sys
from functools import partial

from parity import (  # noqa: F401  (timm first: the shims)
    ROOT,
    timm,
    write_case,
    write_index,
    write_output_strides,
)
from timm.models.xception import Block, SeparableConv2d, Xception  # noqa: E402
from timm.models.xception_aligned import XceptionAligned  # noqa: E402
from torch import nn  # noqa: E402

# The stem's two widths, the entry blocks', the middle's, the exit block's, conv3's and conv4's;
# the tests build ours with the same `widths`.
LEGACY_WIDTHS = (8, 16, 16, 16, 24, 24, 32, 32, 40)


def small_legacy(widths=LEGACY_WIDTHS, num_classes: int = 10) -> Xception:
    """timm's `legacy_xception` at `widths`."""
    model = Xception(num_classes=num_classes)
    stem1, stem2, *entry, middle, exit_width, conv3, conv4 = widths
    model.conv1, model.bn1 = nn.Conv2d(3, stem1, 3, 2, 0, bias=False), nn.BatchNorm2d(stem1)
    model.conv2, model.bn2 = nn.Conv2d(stem1, stem2, 3, bias=False), nn.BatchNorm2d(stem2)
    inputs = [stem2, *entry]
    for i, width in enumerate(entry, 1):
        setattr(model, f"block{i}", Block(inputs[i - 1], width, 2, 2, start_with_relu=i > 1))
    for i in range(4, 12):
        setattr(model, f"block{i}", Block(middle, middle, 3, 1))
    model.block12 = Block(middle, exit_width, 2, 2, grow_first=False)
    model.conv3, model.bn3 = SeparableConv2d(exit_width, conv3, 3, 1, 1), nn.BatchNorm2d(conv3)
    model.conv4, model.bn4 = SeparableConv2d(conv3, conv4, 3, 1, 1), nn.BatchNorm2d(conv4)
    model.num_features = conv4
    model.fc = nn.Linear(conv4, num_classes)
    return model


# timm's `block_cfg` of the small aligned networks: a strided block, an identity-shortcut one,
# the exit flow's two; the tests build ours with the same blocks.
ALIGNED_BLOCKS = [
    {"in_chs": 16, "out_chs": 16, "stride": 2},
    {"in_chs": 16, "out_chs": 24, "stride": 2},
    {"in_chs": 24, "out_chs": 24, "stride": 1},
    {"in_chs": 24, "out_chs": (24, 32, 32), "stride": 2},
    {"in_chs": 32, "out_chs": (40, 40, 48), "stride": 1, "no_skip": True, "start_with_relu": False},
]


# Four strided blocks (the network at stride 32) for `output_stride`: at 16 the exit block
# stops striding, at 8 the third too; each changes its width, so keeps its shortcut (timm drops
# the shortcut of a block it stops striding whose width stays: xception71's fifth at 8).
DILATED_BLOCKS = [
    {"in_chs": 16, "out_chs": 16, "stride": 2},
    {"in_chs": 16, "out_chs": 24, "stride": 2},
    {"in_chs": 24, "out_chs": 32, "stride": 2},
    {"in_chs": 32, "out_chs": (32, 40, 40), "stride": 2},
    {"in_chs": 40, "out_chs": (48, 48, 56), "stride": 1, "no_skip": True, "start_with_relu": False},
]


def small_aligned(preact: bool, epsilon: float, table=ALIGNED_BLOCKS, output_stride: int = 32):
    """timm's `XceptionAligned` at `table` (its stem's widths 32 and 64)."""
    blocks = [dict(b) for b in table]
    if preact:
        blocks[-1].pop("start_with_relu")
    blocks[0]["in_chs"] = 64
    norm = partial(nn.BatchNorm2d, eps=epsilon)
    return XceptionAligned(
        blocks, num_classes=10, preact=preact, norm_layer=norm, output_stride=output_stride
    )


# name -> (architecture in config.json, the small timm network, image size).
CASES = {
    "legacy_xception": ("legacy_xception", small_legacy, 35),
    "xception_aligned": ("xception65", partial(small_aligned, False, 1e-3), 33),
    "xception_aligned_preact": ("xception41p", partial(small_aligned, True, 1e-5), 33),
    "xception_aligned_dilated": (
        "xception65",
        partial(small_aligned, False, 1e-3, DILATED_BLOCKS),
        48,
    ),
}
# The cases written at `output_stride` 8 and 16 (each dilates at both).
OUTPUT_STRIDE = {"xception_aligned_dilated": partial(small_aligned, False, 1e-3, DILATED_BLOCKS)}
FULL_SIZE = ["legacy_xception", "xception41", "xception65", "xception71"]
FULL_SIZE += ["xception41p", "xception65p"]


if __name__ == "__main__":
    if sys.argv[1:] == ["output_stride"]:  # the cases dilated (the others' files untouched)
        for case, build in OUTPUT_STRIDE.items():
            write_case(case, *CASES[case])
            write_output_strides(case, lambda s, build=build: build(output_stride=s))
        sys.exit()
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size)
    write_index("xception", FULL_SIZE)

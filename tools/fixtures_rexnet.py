"""Parity fixtures of ReXNet (see tools/parity.py for how to run it).

Each case is timm's own `RexNet` class with narrow widths (`initial_chs` 8, `final_chs` 8), its
last convolution sized for 32 rather than 1280 and a 10-class classifier: `rexnet` at width
0.75 (timm keeps the first widths below width 1) and depth 0.34 (stages of 1, 1, 1, 2, 2, 2
blocks: four stride-1 blocks add their input, two of them to part of a wider output);
`rexnetr` at width 1 and depth 0.2 (one block a stage) with every width a multiple of 8
(`ch_div`). 40 px images: maps 20, 10, 5, 3, 2.
"""

import sys

from parity import timm, write_case, write_index, write_output_strides  # noqa: F401  (timm first)
from timm.layers import ClassifierHead, ConvNormAct, make_divisible  # noqa: E402
from timm.models.rexnet import RexNet  # noqa: E402

HEAD = 32  # timm's 1280, scaled by the width as timm scales that


def small(width: float, depth: float, divisor: int, output_stride: int = 32) -> RexNet:
    model = RexNet(
        num_classes=10,
        output_stride=output_stride,
        initial_chs=8,
        final_chs=8,
        width_mult=width,
        depth_mult=depth,
        ch_div=divisor,
    )
    last, head = model.features[-1].conv.in_channels, make_divisible(HEAD * width, divisor)
    model.features[-1] = ConvNormAct(last, head, act_layer="swish")
    model.head = ClassifierHead(head, 10, "avg", 0.2)
    return model


# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments.
CASES = {
    "rexnet": ("rexnet_100", lambda: small(0.75, 0.34, 1), 40),
    "rexnetr": ("rexnetr_100", lambda: small(1.0, 0.2, 8), 40),
}

NAMES = [f"rexnet_{m}" for m in (100, 130, 150, 200, 300)]
NAMES += [f"rexnetr_{m}" for m in (100, 130, 150, 200, 300)]

# The case dilated by timm's `output_stride` (8, 16): its small network at that stride on the
# written weights; `rexnet`'s stages of 2 blocks show the first block of a dilated stage at the
# dilation before and the second at the new one (the stride-1 fifth stage between: its first
# block adds its input at the fourth's dilation). 40 px: maps of 5 pixels from stride 8.
OUTPUT_STRIDES = {"rexnet": lambda s: small(0.75, 0.34, 1, s)}

if __name__ == "__main__":
    if sys.argv[1:] == ["output_stride"]:  # only the dilated logits: the cases stay as written
        for case, build in OUTPUT_STRIDES.items():
            write_output_strides(case, build)
        sys.exit()
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size, calibration_size=size)
    write_index("rexnet", NAMES)

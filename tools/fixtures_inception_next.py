"""Parity fixtures of the InceptionNeXt family (see tools/parity.py for how to run it)."""

import sys
from functools import partial

import torch
from parity import timm, write_case, write_index, write_output_strides  # noqa: F401  (timm first)
from timm.models.inception_next import InceptionDWConv2d, MetaNeXt

# The small configuration: four stages of 1, 1, 2, 1 blocks of widths 8 to 32, so that each of
# the mixer's branches has 1 to 4 channels (2 to 8 at atto's quarter) beside the kept ones.
SMALL = {"depths": (1, 1, 2, 1), "dims": (8, 16, 24, 32), "num_classes": 10}


def small(**kwargs) -> torch.nn.Module:
    """timm's `MetaNeXt` in the small configuration, every convolution and Linear weight
    ~N(0, 1 / fan_in) (timm's 0.02 would fade the MLPs and the head out at these widths);
    `parity.perturb` draws the norms, biases and layer scales."""
    model = MetaNeXt(**{**SMALL, **kwargs})
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Conv2d | torch.nn.Linear):
                module.weight.normal_(0.0, module.weight[0].numel() ** -0.5)
    return model


# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments. 48 px: maps of 12, 6, 3 and 1 pixels, smaller
# than the band convolutions in the later stages (their padding shows).
CASES = {
    "inception_next": ("inception_next_tiny", small, 48),
    "inception_next_atto": (
        "inception_next_atto",
        lambda: small(
            token_mixers=partial(InceptionDWConv2d, band_kernel_size=9, branch_ratio=0.25)
        ),
        48,
    ),
}

FULL_SIZE = [f"inception_next_{size}" for size in ("atto", "tiny", "small", "base")]

# The case dilated by timm's `output_stride` (8, 16): its small network at that stride on the
# written weights. At 8 the last two stages keep 6-pixel maps, at 16 the last one 3.
OUTPUT_STRIDES = {"inception_next": lambda s: small(output_stride=s)}

if __name__ == "__main__":
    if sys.argv[1:] == ["output_stride"]:  # only the dilated logits: the cases stay as written
        for case, build in OUTPUT_STRIDES.items():
            write_output_strides(case, build)
        sys.exit()
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size, calibration_size=size)
    write_index("inception_next", FULL_SIZE)

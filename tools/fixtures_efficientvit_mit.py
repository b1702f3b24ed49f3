"""Parity fixtures of MIT's EfficientViT (see tools/parity.py for how to run it).

Each case is timm's own class (`EfficientVit`, the B series; `EfficientVitLarge`, L) in a small
configuration: stem and stages 8, 8, 8, 16, 16 wide, heads of 8 channels (2 heads in the
16-wide attention stages), a 16 -> 24 head. B: the stem's depthwise block, a stage of a strided
and a residual MBConv, an attention stage of two blocks; L (4, 4, 8, 8, 16 wide: its expansions
are 16 and 24): the stem's ConvBlock, fused blocks, then MBConvs with biases, one attention
block. The image sizes make the stride-2 layers see even and odd maps (40 -> 20 -> 10 -> 5 ->
3 -> 2; 36 -> 18 -> 9 -> 5 -> 3 -> 2).
"""

from parity import timm, write_case, write_index  # noqa: F401  (timm first: it applies the shims)
from timm.models.efficientvit_mit import EfficientVit, EfficientVitLarge  # noqa: E402

SMALL = {"widths": (8, 8, 8, 16, 16), "head_dim": 8, "head_widths": (16, 24), "num_classes": 10}

# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments.
CASES = {
    "efficientvit_b_small": (
        "efficientvit_b1",
        lambda: EfficientVit(**SMALL, depths=(1, 2, 1, 1, 2)),
        40,
    ),
    "efficientvit_l_small": (
        "efficientvit_l2",
        lambda: EfficientVitLarge(**{**SMALL, "widths": (4, 4, 8, 8, 16)}, depths=(1,) * 5),
        36,
    ),
}

# Full-size networks whose state-dict index (keys and shapes) the tests convert.
FULL_SIZE = [f"efficientvit_{size}" for size in ("b0", "b1", "b2", "b3", "l1", "l2", "l3")]


if __name__ == "__main__":
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size)
    write_index("efficientvit_mit", FULL_SIZE)

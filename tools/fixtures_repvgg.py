"""Parity fixtures of the RepVGG family (see tools/parity.py for how to run it).

timm's ByobNet in RepVGG's small configurations: stages of widths 8, 16, 32, 64 (1, 3, 2, 1
blocks, stem 8) with every second block in 4 groups (the `g4` rule), and the same ungrouped with
`repvgg_d2se`'s squeeze-excite gates (of one channel at this width). For each, timm's own
`reparameterize()` of the perturbed network: the logits of its fused network and three of its
fused convolutions (`fused.safetensors`, float32), which `nets.repvgg.reparameterize` must give.

`output_stride` (run `tools/fixtures_repvgg.py output_stride` to write only these): the grouped
case's network at timm's `output_stride` 8 and 16 (its feature_info reductions 2, 4, 8, 8, 8 and
2, 4, 8, 16, 16), its logits on the case's images (`output_stride.safetensors`).
"""

import sys

from parity import (  # noqa: F401  (timm first)
    timm,
    write_case,
    write_fused,
    write_index,
    write_output_strides,
)
from timm.models.byobnet import ByobNet, ByoModelCfg, _rep_vgg_bcfg  # noqa: E402

DEPTHS = (1, 3, 2, 1)


def small(scale: float, groups: int = 0, output_stride: int = 32, **cfg) -> ByobNet:
    blocks = _rep_vgg_bcfg(d=DEPTHS, wf=(scale,) * 4, groups=groups)
    return ByobNet(
        ByoModelCfg(blocks=blocks, stem_type="rep", stem_chs=int(64 * scale), **cfg),
        num_classes=10,
        output_stride=output_stride,
    )


SE = {"attn_layer": "se", "attn_kwargs": {"rd_ratio": 0.0625, "rd_divisor": 1}}
CASES = {
    "repvgg_g4": ("repvgg_b1g4", lambda: small(0.125, groups=4), 40),
    "repvgg_se": ("repvgg_d2se", lambda: small(0.125, **SE), 40),
}
FULL_SIZE = ["repvgg_a0", "repvgg_a1", "repvgg_a2", "repvgg_b0", "repvgg_b1", "repvgg_b1g4"]
FULL_SIZE += ["repvgg_b2", "repvgg_b2g4", "repvgg_b3", "repvgg_b3g4", "repvgg_d2se"]


# The fused tensors kept (a few, for the fixture's size): the stem's (no identity), a grouped
# block's with an identity, and an ungrouped one's.
KEPT = ("stem.reparam_conv", "stages.1.1.reparam_conv", "stages.1.2.reparam_conv")


def dilated(output_stride: int) -> ByobNet:
    """The grouped case's network at `output_stride` (its stages 2 and 3 dilated at 8)."""
    model = small(0.125, groups=4, output_stride=output_stride)
    print(
        f"output_stride={output_stride}: reductions {[f['reduction'] for f in model.feature_info]}"
    )
    return model


if __name__ == "__main__" and sys.argv[1:] == ["output_stride"]:
    write_output_strides("repvgg_g4", dilated)
elif __name__ == "__main__":
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size)
        write_fused(case, build, KEPT)
    write_index("repvgg", FULL_SIZE)

"""Parity fixtures of MobileNetV4 (see tools/parity.py for how to run it).

Each case is timm's own `MobileNetV3` class built as `_gen_mobilenet_v4` builds the full-size
networks (normalised head without bias, ReLU, no layer scale), from a reduced `arch_def` (timm's
block strings: `cn` conv-BN-act, `er` Fused IB, `uir` Universal Inverted Bottleneck with `a` its
start and `k` its middle depthwise kernel, 0 for none; `s` stride, `e` expansion, `c` channels)
at a channel multiplier below 1 (so the stem keeps its width, as timm's `fix_stem`), with a
64-wide head instead of 1280. The input sizes make the stride-2 layers see even and odd maps
(54 -> 27 -> 14 -> 7 -> 4; 45 -> 23 -> 12 -> 6 -> 3).

`python tools/fixtures_mobilenet_v4.py output_stride` writes only `mobilenetv4_hybrid_large`'s
logits at timm's `output_stride` 8 and 16 (`write_output_strides`; its small network reaches 32),
its other files unchanged; timm's classifier takes no `output_stride`, so its blocks come from
the builder its `features_only` trunk would use (`fixtures_mobilenet.at_output_stride`).
"""

import sys
from functools import partial

import torch
from fixtures_mobilenet import at_output_stride
from parity import timm, write_case, write_index, write_output_strides  # noqa: F401 (timm first)
from timm.models._efficientnet_builder import decode_arch_def, round_channels  # noqa: E402
from timm.models.mobilenetv3 import MobileNetV3  # noqa: E402

HEAD = 64  # timm's `num_features` (1280 at full size)


def small_v4(arch_def, multiplier: float, stem_size: int, hybrid: bool = False) -> MobileNetV3:
    """`_gen_mobilenet_v4`'s network for `arch_def`: its conv variants' arguments, or its hybrid
    Large's (GELU, layer scale from 1e-5)."""
    return MobileNetV3(
        block_args=decode_arch_def(arch_def),
        num_classes=10,
        head_bias=False,
        head_norm=True,
        num_features=HEAD,
        stem_size=stem_size,
        fix_stem=multiplier < 1.0,
        round_chs_fn=partial(round_channels, multiplier=multiplier),
        norm_layer=partial(torch.nn.BatchNorm2d, eps=1e-5),
        act_layer=torch.nn.GELU if hybrid else torch.nn.ReLU,
        layer_scale_init_value=1e-5 if hybrid else None,
    )


# Conv-Small's kinds: plain convolutions (strided 3x3, then a 1x1 of equal width: no residual),
# and the four UIB instances: ExtraDW strided, IB, ConvNeXt-like and FFN with residuals.
SMALL = [
    ["cn_r1_k3_s2_e1_c32", "cn_r1_k1_s1_e1_c32"],
    [
        "uir_r1_a5_k5_s2_e3_c48",
        "uir_r1_a0_k3_s1_e2_c48",
        "uir_r1_a3_k0_s1_e4_c48",
        "uir_r1_a0_k0_s1_e2_c48",
    ],
    ["uir_r1_a3_k3_s2_e6_c64", "uir_r1_a5_k5_s1_e4_c64"],
    ["cn_r1_k1_s1_c192"],
]
# Conv-Medium's and Large's: the Fused IB first, ExtraDW strided and residual, and a UIB strided
# by its start depthwise convolution alone (no table has one; timm's rule is tested).
MEDIUM = [
    ["er_r1_k3_s2_e4_c48"],
    ["uir_r1_a3_k5_s2_e4_c80", "uir_r1_a3_k3_s1_e2_c80"],
    ["uir_r1_a5_k0_s2_e4_c96", "uir_r1_a5_k3_s1_e4_c96"],
    ["cn_r1_k1_s1_c240"],
]
# The hybrids': Mobile MQA with keys and values downsampled by a strided depthwise convolution
# (v2) and without (on a 7x7 then a 4x4 map), between UIBs with layer scales; GELU throughout.
HYBRID = [
    ["er_r1_k3_s2_e4_c48"],
    ["uir_r1_a3_k5_s2_e4_c96"],
    ["uir_r1_a3_k5_s2_e4_c96", "mqa_r1_k3_h4_s1_v2_d16_c96", "uir_r1_a3_k0_s1_e4_c96"],
    ["uir_r1_a5_k5_s2_e4_c128", "mqa_r1_k3_h2_s1_d32_c128", "uir_r1_a5_k0_s1_e4_c128"],
    ["cn_r1_k1_s1_c240"],
]

# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments.
CASES = {
    "mobilenetv4_conv_small": ("mobilenetv4_conv_small", lambda: small_v4(SMALL, 0.5, 32), 54),
    "mobilenetv4_conv_medium": (
        "mobilenetv4_conv_medium",
        lambda: small_v4(MEDIUM, 0.25, 24),
        45,
    ),
    "mobilenetv4_hybrid_large": (
        "mobilenetv4_hybrid_large",
        lambda: small_v4(HYBRID, 0.5, 24, hybrid=True),
        54,
    ),
}

# Full-size networks whose state-dict index (keys and shapes) the tests convert.
FULL_SIZE = [
    "mobilenetv4_conv_small",
    "mobilenetv4_conv_small_050",
    "mobilenetv4_conv_medium",
    "mobilenetv4_conv_large",
    "mobilenetv4_hybrid_medium",
    "mobilenetv4_hybrid_large",
]


if __name__ == "__main__":
    if sys.argv[1:] == ["output_stride"]:
        build = CASES["mobilenetv4_hybrid_large"][1]
        write_output_strides("mobilenetv4_hybrid_large", partial(at_output_stride, build))
    else:
        for case, (arch, build, size) in CASES.items():
            write_case(case, arch, build, size)
        write_index("mobilenet_v4", FULL_SIZE)

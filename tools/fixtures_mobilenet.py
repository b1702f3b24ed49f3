"""Parity fixtures of the MobileNet V2 / V3 family (see tools/parity.py for how to run it).

Each case is timm's own `MobileNetV3` / `EfficientNet` class, built from a reduced `arch_def`
(timm's block strings: `ds` depthwise-separable, `ir` inverted residual, `cn` conv-BN-act; `k`
kernel, `s` stride, `e` expansion, `c` channels, `se0.25` squeeze-excite, `nre` ReLU instead of
the network's activation) with a channel multiplier, exactly as `_gen_mobilenet_v3` /
`_gen_mobilenet_v2` build the full-size networks; torchvision's are its own classes with reduced
settings (`torchvision_mobilenet.py` rebuilds them: torchvision is not installed here). The input
sizes make the stride-2 layers see both even and odd maps (54 -> 27 -> 14 -> 7; 45 -> 23 -> 12
-> 6 -> 3; 50 -> 25 -> 13 -> 7).

`python tools/fixtures_mobilenet.py output_stride` writes only `mobilenetv3_small`'s logits at
timm's `output_stride` 4 and 8 (`write_output_strides`), its other files unchanged: the small
network reaches stride 16, where 16 would dilate nothing. timm's `MobileNetV3` classifier builds
its blocks at 32 whatever it is given (only its `features_only` trunk, `MobileNetV3Features`,
takes `output_stride`, with the same `EfficientNetBuilder`): `at_output_stride` builds the
classifier with the builder the trunk would have.
"""

import sys
from collections.abc import Callable
from functools import partial
from unittest import mock

import torch
import torchvision_mobilenet as tv  # torchvision's modules, rebuilt
from parity import timm, write_case, write_index, write_output_strides  # noqa: F401 (timm first)
from timm.models._efficientnet_blocks import SqueezeExcite  # noqa: E402
from timm.models._efficientnet_builder import (  # noqa: E402
    EfficientNetBuilder,
    decode_arch_def,
    resolve_act_layer,
    round_channels,
)
from timm.models.efficientnet import EfficientNet  # noqa: E402
from timm.models.mobilenetv3 import MobileNetV3  # noqa: E402

TF = {"pad_type": "same", "bn_eps": 1e-3}  # timm's tf_ networks (BN_EPS_TF_DEFAULT)
TORCH = {"pad_type": "", "bn_eps": 1e-5}


# The last convolution is 1280 (V2, V3 Large) or 1024 (V3 Small) wide at full size; 256 here,
# scaled as our `last_filters` / V2's `head_filters` are (timm's `num_features` is not scaled).
LAST = 256


def timm_builder_args(arch_def, multiplier, pad_type, bn_eps, act) -> dict:
    """What `_gen_mobilenet_v3` and `_gen_mobilenet_v2` give both of timm's classes."""
    return {
        "block_args": decode_arch_def(arch_def),
        "num_classes": 10,
        "num_features": round_channels(LAST, multiplier),
        "pad_type": pad_type,
        "round_chs_fn": partial(round_channels, multiplier=multiplier),
        "norm_layer": partial(torch.nn.BatchNorm2d, eps=bn_eps),
        "act_layer": resolve_act_layer({}, act),
    }


def small_v3(arch_def, multiplier, act, pad_type, bn_eps) -> MobileNetV3:
    """`_gen_mobilenet_v3`'s network for `arch_def` (the stem scaled, as at multiplier >= 0.75)."""
    se_layer = partial(
        SqueezeExcite,
        gate_layer="hard_sigmoid",
        force_act_layer=torch.nn.ReLU,
        rd_round_fn=round_channels,
    )
    args = timm_builder_args(arch_def, multiplier, pad_type, bn_eps, act)
    return MobileNetV3(**args, stem_size=16, se_layer=se_layer)


def small_v2(arch_def, multiplier, pad_type, bn_eps) -> EfficientNet:
    """`_gen_mobilenet_v2`'s network for `arch_def`."""
    return EfficientNet(
        **timm_builder_args(arch_def, multiplier, pad_type, bn_eps, "relu6"), stem_size=32
    )


def at_output_stride(build: Callable[[], torch.nn.Module], output_stride: int) -> torch.nn.Module:
    """`build()` with timm's `EfficientNetBuilder` at `output_stride` (the MobileNetV3
    classifier passes it 32; its features trunk passes the one it is given)."""
    init = EfficientNetBuilder.__init__

    def dilated(self, *args, **kwargs):
        init(self, *args, **{**kwargs, "output_stride": output_stride})

    with mock.patch.object(EfficientNetBuilder, "__init__", dilated):
        return build()


# V3 Large's first stages, and its head: a residual depthwise-separable block, expansion with
# ReLU, stride-2 5x5 with squeeze-excite and hard-swish, a residual one.
LARGE = [
    ["ds_r1_k3_s1_e1_c16_nre"],
    ["ir_r1_k3_s2_e4_c24_nre", "ir_r1_k3_s1_e3_c24_nre"],
    ["ir_r1_k5_s2_e3_c40_se0.25", "ir_r1_k3_s1_e2.5_c40_se0.25"],
    ["cn_r1_k1_s1_c960"],
]
# V3 Small's: a stride-2 depthwise-separable block with squeeze-excite first.
SMALL = [
    ["ds_r1_k3_s2_e1_c16_se0.25_nre"],
    ["ir_r1_k3_s2_e4.5_c24_nre", "ir_r1_k3_s1_e3.67_c24_nre"],
    ["ir_r1_k5_s2_e4_c40_se0.25", "ir_r1_k5_s1_e6_c40_se0.25"],
    ["cn_r1_k1_s1_c576"],
]
SMALL_MINIMAL = [
    ["ds_r1_k3_s2_e1_c16"],
    ["ir_r1_k3_s2_e4.5_c24", "ir_r1_k3_s1_e3.67_c24"],
    ["ir_r1_k3_s2_e4_c40", "ir_r1_k3_s1_e6_c40"],
    ["cn_r1_k1_s1_c576"],
]
V2 = [
    ["ds_r1_k3_s1_c16"],
    ["ir_r2_k3_s2_e6_c24"],
    ["ir_r2_k3_s2_e6_c32"],
]

# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments.
CASES = {
    "mobilenetv3_large_tf": (
        "tf_mobilenetv3_large_100",
        lambda: small_v3(LARGE, 0.25, "hard_swish", **TF),
        54,
    ),
    "mobilenetv3_small": (
        "mobilenetv3_small_100",
        lambda: small_v3(SMALL, 0.35, "hard_swish", **TORCH),
        45,
    ),
    "mobilenetv3_small_minimal_tf": (
        "tf_mobilenetv3_small_minimal_100",
        lambda: small_v3(SMALL_MINIMAL, 0.35, "relu", **TF),
        54,
    ),
    "mobilenetv2": ("mobilenetv2_100", lambda: small_v2(V2, 0.5, **TORCH), 50),
    # torchvision's, at width 0.5: V3 Small's first block (depthwise-separable, squeeze-excite,
    # stride 2), then V3 Large's widths doubled to halve cleanly; its Linear to `last_channel`.
    "tv_mobilenet_v3": (
        "mobilenet_v3_large",
        lambda: tv.MobileNetV3(
            [
                tv.InvertedResidualConfig(*row, width_mult=0.5)
                for row in [
                    (16, 3, 16, 16, True, "RE", 2, 1),
                    (16, 3, 64, 32, False, "RE", 2, 1),
                    (32, 3, 96, 32, False, "RE", 1, 1),
                    (32, 5, 96, 48, True, "HS", 2, 1),
                    (48, 5, 144, 48, True, "HS", 1, 1),
                ]
            ],
            last_channel=128,
            num_classes=10,
        ),
        54,
    ),
    "tv_mobilenet_v2": (
        "mobilenet_v2",
        lambda: tv.MobileNetV2(10, 0.5, [[1, 16, 1, 1], [6, 24, 2, 2], [6, 32, 2, 2]]),
        45,
    ),
}
TORCHVISION = ("mobilenet_v2", "mobilenet_v3_large", "mobilenet_v3_small")

# Full-size networks whose state-dict index (keys and shapes) the tests convert.
FULL_SIZE = [
    "tf_mobilenetv3_large_100",
    "tf_mobilenetv3_small_100",
    "tf_mobilenetv3_large_minimal_100",
    "tf_mobilenetv3_small_minimal_100",
    "mobilenetv3_large_100",
    "mobilenetv3_small_100",
    "mobilenetv2_100",
    "mobilenetv2_140",
    *TORCHVISION,
]


def create(name: str) -> torch.nn.Module:
    if name in TORCHVISION:
        return tv.create_model(name)
    return timm.create_model(name, pretrained=False)


if __name__ == "__main__":
    if sys.argv[1:] == ["output_stride"]:
        build = CASES["mobilenetv3_small"][1]
        write_output_strides("mobilenetv3_small", partial(at_output_stride, build), (4, 8))
    else:
        for case, (arch, build, size) in CASES.items():
            write_case(case, arch, build, size)
        write_index("mobilenet", FULL_SIZE, create)

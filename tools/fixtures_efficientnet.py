"""Parity fixtures of the EfficientNet family (see tools/parity.py for how to run it).

Each case is timm's own `EfficientNet`, built by `_gen_efficientnet` exactly as the full-size
networks are, at channel multiplier 0.25 and depth multiplier 0.5: B0's seven stages with
repeats 1, 1, 1, 2, 2, 2, 1 (so residual blocks with squeeze-excite occur) and widths 8-80, head
320. `efficientnet` has timm's own conventions (symmetric padding, BatchNorm epsilon 1e-5),
`efficientnet_tf` those of the TF ports (`tf_efficientnet_b0`: 'SAME', 1e-3). Images of 54 px
make the stride-2 layers see both even and odd maps (54 -> 27 -> 14 -> 7 -> 4 -> 2).
`tv_efficientnet` is torchvision's `EfficientNet` (`torchvision_efficientnet.py` rebuilds it:
torchvision is not installed here) at the same multipliers, with B5-B7's epsilon 1e-3, 50 px.

EfficientNetV2: timm's `_gen_efficientnetv2_s` at channel multiplier 0.125 and depth multiplier
0.34 (V2-S's six stages with repeats 1, 2, 2, 3, 4, 6, so the unexpanded fused block, the
expanded fused blocks and the MBConv blocks each occur with their residual; widths 8-32, head
160; 176k values), under timm's conventions (`efficientnetv2`) and the TF ports'
(`efficientnetv2_tf`), and torchvision's `efficientnet_v2_s` table rebuilt at the same
multipliers (`tv_efficientnet_v2`, epsilon 1e-3, its `last_channel` 160 where the full size has
1280), at 54 px.

`python tools/fixtures_efficientnet.py output_stride` writes only `efficientnetv2_tf`'s logits
at timm's `output_stride` 8 and 16 (`write_output_strides`), its other files unchanged: its
small network reaches stride 32 (both strides dilate its MBConv stages, with squeeze-excite)
under TensorFlow's 'SAME' padding (the MobileNets' cases dilate under PyTorch's).
"""

import sys

import torchvision_efficientnet as tv  # torchvision's modules, rebuilt
from parity import timm, write_case, write_index, write_output_strides  # noqa: F401  (timm first)
from timm.models.efficientnet import _gen_efficientnet, _gen_efficientnetv2_s  # noqa: E402

SMALL = {"channel_multiplier": 0.25, "depth_multiplier": 0.5, "num_classes": 10}
V2_SMALL = {"channel_multiplier": 0.125, "depth_multiplier": 0.34, "num_classes": 10}
TF = {"pad_type": "same", "bn_eps": 1e-3}  # what timm's tf_efficientnet* functions add

# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments.
CASES = {
    "efficientnet": (
        "efficientnet_b0",
        lambda: _gen_efficientnet("efficientnet_b0", **SMALL),
        54,
    ),
    "efficientnet_tf": (
        "tf_efficientnet_b0",
        lambda: _gen_efficientnet("tf_efficientnet_b0", **SMALL, **TF),
        54,
    ),
    "tv_efficientnet": (
        "efficientnet_b5",
        lambda: tv.EfficientNet(0.25, 0.5, bn_eps=1e-3, num_classes=10),
        50,
    ),
    "efficientnetv2": (
        "efficientnetv2_s",
        lambda: _gen_efficientnetv2_s("efficientnetv2_s", **V2_SMALL),
        54,
    ),
    "efficientnetv2_tf": (
        "tf_efficientnetv2_s",
        lambda: _gen_efficientnetv2_s("tf_efficientnetv2_s", **V2_SMALL, **TF),
        54,
    ),
    "tv_efficientnet_v2": (
        "efficientnet_v2_s",
        lambda: tv.EfficientNet(
            0.125,
            0.34,
            bn_eps=1e-3,
            num_classes=10,
            stages=tv.V2_STAGES["efficientnet_v2_s"],
            last_channel=160,
        ),
        54,
    ),
}

# Full-size networks whose state-dict index (keys and shapes) the tests convert: every scale of
# the TF ports (each width and depth rounding), and two of timm's own (the same keys).
FULL_SIZE = [
    "efficientnet_b0",
    "efficientnet_b3",
    *(f"tf_efficientnet_b{i}" for i in range(8)),
]


def main() -> None:
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size)
    write_index("efficientnet", FULL_SIZE)
    # torchvision's files, the alternative key layout of our (and timm's) names.
    write_index(
        "torchvision_efficientnet",
        [f"efficientnet_b{i} torchvision" for i in (0, 3, 7)],
        lambda name: tv.create_model(name.split(" ")[0]),
    )
    # V2: the TF port of V2-S (timm's keys; its own `efficientnetv2_s` has the same) and
    # torchvision's V2-S.
    write_index(
        "efficientnetv2",
        ["tf_efficientnetv2_s", "efficientnet_v2_s"],
        lambda name: tv.create_model(name) if name in tv.V2_STAGES else timm.create_model(name),
    )


if __name__ == "__main__":
    if sys.argv[1:] == ["output_stride"]:  # `CASES`' build, with timm's argument
        write_output_strides(
            "efficientnetv2_tf",
            lambda s: _gen_efficientnetv2_s(
                "tf_efficientnetv2_s", **V2_SMALL, **TF, output_stride=s
            ),
        )
    else:
        main()

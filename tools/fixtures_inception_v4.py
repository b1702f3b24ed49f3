"""Parity fixtures of Inception v4 and Inception-ResNet-v2 (see tools/parity.py for how to run it).

timm's `InceptionV4` and `InceptionResnetV2` themselves, at full depth, thinned as our
`depth_multiplier` / `min_depth` thin ours (every `ConvNormAct` `max(int(d * m), 8)` wide, of
whatever width the thinned blocks concatenate), on 75 px images, the smallest both take.
"""

import sys
from functools import partial

import torch
from fixtures_inception import MIN_DEPTH, _patched, depth, thin_conv_norm_act
from parity import timm, write_case, write_index  # noqa: F401  (timm first: it applies the shims)
from torch import nn

timm_v4 = sys.modules["timm.models.inception_v4"]  # the attributes are the functions
timm_irv2 = sys.modules["timm.models.inception_resnet_v2"]

SIZE = 75
# BatchNorm statistics from larger images: at 75 px v4's last blocks see 1x1 maps, whose few
# calibration pixels leave channels of tiny variance that amplify rounding (float32 logits then
# differ from float64's by 6e-4 of their range; with statistics from 107 px, by 2e-5).
CALIBRATION_SIZE = 107
# The tests' load_pretrained arguments: depth_multiplier, and min_depth MIN_DEPTH.
V4_MULTIPLIER = 0.1
IRV2_MULTIPLIER = 1 / 16  # 0.1 would make a 1.2 MB file: its 39 residual blocks are wide


def _materialised(model: nn.Module) -> nn.Module:
    model.eval()(torch.zeros(1, 3, SIZE, SIZE))
    return model


def small_inception_v4() -> nn.Module:
    thin = partial(thin_conv_norm_act, multiplier=V4_MULTIPLIER)
    with _patched(timm_v4, "ConvNormAct", thin):
        model = timm_v4.InceptionV4(num_classes=10)
    model.last_linear = nn.LazyLinear(10)
    return _materialised(model)


def small_inception_resnet_v2() -> nn.Module:
    d = partial(depth, multiplier=IRV2_MULTIPLIER)
    thin = partial(thin_conv_norm_act, multiplier=IRV2_MULTIPLIER)
    with _patched(timm_irv2, "ConvNormAct", thin):
        model = timm_irv2.InceptionResnetV2(num_classes=10)
    # Each residual block projects back to its input's width (timm writes the full-size widths,
    # which thinning changes): what Mixed_5b, Mixed_6a and Mixed_7a concatenate.
    width_35 = d(96) + d(64) + d(96) + d(64)
    width_17 = d(384) + d(384) + width_35
    width_8 = d(384) + d(288) + d(320) + width_17
    widths = {320: width_35, 1088: width_17, 2080: width_8}
    blocks = (timm_irv2.Block35, timm_irv2.Block17, timm_irv2.Block8)
    for block in model.modules():
        if isinstance(block, blocks):
            block.conv2d = nn.LazyConv2d(widths[block.conv2d.out_channels], 1)
    model.classif = nn.LazyLinear(10)
    return _materialised(model)


if __name__ == "__main__":
    assert MIN_DEPTH == 8  # the tests' min_depth
    tag = {"pretrained_cfg": {"tag": "tf_in1k"}}  # as the Hub's config.json says
    write_case("inception_v4", "inception_v4", small_inception_v4, SIZE, CALIBRATION_SIZE, tag)
    write_case(
        "inception_resnet_v2",
        "inception_resnet_v2",
        small_inception_resnet_v2,
        SIZE,
        CALIBRATION_SIZE,
        tag,
    )
    write_index("inception_v4", ["inception_v4", "inception_resnet_v2"])

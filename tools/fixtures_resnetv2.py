"""Parity fixtures of timm's ResNetV2 family: pre-activation ResNets and BiT (see tools/parity.py
for how to run it)."""

import sys
from functools import partial

import torch
from parity import (  # noqa: F401  (timm first: it applies the shims)
    timm,
    write_case,
    write_index,
    write_output_strides,
)
from timm.layers import (  # noqa: E402
    BatchNormAct2d,
    EvoNorm2dS0,
    GroupNormAct,
    StdConv2d,
    create_conv2d,
)
from timm.models.resnetv2 import ResNetV2  # noqa: E402


def small_resnetv2(layers, stem_chs, **kwargs) -> ResNetV2:
    """timm's `resnetv2_50` (BatchNorm + ReLU pre-activations, plain convolutions) at reduced
    depth and width: a `stem_chs` stem, bottlenecks `4 * stem_chs * 2**i` wide (ours are
    `num_filters` wide, for the stem and the first stage's bottleneck alike)."""
    return ResNetV2(
        layers,
        channels=tuple(4 * stem_chs * 2**i for i in range(len(layers))),
        num_classes=10,
        stem_chs=stem_chs,
        conv_layer=create_conv2d,
        norm_layer=BatchNormAct2d,
        zero_init_last=False,  # a zero last convolution would leave the residual branches out
        **kwargs,
    )


def with_random_norms(model: ResNetV2) -> ResNetV2:
    """GroupNorm's and EvoNorm's scales (and EvoNorm's `v`) ~U(0.5, 1.5): `parity.perturb` draws
    only their biases, and at 1 a scale mapped to the wrong layer would go unseen."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (torch.nn.GroupNorm, EvoNorm2dS0)):
                module.weight.uniform_(0.5, 1.5, generator=generator)
            if isinstance(module, EvoNorm2dS0):
                module.v.uniform_(0.5, 1.5, generator=generator)
    return model


def tiny(layers=(2, 1, 1), *, basic=False, norm=BatchNormAct2d, **kwargs) -> ResNetV2:
    """Three stages, an 8-wide stem and first stage (ours: `num_filters=8`; timm rounds narrower
    ones up to 8), basic blocks or bottlenecks; a deep stem is 4, 4 then 8 wide (ours:
    `stem_widths=(4, 4)`). The norms' groups are 2 (ours: `norm=partial(..., num_groups=2)` /
    `groups=2`), where timm's networks have 32."""
    channels = tuple((8 if basic else 32) * 2**i for i in range(len(layers)))
    model = ResNetV2(
        list(layers),
        channels=channels,
        num_classes=10,
        stem_chs=8,
        basic=basic,
        bottle_ratio=1.0 if basic else 0.25,
        norm_layer=norm,
        zero_init_last=False,
        **{"conv_layer": create_conv2d, **kwargs},
    )
    return with_random_norms(model)


_DEEP = {"stem_type": "deep", "avg_down": True}
_GROUP_NORM = partial(GroupNormAct, num_groups=2)

# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments. An odd and an even size for the stride-2 padding
# (odd ones for the averaging shortcuts' ceil mode).
CASES = {
    "resnetv2_50": ("resnetv2_50", lambda: small_resnetv2((2, 1, 1, 1), 8), 45),
    "resnetv2_101": ("resnetv2_101", lambda: small_resnetv2((1, 2, 1, 1), 8), 48),
    "resnetv2_basic": ("resnetv2_18", lambda: tiny(basic=True), 48),
    "resnetv2_basic_d": ("resnetv2_34d", lambda: tiny(basic=True, **_DEEP), 45),
    "resnetv2_d_gn": ("resnetv2_50d_gn", lambda: tiny(norm=_GROUP_NORM, **_DEEP), 45),
    "resnetv2_d_evos": (
        "resnetv2_50d_evos",
        lambda: tiny(norm=partial(EvoNorm2dS0, groups=2), **_DEEP),
        45,
    ),
    "resnetv2_bit": (
        "resnetv2_50x1_bit",
        lambda: tiny(norm=_GROUP_NORM, conv_layer=partial(StdConv2d, eps=1e-8), stem_type="fixed"),
        45,
    ),
}

# Full-size networks whose state-dict index (keys and shapes) the tests convert: one of each
# block, stem and norm, and a wide BiT.
FULL_SIZE = [
    "resnetv2_18",
    "resnetv2_34d",
    "resnetv2_50",
    "resnetv2_101",
    "resnetv2_50d_gn",
    "resnetv2_50d_evos",
    "resnetv2_50x1_bit",
    "resnetv2_101x3_bit",
]


# Cases whose network is also written dilated: a bottleneck network at 8 and 16, basic blocks
# with averaging shortcuts (three stages: 16 is their full stride) at 8.
DILATED = {
    "resnetv2_50": (lambda s: small_resnetv2((2, 1, 1, 1), 8, output_stride=s), (8, 16)),
    "resnetv2_basic_d": (lambda s: tiny(basic=True, output_stride=s, **_DEEP), (8,)),
}


if __name__ == "__main__" and sys.argv[1:] == ["output_stride"]:
    for case, (build, output_strides) in DILATED.items():
        write_output_strides(case, build, output_strides)
elif __name__ == "__main__":
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size)
    write_index("resnetv2", FULL_SIZE)

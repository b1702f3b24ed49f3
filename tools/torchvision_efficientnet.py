"""torchvision's EfficientNet B0-B7 and V2-S/M/L, rebuilt with plain torch.nn for the parity
fixtures.

torchvision is not installed where the fixtures are made; this is its `EfficientNet` as
`torchvision/models/efficientnet.py` defines it for B0-B7 (the same `nn.Sequential` nesting, so
the same state-dict keys, and the same forward pass in evaluation; stochastic depth is
training-only and left out):

- `features.0`: a 3x3 stride-2 `Conv2dNormActivation` with SiLU.
- `features.{s + 1}.{j}`: the `MBConv` blocks of stage `s`, each a `.block` Sequential of the
  1x1 expansion (only when `_make_divisible(c_in * t, 8)` differs from `c_in`), the depthwise
  conv, `SqueezeExcitation` (squeeze width `max(1, c_in // 4)`, SiLU, sigmoid) and the 1x1
  projection without activation; the input is added when the stride is 1 and widths agree.
- `features.{n + 1}`: the 1x1 conv to `4 * c_last` with SiLU; `classifier.1` the Linear.

Widths `_make_divisible(c * width_mult, 8)`, repeats `ceil(n * depth_mult)`. BatchNorm is
PyTorch's default (epsilon 1e-5) for B0-B4, epsilon 1e-3 for B5-B7 (ported from TensorFlow).

V2 (`efficientnet_v2_s/m/l`): the stages of its `_efficientnet_conf` (`FusedMBConv` for the
first three: a kxk strided expansion `Conv2dNormActivation` and a 1x1 projection without
activation, or, without expansion, the one kxk convolution with SiLU; the input added when the
stride is 1 and the widths agree), `last_channel=1280`, epsilon 1e-3 everywhere. torchvision
builds V2 at multipliers 1 only; the parity fixture scales the same table by `width_mult` and
`depth_mult` as B0's, with its class's `last_channel` argument for the head.
"""

import math
from functools import partial

import torch
from torch import nn
from torchvision_mobilenet import Conv2dNormActivation, SqueezeExcitation, _make_divisible

# B0's stages: (expansion, kernel, stride, input channels, output channels, repeats).
STAGES = [
    (1, 3, 1, 32, 16, 1),
    (6, 3, 2, 16, 24, 2),
    (6, 5, 2, 24, 40, 2),
    (6, 3, 2, 40, 80, 3),
    (6, 5, 1, 80, 112, 3),
    (6, 5, 2, 112, 192, 4),
    (6, 3, 1, 192, 320, 1),
]
# V2's: the same, with the block kind last (`_efficientnet_conf`'s FusedMBConvConfig/MBConvConfig).
V2_STAGES = {
    "efficientnet_v2_s": [
        (1, 3, 1, 24, 24, 2, "fused"),
        (4, 3, 2, 24, 48, 4, "fused"),
        (4, 3, 2, 48, 64, 4, "fused"),
        (4, 3, 2, 64, 128, 6, "mbconv"),
        (6, 3, 1, 128, 160, 9, "mbconv"),
        (6, 3, 2, 160, 256, 15, "mbconv"),
    ],
    "efficientnet_v2_m": [
        (1, 3, 1, 24, 24, 3, "fused"),
        (4, 3, 2, 24, 48, 5, "fused"),
        (4, 3, 2, 48, 80, 5, "fused"),
        (4, 3, 2, 80, 160, 7, "mbconv"),
        (6, 3, 1, 160, 176, 14, "mbconv"),
        (6, 3, 2, 176, 304, 18, "mbconv"),
        (6, 3, 1, 304, 512, 5, "mbconv"),
    ],
    "efficientnet_v2_l": [
        (1, 3, 1, 32, 32, 4, "fused"),
        (4, 3, 2, 32, 64, 7, "fused"),
        (4, 3, 2, 64, 96, 7, "fused"),
        (4, 3, 2, 96, 192, 10, "mbconv"),
        (6, 3, 1, 192, 224, 19, "mbconv"),
        (6, 3, 2, 224, 384, 25, "mbconv"),
        (6, 3, 1, 384, 640, 7, "mbconv"),
    ],
}
# name -> (width_mult, depth_mult, BatchNorm epsilon)
VARIANTS = {
    "efficientnet_b0": (1.0, 1.0, 1e-5),
    "efficientnet_b1": (1.0, 1.1, 1e-5),
    "efficientnet_b2": (1.1, 1.2, 1e-5),
    "efficientnet_b3": (1.2, 1.4, 1e-5),
    "efficientnet_b4": (1.4, 1.8, 1e-5),
    "efficientnet_b5": (1.6, 2.2, 1e-3),
    "efficientnet_b6": (1.8, 2.6, 1e-3),
    "efficientnet_b7": (2.0, 3.1, 1e-3),
}


class MBConv(nn.Module):
    def __init__(self, expand_ratio, kernel, stride, c_in, c_out, norm_layer):
        super().__init__()
        self.use_res_connect = stride == 1 and c_in == c_out
        expanded = _make_divisible(c_in * expand_ratio, 8)
        layers = []
        if expanded != c_in:
            layers.append(
                Conv2dNormActivation(
                    c_in, expanded, kernel_size=1, norm_layer=norm_layer, activation_layer=nn.SiLU
                )
            )
        layers.append(
            Conv2dNormActivation(
                expanded,
                expanded,
                kernel_size=kernel,
                stride=stride,
                groups=expanded,
                norm_layer=norm_layer,
                activation_layer=nn.SiLU,
            )
        )
        layers.append(SqueezeExcitation(expanded, max(1, c_in // 4), activation=nn.SiLU))
        layers.append(
            Conv2dNormActivation(
                expanded, c_out, kernel_size=1, norm_layer=norm_layer, activation_layer=None
            )
        )
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        result = self.block(x)
        return result + x if self.use_res_connect else result


class FusedMBConv(nn.Module):
    def __init__(self, expand_ratio, kernel, stride, c_in, c_out, norm_layer):
        super().__init__()
        self.use_res_connect = stride == 1 and c_in == c_out
        expanded = _make_divisible(c_in * expand_ratio, 8)
        conv = partial(Conv2dNormActivation, norm_layer=norm_layer)
        if expanded != c_in:
            layers = [
                conv(c_in, expanded, kernel_size=kernel, stride=stride, activation_layer=nn.SiLU),
                conv(expanded, c_out, kernel_size=1, activation_layer=None),
            ]
        else:
            layers = [
                conv(c_in, c_out, kernel_size=kernel, stride=stride, activation_layer=nn.SiLU)
            ]
        self.block = nn.Sequential(*layers)

    def forward(self, x):
        result = self.block(x)
        return result + x if self.use_res_connect else result


BLOCKS = {"mbconv": MBConv, "fused": FusedMBConv}


class EfficientNet(nn.Module):
    def __init__(
        self,
        width_mult,
        depth_mult,
        bn_eps=1e-5,
        num_classes=1000,
        stages=STAGES,
        last_channel=None,
    ):
        super().__init__()
        norm_layer = partial(nn.BatchNorm2d, eps=bn_eps)
        width = lambda c: _make_divisible(c * width_mult, 8)  # noqa: E731
        layers = [
            Conv2dNormActivation(
                3, width(stages[0][3]), stride=2, norm_layer=norm_layer, activation_layer=nn.SiLU
            )
        ]
        for t, k, s, c_in, c_out, n, *kind in stages:
            block = BLOCKS[kind[0] if kind else "mbconv"]
            c_in, c_out = width(c_in), width(c_out)
            blocks = []
            for j in range(int(math.ceil(n * depth_mult))):
                blocks.append(block(t, k, s if j == 0 else 1, c_in, c_out, norm_layer))
                c_in = c_out
            layers.append(nn.Sequential(*blocks))
        last = width(stages[-1][4])
        head = last_channel or 4 * last
        layers.append(
            Conv2dNormActivation(
                last, head, kernel_size=1, norm_layer=norm_layer, activation_layer=nn.SiLU
            )
        )
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(p=0.2), nn.Linear(head, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def create_model(name: str) -> nn.Module:
    """torchvision's full-size `efficientnet_b0` ... `efficientnet_b7`, `efficientnet_v2_*`."""
    if name in V2_STAGES:
        return EfficientNet(1.0, 1.0, 1e-3, stages=V2_STAGES[name], last_channel=1280)
    return EfficientNet(*VARIANTS[name])

"""Parity fixtures of the ConvNeXt family (see tools/parity.py for how to run it).

timm's cases are timm's own `ConvNeXt` class with reduced depths and widths. torchvision is not
installed here, so its case is `TorchvisionConvNeXt` below: torchvision's
`torchvision/models/convnext.py` (`CNBlock`, `ConvNeXt`, `LayerNorm2d`, `Permute`, and
`Conv2dNormActivation` as `ops/misc.py` builds it for the stem) rebuilt with plain torch.nn, the
same `nn.Sequential` nesting (so the same state-dict keys) and the same forward pass.

tools/parity.py's perturbation draws the layer scales and LayerNorm scales from U(0.5, 1.5)
(at their initial 1e-6 the residual branches would vanish from the logits). Image sizes that are
not multiples of 32 (the 4x4/4 stem and the 2x2/2 downsamplings are 'VALID': they drop the
remainder, as PyTorch does) are among the cases.
"""

import sys
from functools import partial

import torch
from parity import timm, write_case, write_index, write_output_strides  # noqa: F401  (timm first)
from timm.models.convnext import ConvNeXt  # noqa: E402
from torch import nn


class LayerNorm2d(nn.LayerNorm):
    """torchvision.models.convnext.LayerNorm2d: LayerNorm over the channels of NCHW maps."""

    def forward(self, x):
        x = x.permute(0, 2, 3, 1)
        x = nn.functional.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class Permute(nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.dims = dims

    def forward(self, x):
        return torch.permute(x, self.dims)


class CNBlock(nn.Module):
    """torchvision's block: `block.{0..6}` and the layer scale `[c, 1, 1]` (stochastic depth is
    the identity in evaluation)."""

    def __init__(self, dim, layer_scale=1e-6):
        super().__init__()
        self.block = nn.Sequential(
            nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim, bias=True),
            Permute([0, 2, 3, 1]),
            nn.LayerNorm(dim, eps=1e-6),
            nn.Linear(dim, 4 * dim, bias=True),
            nn.GELU(),
            nn.Linear(4 * dim, dim, bias=True),
            Permute([0, 3, 1, 2]),
        )
        self.layer_scale = nn.Parameter(torch.ones(dim, 1, 1) * layer_scale)

    def forward(self, x):
        return x + self.layer_scale * self.block(x)


class TorchvisionConvNeXt(nn.Module):
    """torchvision.models.convnext.ConvNeXt for `(depth, width)` stages."""

    def __init__(self, depths, widths, num_classes=1000):
        super().__init__()
        norm = partial(LayerNorm2d, eps=1e-6)
        # Conv2dNormActivation(3, w, kernel_size=4, stride=4, padding=0, norm, no activation,
        # bias=True): `.0` the conv, `.1` the norm.
        layers = [nn.Sequential(nn.Conv2d(3, widths[0], 4, stride=4, padding=0), norm(widths[0]))]
        for i, (depth, width) in enumerate(zip(depths, widths, strict=True)):
            layers.append(nn.Sequential(*[CNBlock(width) for _ in range(depth)]))
            if i + 1 < len(widths):
                layers.append(
                    nn.Sequential(norm(width), nn.Conv2d(width, widths[i + 1], 2, stride=2))
                )
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            norm(widths[-1]), nn.Flatten(1), nn.Linear(widths[-1], num_classes)
        )

    def forward(self, x):
        return self.classifier(self.avgpool(self.features(x)))


SMALL = {"depths": (1, 1, 2, 1), "widths": (16, 32, 48, 64)}


def small_timm(**kw) -> nn.Module:
    return ConvNeXt(depths=SMALL["depths"], dims=SMALL["widths"], num_classes=10, **kw)


# name -> (architecture in config.json, the small network, image size); the tests hold the
# matching `load_pretrained` keyword arguments (SMALL).
CASES = {
    "convnext": ("convnext_tiny", small_timm, 72),
    "convnext_odd": ("convnext_base", small_timm, 83),  # 83 -> 20 -> 10 -> 5 -> 2
    # ConvNeXt V2 (GRN, no layer scale), with timm's 1x1-convolution MLP of its small sizes.
    "convnextv2_conv_mlp": (
        "convnextv2_atto",
        partial(small_timm, use_grn=True, ls_init_value=None, conv_mlp=True),
        64,
    ),
    "tv_convnext": (
        "convnext_tiny",
        lambda: TorchvisionConvNeXt(**SMALL, num_classes=10),
        64,
    ),
}

# Full-size networks whose state-dict index (keys and shapes) the tests convert: timm's, and
# torchvision's layout (`[name torchvision]`).
NAMES = ["convnext_tiny", "convnext_small", "convnext_base", "convnext_large"]
NAMES += ["convnext_atto", "convnext_nano", "convnext_xlarge", "convnext_xxlarge"]
NAMES += ["convnextv2_atto", "convnextv2_tiny", "convnextv2_huge"]
TORCHVISION = {
    "convnext_tiny torchvision": ((3, 3, 9, 3), (96, 192, 384, 768)),
    "convnext_large torchvision": ((3, 3, 27, 3), (192, 384, 768, 1536)),
}


def create(name: str) -> nn.Module:
    if name in TORCHVISION:
        return TorchvisionConvNeXt(*TORCHVISION[name])
    return timm.create_model(name, pretrained=False)


# The case dilated by timm's `output_stride` (8, 16): its small network at that stride on the
# written weights (V2's blocks differ only in their MLP, which dilation does not touch). At 8
# the last two stages keep 9-pixel maps (72 px), at 16 the last one 4.
OUTPUT_STRIDES = {"convnext": lambda s: small_timm(output_stride=s)}

if __name__ == "__main__":
    if sys.argv[1:] == ["output_stride"]:  # only the dilated logits: the cases stay as written
        for case, build in OUTPUT_STRIDES.items():
            write_output_strides(case, build)
        sys.exit()
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size)
    write_index("convnext", NAMES + list(TORCHVISION), create)

"""Parity fixtures of the VGG and AlexNet family (see tools/parity.py for how to run it).

timm's VGG is the reference for timm's key layout. torchvision is not installed here, so the
references for torchvision's layout (VGG's `classifier.0/3/6`, AlexNet) are torchvision's
`VGG`/`make_layers` and `AlexNet`, written out below layer for layer with plain torch.nn, at
reduced widths.
"""

import torch
from parity import ROOT, timm, write_case, write_index  # noqa: F401  (timm first: the shims)
from timm.layers import ClassifierHead  # noqa: E402
from timm.models.vgg import VGG, ConvMlp  # noqa: E402
from torch import nn  # noqa: E402


def vgg_cfg(stage_sizes, widths):
    """A `cfg` list of timm's and torchvision's `make_layers`: widths, 'M' after each stage."""
    return [v for size, w in zip(stage_sizes, widths, strict=True) for v in [w] * size + ["M"]]


def small_timm_vgg(stage_sizes, widths, fc_width, batch_norm) -> VGG:
    """timm's VGG with its 4096-wide `pre_logits` and head rebuilt `fc_width` wide (timm fixes
    4096; ours is the `fc_width` field)."""
    norm = nn.BatchNorm2d if batch_norm else None
    model = VGG(vgg_cfg(stage_sizes, widths), num_classes=10, norm_layer=norm)
    model.pre_logits = ConvMlp(widths[-1], fc_width, 7, drop_rate=0.0)
    model.head = ClassifierHead(fc_width, 10, pool_type="avg")
    return model


class TorchvisionVGG(nn.Module):
    """torchvision.models.vgg.VGG over `make_layers(cfg, batch_norm)`."""

    def __init__(self, cfg, batch_norm, num_classes=1000, fc_width=4096, dropout=0.5):
        super().__init__()
        layers, channels = [], 3
        for v in cfg:
            if v == "M":
                layers += [nn.MaxPool2d(kernel_size=2, stride=2)]
                continue
            conv = nn.Conv2d(channels, v, kernel_size=3, padding=1)
            norm = [nn.BatchNorm2d(v)] if batch_norm else []
            layers += [conv, *norm, nn.ReLU(inplace=True)]
            channels = v
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(channels * 7 * 7, fc_width),
            nn.ReLU(True),
            nn.Dropout(p=dropout),
            nn.Linear(fc_width, fc_width),
            nn.ReLU(True),
            nn.Dropout(p=dropout),
            nn.Linear(fc_width, num_classes),
        )

    def forward(self, x):
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


class TorchvisionAlexNet(nn.Module):
    """torchvision.models.alexnet.AlexNet, with its widths as arguments."""

    def __init__(
        self, widths=(64, 192, 384, 256, 256), num_classes=1000, fc_width=4096, dropout=0.5
    ):
        super().__init__()
        w1, w2, w3, w4, w5 = widths
        self.features = nn.Sequential(
            nn.Conv2d(3, w1, kernel_size=11, stride=4, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(w1, w2, kernel_size=5, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(w2, w3, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(w3, w4, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(w4, w5, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
        )
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(
            nn.Dropout(p=dropout),
            nn.Linear(w5 * 6 * 6, fc_width),
            nn.ReLU(inplace=True),
            nn.Dropout(p=dropout),
            nn.Linear(fc_width, fc_width),
            nn.ReLU(inplace=True),
            nn.Linear(fc_width, num_classes),
        )

    def forward(self, x):
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


WIDTHS = (8, 16, 16, 24, 24)
FULL_WIDTHS = (64, 128, 256, 512, 512)
ALEXNET_WIDTHS = (8, 16, 24, 16, 16)

# name -> (architecture in config.json, the small reference, image size[, calibration size]);
# the tests hold the matching `load_pretrained` keyword arguments. Sizes: 84 leaves odd maps (21,
# 5) and a 2x2 one pooled up to 7x7 over overlapping bins; 64 even maps. Two cases have three
# stages only, so that small images leave maps larger than 7x7: 10x10 (83), over which timm
# slides fc6, and 9x9 (75), which torchvision pools down to 7x7. AlexNet's 96 and 111 leave even
# and odd maps after its stride-4 first layer.
CASES = {
    "vgg_timm": (
        "vgg11",
        lambda: small_timm_vgg((1, 1, 2, 2, 2), WIDTHS, 32, batch_norm=False),
        84,
    ),
    "vgg_bn_timm": (
        "vgg16_bn",
        lambda: small_timm_vgg((2, 2, 3, 3, 3), WIDTHS, 32, batch_norm=True),
        64,
    ),
    "vgg_timm_large": (
        "vgg11",
        lambda: small_timm_vgg((1, 1, 2), WIDTHS[:3], 32, batch_norm=False),
        83,
    ),
    "vgg_bn_torchvision": (
        "vgg11_bn",
        lambda: TorchvisionVGG(vgg_cfg((1, 1, 2), WIDTHS[:3]), True, 10, fc_width=32),
        75,
    ),
    "alexnet": (
        "alexnet",
        lambda: TorchvisionAlexNet(ALEXNET_WIDTHS, 10, fc_width=32),
        96,
        96,  # AlexNet's three 3x3/2 pools need 63 pixels or more
    ),
    "alexnet_odd": (
        "alexnet",
        lambda: TorchvisionAlexNet(ALEXNET_WIDTHS, 10, fc_width=32),
        111,
        96,
    ),
}

# Full-size networks whose state-dict index (keys and shapes) the tests convert: timm's, then
# torchvision's layouts (`[name torchvision]` where timm has the name too).
FULL_SIZE = ["vgg11", "vgg13", "vgg16", "vgg19", "vgg11_bn", "vgg13_bn", "vgg16_bn", "vgg19_bn"]
TORCHVISION = {
    "vgg16 torchvision": lambda: TorchvisionVGG(vgg_cfg((2, 2, 3, 3, 3), FULL_WIDTHS), False),
    "vgg19_bn torchvision": lambda: TorchvisionVGG(vgg_cfg((2, 2, 4, 4, 4), FULL_WIDTHS), True),
    "alexnet": TorchvisionAlexNet,
}


def append_index(family: str, builders) -> None:
    """Sections for reference networks timm does not build, after `write_index`'s."""
    lines = []
    for section, build in builders.items():
        with torch.device("meta"):
            model = build()
        lines.append(f"[{section}]")
        lines += [f"{k} {','.join(map(str, v.shape))}" for k, v in model.state_dict().items()]
    with (ROOT / "state_dicts" / f"{family}.txt").open("a") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    for case, (arch, build, size, *calibration) in CASES.items():
        write_case(case, arch, build, size, *calibration)
    write_index("vgg", FULL_SIZE)
    append_index("vgg", TORCHVISION)

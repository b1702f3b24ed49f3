"""Parity fixtures of the Inception family (see tools/parity.py for how to run it).

Inception v3: timm's `InceptionV3` itself, thinned as our `depth_multiplier` / `min_depth` thin
ours (every convolution `max(int(d * m), min_depth)` wide; lazy convolutions take whatever the
thinned blocks concatenate). GoogLeNet: torchvision's `GoogLeNet` (torchvision is not installed
here), rebuilt below with plain torch.nn from its source, thinned the same way.
"""

import contextlib
import sys
from functools import partial

import torch
from parity import timm, write_case, write_index  # noqa: F401  (timm first: it applies the shims)
from torch import nn
from torch.nn import functional as F  # noqa: N812

timm_inception = sys.modules["timm.models.inception_v3"]  # the attribute is the function

MIN_DEPTH = 8  # the tests' load_pretrained arguments: min_depth, and depth_multiplier below


def depth(features: int, multiplier: float = 0.1) -> int:
    return max(int(features * multiplier), MIN_DEPTH)


# Inception v3


def thin_conv_norm_act(
    in_channels, out_channels, kernel_size=1, stride=1, padding="", multiplier=0.1, **kw
):
    """timm's ConvNormAct, `depth(out_channels, multiplier)` wide, of any input width."""
    del in_channels
    width = depth(out_channels, multiplier)
    block = timm.layers.ConvNormAct(1, width, kernel_size, stride, padding, **kw)
    block.conv = nn.LazyConv2d(width, kernel_size, stride, padding, bias=False)
    return block


class InceptionV3(timm_inception.InceptionV3):
    """timm's, with the auxiliary head run in training only (as torchvision's), so that eval runs
    on images too small for it."""

    def forward(self, x):
        self.aux_logits = self.training and self.AuxLogits is not None
        return super().forward(x)


def small_inception_v3(aux_logits: bool) -> nn.Module:
    with (
        _patched(timm_inception, "ConvNormAct", thin_conv_norm_act),
        _patched(timm_inception, "trunc_normal_", _init_unless_lazy),
    ):
        model = InceptionV3(num_classes=10, aux_logits=aux_logits)
    model.fc = nn.LazyLinear(10)
    if aux_logits:
        model.AuxLogits.fc = nn.LazyLinear(10)
        model.train()(torch.zeros(2, 3, 299, 299))  # materialises the lazy layers
    model.eval()(torch.zeros(1, 3, 107, 107))
    for module in model.modules():  # perturb's statistics only
        if isinstance(module, nn.BatchNorm2d):
            module.reset_running_stats()
    return model


def _init_unless_lazy(tensor, **kwargs):
    """timm's initialiser, but for lazy convolutions (PyTorch's own initialises them)."""
    if not isinstance(tensor, nn.parameter.UninitializedParameter):
        timm.layers.trunc_normal_(tensor, **kwargs)


class _TensorFlowPools:
    """torch.nn.functional with TensorFlow's average pools, which leave the padding out."""

    def __getattr__(self, name):
        return getattr(F, name)

    @staticmethod
    def avg_pool2d(x, *args, **kwargs):
        return F.avg_pool2d(x, *args, count_include_pad=False, **kwargs)


@contextlib.contextmanager
def _patched(module, name, value):
    saved = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, saved)


# GoogLeNet: torchvision/models/googlenet.py, module for module.


class BasicConv2d(nn.Module):
    def __init__(self, in_channels, out_channels, **kwargs):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, bias=False, **kwargs)
        self.bn = nn.BatchNorm2d(out_channels, eps=0.001)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)), inplace=True)


class Inception(nn.Module):
    def __init__(self, in_channels, ch1x1, ch3x3red, ch3x3, ch5x5red, ch5x5, pool_proj):
        super().__init__()
        self.branch1 = BasicConv2d(in_channels, ch1x1, kernel_size=1)
        self.branch2 = nn.Sequential(
            BasicConv2d(in_channels, ch3x3red, kernel_size=1),
            BasicConv2d(ch3x3red, ch3x3, kernel_size=3, padding=1),
        )
        self.branch3 = nn.Sequential(
            BasicConv2d(in_channels, ch5x5red, kernel_size=1),
            # torchvision: "Here, kernel_size=3 instead of kernel_size=5 is a known bug."
            BasicConv2d(ch5x5red, ch5x5, kernel_size=3, padding=1),
        )
        self.branch4 = nn.Sequential(
            nn.MaxPool2d(kernel_size=3, stride=1, padding=1, ceil_mode=True),
            BasicConv2d(in_channels, pool_proj, kernel_size=1),
        )

    def forward(self, x):
        branches = [self.branch1(x), self.branch2(x), self.branch3(x), self.branch4(x)]
        return torch.cat(branches, 1)


class InceptionAux(nn.Module):
    def __init__(self, in_channels, num_classes, dropout=0.7, width=128):
        super().__init__()
        self.conv = BasicConv2d(in_channels, width, kernel_size=1)
        self.fc1 = nn.Linear(width * 16, 1024)
        self.fc2 = nn.Linear(1024, num_classes)
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x):
        x = F.adaptive_avg_pool2d(x, (4, 4))
        x = torch.flatten(self.conv(x), 1)
        x = self.dropout(F.relu(self.fc1(x), inplace=True))
        return self.fc2(x)


# torchvision's Inception(...) widths, in_channels left out (the previous module's output).
GOOGLENET_MODULES = {
    "inception3a": (64, 96, 128, 16, 32, 32),
    "inception3b": (128, 128, 192, 32, 96, 64),
    "inception4a": (192, 96, 208, 16, 48, 64),
    "inception4b": (160, 112, 224, 24, 64, 64),
    "inception4c": (128, 128, 256, 24, 64, 64),
    "inception4d": (112, 144, 288, 32, 64, 64),
    "inception4e": (256, 160, 320, 32, 128, 128),
    "inception5a": (256, 160, 320, 32, 128, 128),
    "inception5b": (384, 192, 384, 48, 128, 128),
}


class GoogLeNet(nn.Module):
    """torchvision's GoogLeNet(aux_logits=True, transform_input=False, dropout=0.2), every
    convolution `width(d)` wide; the auxiliary heads run in training only, as there."""

    def __init__(self, num_classes=1000, width=lambda d: d):
        super().__init__()
        pool = partial(nn.MaxPool2d, stride=2, ceil_mode=True)
        self.conv1 = BasicConv2d(3, width(64), kernel_size=7, stride=2, padding=3)
        self.maxpool1 = pool(3)
        self.conv2 = BasicConv2d(width(64), width(64), kernel_size=1)
        self.conv3 = BasicConv2d(width(64), width(192), kernel_size=3, padding=1)
        self.maxpool2 = pool(3)
        channels = width(192)
        for name, widths in GOOGLENET_MODULES.items():
            thin = [width(w) for w in widths]
            setattr(self, name, Inception(channels, *thin))
            channels = thin[0] + thin[2] + thin[4] + thin[5]
            if name == "inception4a":
                self.aux1 = InceptionAux(channels, num_classes, width=width(128))
            if name == "inception4d":
                self.aux2 = InceptionAux(channels, num_classes, width=width(128))
        self.maxpool3 = pool(3)
        self.maxpool4 = pool(2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.dropout = nn.Dropout(p=0.2)
        self.fc = nn.Linear(channels, num_classes)

    def forward(self, x):
        x = self.maxpool2(self.conv3(self.conv2(self.maxpool1(self.conv1(x)))))
        x = self.inception3b(self.inception3a(x))
        x = self.inception4a(self.maxpool3(x))
        if self.training:
            self.aux1(x)
        x = self.inception4d(self.inception4c(self.inception4b(x)))
        if self.training:
            self.aux2(x)
        x = self.inception5b(self.inception5a(self.maxpool4(self.inception4e(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(self.dropout(x))


def full_size(architecture: str) -> nn.Module:
    if architecture == "googlenet":
        return GoogLeNet()
    # torchvision's file (`inception_v3`, timm's `tv_in1k`) has the auxiliary head; timm's ports
    # of Slim's checkpoints do not.
    return timm.create_model(architecture, aux_logits=architecture == "inception_v3")


if __name__ == "__main__":
    write_case("inception_v3", "inception_v3", partial(small_inception_v3, True), 107, 299)
    with _patched(timm_inception, "F", _TensorFlowPools()):
        write_case(
            "inception_v3_tf",
            "inception_v3",
            partial(small_inception_v3, False),
            107,
            107,
            config={"pretrained_cfg": {"tag": "tf_in1k"}},
        )
    # 1/16: the auxiliary heads' 1024-wide fc1 (a full-size width) keeps the file under 1 MB.
    write_case(
        "googlenet", "googlenet", lambda: GoogLeNet(10, partial(depth, multiplier=1 / 16)), 64, 64
    )
    write_index("inception", ["inception_v3", "inception_v3.tf_in1k", "googlenet"], full_size)

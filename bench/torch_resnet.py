"""PyTorch's train step on CPU, the yardstick for `train_step.py --torch`: ResNet-18/50, the CIFAR
ResNet-20/32/44/56/110, and any of timm's networks (the ViTs, ...) when timm is installed.

torchvision is not installed for CPU here, so the ResNets are rebuilt from its layout (v1.5: the
stride on the bottleneck's 3x3). The CIFAR ResNets are He et al.'s (and `nets.resnet`'s
`CifarResNet`): a 3x3 stem, 16/32/64 filters, option-A shortcuts (subsample, zero-pad the
channels). `--channels-last` runs PyTorch in its `channels_last` memory format, often its faster
layout on CPU. PyTorch is optional and never a dependency of the project. In an environment with
torch and timm but not JAX, this file times one network by itself:

    PYTHONPATH=../shared/tools /work/torchenv/bin/python bench/torch_resnet.py \
        vit_small_patch16_224 --batch 8 --size 224 --steps 5
"""

import argparse
import importlib
import statistics
import time
from functools import partial

import torch
from torch import nn


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False),
            nn.BatchNorm2d(planes),
            nn.ReLU(inplace=True),
            nn.Conv2d(planes, planes, 3, 1, 1, bias=False),
            nn.BatchNorm2d(planes),
        )
        self.shortcut = _projection(inplanes, planes, stride)

    def forward(self, x):
        return torch.relu(self.body(x) + self.shortcut(x))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(inplanes, planes, 1, bias=False),
            nn.BatchNorm2d(planes),
            nn.ReLU(inplace=True),
            nn.Conv2d(planes, planes, 3, stride, 1, bias=False),
            nn.BatchNorm2d(planes),
            nn.ReLU(inplace=True),
            nn.Conv2d(planes, planes * 4, 1, bias=False),
            nn.BatchNorm2d(planes * 4),
        )
        self.shortcut = _projection(inplanes, planes * 4, stride)

    def forward(self, x):
        return torch.relu(self.body(x) + self.shortcut(x))


def _projection(inplanes: int, outplanes: int, stride: int) -> nn.Module:
    if inplanes == outplanes and stride == 1:
        return nn.Identity()
    return nn.Sequential(
        nn.Conv2d(inplanes, outplanes, 1, stride, bias=False), nn.BatchNorm2d(outplanes)
    )


class OptionAShortcut(nn.Module):
    """He et al.'s parameter-free CIFAR shortcut: subsample, zero-pad the new channels."""

    def __init__(self, outplanes: int, stride: int):
        super().__init__()
        self.outplanes, self.stride = outplanes, stride

    def forward(self, x):
        x = x[:, :, :: self.stride, :: self.stride]
        return nn.functional.pad(x, (0, 0, 0, 0, 0, self.outplanes - x.shape[1]))


class CifarBlock(BasicBlock):
    def __init__(self, inplanes: int, planes: int, stride: int):
        super().__init__(inplanes, planes, stride)
        if inplanes != planes or stride != 1:
            self.shortcut = OptionAShortcut(planes, stride)


def cifar_resnet(n: int, num_classes: int) -> nn.Module:
    """ResNet-(6n+2) for 32 px: 3x3 stem, three stages of `n` blocks with 16/32/64 filters."""
    layers = [nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True)]
    inplanes = 16
    for i in range(3):
        planes = 16 * 2**i
        for j in range(n):
            layers.append(CifarBlock(inplanes, planes, 2 if i > 0 and j == 0 else 1))
            inplanes = planes
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(inplanes, num_classes)]
    return nn.Sequential(*layers)


def resnet(block, stage_sizes, num_classes: int) -> nn.Module:
    layers = [
        nn.Conv2d(3, 64, 7, 2, 3, bias=False),
        nn.BatchNorm2d(64),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, 1),
    ]
    inplanes = 64
    for i, size in enumerate(stage_sizes):
        for j in range(size):
            planes = 64 * 2**i
            layers.append(block(inplanes, planes, 2 if i > 0 and j == 0 else 1))
            inplanes = planes * block.expansion
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(inplanes, num_classes)]
    return nn.Sequential(*layers)


NETWORKS = {
    "resnet18": partial(resnet, BasicBlock, (2, 2, 2, 2)),
    "resnet50": partial(resnet, Bottleneck, (3, 4, 6, 3)),
    **{f"resnet{6 * n + 2}": partial(cifar_resnet, n) for n in (3, 5, 7, 9, 18)},
}


class Timer:
    """The same step as `train_step.make_step` in PyTorch eager mode: SGD momentum, CE, BN."""

    compile_s = None

    def __init__(
        self, name: str, batch: int, size: int, num_classes: int, channels_last: bool = False
    ):
        torch.manual_seed(0)
        if name in NETWORKS:
            self.model = NETWORKS[name](num_classes).train()
        else:
            self.model = _timm(name).create_model(name, num_classes=num_classes).train()
        self.images = torch.randn(batch, 3, size, size)
        if channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
            self.images = self.images.contiguous(memory_format=torch.channels_last)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)
        self.labels = torch.randint(0, num_classes, (batch,))
        self.times: list[float] = []
        self._step()  # warm-up

    def _step(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(self.model(self.images), self.labels)
        loss.backward()
        self.optimizer.step()

    def run(self) -> None:
        start = time.perf_counter()
        self._step()
        self.times.append(time.perf_counter() - start)


def _timm(name: str):
    """timm, imported plainly or through `timm_compat` (the shims for an environment without
    torchvision), for a network the ResNets above are not."""
    for module, attribute in (("timm", None), ("timm_compat", "import_timm")):
        try:
            imported = importlib.import_module(module)
        except ImportError:
            continue
        return getattr(imported, attribute)() if attribute else imported
    known = f"{sorted(NETWORKS)} (and timm's networks, with timm installed)"
    raise ValueError(f"--torch knows {known}, not {name!r}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Times PyTorch's eager train step on CPU.")
    parser.add_argument("name")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--num-classes", type=int, default=1000)
    parser.add_argument("--channels-last", action="store_true", help="torch.channels_last")
    args = parser.parse_args()
    timer = Timer(args.name, args.batch, args.size, args.num_classes, args.channels_last)
    for _ in range(args.steps):
        timer.run()
    step = statistics.median(timer.times)
    print(
        f"{args.name} batch {args.batch} @ {args.size}px, PyTorch {torch.__version__} eager, "
        f"{'channels_last, ' * args.channels_last}{torch.get_num_threads()} threads: "
        f"step {step * 1e3:.1f} ms, "
        f"{args.batch / step:.1f} img/s"
    )

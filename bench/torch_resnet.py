"""PyTorch's train step on CPU, the yardstick for `train_step.py --torch`: ResNet-18/50, and any
of timm's networks (the ViTs, ...) when timm is installed.

torchvision is not installed for CPU here, so the ResNets are rebuilt from its layout (v1.5: the
stride on the bottleneck's 3x3). PyTorch is optional and never a dependency of the project. In an
environment with torch and timm but not JAX, this file times one network by itself:

    PYTHONPATH=../shared/tools /work/torchenv/bin/python bench/torch_resnet.py \
        vit_small_patch16_224 --batch 8 --size 224 --steps 5
"""

import argparse
import importlib
import statistics
import time

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
    "resnet18": (BasicBlock, (2, 2, 2, 2)),
    "resnet50": (Bottleneck, (3, 4, 6, 3)),
}


class Timer:
    """The same step as `train_step.make_step` in PyTorch eager mode: SGD momentum, CE, BN."""

    compile_s = None

    def __init__(self, name: str, batch: int, size: int, num_classes: int):
        torch.manual_seed(0)
        if name in NETWORKS:
            self.model = resnet(*NETWORKS[name], num_classes).train()
        else:
            self.model = _timm(name).create_model(name, num_classes=num_classes).train()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9)
        self.images = torch.randn(batch, 3, size, size)
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
    args = parser.parse_args()
    timer = Timer(args.name, args.batch, args.size, args.num_classes)
    for _ in range(args.steps):
        timer.run()
    step = statistics.median(timer.times)
    print(
        f"{args.name} batch {args.batch} @ {args.size}px, PyTorch {torch.__version__} eager, "
        f"{torch.get_num_threads()} threads: step {step * 1e3:.1f} ms, "
        f"{args.batch / step:.1f} img/s"
    )

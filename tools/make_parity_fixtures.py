"""Writes the parity fixtures of `tests/test_pretrained.py` with the reference code (timm).

Run on a developer machine with torch and timm (never dependencies of the project):

    python3 -m venv /tmp/torchenv && /tmp/torchenv/bin/pip install torch==2.13.0 numpy safetensors
    /tmp/torchenv/bin/pip install --no-deps timm
    PYTHONPATH=../shared/tools /tmp/torchenv/bin/python tools/make_parity_fixtures.py

For each case: a small configuration of a timm network, with non-trivial weights (norm scales
~U(0.5, 1.5), biases ~N(0, 0.1), BatchNorm statistics from a few training passes), saved as a
timm checkpoint would be (`<case>/model.safetensors`, `<case>/config.json`), and its eval-mode
logits on fixed inputs (`<case>/expected.safetensors`: `images` NHWC, `logits`). It also writes
`tests/fixtures/state_dicts.txt`: the key and shape of every tensor of the full-size networks,
which the tests convert abstractly.
"""

import json
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / ".." / "shared" / "tools"))
from timm_compat import import_timm  # noqa: E402

timm = import_timm()
from timm.models.resnet import BasicBlock, Bottleneck, ResNet, make_blocks  # noqa: E402

ROOT = Path(__file__).resolve().parents[1] / "tests" / "fixtures"


def small_resnet(block, layers, channels, **block_args) -> ResNet:
    """timm's ResNet with a stem of `channels[0]` filters (timm's is always 64 wide, as is ours
    at full size; ours is `num_filters` wide, so small tests shrink it too)."""
    model = ResNet(block, layers, num_classes=10, channels=channels, **block_args)
    model.conv1 = torch.nn.Conv2d(3, channels[0], 7, stride=2, padding=3, bias=False)
    model.bn1 = torch.nn.BatchNorm2d(channels[0])
    stages, _ = make_blocks(
        (block,) * len(channels),
        channels,
        layers,
        channels[0],
        act_layer=torch.nn.ReLU,
        norm_layer=torch.nn.BatchNorm2d,
        aa_layer=None,
        **block_args,
    )
    for name, stage in stages:
        setattr(model, name, stage)
    return model


# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments.
CASES = {
    "resnet_basic": (
        "resnet18",
        lambda: small_resnet(BasicBlock, (2, 1, 1, 1), (8, 16, 32, 64)),
        48,
    ),
    "resnet_bottleneck": (
        "resnet50",
        lambda: small_resnet(Bottleneck, (2, 1, 1, 1), (8, 16, 32, 64)),
        40,
    ),
    "resnext": (
        "resnext50_32x4d",
        lambda: small_resnet(Bottleneck, (1, 1, 1, 1), (8, 16, 32, 64), cardinality=4, base_width=16),
        44,
    ),
}

# Full-size networks whose state-dict index (keys and shapes) the tests convert.
FULL_SIZE = [
    "resnet18",
    "resnet34",
    "resnet50",
    "resnet101",
    "resnet152",
    "wide_resnet50_2",
    "wide_resnet101_2",
    "resnext50_32x4d",
    "resnext101_32x8d",
]


def perturb(model: torch.nn.Module, generator: torch.Generator) -> None:
    """Norm scales ~U(0.5, 1.5), biases ~N(0, 0.1), then BatchNorm statistics from training;
    finally every value rounded to float16, in which the fixture stores them (half the bytes;
    the logits are computed from the rounded values, in float32)."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.weight.uniform_(0.5, 1.5, generator=generator)
                module.bias.normal_(0.0, 0.1, generator=generator)
                module.momentum = None  # cumulative averages over the calibration passes
            elif getattr(module, "bias", None) is not None:
                module.bias.normal_(0.0, 0.1, generator=generator)
        model.train()
        for _ in range(4):
            model(torch.randn(8, 3, 56, 56, generator=generator))
        for tensor in model.state_dict().values():
            if tensor.is_floating_point():
                tensor.copy_(tensor.half().float())
    model.eval()


def write_case(name: str, architecture: str, build, size: int) -> None:
    generator = torch.Generator().manual_seed(sum(map(ord, name)))
    torch.manual_seed(0)
    model = build()
    perturb(model, generator)
    images = torch.randn(2, 3, size, size, generator=generator)
    with torch.no_grad():
        logits = model(images)
    folder = ROOT / "parity" / name
    folder.mkdir(parents=True, exist_ok=True)
    state = {
        k: v.half().numpy() if v.is_floating_point() else v.numpy()
        for k, v in model.state_dict().items()
    }
    save_file(state, folder / "model.safetensors")
    config = {"architecture": architecture, "num_classes": 10}
    (folder / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    save_file(
        {
            "images": np.ascontiguousarray(images.permute(0, 2, 3, 1).numpy()),
            "logits": logits.numpy(),
        },
        folder / "expected.safetensors",
    )
    print(f"{name}: {sum(v.size for v in state.values()):,} values, logits {tuple(logits.shape)}")


def write_index() -> None:
    lines = [
        "# key shape of every tensor of timm's full-size networks (tools/make_parity_fixtures.py)"
    ]
    for architecture in FULL_SIZE:
        with torch.device("meta"):
            model = timm.create_model(architecture, pretrained=False)
        lines.append(f"[{architecture}]")
        lines += [f"{k} {','.join(map(str, v.shape))}" for k, v in model.state_dict().items()]
    (ROOT / "state_dicts.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size)
    write_index()

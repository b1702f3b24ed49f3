"""What every parity-fixture script shares: the reference's weights made non-trivial, a case
written as a timm checkpoint would be, and a family's full-size state-dict index.

Run on a developer machine with torch and timm (never dependencies of the project):

    python3 -m venv /tmp/torchenv && /tmp/torchenv/bin/pip install torch==2.13.0 numpy safetensors
    /tmp/torchenv/bin/pip install --no-deps timm
    PYTHONPATH=../shared/tools /tmp/torchenv/bin/python tools/fixtures_<family>.py

Each case: a small configuration of a reference network with non-trivial weights (norm scales
~U(0.5, 1.5), biases ~N(0, 0.1), BatchNorm statistics from a few training passes, every value
rounded to float16), saved as `tests/fixtures/parity/<case>/model.safetensors` (float16) and
`config.json`, and its eval-mode logits on fixed inputs, computed in float32
(`expected.safetensors`: `images` NHWC, `logits`). The index
(`tests/fixtures/state_dicts/<family>.txt`) lists the key and shape of every tensor of the
family's full-size networks, which the tests convert abstractly.
"""

import json
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load_file, save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / ".." / "shared" / "tools"))
from timm_compat import import_timm  # noqa: E402

timm = import_timm()
ROOT = Path(__file__).resolve().parents[1] / "tests" / "fixtures"


def perturb(model: torch.nn.Module, generator: torch.Generator, calibration_size: int = 56) -> None:
    """Norm scales ~U(0.5, 1.5), biases ~N(0, 0.1), then BatchNorm statistics from nets_training on
    `calibration_size` pixel images; finally every value rounded to float16, in which the fixture
    stores them (half the bytes; the logits are computed from the rounded values, in float32).

    Layer scales (timm's `gamma`, torchvision's `layer_scale`) are drawn ~U(0.5, 1.5) too: at
    their initial 1e-6 the residual branches would vanish from the logits, and a wrong mapping of
    the blocks would go unseen. So are the scales of ConvNeXt V2's global response norms
    (initially zero: the identity), and NFNets' gains: of the standardised convolutions (the
    last of a block starts at zero without skip-init) and DeepMind's skip-init gains (zero).
    TinyViT's and LeViT's per-offset attention biases (initially zero, where their indexing would
    not show) are drawn ~N(0, 1); BatchNorm1d (LeViT's) as BatchNorm2d. (Networks without
    LayerNorm or layer scales draw as before.)"""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)):
                module.weight.uniform_(0.5, 1.5, generator=generator)
                module.bias.normal_(0.0, 0.1, generator=generator)
                module.momentum = None  # cumulative averages over the calibration passes
            elif getattr(module, "bias", None) is not None:
                if isinstance(module, torch.nn.LayerNorm) and module.weight is not None:
                    module.weight.uniform_(0.5, 1.5, generator=generator)
                module.bias.normal_(0.0, 0.1, generator=generator)
        for name, tensor in model.named_parameters():
            if name.rpartition(".")[2] in ("gamma", "layer_scale", "gain", "skipinit_gain"):
                tensor.uniform_(0.5, 1.5, generator=generator)
            elif name.endswith("attention_biases"):  # TinyViT's, LeViT's, EfficientFormer's: zero
                tensor.normal_(0.0, 1.0, generator=generator)
        for module in model.modules():  # ConvNeXt V2's GRN: at its initial 0, the identity
            if type(module).__name__ == "GlobalResponseNorm":
                module.weight.uniform_(0.5, 1.5, generator=generator)
        model.train()
        for _ in range(4):
            model(torch.randn(8, 3, calibration_size, calibration_size, generator=generator))
        for tensor in model.state_dict().values():
            if tensor.is_floating_point():
                tensor.copy_(tensor.half().float())
    model.eval()


def write_case(
    name: str,
    architecture: str,
    build: Callable[[], torch.nn.Module],
    size: int | tuple[int, int],
    calibration_size: int = 56,
    config: dict | None = None,
) -> None:
    """`size`: the images' side, or their (height, width); `config` adds to config.json (timm's
    `pretrained_cfg`, ...)."""
    generator = torch.Generator().manual_seed(sum(map(ord, name)))
    torch.manual_seed(0)
    model = build()
    perturb(model, generator, calibration_size)
    height, width = (size, size) if isinstance(size, int) else size
    images = torch.randn(2, 3, height, width, generator=generator)
    with torch.no_grad():
        logits = model(images)
    folder = ROOT / "parity" / name
    folder.mkdir(parents=True, exist_ok=True)
    state = {
        k: v.half().numpy() if v.is_floating_point() else v.numpy()
        for k, v in model.state_dict().items()
    }
    save_file(state, folder / "model.safetensors")
    config = {"architecture": architecture, "num_classes": 10, **(config or {})}
    (folder / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    save_file(
        {
            "images": np.ascontiguousarray(images.permute(0, 2, 3, 1).numpy()),
            # Features without a classifier are a strided view (the class token's row), which
            # safetensors would write as the buffer's first bytes.
            "logits": np.ascontiguousarray(logits.numpy()),
        },
        folder / "expected.safetensors",
    )
    print(f"{name}: {sum(v.size for v in state.values()):,} values, logits {tuple(logits.shape)}")


def write_index(
    family: str,
    architectures: list[str],
    create: Callable[[str], torch.nn.Module] | None = None,
) -> None:
    """The key and shape of every tensor of timm's full-size `architectures`, as an index;
    `create(name)` builds them instead where timm does not have them all (torchvision's)."""
    create = create or partial(timm.create_model, pretrained=False)
    lines = [
        f"# key shape of every tensor of timm's full-size networks (tools/fixtures_{family}.py)"
    ]
    for architecture in architectures:
        with torch.device("meta"):
            model = create(architecture)
        lines.append(f"[{architecture}]")
        lines += [f"{k} {','.join(map(str, v.shape))}" for k, v in model.state_dict().items()]
    (ROOT / "state_dicts" / f"{family}.txt").write_text("\n".join(lines) + "\n")


def write_fused(
    case: str,
    build: Callable[[], torch.nn.Module],
    kept: tuple[str, ...],
    fuse: Callable[[torch.nn.Module], torch.nn.Module] | None = None,
) -> None:
    """timm's fusion of the case's network (its written weights; `fuse`, by default timm's
    `reparameterize_model`): the logits of the fused network on the case's images and its fused
    tensors under the prefixes `kept` (a few, for the fixture's size), as `fused.safetensors`
    (float32), which a family's `reparameterize` must give (RepVGG's, FastViT's, RepViT's)."""
    from timm.utils.model import reparameterize_model

    folder = ROOT / "parity" / case
    model = build()
    state = load_file(folder / "model.safetensors")
    model.load_state_dict({k: torch.from_numpy(v).float() for k, v in state.items()})
    model.eval()
    model = (fuse or reparameterize_model)(model)
    images = torch.from_numpy(load_file(folder / "expected.safetensors")["images"])
    with torch.no_grad():
        logits = model(images.permute(0, 3, 1, 2))
    fused = {k: v.numpy() for k, v in model.state_dict().items() if k.startswith(kept)}
    assert len(fused) == 2 * len(kept)  # a weight and a bias each
    save_file({**fused, "logits": logits.numpy()}, folder / "fused.safetensors")


def write_output_strides(
    case: str, build: Callable[[int], torch.nn.Module], output_strides: tuple[int, ...] = (8, 16)
) -> None:
    """The case's network (its written weights) dilated by timm's `output_stride`: `build(s)` is
    the case's small network at `output_stride=s`. Its logits on the case's images at each
    stride, as `output_stride.safetensors` (`logits_8`, `logits_16`; float32), which the
    network with the same `output_stride` must give (`tests.helpers.output_stride_error`)."""
    folder = ROOT / "parity" / case
    state = load_file(folder / "model.safetensors")
    images = torch.from_numpy(load_file(folder / "expected.safetensors")["images"])
    out = {}
    for output_stride in output_strides:
        model = build(output_stride)
        model.load_state_dict({k: torch.from_numpy(v).float() for k, v in state.items()})
        model.eval()
        with torch.no_grad():
            out[f"logits_{output_stride}"] = model(images.permute(0, 3, 1, 2)).numpy()
        # timm's pyramid strides, to see that the small network dilates at this stride
        reductions = [level["reduction"] for level in getattr(model, "feature_info", [])]
        print(f"{case} at output stride {output_stride}: feature_info reductions {reductions}")
    save_file(out, folder / "output_stride.safetensors")

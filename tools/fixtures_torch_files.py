"""Fixtures of PyTorch files as people save them, and the reference's logits on real published
files, written by torch itself (a developer machine's torch venv: see tools/parity.py).

    AKAMASTER=$(fetch github:akamaster/pytorch_resnet_cifar10)   # the git dir `fetch` returns
    ZHENG=$(fetch github:Zheng-Jiakun/pytorch_resnet_cifar10)    # a user's own training runs
    CIFAR=$(fetch github:zhi-fangZhang/idpl_gen)   # data/cifar-10-batches-py/test_batch
    /tmp/torchenv/bin/python tools/fixtures_torch_files.py --akamaster $AKAMASTER --cifar $CIFAR \
        --out /tmp/real --zheng $ZHENG

writes:
- `tests/fixtures/torch_files/`: one small state dict (float32, float16, bfloat16 and int64
  tensors, a transposed view, two tensors sharing a storage, a scalar) saved the ways checkpoints
  are: bare, under `state_dict` / `model` / `model_state_dict` / `ema`, with `module.` and
  `_orig_mod.` prefixes, as `.pth` / `.pt` / `.th` / `.pth.tar`, in torch's zip format and its
  legacy one; files that only `weights_only=False` loads, or that hold no weights; and
  `expected.npz`, the tensors as torch reads them (bfloat16 as float32).
- `tests/fixtures/real/`: Idelbayev's published `resnet20-12fca82f.th` as it is, and
  `resnet20_cifar10.npz`: the first 100 CIFAR-10 test images (uint8), their labels, and the
  logits of his `resnet.py` with that file (eval mode).
- `--out`: each real file (his four that `fetch` brings whole, and the checkpoints a user of his
  code trained and committed, torch >= 1.6 zip files), `files.json` (their source, network and
  the accuracy each file records, `best_prec1`), and his code's logits on every test image the
  CIFAR copy holds, for `tools/real_files.py` (the table in docs/pretrained.md).

The test images come from the Python version's `test_batch` as a public repository holds it:
`fetch` keeps its first 3 MiB, the labels and the first 1,017 images, exact (the JPEG copies of
the test set that repositories hold whole lose ten points of these networks' accuracy).
"""

import argparse
import importlib.util
import json
import pickletools
import struct
import subprocess
import tempfile
from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
AKAMASTER = "akamaster/pytorch_resnet_cifar10"
ZHENG = "Zheng-Jiakun/pytorch_resnet_cifar10"
# (repository, path, network): the published files, then a user's runs of the same code
REAL_FILES = [
    (AKAMASTER, f"pretrained_models/{name}.th", name.split("-")[0])
    for name in ("resnet20-12fca82f", "resnet32-d509ac18", "resnet44-014dd654", "resnet56-4bfd9763")
] + [(ZHENG, f"save_resnet{n}/model.th", f"resnet{n}") for n in (20, 56)]


def toy_state_dict() -> OrderedDict:
    """Every kind of tensor a state dict holds, with values that tell them apart."""
    g = torch.Generator().manual_seed(0)
    shared = torch.randn(4, 6, generator=g)
    return OrderedDict(
        [
            ("conv.weight", torch.randn(3, 2, 3, 3, generator=g)),
            ("fc.weight", torch.randn(5, 4, generator=g).t()),  # non-contiguous
            ("half.weight", torch.randn(7, generator=g).half()),
            ("bf16.weight", torch.randn(7, generator=g).bfloat16()),
            ("view.a", shared[1]),  # two tensors of one storage, at offsets
            ("view.b", shared[:, 2]),
            ("bn.num_batches_tracked", torch.tensor(12)),
            ("bn.running_var", torch.rand(3, generator=g, dtype=torch.float64)),
        ]
    )


def prefixed(state: OrderedDict, prefix: str) -> OrderedDict:
    return OrderedDict((prefix + k, v) for k, v in state.items())


def write_torch_files(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    state = toy_state_dict()
    legacy = {"_use_new_zipfile_serialization": False}
    cases = {
        "bare.pth": (state, {}),
        "legacy_dataparallel.th": (
            {"epoch": 90, "best_prec1": 91.5, "state_dict": prefixed(state, "module.")},
            legacy,
        ),
        "compiled.pt": ({"model": prefixed(state, "_orig_mod."), "step": 7}, {}),
        "both_prefixes.pth": (prefixed(state, "_orig_mod.module."), {}),
        "model_state_dict.pth.tar": (
            {"model_state_dict": state, "optimizer_state_dict": {"state": {}, "param_groups": []}},
            {},
        ),
        "ema_only.pt": ({"ema": state, "updates": 1000}, legacy),
        "no_weights.pth": ({"epoch": 3, "optimizer": {"lr": 0.1}}, {}),
        "namespace.pth": ({"state_dict": state, "args": argparse.Namespace(lr=0.1)}, {}),
    }
    for name, (obj, kwargs) in cases.items():
        torch.save(obj, folder / name, **kwargs)
    expected = {
        k: (v.float() if v.dtype == torch.bfloat16 else v).numpy() for k, v in state.items()
    }
    np.savez(folder / "expected.npz", **expected)


def git_file(git_dir: Path, path: str, commit: str = "HEAD") -> bytes:
    return subprocess.run(
        ["git", f"--git-dir={git_dir}", "show", f"{commit}:{path}"], check=True, capture_output=True
    ).stdout


def cifar_test_images(git_dir: Path, count: int | None) -> tuple[np.ndarray, np.ndarray]:
    """The first `count` (None: all held) images of CIFAR-10's `test_batch`, and their labels.

    The file is a pickled dict: `labels` (10,000 ints), then `data` (one string of 10,000 rows
    of 3,072 bytes, channel-major), read from its opcodes, since the copy may end mid-string."""
    blob = git_file(git_dir, "data/cifar-10-batches-py/test_batch")
    labels, key = [], None
    try:
        for op, arg, _ in pickletools.genops(blob):
            if op.name == "SHORT_BINSTRING":
                key = arg
            elif op.name == "BININT1" and key == "labels":
                labels.append(arg)
    except ValueError:  # the data string runs past the copy's end
        pass
    header = b"T" + struct.pack("<i", 10000 * 3072)  # BINSTRING of the 10,000 rows
    data = blob.find(header) + len(header)
    if len(labels) != 10000 or data < len(header):
        raise SystemExit(f"{git_dir}: not CIFAR-10's test_batch (protocol 2, as published)")
    rows = (len(blob) - data) // 3072
    count = min(rows, count or rows)
    images = np.frombuffer(blob[data : data + count * 3072], np.uint8)
    return images.reshape(count, 3, 32, 32).transpose(0, 2, 3, 1), np.asarray(labels[:count])


def reference_logits(
    akamaster: Path, weights: Path, network: str, images: np.ndarray
) -> np.ndarray:
    """His `resnet.py` with a file, on his test transform (ToTensor, ImageNet's Normalize)."""
    source = Path(tempfile.mkdtemp()) / "resnet.py"
    source.write_bytes(git_file(akamaster, "resnet.py"))
    spec = importlib.util.spec_from_file_location("akamaster_resnet", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = getattr(module, network)()
    state = torch.load(weights, map_location="cpu", weights_only=True)["state_dict"]
    model.load_state_dict({k.removeprefix("module."): v for k, v in state.items()})
    model.eval()
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    x = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255
    with torch.no_grad():
        batches = [x[i : i + 500] for i in range(0, len(x), 500)]
        return torch.cat([model((b - mean) / std) for b in batches]).numpy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--akamaster", type=Path, required=True, help="its git directory")
    parser.add_argument("--cifar", type=Path, required=True, help="its git directory")
    parser.add_argument("--out", type=Path, help="where the real files and their logits go")
    parser.add_argument("--zheng", type=Path, help=f"{ZHENG}'s git directory")
    args = parser.parse_args()
    write_torch_files(ROOT / "torch_files")

    real = ROOT / "real"
    real.mkdir(parents=True, exist_ok=True)
    resnet20 = real / "resnet20-12fca82f.th"
    resnet20.write_bytes(git_file(args.akamaster, "pretrained_models/resnet20-12fca82f.th"))
    images, labels = cifar_test_images(args.cifar, count=100)
    logits = reference_logits(args.akamaster, resnet20, "resnet20", images)
    np.savez_compressed(real / "resnet20_cifar10.npz", images=images, labels=labels, logits=logits)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        images, labels = cifar_test_images(args.cifar, count=None)
        np.savez_compressed(args.out / "cifar10_test.npz", images=images, labels=labels)
        repositories = {AKAMASTER: args.akamaster, ZHENG: args.zheng}
        table = {}
        for repository, path, network in REAL_FILES:
            if repositories[repository] is None:
                continue
            name = f"{repository.split('/')[0]}_{path.replace('/', '_')}"
            (args.out / name).write_bytes(git_file(repositories[repository], path))
            saved = torch.load(args.out / name, map_location="cpu", weights_only=True)
            logits = reference_logits(args.akamaster, args.out / name, network, images)
            np.save(args.out / f"{name}.logits.npy", logits)
            table[name] = {
                "repository": repository,
                "path": path,
                "network": network,
                "best_prec1": round(float(saved["best_prec1"]), 2),
            }
        (args.out / "files.json").write_text(json.dumps(table, indent=1))
    print(f"torch {torch.__version__}: wrote {ROOT / 'torch_files'}, {real}, {args.out}")


if __name__ == "__main__":
    main()

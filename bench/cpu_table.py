"""docs/performance.md's CPU training table: ImageNet- and CIFAR-size ResNets against PyTorch.

    python bench/cpu_table.py                                    # the zoo and flax.linen.Conv
    python bench/cpu_table.py --torch-python /work/torchenv/bin/python   # and PyTorch's eager

Each row times the full train step of `bench/train_step.py` (SGD momentum, cross-entropy,
BatchNorm updates, float32) with the zoo's `nets.layers.Conv` and with plain `flax.linen.Conv`,
interleaved in this process with the CPU settings `train.py` makes
(`nets_training.host_memory`'s malloc, `--malloc-defaults` leaves glibc's;
`nets_training.xla_cpu_flags`, `--ynn-convolutions` leaves XLA's), then PyTorch's eager step in
its default and its `channels_last` memory formats
(`bench/torch_resnet.py`): in this process when torch imports here, otherwise in the
`--torch-python` interpreter (an environment with torch and no JAX), run after the JAX timings so
the two never share the cores. PyTorch is never a dependency: without it the PyTorch columns say
so. Figures are medians over `--steps` steps, in img/s.
"""

import argparse
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import train_step

# (network, batch, image size, classes, steps): the rows; the slow ResNet-50 takes fewer.
ROWS = (
    ("resnet18", 32, 64, 1000, 10),
    ("resnet50", 8, 224, 1000, 5),
    ("resnet20", 128, 32, 10, 10),
    ("resnet56", 128, 32, 10, 5),
)
TORCH_FORMATS = {"eager": [], "channels_last": ["--channels-last"]}


def torch_img_s(python: str | None, name, batch, size, classes, steps) -> dict[str, float]:
    """PyTorch's img/s in each of `TORCH_FORMATS`; empty without PyTorch."""
    if importlib.util.find_spec("torch") is not None:
        import torch_resnet  # bench/torch_resnet.py

        timers = {
            fmt: torch_resnet.Timer(name, batch, size, classes, channels_last=bool(flag))
            for fmt, flag in TORCH_FORMATS.items()
        }
        return {fmt: batch / s for fmt, s in train_step.run_interleaved(timers, steps).items()}
    if python is None:
        return {}
    script = str(Path(__file__).with_name("torch_resnet.py"))
    args = [name, "--batch", str(batch), "--size", str(size), "--num-classes", str(classes)]
    figures = {}
    for fmt, flag in TORCH_FORMATS.items():
        out = subprocess.run(
            [python, script, *args, "--steps", str(steps), *flag],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        figures[fmt] = float(re.search(r"([\d.]+) img/s", out).group(1))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--torch-python", help="an interpreter with torch, when this one has none")
    parser.add_argument("--rows", default=",".join(r[0] for r in ROWS), help="networks to time")
    parser.add_argument("--steps", type=int, help="steps a row; default: each row's own")
    train_step.add_runtime_flags(parser)
    args = parser.parse_args()
    train_step.set_runtime(args)
    wanted = args.rows.split(",")
    unknown = set(wanted) - {r[0] for r in ROWS}
    if unknown:
        sys.exit(f"cpu_table.py: --rows knows {[r[0] for r in ROWS]}, not {sorted(unknown)}")

    lines = []
    for name, batch, size, classes, steps in (r for r in ROWS if r[0] in wanted):
        steps = args.steps or steps
        timers, _ = train_step.build_timers(name, batch, size, "float32", classes, "both")
        ours, flax = (batch / s for s in train_step.run_interleaved(timers, steps).values())
        torch = torch_img_s(args.torch_python, name, batch, size, classes, steps)
        if torch:
            best = max(torch.values())
            torch_cell = f"{torch['eager']:.1f} ({torch['channels_last']:.1f} channels_last)"
            ratio = f"{ours / best:.2f}"
        else:
            torch_cell, ratio = "no PyTorch", "-"
        row = f"{name}, batch {batch}, {size} px"
        lines.append(f"| {row} | {ours:.1f} img/s | {flax:.1f} | {torch_cell} | {ratio} |")
    print("| train step | ours | plain flax.linen.Conv | PyTorch eager | ours ÷ best PyTorch |")
    print("|---|---|---|---|---|")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

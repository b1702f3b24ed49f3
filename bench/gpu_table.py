"""docs/performance.md's GPU training table: our jitted step beside PyTorch's, eager and compiled.

    python bench/gpu_table.py                  # the three rows: ~5 minutes on an H200 (estimated)
    python bench/gpu_table.py --rows resnet20 --no-compile
    python bench/gpu_table.py --batch 8 --size 32 --steps 2 --no-compile \
        --torch-python PYTHON_WITH_TORCH       # a dry run on a CPU (torch.compile takes minutes)

Every figure follows issue 32's method: bfloat16 compute with float32 parameters, SGD with
momentum 0.9, softmax cross-entropy, BatchNorm updates, random data already on the device;
`--steps` steps queued, then one synchronisation; the median of `--windows` such windows, after
warm-up steps. Ours is `bench/train_step.py`'s step (`build_timers`, `Timer.queued`); PyTorch's is
autocast bfloat16 in `channels_last`, eager and under `torch.compile`, on torchvision's ResNet-50
(timm's where torchvision does not import), timm's ViT and `bench/torch_resnet.py`'s CIFAR
ResNets. Each figure runs in a process of its own, one after another, so JAX and PyTorch never
share the GPU's memory and a failure (out of memory, no PyTorch, a time-out) only fills its own
cell; this process imports neither. PyTorch, torchvision and timm are never dependencies: the
PyTorch figures run in this interpreter when torch imports here, otherwise in `--torch-python`'s.
"""

import argparse
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# (network, batch, image size, classes): the rows.
ROWS = (
    ("resnet50", 256, 224, 1000),
    ("vit_small_patch16_224", 256, 224, 1000),
    ("resnet20", 128, 32, 10),
)
COLUMNS = {
    "ours": "ours",
    "eager": "PyTorch eager (AMP, channels_last)",
    "compile": "torch.compile (AMP, channels_last)",
}
# (who, column, record key) of the compile seconds: ours its compilation, torch.compile's the
# first step, where it compiles (eager's first step compiles nothing).
COMPILE_SECONDS = (("ours", "ours", "compile_s"), ("torch.compile", "compile", "first_step_s"))
WARM_UP_STEPS = 3  # after the first: cuDNN's algorithm searches, allocator growth
RESULT = "RESULT "  # the line that carries a figure's record from its process
ERROR = re.compile(r"[\w.]+(Error|Exception): ")  # a traceback's last line: what was raised


def time_ours(
    name: str, batch: int, size: int | None, classes: int, steps: int, windows: int, channels=3
) -> dict:
    """Our jitted train step's record: img/s, compile seconds, device and versions; `channels`:
    the images' (`bench/stem_channels.py`'s padded stems)."""
    import flax  # imported here, as JAX is: the table's own process imports neither
    import jax
    import train_step  # bench/train_step.py

    from nets_training import host_memory, xla_cpu_flags

    host_memory.reuse_freed_memory()  # train.py's CPU settings, before JAX starts: a dry run on
    xla_cpu_flags.prefer_eigen_convolutions()  # a CPU times the step training runs
    timers, _ = train_step.build_timers(
        name, batch, size, "bfloat16", classes, "ours", channels=channels
    )
    (timer,) = timers.values()
    timer.queued(WARM_UP_STEPS)
    step_s = statistics.median(timer.queued(steps) for _ in range(windows))
    return {
        "img_s": batch / step_s,
        "compile_s": timer.compile_s,
        "device": jax.devices()[0].device_kind,
        "versions": {"jax": jax.__version__, "flax": flax.__version__},
    }


def torch_model(name: str, classes: int, size: int):
    """torchvision's network where it has one and imports, `bench/torch_resnet.py`'s CIFAR
    ResNets (He et al.'s, which no library ships), else timm's (its ViTs set to `size`)."""
    import torch_resnet  # bench/torch_resnet.py; imports torch

    build = torch_resnet.NETWORKS.get(name)
    if build is not None and build.func is torch_resnet.cifar_resnet:
        return build(classes)
    try:
        import torchvision

        model = torchvision.models.get_model(name, num_classes=classes)
    except (ImportError, ValueError):  # no torchvision here, or not one of its networks
        model = torch_resnet._timm(name).create_model(name, num_classes=classes)
    if hasattr(model, "set_input_size"):  # timm's ViTs take only their own size, unless told
        model.set_input_size(img_size=(size, size))
    return model


def time_torch(
    name: str, batch: int, size: int, classes: int, steps: int, windows: int, compiled: bool
) -> dict:
    """PyTorch's train step's record (eager or `torch.compile`d): img/s, the first step's
    seconds (where torch.compile compiles), device and versions."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: a dry run
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    model = torch_model(name, classes, size).to(device, memory_format=torch.channels_last).train()
    forward = torch.compile(model) if compiled else model
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    images = torch.randn(batch, 3, size, size, device=device)
    images = images.contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, classes, (batch,), device=device)

    def queued(n: int) -> float:
        """Seconds a step over `n` steps, then one synchronisation (as `Timer.queued`)."""
        start = time.perf_counter()
        for _ in range(n):
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device, dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(forward(images), labels)
            loss.backward()
            optimizer.step()
        if device == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter() - start) / n

    first_s = queued(1)
    queued(WARM_UP_STEPS)
    step_s = statistics.median(queued(steps) for _ in range(windows))
    versions = {"torch": torch.__version__}
    for library in ("torchvision", "timm"):  # those this network's build imported
        if library in sys.modules and hasattr(sys.modules[library], "__version__"):
            versions[library] = sys.modules[library].__version__
    return {
        "img_s": batch / step_s,
        "first_step_s": first_s,
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "versions": versions,
    }


def measure(column: str, row: tuple, args: argparse.Namespace, torch_python: str | None) -> dict:
    """One figure's record from a process of its own, or `{'error': why}`."""
    python = sys.executable if column == "ours" else torch_python
    if python is None:
        return {"error": "no PyTorch"}
    name, batch, size, _ = row
    command = [python, __file__, "--measure", column, "--rows", name, "--batch", str(batch)]
    command += ["--size", str(size), "--steps", str(args.steps), "--windows", str(args.windows)]
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=args.timeout,
            cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=path),
        )
    except subprocess.TimeoutExpired:
        return {"error": f"over {args.timeout} s"}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(RESULT):
            return json.loads(line.removeprefix(RESULT))
    said = [line for line in done.stderr.splitlines() if line.strip()]
    raised = [line for line in said if ERROR.match(line)] or said  # not torch's hints after it
    return {"error": raised[-1][:100] if raised else f"exit status {done.returncode}"}


def img_s(figure: float) -> str:
    return f"{figure:,.0f}" if figure >= 100 else f"{figure:.1f}"


def table(rows: list[tuple[str, dict[str, dict]]]) -> str:
    """The markdown table of `(row label, {column: record})`, in `COLUMNS`' order; a column
    without a record says 'not run', one with an error says the error."""
    lines = [
        f"| train step | {' | '.join(COLUMNS.values())} | ours ÷ best PyTorch "
        "| compile s (torch.compile: its first step) |",
        "|---" * (len(COLUMNS) + 3) + "|",
    ]
    for label, records in rows:
        records = {column: records.get(column, {"error": "not run"}) for column in COLUMNS}
        cells = [
            img_s(r["img_s"]) + " img/s" * (c == "ours") if "img_s" in r else r["error"]
            for c, r in records.items()
        ]
        theirs = [r["img_s"] for c, r in records.items() if c != "ours" and "img_s" in r]
        ours = records["ours"].get("img_s")
        ratio = f"{ours / max(theirs):.2f}" if ours and theirs else "-"
        seconds = [
            f"{who} {records[column][key]:.1f}"
            for who, column, key in COMPILE_SECONDS
            if key in records[column]
        ]
        row = [label, *(cell.replace("|", "/") for cell in cells), ratio, ", ".join(seconds)]
        lines.append(f"| {' | '.join(row)} |")
    return "\n".join(lines)


def setting(rows: list[tuple[str, dict[str, dict]]], steps: int, windows: int) -> str:
    """The line above the table: the card, the versions that ran, the method."""
    records = [r for _, records in rows for r in records.values() if "device" in r]
    devices = sorted({r["device"] for r in records})
    versions = {k: v for r in records for k, v in r["versions"].items()}
    return (
        f"On {', '.join(devices) or 'no device (nothing ran)'}; "
        f"{', '.join(f'{k} {v}' for k, v in versions.items())}; "
        f"{steps} steps queued, then one synchronisation, median of {windows} windows."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default=",".join(r[0] for r in ROWS), help="networks to time")
    parser.add_argument("--batch", type=int, help="batch size of every row; default: each row's")
    parser.add_argument("--size", type=int, help="image size of every row; default: each row's")
    parser.add_argument("--steps", type=int, default=20, help="steps queued in a window")
    parser.add_argument("--windows", type=int, default=3, help="windows; the median is reported")
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    parser.add_argument("--torch-python", help="an interpreter with torch, when this one has none")
    parser.add_argument("--timeout", type=int, default=600, help="seconds a figure may take")
    parser.add_argument(
        "--measure",
        choices=list(COLUMNS),
        help="time one column of one row here and print its record (what each process runs)",
    )
    args = parser.parse_args()
    wanted = args.rows.split(",")
    unknown = set(wanted) - {r[0] for r in ROWS}
    if unknown:
        sys.exit(f"gpu_table.py: --rows knows {[r[0] for r in ROWS]}, not {sorted(unknown)}")
    if args.measure and len(wanted) != 1:
        sys.exit("gpu_table.py: --measure times one network: give it as --rows")
    if args.torch_python and shutil.which(args.torch_python) is None:
        sys.exit(f"gpu_table.py: --torch-python {args.torch_python}: no such program")
    rows = [
        (name, args.batch or batch, args.size or size, classes)
        for name, batch, size, classes in ROWS
        if name in wanted
    ]

    if args.measure:
        (row,) = rows
        if args.measure == "ours":
            record = time_ours(*row, args.steps, args.windows)
        else:
            record = time_torch(*row, args.steps, args.windows, args.measure == "compile")
        print(RESULT + json.dumps(record), flush=True)
        return

    has_torch = importlib.util.find_spec("torch") is not None
    torch_python = args.torch_python or (sys.executable if has_torch else None)
    columns = [c for c in COLUMNS if not (args.no_compile and c == "compile")]
    results = []
    for row in rows:
        records = {}
        for column in columns:
            records[column] = measure(column, row, args, torch_python)
            print(f"{row[0]} {column}: {records[column]}", file=sys.stderr, flush=True)
        results.append((f"{row[0]}, batch {row[1]}, {row[2]} px", records))
    print(setting(results, args.steps, args.windows))
    print()
    print(table(results))


if __name__ == "__main__":
    main()

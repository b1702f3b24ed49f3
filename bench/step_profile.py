"""Where a train step's device time goes: a profile of `bench/train_step.py`'s step, summed by kind.

    python bench/step_profile.py vit_small_patch16_224 --batch 256 --dtype bfloat16   # a GPU
    python bench/step_profile.py resnet20 --batch 64 --size 32 --num-classes 10        # a CPU

Compiles the step, warms it up, then records `--steps` queued steps with `jax.profiler` and reads
the trace it writes (`--trace-dir`; open it in Perfetto or TensorBoard for the timeline). Prints,
per step, each thread's busy time (on a GPU, the streams' kernels and XLA's op names; on a CPU,
XLA's threads), the share of the busiest thread by kind (matrix products, convolutions, fused
attention, reductions and norms, elementwise fusions, copies and layout changes), and its costliest
operations. The kinds are read from the operations' names, which XLA and the CUDA libraries pick;
a name that matches no kind counts as "other" and shows among the costliest. Under each of the
costliest that is one of the compiled step's HLO instructions (XLA's fusions: the kernel is named
after its instruction), the JAX operations it computes (their `op_name`s, from the HLO's metadata:
`blocks_3/attn/...` and `transpose(jvp(...))` for the backward pass), so a costly fusion is found
in the network's code.
"""

import argparse
import collections
import gzip
import json
import re
import sys
import tempfile
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).parent))  # bench/train_step.py

import train_step  # noqa: E402

# (kind, pattern over an operation's name), the first match counts.
KINDS = (
    ("fused attention", r"fmha|sdpa|flash|attention"),  # cuDNN's convolutions say fprop too
    ("convolution", r"conv(?!ert)|cudnn|implicit_gemm|wgrad|dgrad"),
    ("matrix product", r"gemm|xmma|cublas|cutlass|nvjet|\bdot|matmul"),
    ("reduction, norm", r"reduce|norm|softmax"),
    ("copy, layout", r"copy|transpose|memcpy|memset|bitcast|concatenate|pad|slice|dynamic"),
    ("elementwise fusion", r"fusion|loop_|triton|elementwise|add|multiply|convert"),
)
# Host-side bookkeeping in a CPU trace: the Python thread and PjRt's scheduling, not XLA's work.
HOST_ONLY = re.compile(r"^(\$|end: |PjitFunction|CommonPjRt|ThunkExecutor|Execute|Handle |Parse)")


def kind(name: str) -> str:
    lowered = name.lower()
    return next((k for k, pattern in KINDS if re.search(pattern, lowered)), "other")


def read_trace(trace_dir: Path) -> list[tuple[str, str, float]]:
    """`(thread, name, self microseconds)` of every complete event in the newest Perfetto trace
    under `trace_dir`, the thread named with its process ('/device:GPU:0 / Stream #14'). Self
    time: an event's less the events it encloses on its thread (a `while` loop's body), so that
    nothing counts twice."""
    traces = sorted(trace_dir.glob("plugins/profile/*/*.trace.json.gz"))
    if not traces:
        raise SystemExit(f"step_profile.py: jax.profiler wrote no trace under {trace_dir}")
    with gzip.open(traces[-1]) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    named = {"process_name": {}, "thread_name": {}}
    for e in events:
        if e.get("ph") == "M" and e.get("name") in named:
            key = e["pid"] if e["name"] == "process_name" else (e["pid"], e["tid"])
            named[e["name"]][key] = e["args"]["name"]
    processes, threads = named["process_name"], named["thread_name"]
    by_thread = collections.defaultdict(list)
    for e in events:
        thread = threads.get((e.get("pid"), e.get("tid")), str(e.get("tid")))
        if (
            e.get("ph") == "X"
            and not HOST_ONLY.match(e["name"])
            and not thread.startswith("python")
        ):
            label = f"{processes.get(e['pid'], e['pid'])} / {thread}"
            by_thread[label].append((float(e["ts"]), float(e.get("dur", 0.0)), e["name"]))
    return [event for label, spans in by_thread.items() for event in self_times(label, spans)]


def self_times(thread: str, spans: list[tuple[float, float, str]]) -> list[tuple[str, str, float]]:
    """`(thread, name, self time)` of `(start, duration, name)` spans that nest or follow. A span
    that starts inside another but ends after it follows it: a GPU stream's kernels, whose
    recorded times overlap by a little, never enclose each other."""
    out, open_spans = [], []  # open_spans: [end, name, self time] of the enclosing spans
    for start, duration, name in sorted(spans, key=lambda s: (s[0], -s[1])):
        while open_spans and not start < open_spans[-1][0] >= start + duration:  # not inside
            end, done, own = open_spans.pop()
            out.append((thread, done, own))
        if open_spans:
            open_spans[-1][2] -= duration
        open_spans.append([start + duration, name, duration])
    out += [(thread, name, own) for _, name, own in reversed(open_spans)]
    return out


_COMPUTATION = re.compile(r"^(?:ENTRY )?%([\w.\-]+) ")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = ")
_OP_NAME = re.compile(r'op_name="([^"]+)"')
_CALLS = re.compile(r"calls=%([\w.\-]+)")


def kernel_name(instruction: str) -> str:
    """The name XLA gives the kernel of an HLO instruction: `.` and `-` as `_`."""
    return re.sub(r"[.\-]", "_", instruction)


def hlo_sources(hlo_text: str, most: int = 3) -> dict[str, list[str]]:
    """`{instruction's kernel name: the op_names of up to `most` JAX operations it computes}` of
    a compiled module's text (`compiled.as_text()`): the instruction's own, then those of the
    computation it calls (a fusion's body), `jit(step)/` left out."""
    per_computation = collections.defaultdict(list)
    instructions = {}  # name -> (own op_name or None, called computation or None)
    computation = None
    for line in hlo_text.splitlines():
        if line.startswith("}"):
            computation = None
        elif (start := _COMPUTATION.match(line)) and line.rstrip().endswith("{"):
            computation = start.group(1)
        elif computation and (instruction := _INSTRUCTION.match(line)):
            op_name = _OP_NAME.search(line)
            op_name = op_name and op_name.group(1).removeprefix("jit(step)/")
            if op_name and op_name not in per_computation[computation]:
                per_computation[computation].append(op_name)
            calls = _CALLS.search(line)
            instructions[instruction.group(1)] = (op_name, calls and calls.group(1))
    sources = {}
    for name, (own, calls) in instructions.items():
        names = [own] if own else []
        names += [n for n in per_computation.get(calls, ()) if n not in names]
        if names:
            sources[kernel_name(name)] = names[:most]
    return sources


def summary(
    events: list[tuple[str, str, float]],
    steps: int,
    top: int,
    sources: dict[str, list[str]] | None = None,
) -> str:
    """The report's lines: busy ms a step by thread, the busiest thread's kinds and operations,
    each of these with the JAX operations `sources` (`hlo_sources`) says it computes."""
    by_thread = collections.defaultdict(collections.Counter)
    for thread, name, us in events:
        by_thread[thread][name] += us / 1e3 / steps
    if not by_thread:
        return "no device operations in the trace"
    busy = {thread: sum(ops.values()) for thread, ops in by_thread.items()}
    lines = ["busy ms a step, by thread:"]
    lines += [f"  {ms:9.2f}  {thread}" for thread, ms in sorted(busy.items(), key=lambda t: -t[1])]
    # A GPU's trace holds each kernel more than once (its stream's, XLA's ops' and modules'
    # lines): the busiest stream's names say what ran; on a CPU, XLA's threads share the work, so
    # they are summed.
    streams = [t for t in by_thread if "stream" in t.lower()]
    streams = streams or [t for t in by_thread if t.endswith("XLA Ops")]
    chosen = [max(streams, key=busy.get)] if streams else list(by_thread)
    ops = sum((by_thread[t] for t in chosen), collections.Counter())
    total = sum(ops.values())
    kinds = collections.Counter()
    for name, ms in ops.items():
        kinds[kind(name)] += ms
    where = chosen[0] if len(chosen) == 1 else f"{len(chosen)} threads summed"
    lines.append(f"by kind ({where}: {total:.2f} ms a step):")
    lines += [f"  {ms:9.2f} ms {100 * ms / total:5.1f}%  {k}" for k, ms in kinds.most_common()]
    lines.append(f"costliest {top} operations:")
    for name, ms in ops.most_common(top):
        lines.append(f"  {ms:9.3f} ms {100 * ms / total:5.1f}%  [{kind(name)}] {name[:110]}")
        lines += [
            f"{'':24}<- {op_name[:110]}" for op_name in (sources or {}).get(kernel_name(name), ())
        ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    train_step.add_step_flags(parser, 5, "steps recorded, queued")
    parser.add_argument("--top", type=int, default=25, help="operations listed")
    parser.add_argument("--trace-dir", type=Path, help="where the trace stays; default: a temp dir")
    train_step.add_runtime_flags(parser)
    args = parser.parse_args()
    train_step.set_runtime(args)
    timers, _ = train_step.build_timers(
        args.name, args.batch, args.size, args.dtype, args.num_classes, "ours"
    )
    (timer,) = timers.values()
    step_s = min(timer.queued(args.steps) for _ in range(2))  # warm-up, and the unprofiled time
    trace_dir = args.trace_dir or Path(tempfile.mkdtemp(prefix="step_profile_"))
    with jax.profiler.trace(str(trace_dir), create_perfetto_trace=True):
        timer.queued(args.steps)
    print(
        f"  compile {timer.compile_s:.1f} s, step {1e3 * step_s:.2f} ms unprofiled "
        f"({args.batch / step_s:,.0f} img/s); trace in {trace_dir}"
    )
    sources = hlo_sources(timer.compiled.as_text())
    print(summary(read_trace(trace_dir), args.steps, args.top, sources))


if __name__ == "__main__":
    main()

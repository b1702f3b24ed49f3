"""What the run reports: `metrics.jsonl`, TensorBoard events, the console (bar and lines), and
the window of train-step metrics that a training record averages.

A resumed run rewinds its records to the checkpoint it restored: records written after that step
by the interrupted attempt are dropped from `metrics.jsonl`, and TensorBoard purges them
(`purge_step`), so the files end exactly as an uninterrupted run's would.
"""

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
import tqdm

METRICS_FILE = "metrics.jsonl"


class MetricsLog:
    """Appends `{'step': s, name: value, ...}` records; only process 0 writes anything."""

    def __init__(self, workdir: Path, resume_step: int | None, enabled: bool = True):
        self.path = workdir / METRICS_FILE
        self.enabled = enabled
        self.records = self._rewind(resume_step or 0)
        self._events = (
            EventFile(workdir / "tensorboard", (resume_step or 0) + 1) if enabled else None
        )

    def _rewind(self, step: int) -> list[dict[str, Any]]:
        """Keeps the records of steps up to `step`; rewrites the file atomically."""
        if not self.path.exists():
            return []
        lines = self.path.read_text().splitlines()
        records = [json.loads(line) for line in lines if line.strip()]
        records = [r for r in records if r["step"] <= step]
        if self.enabled:
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text("".join(json.dumps(r) + "\n" for r in records))
            os.replace(tmp, self.path)
        return records

    def write(self, step: int, values: dict[str, float]) -> None:
        """Appends a record to both files.

        Raises:
          OSError: a file could not be written (a full disk); its `filename` says which.
        """
        record = {"step": step, **values}
        self.records.append(record)
        if not self.enabled:
            return
        with _naming(self.path), open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
        self._events.write(step, values)

    def best_record(self, name: str) -> dict[str, Any] | None:
        """The first record with the highest `name`; None when none has it."""
        records = [r for r in self.records if name in r]
        return max(records, key=lambda r: r[name]) if records else None

    def last(self, name: str) -> float | None:
        values = [r[name] for r in self.records if name in r]
        return values[-1] if values else None

    def close(self) -> None:
        if self._events is not None:
            self._events.close()


class EventFile:
    """A TensorBoard event file in `folder`, written and flushed in the caller's thread.

    tensorboardX's `SummaryWriter` writes on a thread of its own and flushes again at exit: on a
    full disk, each says the error again, with its traceback, after the run has said it in one
    line. This writes the events that `SummaryWriter(folder, purge_step=...).add_scalar` would.
    """

    def __init__(self, folder: Path, purge_step: int):
        self.folder = folder
        tensorboardx = _tensorboardx()
        proto = tensorboardx.proto.event_pb2
        self._event, self._scalar = proto.Event, tensorboardx.summary.scalar
        with _naming(folder):
            folder.mkdir(parents=True, exist_ok=True)
            self._writer = tensorboardx.event_file_writer.EventsWriter(str(folder / "events"))
            # TensorBoard drops the events at and after `purge_step` that older files hold: what
            # the interrupted run logged after the checkpoint a resumed one starts from.
            start = proto.SessionLog(status=proto.SessionLog.START)
            self._write(
                [
                    proto.Event(step=purge_step, file_version="brain.Event:2"),
                    proto.Event(step=purge_step, session_log=start),
                ]
            )

    def write(self, step: int, values: Mapping[str, float]) -> None:
        """One scalar per value, at `step`; on disk when it returns."""
        with _naming(self.folder):
            self._write(
                self._event(step=step, summary=self._scalar(k, v)) for k, v in values.items()
            )

    def _write(self, events) -> None:
        for event in events:
            event.wall_time = time.time()
            self._writer.write_event(event)
        self._writer.flush()

    def close(self) -> None:
        """Closes the file, even when a full disk refuses what was left to write (raised)."""
        with _naming(self.folder):
            self._writer.close()


@contextlib.contextmanager
def _naming(path: Path) -> Iterator[None]:
    """Gives an OSError raised in the block `path` as its file name when it has none (a write
    or flush that a full disk refuses names no file)."""
    try:
        yield
    except OSError as e:
        if e.filename is None:
            raise OSError(e.errno, e.strerror, str(path)) from None
        raise


def _tensorboardx():
    """tensorboardX (its `event_file_writer`, `proto` and `summary` modules), imported without
    torch.

    tensorboardX imports torch when it is installed, only to convert torch tensors; that costs
    seconds at every start and we log Python floats. So torch is hidden during the import (unless
    something has imported it already, in which case it costs nothing).
    """
    hide = "torch" not in sys.modules
    if hide:
        sys.modules["torch"] = None  # makes `import torch` raise ImportError
    try:
        import tensorboardX.event_file_writer
        import tensorboardX.proto.event_pb2
        import tensorboardX.summary
    finally:
        if hide:
            del sys.modules["torch"]
    return tensorboardX


class Window:
    """The train steps' metrics since the last training record, one dict of scalars per step.

    They stay device arrays until a record or a checkpoint needs them, so the loop never waits for
    the devices between those; then one `jax.device_get` brings them all over (the Flax example's
    `common_utils.get_metrics`).
    """

    def __init__(self, steps: Sequence[Mapping[str, float]] = ()):
        self._steps: list[Mapping[str, Any]] = list(steps)

    def add(self, metrics: Mapping[str, jax.Array]) -> None:
        self._steps.append(metrics)

    def fetch(self) -> list[dict[str, float]]:
        """The window's metrics as host floats, for a checkpoint; they stay in the window."""
        self._steps = [{k: float(v) for k, v in m.items()} for m in jax.device_get(self._steps)]
        return list(self._steps)

    def mean(self) -> dict[str, float]:
        """Each metric averaged over the window's steps that have it (at least one: a run resumed
        with another `distill` changes the step's metrics); starts a new window."""
        steps, self._steps = self.fetch(), []
        names = dict.fromkeys(name for s in steps for name in s)
        return {name: float(np.mean([s[name] for s in steps if name in s])) for name in names}


class Throughput:
    """Images per second over the training steps only (not compilation, evaluation or saving),
    and the part of that time the loop waited for the input pipeline."""

    def __init__(self, batch_size: int):
        self.batch_size = batch_size
        self.total_steps, self.total_seconds = 0, 0.0
        self.restart()

    def restart(self) -> None:
        """Call after anything that is not training, once the devices are idle."""
        self._start, self._steps, self._waited = time.perf_counter(), 0, 0.0

    def wait_for(self, batches: Iterator[Any]) -> Any:
        """The next batch, timing the wait: with batches made ahead (`data.on_device`), the loop
        waits only when the pipeline is slower than the devices."""
        start = time.perf_counter()
        batch = next(batches)
        self._waited += time.perf_counter() - start
        return batch

    def step(self) -> None:
        self._steps += 1

    def measure(self) -> tuple[float | None, float]:
        """img/s since the last restart (call once the devices have finished those steps), None
        when no step ran since (the first step of a run is compilation, not timed); and the
        part of that time spent waiting for batches."""
        seconds = time.perf_counter() - self._start
        self.total_steps += self._steps
        self.total_seconds += seconds
        rate = self._steps * self.batch_size / seconds if self._steps else None
        waiting = min(1.0, self._waited / seconds) if seconds > 0 else 0.0
        self.restart()
        return rate, waiting

    def mean(self) -> float | None:
        """img/s over every timed step; None when none was."""
        if not self.total_steps:
            return None
        return self.total_steps * self.batch_size / self.total_seconds


class Console:
    """A progress bar with loss, lr and img/s, and one line per evaluation; silent off process 0."""

    def __init__(self, total_steps: int, start_step: int, enabled: bool = True):
        self._bar = tqdm.tqdm(
            total=total_steps,
            initial=start_step,
            disable=not enabled,
            dynamic_ncols=True,
            unit="step",
            mininterval=1.0,
        )
        self.enabled = enabled

    def advance(self, steps: int = 1) -> None:
        self._bar.update(steps)

    def show(
        self, loss: float, lr: float, images_per_second: float | None, data_wait: float
    ) -> None:
        rate = "n/a" if images_per_second is None else f"{images_per_second:.3g}"
        wait = {"data_wait": f"{100 * data_wait:.0f}%"} if data_wait >= 0.01 else {}
        self._bar.set_postfix(loss=f"{loss:.4f}", lr=f"{lr:.3g}", img_s=rate, **wait)

    def print(self, line: str) -> None:
        if self.enabled:
            self._bar.write(line)

    def close(self) -> None:
        self._bar.close()

"""Checkpoints with orbax-checkpoint, and fine-tuning from another run's weights.

`<workdir>/checkpoints/<step>/state` holds the whole `TrainState` (params, BatchNorm statistics,
optimizer state, EMA, RNG, step) and `<step>/log_window` the metrics of the train steps that no
record has averaged yet (JSON), so that a resumed run writes the records an uninterrupted one
would. The input pipeline's position is the step (`nets_training.data`), so a checkpoint holds
nothing per process and resumes on any number of processes (older versions' `<step>/data`,
grain's per-process position, is not read). Orbax writes each step into a temporary folder and
renames it when complete, so a run killed at any moment leaves only whole checkpoints behind (and
the next run removes the temporary folder: the workdir's lock makes it the only writer).

A checkpoint that does not read back (a truncated file, a missing item) is moved to
`<workdir>/damaged_checkpoints/` and the run resumes from the newest one that does; a checkpoint
of another configuration (other shapes) stops the run, naming the variable that differs.
"""

import dataclasses
import itertools
import json
import logging as std_logging
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import flax
import jax
import numpy as np
import orbax.checkpoint as ocp
from absl import logging

from nets_training.errors import UserError
from nets_training.steps import TrainState
from nets_training.workdir import AVERAGED_DIR, BEST_DIR, is_held

# Entries that older versions kept in the saved state and this one does not: restored, then
# dropped. `window` summed the loss and top-1 of the logging window, now kept on the host.
LEGACY_STATE_ENTRIES = ("window",)
DAMAGED_DIR = "damaged_checkpoints"  # beside `checkpoints/`: where unreadable steps are moved
JSON_FILE = "metadata"  # the file of a JSON item (orbax's `JsonCheckpointHandler`) in its folder


class IncompatibleCheckpoint(UserError):
    """The checkpoint holds a state of other shapes or other variables than the config builds."""


class DamagedCheckpoint(UserError):
    """A checkpoint that does not read back (a truncated or missing file): the message names it,
    why, and the run's other checkpoints. Read-only programs say so; train.py moves it aside."""


class CheckpointGone(UserError):
    """A checkpoint removed while it was read: its live run keeps only its newest few
    (`train.keep_checkpoints`) or best (`train.keep_best`). Listing the folder again finds the
    ones kept now."""


class Restored(NamedTuple):
    step: int
    state: TrainState
    log_window: list[dict[str, float]]  # the train metrics that no record has averaged yet
    skipped: list[str]  # one line per newer checkpoint that did not read back, and where it went


class Checkpointer:
    """Saves and restores a run's position under `directory/<step>/`: the `TrainState` and the
    train metrics not logged yet."""

    RECORD = "log_window"  # the JSON item beside `state`

    def __init__(self, directory: Path, keep: int | None):  # None: all
        self._manager = ocp.CheckpointManager(
            directory.absolute(),
            # The workdir's lock makes this run the only writer: a temporary folder is a leftover.
            options=ocp.CheckpointManagerOptions(
                max_to_keep=keep, create=True, cleanup_tmp_directories=True
            ),
            # Named up front so that `item_metadata` can read a checkpoint before restoring it.
            item_handlers={
                "state": ocp.StandardCheckpointHandler(),
                self.RECORD: ocp.JsonCheckpointHandler(),
            },
        )
        self.directory = directory
        self._writing: int | None = None  # the step whose write may still be in flight
        self._failed = False  # a write failed: `close` removes what it left

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def last_complete_step(self) -> int | None:
        """The newest step on disk, from the folder itself (the manager's list may hold a step
        whose write failed)."""
        return newest_complete_step(self.directory)

    def save(
        self,
        step: int,
        state: TrainState,
        log_window: Sequence[Mapping[str, float]],
    ) -> None:
        """Starts writing; returns once the arrays are off the devices (they may be donated).

        Raises:
          UserError: this write or the previous one failed (a full or read-only disk); the
            message says where, and which complete checkpoint is left.
        """
        self.finish_writing()
        self._start_writing(step, state, list(log_window))

    def _start_writing(self, step: int, state: Any, record: Any) -> None:
        """Starts writing `state` and its JSON `record` (the `RECORD` item) at `step`."""
        if jax.process_count() == 1:
            # Host copies: orbax then writes them as they are, instead of compiling a slicing
            # program per array shape (seconds, on CPU). Several processes hand over their shards.
            state = jax.device_get(state)
        args = ocp.args.Composite(
            state=ocp.args.StandardSave(state), **{self.RECORD: ocp.args.JsonSave(record)}
        )
        self._writing = step
        try:
            self._manager.save(step, args=args, force=True)
        except Exception as e:  # orbax and tensorstore raise all kinds, the OS's error inside
            raise self._write_error(e) from None

    def finish_writing(self) -> None:
        """Waits for the write in flight; its failure becomes a `UserError`."""
        try:
            self._manager.wait_until_finished()
        except Exception as e:
            raise self._write_error(e) from None
        self._writing = None

    def _write_error(self, error: Exception) -> UserError:
        step, self._writing, self._failed = self._writing, None, True
        last = self.last_complete_step()
        kept = f"the last complete checkpoint is step {last}" if last else "no checkpoint is saved"
        return UserError(
            f"could not write checkpoint {step} in {self.directory}: {os_reason(error)}; {kept}"
        )

    def restore_latest(self, like: TrainState) -> Restored | None:
        """The newest checkpoint that reads back (see `restore`); None when there is none.

        Newer ones that do not read back are moved to `DAMAGED_DIR` (kept for the user to look
        at, and out of the way of this run's saves of the same steps).

        Raises:
          IncompatibleCheckpoint: a checkpoint that reads back has other variables or shapes
            than `like` (another network, class count or optimizer); nothing is moved then.
          UserError: there are checkpoints and none of them reads back.
        """
        failures = []
        for step in sorted(self._manager.all_steps(), reverse=True):
            try:
                saved = self._manager.item_metadata(step)
                if saved.get("state") is None:
                    raise FileNotFoundError("the state's metadata is missing")
                check_fits(saved["state"], like, self.directory / str(step))
                state, window = self.restore(step, like, saved)
            except IncompatibleCheckpoint:
                raise
            except Exception as e:  # whatever a damaged file makes orbax or tensorstore raise
                failures.append((step, f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"))
                continue
            return Restored(step, state, window, self._set_aside(failures, step))
        if failures:
            listed = "; ".join(f"step {s}: {reason}" for s, reason in failures)
            raise UserError(
                f"no checkpoint in {self.directory} reads back ({listed}); move them elsewhere "
                "to start this workdir afresh, or use another workdir"
            )
        return None

    def _set_aside(self, failures: list[tuple[int, str]], resumed: int) -> list[str]:
        """Moves the unreadable steps to `DAMAGED_DIR`; a line for each."""
        lines = []
        for step, reason in failures:
            where = self.directory.parent / DAMAGED_DIR / str(step)
            for copy in itertools.count(2):  # the same step may have been set aside before
                if not where.exists():
                    break
                where = where.with_name(f"{step}-{copy}")
            if jax.process_index() == 0:
                where.parent.mkdir(exist_ok=True)
                (self.directory / str(step)).rename(where)
            lines.append(
                f"checkpoint {step} does not read back ({reason}); moved it to {where} and "
                f"resumed from step {resumed}"
            )
        if lines:
            self._manager.reload()
        return lines

    def restore(
        self,
        step: int,
        like: TrainState,
        saved: Mapping[str, Any] | None = None,
    ) -> tuple[TrainState, list[dict[str, float]]]:
        """The state saved at `step`, placed like `like`, and the metrics of its steps that no
        record has averaged yet.

        Checkpoints of older versions restore too: their `LEGACY_STATE_ENTRIES` are dropped, and
        having no `log_window`, the first record after resuming averages only the new steps.
        `saved` is the step's item metadata, when already read.
        """
        saved = saved or self._manager.item_metadata(step)
        items = {"state": ocp.args.StandardRestore(_state_target(like, saved["state"]))}
        if "log_window" in saved:
            items["log_window"] = ocp.args.JsonRestore()
        restored = self._manager.restore(step, args=ocp.args.Composite(**items))
        fields = {f.name: restored.state[f.name] for f in dataclasses.fields(TrainState)}
        return TrainState(**fields), restored.get("log_window", [])

    def close(self) -> None:
        """Waits for the last write to finish (see `save` for its errors; one already raised is
        not raised again)."""
        try:
            if self._writing is not None:
                self.finish_writing()
        finally:
            self._manager.close()
            self._remove_leftovers()

    def _remove_leftovers(self) -> None:
        """Removes what failed writes left: their temporary folders (the workdir's lock makes
        this run the only writer), which a full disk would otherwise keep. After a failure orbax
        does not wait for the write's other items, whose threads may still be creating or
        writing there (a removed folder comes back; one not made yet appears later): after a
        failed write the folders must stay away for `LEFTOVER_QUIET_SECONDS`, tried for up to
        `LEFTOVER_SECONDS`."""
        if jax.process_index() != 0 or not self._failed:
            return
        deadline = time.monotonic() + LEFTOVER_SECONDS
        quiet_until = time.monotonic() + LEFTOVER_QUIET_SECONDS
        while time.monotonic() < deadline:
            if leftovers := list(self.directory.glob("*.orbax-checkpoint-tmp*")):
                for leftover in leftovers:
                    shutil.rmtree(leftover, ignore_errors=True)
                quiet_until = time.monotonic() + LEFTOVER_QUIET_SECONDS
            elif time.monotonic() >= quiet_until:
                return
            time.sleep(0.05)


class KeptWeights(Checkpointer):
    """Weights kept apart from the run's checkpoints, under `directory/<step>/`: `state` holds
    what evaluation reads (params, BatchNorm statistics, the EMA where the run keeps one), and
    `RECORD` (JSON) why they are kept."""

    def __init__(self, directory: Path):
        super().__init__(directory, keep=None)  # its writers remove what they replace

    def write(self, step: int, weights: Mapping[str, Any], record: Mapping[str, Any]) -> None:
        """Writes `weights` at `step` (atomically, and waits), in place of any there."""
        if step in self._manager.all_steps():
            self._manager.delete(step)
        self._start_writing(step, dict(weights), dict(record))
        self.finish_writing()

    def remove_all_but(self, steps: Collection[int]) -> None:
        for step in self._manager.all_steps():
            if step not in steps:
                self._manager.delete(step)


class AveragedWeights(KeptWeights):
    """`nets-average`'s average of a run's weights (`averaging`); the record says which steps."""

    RECORD = "averaged"


class BestCheckpointer(KeptWeights):
    """The weights of the run's `keep` best evaluations so far (highest eval top-1, the earlier
    of equals ranked higher; timm's checkpoint history), each with its evaluation's record.
    `load_variables(directory)` reads the best of them, and so do `finetune.init_from` and
    `distill.teacher`; `nets-average` averages them."""

    RECORD = "evaluation"

    def __init__(self, directory: Path, checkpoints: Checkpointer, keep: int, start_step: int):
        super().__init__(directory)
        self._checkpoints = checkpoints  # whose writes must not overlap these (orbax's barriers)
        self._keep = keep
        # Read once, by every process alike, before any write: each then decides the same. A
        # run that starts at `start_step` (0, or the checkpoint it resumes) drops what an
        # interrupted attempt kept past it, as its records are: evaluations of weights that no
        # checkpoint leads to (a restart from scratch would serve them as its best).
        kept = kept_evaluations(directory)
        self._kept = {step: record for step, record in kept.items() if step <= start_step}
        if len(self._kept) < len(kept):
            self.remove_all_but(self._kept)

    def offer(self, step: int, state: TrainState, evaluation: Mapping[str, float]) -> bool:
        """Keeps the weights of `step`, whose evaluation is `evaluation`, when it ranks among the
        `keep` best (a resumed run that evaluates a step again replaces its weights); returns
        whether it did. Writes and waits (rare; the run's own checkpoint writes, waited for
        first, never overlap it: two writes at once break orbax's barriers across processes),
        then removes the weights that fell out of the `keep` best, whatever their steps (a
        resumed run's may come before those its stopped predecessor wrote). Errors as
        `Checkpointer.save`'s."""
        others = {s: r for s, r in self._kept.items() if s != step}
        ranked = sorted([*others.items(), (step, dict(evaluation))], key=rank)
        if step not in dict(ranked[: self._keep]):
            return False
        self._checkpoints.finish_writing()
        weights = {"params": state.params, "batch_stats": state.batch_stats}
        if state.ema_params:
            weights["ema_params"] = state.ema_params
        self.write(step, weights, evaluation)
        self._kept = dict(ranked[: self._keep])
        self.remove_all_but(self._kept)
        return True


def rank(item: tuple[int, Mapping[str, float]]) -> tuple[float, int]:
    """The order of kept evaluations `(step, record)`: highest top-1 first, the earlier of
    equals first."""
    step, record = item
    return -record["eval/top1"], step


def kept_evaluations(directory: Path) -> dict[int, dict[str, float]]:
    """Step -> evaluation record of the weights a `BestCheckpointer` kept in `directory`."""
    records = {
        step: directory / str(step) / BestCheckpointer.RECORD / JSON_FILE
        for step in saved_steps(directory)
    }
    return {step: json.loads(r.read_text()) for step, r in records.items() if r.is_file()}


def saved_steps(directory: Path) -> list[int]:
    """The steps, oldest first, of the whole checkpoints (or kept weights) in `directory`: the
    `<step>` folders holding a `state`. One still being written is not among them: orbax writes
    it in `<step>.orbax-checkpoint-tmp-*`, writes `commit_success.txt` there once it is whole,
    then renames it to `<step>`."""
    found = directory.glob("*")
    return sorted(int(p.name) for p in found if p.name.isdigit() and (p / "state").is_dir())


LEFTOVER_SECONDS = 10.0
LEFTOVER_QUIET_SECONDS = 1.0


def newest_complete_step(directory: Path) -> int | None:
    """The newest step of `directory` whose checkpoint is complete: orbax writes a step in a
    temporary folder, renamed to the step's number once whole."""
    steps = [int(p.name) for p in directory.glob("*") if p.name.isdigit()]
    return max(steps, default=None)


def quiet_write_failures() -> None:
    """Keeps the echoes of a failed checkpoint write off stderr: `Checkpointer.save` and `close`
    say it in one line. Orbax's threads log it, with tracebacks; what tensorstore still had in
    flight echoes too (`quiet_abandoned_io`). (`train.py` calls this, unless `--verbosity` asks
    for it all.)
    """
    logging.get_absl_logger().addFilter(lambda record: "/orbax/" not in record.pathname)
    quiet_abandoned_io()


def _never_retrieved(record: std_logging.LogRecord) -> bool:
    return "exception was never retrieved" not in record.getMessage()


def _closed_loop_hook(previous: Callable[[Any], None]) -> Callable[[Any], None]:
    def hook(unraisable) -> None:
        error = unraisable.exc_value
        if not (isinstance(error, RuntimeError) and str(error) == "Event loop is closed"):
            previous(unraisable)

    return hook


def quiet_abandoned_io() -> Callable[[], None]:
    """Keeps off stderr the echoes of a failed orbax read or write; returns what undoes it.

    Orbax runs each read or write on an asyncio loop of its own and closes it at the first
    error, while tensorstore's others are still in flight: each that completes later calls back
    into the closed loop from a tensorstore thread, which Python prints as an "Event loop is
    closed" traceback (an unraisable exception), even after the error was handled, or while the
    process exits; and asyncio logs each of their errors as never retrieved. Those threads
    cannot be waited for, so after a failure this stays for the process; it drops nothing else.
    """
    asyncio_log = std_logging.getLogger("asyncio")
    filtered = _never_retrieved in asyncio_log.filters  # already, for the process (train.py's)
    asyncio_log.addFilter(_never_retrieved)
    previous = sys.unraisablehook
    sys.unraisablehook = _closed_loop_hook(previous)

    def undo() -> None:
        if not filtered:
            asyncio_log.removeFilter(_never_retrieved)
        sys.unraisablehook = previous

    return undo


def os_reason(error: Exception) -> str:
    """The operating system's words for why a write failed ("No space left on device"), found in
    the exception's chain (tensorstore puts the code in its message); else its first line."""
    seen = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.strerror:
            return seen.strerror
        code = re.search(r"os_error_code='(\d+)'", str(seen))
        if code:
            return os.strerror(int(code.group(1)))
        seen = seen.__cause__ or seen.__context__
    return str(error).splitlines()[0][:200] if str(error) else type(error).__name__


def shapes(tree: Any) -> dict[str, tuple[int, ...]]:
    """'params/Dense_0/kernel' -> shape, for every array of `tree` (arrays or their metadata)."""
    return {
        jax.tree_util.keystr(path, simple=True, separator="/"): tuple(leaf.shape)
        for path, leaf in jax.tree_util.tree_leaves_with_path(tree)
    }


def check_fits(saved: Mapping[str, Any], like: TrainState, where: Path) -> None:
    """Raises `IncompatibleCheckpoint` naming the first variable that the checkpoint at `where`
    (its state's tree metadata `saved`) lacks, has in excess, or has in another shape."""
    have = shapes({k: v for k, v in saved.items() if k not in LEGACY_STATE_ENTRIES})
    want = {}  # in the fields' order (a dict's leaves come sorted): params before ema_params
    for field in dataclasses.fields(TrainState):
        want.update(shapes({field.name: getattr(like, field.name)}))
    for name in [*want, *(n for n in have if n not in want)]:
        if name not in have:
            problem = f"has no {name}"
        elif name not in want:
            problem = f"has {name}, which this config does not build"
        elif have[name] != want[name]:
            problem = f"has {name} of shape {have[name]}, this config {want[name]}"
        else:
            continue
        raise IncompatibleCheckpoint(f"checkpoint {where} {problem}")


def _state_target(like: TrainState, saved: Mapping[str, Any]) -> dict[str, Any]:
    """`like`'s fields as abstract arrays, in a dict that also holds the legacy entries of
    `saved` (the checkpoint's tree metadata): orbax restores exactly the tree it is given."""
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, like)
    target = {f.name: getattr(abstract, f.name) for f in dataclasses.fields(TrainState)}
    for name in LEGACY_STATE_ENTRIES:
        if name in saved:
            target[name] = jax.ShapeDtypeStruct(saved[name].shape, saved[name].dtype)
    return target


def find_state(path: str | Path, key: str = "finetune.init_from") -> Path:
    """The `state` folder of the checkpoint that `path` names.

    Accepts a workdir (its latest checkpoint), its `checkpoints/` folder, one `<step>` folder,
    or a folder of kept weights (`<workdir>/best`: the best evaluation's; `<workdir>/averaged`);
    `key` names the setting in the error when there is none.
    """
    given = path
    path = Path(path).expanduser()
    if (path / "checkpoints").is_dir():
        path = path / "checkpoints"
    if not (path / "state").is_dir():
        steps = saved_steps(path)
        if not steps:
            raise UserError(f"{key}: no checkpoint found at {given}")
        if kept := kept_evaluations(path):  # `<workdir>/best`: the best of those kept
            path = path / str(min(kept.items(), key=rank)[0])
        else:
            path = path / str(steps[-1])
    return path / "state"


def read_state(state: Path) -> dict[str, Any]:
    """The arrays that the checkpoint's `state` folder holds (orbax's restore, as saved).

    Raises:
      CheckpointGone: the checkpoint was removed while it was read (a live run rotated it away):
        list the steps again.
      DamagedCheckpoint: it does not read back (a truncated or missing file); the message says
        why, and which of the run's other checkpoints there are.
    """
    undo = quiet_abandoned_io()  # before the read: some echo before orbax raises
    try:
        saved = ocp.StandardCheckpointer().restore(state.absolute())
    except Exception as e:  # whatever a damaged or vanishing file makes orbax or tensorstore raise
        folder = state.parent
        if _removed(folder):
            raise CheckpointGone(
                f"{folder} was removed while it was read (its run keeps only its newest "
                "checkpoints)"
            ) from None
        raise DamagedCheckpoint(_damaged(folder, e)) from None
    undo()  # a whole read leaves nothing in flight
    return saved


REMOVAL_SECONDS = 5.0  # the longest a live run's removal of a checkpoint it rotated away takes


def _removed(folder: Path) -> bool:
    """Whether the checkpoint `folder` (`<run>/checkpoints/<step>`, `<run>/best/<step>`) went
    away: orbax removes one file by file, then the folder, so a read that failed midway may see
    the folder still there; while a run holds the workdir, give its removal `REMOVAL_SECONDS`."""
    deadline = time.monotonic() + REMOVAL_SECONDS
    while folder.exists() and is_held(folder.parent.parent) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not folder.exists()


def _damaged(folder: Path, error: Exception) -> str:
    """One line: the checkpoint `folder` is damaged, why (`error`'s first line, without the
    path it repeats), and what else of its run eval.py and export.py could read."""
    reason = str(error).splitlines()[0] if str(error) else type(error).__name__
    reason = re.sub(r' in OCDBT database at local file "[^"]*"', "", reason)[:200]
    run = folder.parent.parent
    if folder.parent.name == "checkpoints" and folder.name.isdigit():
        return f"checkpoint {folder.name} of {run} is damaged ({reason}); {available(run, folder)}"
    return f"{folder} is damaged ({reason}); {available(run, folder)}"


def available(run: Path, unreadable: Path | None = None) -> str:
    """What of a run eval.py and export.py can read, in words: its checkpoints' steps, `--step=`
    the newest, and the kept weights that `--best` and `--averaged` read; not the checkpoint
    folder `unreadable` (nor its kept weights' folder)."""
    steps = saved_steps(run / "checkpoints")
    other = ""
    if unreadable is not None and unreadable.parent == run / "checkpoints":
        steps, other = [s for s in steps if str(s) != unreadable.name], "other "
    if steps:
        listed = ", ".join(map(str, steps))
        said = f"its {other}checkpoints are steps {listed} (--step={steps[-1]}: the newest)"
    else:
        said = f"it has no {other}checkpoint"
    kept = {BEST_DIR: "its best evaluation's weights", AVERAGED_DIR: "the average of its weights"}
    for folder, what in kept.items():
        if saved_steps(run / folder) and (unreadable is None or unreadable.parent != run / folder):
            said += f"; --{folder} reads {what}"
    return said


def load_variables(path: str | Path, use_ema: bool = True) -> dict:
    """The network variables `{'params', 'batch_stats'}` of a checkpoint, for `network_fn.apply`.

    `path` is a workdir, its `checkpoints/` folder or one `<step>` folder. When the run kept an
    EMA of the weights (`optim.ema_decay`) and `use_ema` is set, those are the params, as in the
    run's own evaluation.

    Raises:
      DamagedCheckpoint, CheckpointGone: see `read_state`.
    """
    saved = read_state(find_state(path, key="checkpoint"))
    params = saved["ema_params"] if use_ema and saved.get("ema_params") else saved["params"]
    return {"params": params, "batch_stats": saved.get("batch_stats", {})}


def merge_pretrained(
    init_from: str, variables: dict, exclude: Sequence[str]
) -> tuple[dict, list[str]]:
    """`variables` ({'params', 'batch_stats'}) with every entry not matching `exclude` replaced
    by the checkpoint's. Returns the merged variables and the names kept at initialisation.

    Raises:
      UserError: an entry that is not excluded is missing from the checkpoint or has another
        shape there; the message names its path.
    """
    state_dir = find_state(init_from)
    saved = read_state(state_dir)
    saved_flat = flax.traverse_util.flatten_dict({k: saved.get(k, {}) for k in variables}, sep="/")
    patterns = [re.compile(p) for p in exclude]
    merged, kept = {}, []
    for name, value in flax.traverse_util.flatten_dict(variables, sep="/").items():
        if any(p.search(name) for p in patterns):
            merged[name] = value
            kept.append(name)
            continue
        if name not in saved_flat:
            raise UserError(
                f"finetune.init_from: {name} is not in {state_dir}; exclude it with a "
                "finetune.exclude regex"
            )
        old = saved_flat[name]
        if tuple(old.shape) != tuple(value.shape):
            raise UserError(
                f"finetune.init_from: {name} has shape {tuple(old.shape)} in {state_dir} but "
                f"{tuple(value.shape)} here; exclude it with a finetune.exclude regex"
            )
        merged[name] = np.asarray(old, dtype=value.dtype)
    return flax.traverse_util.unflatten_dict(merged, sep="/"), kept

"""A run's weights averaged over several of its points (timm's `avg_checkpoints.py`; the
stochastic weight averaging of Izmailov et al. 2018 over saved points): those of its kept best
evaluations (`train.keep_best`) or its newest checkpoints, written to `<workdir>/averaged/<step>`
(the newest step averaged) in the form of `<workdir>/best`, which `eval.py --averaged`,
`export.py --averaged`, `finetune.init_from` and `distill.teacher` read.

Every variable is averaged (in float64, then in its own dtype): the parameters, the BatchNorm
statistics too (as timm's script does; SWA recomputes them instead), and the EMA of the weights
where the run kept one.
"""

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from flax.traverse_util import flatten_dict, unflatten_dict

from nets_training import checkpoint
from nets_training.errors import UserError
from nets_training.workdir import AVERAGED_DIR, BEST_DIR

WEIGHTS = ("params", "batch_stats", "ema_params")  # what a checkpoint's average holds


@dataclasses.dataclass(frozen=True)
class Point:
    """One set of weights to average: a kept evaluation's or a checkpoint's."""

    step: int
    folder: Path  # its `<step>` folder
    top1: float | None = None  # its evaluation's, where it was kept for it


def points(workdir: Path, last: int | None = None) -> list[Point]:
    """The weights of the run's kept best evaluations, best first (`last` None), or of its
    `last` newest checkpoints, newest first: at least two."""
    if last is None:
        kept = checkpoint.kept_evaluations(workdir / BEST_DIR)
        found = [
            Point(step, workdir / BEST_DIR / str(step), record["eval/top1"])
            for step, record in sorted(kept.items(), key=checkpoint.rank)
        ]
        if len(found) < 2:
            raise UserError(
                f"{workdir / BEST_DIR} holds the weights of {len(found)} evaluation"
                f"{'' if len(found) == 1 else 's'}: nothing to average (train.keep_best=N keeps "
                "the N best of a run; or give --last=N, its N newest checkpoints)"
            )
        return found
    if last < 2:
        raise UserError(f"--last={last}: averaging takes at least 2 checkpoints")
    folder = workdir / "checkpoints"
    steps = checkpoint.saved_steps(folder)[::-1]
    if len(steps) < last:
        raise UserError(
            f"--last={last}: {folder} holds {len(steps)} checkpoints (train.keep_checkpoints "
            "says how many a run keeps)"
        )
    return [Point(step, folder / str(step)) for step in steps[:last]]


ATTEMPTS = 5  # listings of a live run's checkpoints to try, each of which it may rotate away


def averaged(workdir: Path, last: int | None = None) -> tuple[list[Point], dict[str, Any]]:
    """The `points` (`last`: see there) and their `average`, whole when read: a live run removes
    its oldest checkpoint at each save (and a kept evaluation that a better one replaces), maybe
    between the listing and the read, or during it; then the points are listed again, up to
    `ATTEMPTS` times. The oldest are read first, being the next to go.

    Raises:
      UserError: as `points`; a damaged checkpoint (`checkpoint.DamagedCheckpoint`); or the
        points went away `ATTEMPTS` times.
    """
    for _ in range(ATTEMPTS):
        found = points(workdir, last)
        try:
            return found, average([p.folder for p in reversed(found)])
        except checkpoint.CheckpointGone as e:
            gone = e
    raise UserError(
        f"{workdir}: {ATTEMPTS} times, a checkpoint to average was removed while it was read "
        f"(the last: {gone}); the run removes its oldest at each save: average with a smaller "
        "--last, or after the run"
    )


def average(folders: Sequence[Path]) -> dict[str, Any]:
    """The mean of the weights (`WEIGHTS`) that the checkpoints in `folders` hold, in float64,
    then in each variable's own dtype; read one at a time (`checkpoint.read_state`: its errors)."""
    total: dict[str, np.ndarray] = {}
    dtypes: dict[str, np.dtype] = {}
    first = None
    for folder in folders:
        saved = checkpoint.read_state(folder / "state")
        flat = flatten_dict({k: saved[k] for k in WEIGHTS if saved.get(k)}, sep="/")
        if first is None:
            first = folder
            dtypes = {name: np.asarray(value).dtype for name, value in flat.items()}
            total = {name: np.zeros(np.shape(value), np.float64) for name, value in flat.items()}
        _check_same(flat, total, folder, first)
        for name, value in flat.items():
            total[name] += np.asarray(value, np.float64)
    mean = {name: (s / len(folders)).astype(dtypes[name]) for name, s in total.items()}
    return unflatten_dict(mean, sep="/")


def write(workdir: Path, weights: Mapping[str, Any], averaged: Sequence[Point]) -> Path:
    """Writes `weights` (atomically, orbax) to `<workdir>/averaged/<newest step averaged>`, with
    the steps averaged as its record, in place of any average written before; its folder."""
    step = max(p.step for p in averaged)
    record = {"steps": [p.step for p in averaged], "from": averaged[0].folder.parent.name}
    saver = checkpoint.AveragedWeights(workdir / AVERAGED_DIR)
    try:
        saver.write(step, weights, record)
        saver.remove_all_but({step})
    finally:
        saver.close()
    return workdir / AVERAGED_DIR / str(step)


def _check_same(flat: Mapping[str, Any], like: Mapping[str, np.ndarray], folder, first) -> None:
    for name in [*like, *(n for n in flat if n not in like)]:
        if name not in flat or name not in like:
            where = folder if name not in flat else first
            raise UserError(f"{where} has no {name}: the weights to average must be one network's")
        if np.shape(flat[name]) != like[name].shape:
            raise UserError(
                f"{folder} has {name} of shape {np.shape(flat[name])}, {first} "
                f"{like[name].shape}: the weights to average must be one network's"
            )

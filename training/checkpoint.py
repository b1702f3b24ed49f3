"""Checkpoints with orbax-checkpoint, and fine-tuning from another run's weights.

`<workdir>/checkpoints/<step>/state` holds the whole `TrainState` (params, BatchNorm statistics,
optimizer state, EMA, RNG, step), `<step>/data` the input pipeline's position (grain's
iterator state, one file per process) and `<step>/log_window` the metrics of the train steps that
no record has averaged yet (JSON), so that a resumed run writes the records an uninterrupted one
would. Orbax writes each step into a temporary folder and renames it when complete, so a run
killed at any moment leaves only whole checkpoints behind.
"""

import dataclasses
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import flax
import grain
import jax
import numpy as np
import orbax.checkpoint as ocp

from training.errors import UserError
from training.steps import TrainState

# Entries that older versions kept in the saved state and this one does not: restored, then
# dropped. `window` summed the loss and top-1 of the logging window, now kept on the host.
LEGACY_STATE_ENTRIES = ("window",)


class Checkpointer:
    """Saves and restores a run's position under `directory/<step>/`: the `TrainState`, the data
    iterator's position and the train metrics not logged yet."""

    def __init__(self, directory: Path, keep: int):
        self._manager = ocp.CheckpointManager(
            directory.absolute(),
            options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True),
            # Named up front so that `item_metadata` can read a checkpoint before restoring it.
            item_handlers={
                "state": ocp.StandardCheckpointHandler(),
                "data": grain.checkpoint.CheckpointHandler(),
                "log_window": ocp.JsonCheckpointHandler(),
            },
        )
        self.directory = directory

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def save(
        self,
        step: int,
        state: TrainState,
        data_iterator: grain.DatasetIterator,
        log_window: Sequence[Mapping[str, float]],
    ) -> None:
        """Starts writing; returns once the arrays are off the devices (they may be donated)."""
        if jax.process_count() == 1:
            # Host copies: orbax then writes them as they are, instead of compiling a slicing
            # program per array shape (seconds, on CPU). Several processes hand over their shards.
            state = jax.device_get(state)
        args = ocp.args.Composite(
            state=ocp.args.StandardSave(state),
            data=grain.checkpoint.CheckpointSave(data_iterator),
            log_window=ocp.args.JsonSave(list(log_window)),
        )
        self._manager.save(step, args=args, force=True)

    def restore(
        self, step: int, like: TrainState, data_iterator: grain.DatasetIterator
    ) -> tuple[TrainState, list[dict[str, float]]]:
        """The state saved at `step`, placed like `like`, and the metrics of its steps that no
        record has averaged yet; moves `data_iterator` to its position.

        Checkpoints of older versions restore too: their `LEGACY_STATE_ENTRIES` are dropped, and
        having no `log_window`, the first record after resuming averages only the new steps.
        """
        saved = self._manager.item_metadata(step)
        items = {
            "state": ocp.args.StandardRestore(_state_target(like, saved["state"])),
            "data": grain.checkpoint.CheckpointRestore(data_iterator),
        }
        if "log_window" in saved:
            items["log_window"] = ocp.args.JsonRestore()
        restored = self._manager.restore(step, args=ocp.args.Composite(**items))
        fields = {f.name: restored.state[f.name] for f in dataclasses.fields(TrainState)}
        return TrainState(**fields), restored.get("log_window", [])

    def close(self) -> None:
        """Waits for the last write to finish."""
        self._manager.wait_until_finished()
        self._manager.close()


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

    Accepts a workdir (its latest checkpoint), its `checkpoints/` folder, or one `<step>` folder;
    `key` names the setting in the error when there is none.
    """
    given = path
    path = Path(path).expanduser()
    if (path / "checkpoints").is_dir():
        path = path / "checkpoints"
    if not (path / "state").is_dir():
        steps = [int(p.name) for p in path.glob("*") if p.name.isdigit() and (p / "state").is_dir()]
        if not steps:
            raise UserError(f"{key}: no checkpoint found at {given}")
        path = path / str(max(steps))
    return path / "state"


def load_variables(path: str | Path, use_ema: bool = True) -> dict:
    """The network variables `{'params', 'batch_stats'}` of a checkpoint, for `network_fn.apply`.

    `path` is a workdir, its `checkpoints/` folder or one `<step>` folder. When the run kept an
    EMA of the weights (`optim.ema_decay`) and `use_ema` is set, those are the params, as in the
    run's own evaluation.
    """
    saved = ocp.StandardCheckpointer().restore(find_state(path, key="checkpoint").absolute())
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
    saved = ocp.StandardCheckpointer().restore(state_dir.absolute())
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

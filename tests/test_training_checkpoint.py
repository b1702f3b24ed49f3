"""Checkpoints: the state and the unlogged metrics come back as saved, also from a checkpoint that
a previous version wrote (with its logging window in the state and grain's per-process data
position beside it, neither read now: the position is the step)."""

import dataclasses
import logging as std_logging
import sys

import flax
import grain
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest
from absl import logging as absl_logging

from nets_inference import load
from nets_training import checkpoint, config, loop, steps, teacher
from nets_training.config import DistillConfig
from nets_training.errors import UserError
from nets_training.workdir import BEST_DIR
from tests.helpers import train_tiny_run


@flax.struct.dataclass
class OldTrainState(steps.TrainState):
    """The state as the previous version saved it, with its logging window's sums."""

    window: jax.Array


def batches():
    return iter(grain.MapDataset.range(100).batch(4).to_iter_dataset())


def small_state(tx=None):
    tx = tx or optax.sgd(0.1, momentum=0.9)
    return steps.create_state({"params": {"w": jnp.arange(3.0)}}, tx, jax.random.PRNGKey(0), False)


def save_like_the_previous_version(directory, step, state, data_iterator):
    fields = {f.name: getattr(state, f.name) for f in dataclasses.fields(state)}
    old = OldTrainState(**fields, window=jnp.array([4.5, 1.5]))
    manager = ocp.CheckpointManager(directory.absolute())
    args = ocp.args.Composite(
        state=ocp.args.StandardSave(jax.device_get(old)),
        data=grain.checkpoint.CheckpointSave(data_iterator),
    )
    manager.save(step, args=args, force=True)
    manager.close()


def assert_same_state(a, b):
    assert type(a) is type(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)


def test_a_checkpoint_of_the_previous_version_resumes_without_its_window(tmp_path):
    state, data = small_state().replace(step=jnp.int32(7)), batches()
    next(data)
    save_like_the_previous_version(tmp_path, 7, state, data)
    checkpoints = checkpoint.Checkpointer(tmp_path, keep=2)
    restored, window = checkpoints.restore(7, small_state())
    assert_same_state(restored, state)
    assert window == []  # its first record will average the steps after it only

    checkpoints.save(8, restored, [{"loss": 0.75, "top1": 0.5}])
    checkpoints.close()
    assert sorted(p.name for p in (tmp_path / "8").iterdir() if p.is_dir()) == [
        "log_window",
        "state",
    ]
    again, window = checkpoint.Checkpointer(tmp_path, keep=2).restore(8, small_state())
    assert_same_state(again, state)
    assert window == [{"loss": 0.75, "top1": 0.5}]


def test_a_checkpoint_of_another_optimizer_is_refused_naming_what_it_lacks(tmp_path):
    checkpoints = checkpoint.Checkpointer(tmp_path, keep=2)
    checkpoints.save(1, small_state(), [])
    checkpoints.close()
    adam = small_state(optax.adam(0.1))
    with pytest.raises(
        checkpoint.IncompatibleCheckpoint, match=f"{tmp_path / '1'} has no opt_state/0/count"
    ):
        checkpoint.Checkpointer(tmp_path, keep=2).restore_latest(adam)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1"]  # refused, not set aside


def test_a_failed_write_is_said_in_the_operating_systems_words():
    # As tensorstore reports a full disk (its message, seen on a full tmpfs), and as Python does.
    tensorstore = ValueError(
        'RESOURCE_EXHAUSTED: Error writing local file "/w/checkpoints/4.orbax-checkpoint-tmp/'
        'state/manifest.ocdbt": Failed to write 205 bytes to file 14: No space left on device '
        "[os_error_code='28']"
    )
    assert checkpoint.os_reason(tensorstore) == "No space left on device"
    try:
        raise RuntimeError("commit failed") from OSError(30, "Read-only file system", "/w")
    except RuntimeError as wrapped:
        assert checkpoint.os_reason(wrapped) == "Read-only file system"
    assert checkpoint.os_reason(KeyError("state")) == "'state'"


def test_the_best_evaluations_weights_are_kept_and_read_by_what_takes_a_run(tmp_path, monkeypatch):
    # Evaluations scripted by step (top-1 0.5, 0.7, 0.6, then 0.7 again on resuming): the best is
    # step 2's weights, which a later tie does not replace; eval.py, export.py, fine-tuning and
    # distillation read them from <workdir>/best.
    top1 = {1: 0.5, 2: 0.7, 3: 0.6, 4: 0.7}

    def scripted(eval_step, state, batches, mesh):
        return {"eval/loss": 1.0, "eval/top1": top1[int(state.step)], "eval/top5": 1.0}

    monkeypatch.setattr(loop, "evaluate", scripted)
    each_step = ["train.eval_every=1", "train.checkpoint_every=1", "train.keep_checkpoints=4"]
    summary = train_tiny_run(tmp_path, *each_step)
    assert (summary.best_top1, summary.best_step, summary.final_top1) == (0.7, 2, 0.6)
    assert "best eval top-1 70.00% at step 2, final 60.00%" in str(summary)
    assert sorted(p.name for p in (tmp_path / "best").iterdir()) == ["2"]
    best = checkpoint.load_variables(tmp_path / "best")
    assert_same_state(best, checkpoint.load_variables(tmp_path / "checkpoints" / "2"))
    resumed = config.load(tmp_path / "config.yaml", ["train.steps=4"])
    loop.train(resumed, tmp_path)
    assert sorted(p.name for p in (tmp_path / "best").iterdir()) == ["2"]

    step, folder = load.kept_checkpoint(tmp_path, BEST_DIR)
    assert (step, folder) == (2, tmp_path / "best" / "2")
    assert load.from_workdir(tmp_path, kept=BEST_DIR).source.startswith(f"{folder} (resnet20)")
    assert checkpoint.find_state(tmp_path / "best") == folder / "state"  # finetune.init_from
    kd, _ = teacher.distiller(
        DistillConfig(teacher=str(tmp_path / "best")), 10, 1, (0.3046,), (0.3754,), "float32"
    )
    assert kd.description.startswith(f"distilling from {folder} (resnet20)")


def test_a_run_that_keeps_no_best_says_so_where_it_is_asked_for(tmp_path):
    train_tiny_run(tmp_path, "train.keep_best=false", "train.steps=1")  # an older config's: 0
    assert not (tmp_path / "best").exists()
    with pytest.raises(UserError) as error:
        load.from_workdir(tmp_path, kept=BEST_DIR)
    assert str(error.value) == (
        f"{tmp_path / 'best'}: no best weights there (the run has not evaluated yet, or it ran "
        "with train.keep_best=0)"
    )


def test_the_n_best_are_kept_and_the_best_of_them_read_whatever_their_steps(tmp_path):
    # A resumed run's evaluations may come at earlier steps than those its stopped predecessor
    # kept (of equal top-1, the earlier step ranks higher: a run's first of equals), and it may
    # evaluate a step again (the last offer): its weights replace the old.
    best = checkpoint.BestCheckpointer(
        tmp_path, checkpoint.Checkpointer(tmp_path / "c", keep=1), keep=2, start_step=0
    )
    offers = [(5, 0.5, True), (3, 0.5, True), (4, 0.5, True), (6, 0.4, False), (2, 0.7, True)]
    for step, top1, kept in [*offers, (3, 0.6, True)]:
        state = small_state().replace(step=jnp.int32(step), params={"w": jnp.full(3, top1)})
        assert best.offer(step, state, {"eval/top1": top1}) is kept, step
    best.close()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.isdigit()) == ["2", "3"]
    assert checkpoint.find_state(tmp_path) == tmp_path / "2" / "state"
    third = checkpoint.load_variables(tmp_path / "3")["params"]["w"]
    np.testing.assert_array_equal(third, np.full(3, 0.6, np.float32))

    def started_at(step):  # the best weights of a run resumed at `step`
        return checkpoint.BestCheckpointer(
            tmp_path, checkpoint.Checkpointer(tmp_path / "c", 1), 2, step
        )

    resumed = started_at(6)
    assert not resumed.offer(7, small_state(), {"eval/top1": 0.55})  # ranked against the kept
    resumed.close()
    # Started again at step 2 (its checkpoint, or 0: from scratch), a run drops the weights kept
    # past it, which no checkpoint leads to, as it drops its records there.
    started_at(2).close()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.isdigit()) == ["2"]
    started_at(0).close()
    assert not [p.name for p in tmp_path.iterdir() if p.name.isdigit()]


def test_keep_best_counts_and_reads_older_configs_switch():
    assert config.from_dict({"train": {"keep_best": True}}).train.keep_best == 1
    assert config.from_dict({"train": {"keep_best": 5}}).train.keep_best == 5
    with pytest.raises(UserError, match="train.keep_best: must be >= 0, got -1"):
        config.from_dict({"train": {"keep_best": -1}})


def test_a_whole_read_leaves_the_runs_own_quieting_in_place(monkeypatch):
    """train.py quiets a failed write's echoes for the whole run; a checkpoint read inside it (a
    teacher's, finetune.init_from's) undoes only what the read itself put in place."""
    asyncio_log = std_logging.getLogger("asyncio")
    monkeypatch.setattr(asyncio_log, "filters", [])
    monkeypatch.setattr(absl_logging.get_absl_logger(), "filters", [])
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)
    checkpoint.quiet_write_failures()
    runs_hook, runs_filters = sys.unraisablehook, list(asyncio_log.filters)
    undo = checkpoint.quiet_abandoned_io()
    assert sys.unraisablehook is not runs_hook
    undo()
    assert sys.unraisablehook is runs_hook and asyncio_log.filters == runs_filters != []

"""Checkpoints: the state and the unlogged metrics come back as saved, also from a checkpoint that
a previous version wrote (with its logging window in the state and grain's per-process data
position beside it, neither read now: the position is the step)."""

import dataclasses

import flax
import grain
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest

from nets_training import checkpoint, steps


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

"""Checkpoints: the state, the data position and the unlogged metrics come back as saved, also
from a checkpoint that the previous version wrote."""

import dataclasses

import flax
import grain
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp

from training import checkpoint, steps


@flax.struct.dataclass
class OldTrainState(steps.TrainState):
    """The state as the previous version saved it, with its logging window's sums."""

    window: jax.Array


def batches():
    return iter(grain.MapDataset.range(100).batch(4).to_iter_dataset())


def small_state():
    tx = optax.sgd(0.1, momentum=0.9)
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
    resumed = batches()
    restored, window = checkpoints.restore(7, small_state(), resumed)
    assert_same_state(restored, state)
    assert window == []  # its first record will average the steps after it only
    np.testing.assert_array_equal(next(resumed), next(data))

    checkpoints.save(8, restored, resumed, [{"loss": 0.75, "top1": 0.5}])
    checkpoints.close()
    again, window = checkpoint.Checkpointer(tmp_path, keep=2).restore(8, small_state(), batches())
    assert_same_state(again, state)
    assert window == [{"loss": 0.75, "top1": 0.5}]

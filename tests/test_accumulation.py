"""optim.accumulate_steps (optax.MultiSteps): k micro-batches make the update of one batch k times
their size, the schedule counts optimizer steps, a checkpoint between them resumes, and the run's
length must be whole optimizer steps. NASNet's drop-path progress comes from the step too."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import nets_factory
from nets_training import checkpoint, loop, optim, steps
from nets_training.config import OptimConfig, TrainConfig
from nets_training.errors import UserError
from tests.helpers import numpy_variables

# A tiny ViT (LayerNorm: no batch statistics, so the mean gradient is the whole batch's), in
# evaluation mode: no dropout.
TINY_VIT = {"img_size": 8, "patch_size": 4, "embed_dim": 8, "depth": 1, "num_heads": 2}


def test_k_micro_batches_are_one_batch_k_times_their_size():
    fn = nets_factory.get_network_fn("vit_tiny_patch16_224", 3, **TINY_VIT)
    images = jax.random.normal(jax.random.key(0), (8, 8, 8, 3))
    labels = jnp.arange(8) % 3
    params = numpy_variables(jax.eval_shape(fn.init, jax.random.key(1), images))["params"]

    @jax.jit
    def grads(params, weights):
        """The gradient of the mean loss over the examples of weight 1 (one compiled shape)."""

        def loss(p):
            logits, _ = fn.apply({"params": p}, images)
            losses = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
            return jnp.sum(weights * losses) / jnp.sum(weights)

        return jax.grad(loss)(params)

    # The learning rate grows with the optimizer's count: equal only if the count is of updates.
    schedule = lambda count: 1e-2 * (count + 1)  # noqa: E731
    # eps: the key projection's bias has no gradient but rounding, which Adam would blow up.
    common = dict(name="adamw", eps=1e-3, decoupled_weight_decay=0.05, clip_grad_norm=0.5)
    common |= dict(layer_decay=0.8)

    def train(accumulate, batches):
        cfg = OptimConfig(accumulate_steps=accumulate, **common)
        tx = optim.optimizer(cfg, schedule, module=fn.module)
        p, state, update = params, tx.init(params), jax.jit(tx.update)
        for weights in batches:
            updates, state = update(grads(p, weights), state, p)
            p = optax.apply_updates(p, updates)
        return p

    whole = [jnp.ones(8)] * 2  # two optimizer steps on the batch of 8
    first, second = jnp.arange(8) < 4, jnp.arange(8) >= 4
    halves = [first, second] * 2  # two of 2 micro-batches of 4 each
    trained = jax.tree.leaves(train(1, whole))
    for a, b in zip(trained, jax.tree.leaves(train(2, halves)), strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)
    assert not np.allclose(trained[-1], jax.tree.leaves(params)[-1])  # it learnt


def test_a_checkpoint_between_micro_batches_comes_back_whole(tmp_path):
    tx = optim.optimizer(OptimConfig(name="adamw", accumulate_steps=3), optax.constant_schedule(1))
    params = {"w": jnp.arange(3.0)}
    state = steps.create_state({"params": params}, tx, jax.random.PRNGKey(0), ema=False)
    _, opt_state = tx.update({"w": jnp.ones(3)}, state.opt_state, params)  # one of three
    state = state.replace(step=jnp.int32(1), opt_state=opt_state)
    checkpoints = checkpoint.Checkpointer(tmp_path, keep=2)
    checkpoints.save(1, state, [])
    checkpoints.close()
    fresh = steps.create_state({"params": params}, tx, jax.random.PRNGKey(0), ema=False)
    restored = checkpoint.Checkpointer(tmp_path, keep=2).restore_latest(fresh).state
    assert int(restored.opt_state.mini_step) == 1
    for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(state), strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_run_is_whole_optimizer_steps():
    assert loop.train_steps(TrainConfig(epochs=1.0), 4, 10.5) == 12  # 11 rounded up to 12
    assert loop.train_steps(TrainConfig(epochs=1.0), 1, 10.5) == 11  # as without accumulation
    assert loop.train_steps(TrainConfig(steps=8), 4, 10.5) == 8
    with pytest.raises(UserError) as error:
        loop.train_steps(TrainConfig(steps=10), 4, 10.5)
    assert str(error.value) == (
        "train.steps=10 does not divide into optimizer steps of optim.accumulate_steps=4 train "
        "steps; set train.steps to a multiple of 4 (8 or 12)"
    )


def test_nasnets_drop_path_progress_is_the_runs():
    nasnet = nets_factory.get_network_fn("nasnet_mobile", 10, is_training=True)
    progress = steps.progress_arguments(nasnet, jnp.int32(30), 120)
    assert float(progress["drop_path_progress"]) == 0.25
    assert float(steps.progress_arguments(nasnet, jnp.int32(500), 120)["drop_path_progress"]) == 1
    resnet = nets_factory.get_network_fn("resnet20", 10, is_training=True)
    assert steps.progress_arguments(resnet, jnp.int32(30), 120) == {}

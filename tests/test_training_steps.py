"""The loss, the optimizers and schedules, and the train and eval steps, on tiny inputs."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import nets_factory
from nets_training import device_augment, networks, optim, steps
from nets_training.config import DataConfig, MixupConfig, ModelConfig, OptimConfig
from nets_training.errors import UserError
from nets_training.metrics import Window

LOGITS = jnp.array([[2.0, 0.5, -1.0], [0.1, 0.2, 3.0]])
LABELS = jnp.array([0, 1])


CROSS_ENTROPY = steps.make_loss(OptimConfig())


def test_loss_is_mean_cross_entropy():
    expected = optax.softmax_cross_entropy_with_integer_labels(LOGITS, LABELS).mean()
    targets = jax.nn.one_hot(LABELS, 3)
    loss = steps.classification_loss(LOGITS, {"logits": LOGITS}, targets, CROSS_ENTROPY)
    assert np.isclose(loss, expected)


def test_aux_logits_add_their_cross_entropy_weighted_by_0_4():
    aux = jnp.array([[0.0, 1.0, 0.0], [1.0, 0.0, 2.0]])
    targets = optax.smooth_labels(jax.nn.one_hot(LABELS, 3), 0.1)
    main = steps.classification_loss(LOGITS, {}, targets, CROSS_ENTROPY)
    with_aux = steps.classification_loss(LOGITS, {"aux_logits": aux}, targets, CROSS_ENTROPY)
    aux_loss = steps.cross_entropy(aux, LABELS, 0.1).mean()
    assert np.isclose(with_aux, main + 0.4 * aux_loss)


def test_label_smoothing_spreads_epsilon_over_all_classes():
    eps, k = 0.3, 3
    targets = np.eye(k)[np.asarray(LABELS)] * (1 - eps) + eps / k
    expected = -(targets * jax.nn.log_softmax(LOGITS)).sum(-1)
    np.testing.assert_allclose(steps.cross_entropy(LOGITS, LABELS, eps), expected, rtol=1e-6)


def lr_at(schedule, *points):
    return [float(schedule(p)) for p in points]


def test_schedules_warm_up_linearly_then_decay_to_their_end():
    common = dict(lr=0.4, warmup_epochs=1, end_lr=0.01)
    cosine = optim.schedule(OptimConfig(schedule="cosine", **common), 128, 100, 10)
    assert np.allclose(lr_at(cosine, 0, 5, 10, 100), [0, 0.2, 0.4, 0.01])
    poly = optim.schedule(OptimConfig(schedule="polynomial", power=1.0, **common), 128, 100, 10)
    assert np.allclose(lr_at(poly, 55, 100), [0.205, 0.01])
    step = optim.schedule(
        OptimConfig(schedule="step", boundaries=(0.5, 0.75), **common), 1, 100, 10
    )
    assert np.allclose(lr_at(step, 49, 50, 74, 75), [0.4, 0.04, 0.04, 0.004])
    expo = optim.schedule(OptimConfig(schedule="exponential", lr=1.0, decay_epochs=2), 1, 100, 10)
    assert np.allclose(lr_at(expo, 19, 20, 40), [1.0, 0.1, 0.01])
    const = optim.schedule(OptimConfig(schedule="constant", lr=0.3), 1, 100, 10)
    assert np.allclose(lr_at(const, 0, 99), [0.3, 0.3])


def test_lr_scales_with_the_batch_when_a_reference_batch_is_set():
    cfg = OptimConfig(lr=0.1, lr_reference_batch=256, schedule="constant")
    assert np.isclose(float(optim.schedule(cfg, 1024, 10, 1)(3)), 0.4)


PARAMS = {"Conv_0": {"kernel": jnp.ones((3, 3)), "bias": jnp.ones(3)}}


@pytest.mark.parametrize(
    "name", ["sgd", "momentum", "nesterov", "adamw", "rmsprop", "lamb", "lars"]
)
def test_every_optimizer_descends(name):
    tx = optim.optimizer(OptimConfig(name=name, lr=0.01), optax.constant_schedule(0.01))
    grads = jax.tree.map(jnp.ones_like, PARAMS)
    updates, _ = tx.update(grads, tx.init(PARAMS), PARAMS)
    assert all(float(u.sum()) < 0 for u in jax.tree.leaves(updates))


def test_decoupled_decay_touches_kernels_only():
    cfg = OptimConfig(name="adamw", lr=0.1, decoupled_weight_decay=0.5)
    tx = optim.optimizer(cfg, optax.constant_schedule(0.1))
    zeros = jax.tree.map(jnp.zeros_like, PARAMS)
    updates, _ = tx.update(zeros, tx.init(PARAMS), PARAMS)
    np.testing.assert_allclose(updates["Conv_0"]["kernel"], -0.05)
    np.testing.assert_allclose(updates["Conv_0"]["bias"], 0.0)


def test_trainable_regexes_freeze_everything_else():
    params = {"Dense_0": {"kernel": jnp.ones(2)}, "conv_init": {"kernel": jnp.ones(2)}}
    tx = optim.optimizer(OptimConfig(), optax.constant_schedule(0.1), trainable=["Dense_"])
    grads = jax.tree.map(jnp.ones_like, params)
    updates, _ = tx.update(grads, tx.init(params), params)
    assert float(abs(updates["Dense_0"]["kernel"]).sum()) > 0
    assert float(abs(updates["conv_init"]["kernel"]).sum()) == 0


@pytest.fixture(scope="module")
def tiny():
    kwargs = dict(stage_sizes=(1, 1), num_filters=4)
    train_fn = nets_factory.get_network_fn("resnet20", 3, 1e-4, is_training=True, **kwargs)
    eval_fn = nets_factory.get_network_fn("resnet20", 3, **kwargs)
    variables = jax.jit(train_fn.init)(jax.random.PRNGKey(0), jnp.zeros((1, 8, 8, 1)))
    prepare = lambda x: steps.preprocess(x, 8, (0.5,), (0.25,))  # noqa: E731
    return train_fn, eval_fn, variables, prepare


def test_eval_step_counts_real_examples_only(tiny):
    _, eval_fn, variables, prepare = tiny
    state = steps.create_state(variables, optax.sgd(0.1), jax.random.PRNGKey(1), ema=False)
    images = np.random.default_rng(0).integers(0, 255, (4, 8, 8, 1), dtype=np.uint8)
    eval_step = jax.jit(steps.make_eval_step(eval_fn, prepare, use_ema=False))
    full = eval_step(state, {"image": images, "label": np.array([0, 1, 2, 0]), "mask": np.ones(4)})
    mask = np.array([1.0, 1.0, 0.0, 0.0])
    half = eval_step(state, {"image": images, "label": np.array([0, 1, 2, 0]), "mask": mask})
    first = eval_step(state, {"image": images[:2], "label": np.array([0, 1]), "mask": np.ones(2)})
    np.testing.assert_allclose(half, first, rtol=1e-5)
    assert float(full[3]) == 4 and float(half[3]) == 2 and float(full[2]) == 4  # 3 classes: top-5


def poisoned(prepare):
    """`prepare`, except that an all-zero batch becomes NaN: its step's loss is not finite."""
    return lambda images: prepare(images) * jnp.where(jnp.any(images), 1.0, jnp.nan)


def assert_same_tree(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)


def test_train_step_returns_its_metrics_and_a_non_finite_step_changes_nothing_but_step(tiny):
    train_fn, _, variables, prepare = tiny
    tx = optax.sgd(0.1, momentum=0.9)
    state = steps.create_state(variables, tx, jax.random.PRNGKey(1), ema=False)
    augment = device_augment.make_augment(DataConfig(), MixupConfig(), 3, 0.0)
    train_step = steps.make_train_step(
        train_fn, tx, poisoned(prepare), augment, CROSS_ENTROPY, ema_decay=0.0
    )
    train_step = jax.jit(train_step)
    rng = np.random.default_rng(0)
    labels = np.array([0, 1, 2, 0])
    batch = lambda: {"image": rng.integers(1, 255, (4, 8, 8, 1), np.uint8), "label": labels}  # noqa: E731
    window, losses = Window(), []
    for _ in range(3):
        state, metrics = train_step(state, batch())
        assert {k: (v.shape, v.dtype) for k, v in metrics.items()} == {
            "loss": ((), jnp.float32),
            "top1": ((), jnp.float32),
        }
        window.add(metrics)
        losses.append(float(metrics["loss"]))
    assert window.mean()["loss"] == np.mean(losses)  # what the loop logs as train/loss
    good = state
    state, metrics = train_step(state, {"image": np.zeros((4, 8, 8, 1), np.uint8), "label": labels})
    assert not np.isfinite(metrics["loss"])
    state, metrics = train_step(state, batch())  # a finite loss after it changes nothing either
    assert np.isfinite(metrics["loss"])
    assert (int(state.step), int(state.nonfinite_step)) == (5, 4)
    assert_same_tree(
        (state.params, state.batch_stats, state.opt_state),
        (good.params, good.batch_stats, good.opt_state),
    )


def test_gradient_clipping_bounds_the_update():
    cfg = OptimConfig(name="sgd", lr=1.0, clip_grad_norm=0.5)
    tx = optim.optimizer(cfg, optax.constant_schedule(1.0))
    grads = jax.tree.map(lambda p: 1e6 * jnp.ones_like(p), PARAMS)
    updates, _ = tx.update(grads, tx.init(PARAMS), PARAMS)
    assert np.isclose(float(optax.tree.norm(updates)), 0.5, rtol=1e-5)

    # Adaptive clipping: each output unit's update at most 0.01 x its weights' norm (a kernel's
    # column, a bias whole, a gain's each entry), the classifier's left as it is.
    agc = OptimConfig(name="sgd", lr=1.0, agc=0.01)
    params = {**PARAMS, "gain": jnp.array([3.0, -4.0]), "head": {"kernel": jnp.ones((3, 2))}}
    tx = optim.optimizer(agc, optax.constant_schedule(1.0), classifier=["head/kernel"])
    grads = jax.tree.map(lambda p: 1e6 * jnp.ones_like(p), params)
    updates, _ = tx.update(grads, tx.init(params), params)
    columns = np.linalg.norm(updates["Conv_0"]["kernel"], axis=0)
    np.testing.assert_allclose(columns, 0.01 * np.sqrt(3.0), rtol=1e-5)  # ones: each column's
    assert np.isclose(np.linalg.norm(updates["Conv_0"]["bias"]), 0.01 * np.sqrt(3.0), rtol=1e-5)
    np.testing.assert_allclose(np.abs(updates["gain"]), [0.03, 0.04], rtol=1e-5)
    np.testing.assert_array_equal(updates["head"]["kernel"], -1e6)  # sgd: -lr x the gradient


def test_model_dtype_reaches_the_network():
    train_fn, eval_fn = networks.network_fns(ModelConfig(name="resnet18", dtype="bfloat16"), 10)
    assert train_fn.module.dtype == eval_fn.module.dtype == jnp.bfloat16
    assert train_fn.is_training and not eval_fn.is_training
    with pytest.raises(UserError, match="model.kwargs.dtype: set model.dtype instead"):
        networks.network_fns(ModelConfig(kwargs={"dtype": "float16"}), 10)

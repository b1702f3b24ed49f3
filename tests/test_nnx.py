"""nets_factory.to_nnx: a network and its variables as a Flax NNX module that computes what the
Linen network computes, trains with nnx.Optimizer, and goes back to Linen variables."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

import nets_factory
import nets_nnx
from tests.helpers import numpy_variables

RESNET = {"num_filters": 4, "stage_sizes": (1, 1)}
VGG = {"stage_sizes": (1, 1), "stage_widths": (4, 8), "fc_width": 16}  # fc6, fc7 drop out
IMAGES = jax.random.normal(jax.random.key(0), (4, 16, 16, 3))
LABELS = jnp.arange(4)


def networks(name="resnet18", fields=RESNET):
    """Training and evaluation functions, and variables as jax arrays (drawn in numpy: `init`
    run op by op costs seconds, and any values serve a comparison of two paths)."""
    train_fn = nets_factory.get_network_fn(name, 10, is_training=True, **fields)
    eval_fn = nets_factory.get_network_fn(name, 10, **fields)
    abstract = jax.eval_shape(train_fn.init, jax.random.key(1), IMAGES)
    return train_fn, eval_fn, jax.tree.map(jnp.asarray, numpy_variables(abstract, seed=1))


def cross_entropy(logits):
    return optax.softmax_cross_entropy_with_integer_labels(logits, LABELS).mean()


def assert_trees_close(a, b, tolerance):
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, atol=tolerance, rtol=0), a, b)


def test_evaluation_gives_the_linen_networks_logits_and_end_points():
    _, eval_fn, variables = networks()
    model = nets_factory.to_nnx(eval_fn, variables)
    logits, end_points = model(IMAGES)
    expected, expected_points = eval_fn.apply(variables, IMAGES)
    np.testing.assert_array_equal(logits, expected)
    assert end_points.keys() == expected_points.keys()
    assert isinstance(model.linen.conv_init["kernel"], nnx.Param)
    assert isinstance(model.linen.bn_init["mean"], nnx.BatchStat)


def test_an_nnx_optimizer_step_is_the_linen_training_step():
    train_fn, eval_fn, variables = networks()
    tx = optax.sgd(0.1, momentum=0.9)

    # Linen: the step as train.py takes it.
    def loss(params):
        (logits, _), updates = train_fn.apply(
            {**variables, "params": params}, IMAGES, mutable=["batch_stats"]
        )
        return cross_entropy(logits), updates

    grads, updates = jax.jit(jax.grad(loss, has_aux=True))(variables["params"])  # op by op: 7 s
    moves, _ = tx.update(grads, tx.init(variables["params"]), variables["params"])
    expected = {"params": optax.apply_updates(variables["params"], moves), **updates}

    model = nets_factory.to_nnx(train_fn, variables)
    optimizer = nnx.Optimizer(model, tx, wrt=nnx.Param)

    @nnx.jit
    def step(model, optimizer):
        grads = nnx.grad(lambda m: cross_entropy(m(IMAGES)[0]))(model)
        optimizer.update(model, grads)

    step(model, optimizer)
    after = nets_nnx.to_linen_variables(model)
    assert_trees_close(after, expected, 1e-6)
    moved = jax.tree.map(lambda a, b: float(jnp.abs(a - b).max()), after, variables)
    assert moved["params"]["conv_init"]["kernel"] > 0 and moved["params"]["Dense_0"]["kernel"] > 0
    assert moved["batch_stats"]["bn_init"]["mean"] > 0

    # ... and back in Linen, evaluation sees the trained weights and statistics.
    model.eval()
    logits, _ = model(IMAGES)
    np.testing.assert_allclose(logits, eval_fn.apply(after, IMAGES)[0], atol=1e-6)


def test_dropout_draws_from_the_models_stream_in_training_only():
    train_fn, eval_fn, variables = networks("vgg11", VGG)
    model = nets_factory.to_nnx(train_fn, variables, seed=3)
    first, second = model(IMAGES)[0], model(IMAGES)[0]
    assert not np.allclose(first, second)  # a new dropout key per call
    model.eval()
    np.testing.assert_array_equal(model(IMAGES)[0], eval_fn.apply(variables, IMAGES)[0])


@pytest.mark.parametrize("variables", [None, {"batch_stats": {}}])
def test_variables_that_are_not_a_networks_are_refused_in_one_line(variables):
    network_fn = nets_factory.get_network_fn("lenet", 10)
    with pytest.raises(TypeError, match=r"^to_nnx needs the network's variables, .*; got "):
        nets_factory.to_nnx(network_fn, variables)

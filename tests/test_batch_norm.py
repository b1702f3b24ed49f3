"""nets.layers.BatchNorm: flax's BatchNorm, with its training gradient in closed form."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from nets.layers.batch_norm import BatchNorm


def perturbed(variables):
    return jax.tree.map(lambda v: v + jax.random.uniform(jax.random.key(3), v.shape), variables)


def relative_error(a, b) -> float:
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return float(np.abs(a - b).max() / np.abs(b).max())


def train_outputs(cls, variables, x, **fields):
    """Output, updated statistics and the gradients of a loss that reads all three (so the
    statistics' cotangents are not zero) with respect to the parameters and the input."""
    module = cls(use_running_average=False, momentum=0.9, **fields)
    weights = jax.random.normal(jax.random.key(4), x.shape)

    def loss(params, x):
        y, updates = module.apply(
            {"params": params, "batch_stats": variables["batch_stats"]},
            x,
            mutable=["batch_stats"],
        )
        stats = updates["batch_stats"]
        total = (y.astype(jnp.float32) * weights).sum()
        return total + (3 * stats["mean"]).sum() + (stats["var"] ** 2).sum(), (y, stats)

    grads, (y, stats) = jax.grad(loss, (0, 1), has_aux=True)(variables["params"], x)
    return y, stats, grads


@pytest.mark.parametrize(
    ("use_scale", "dtype", "x_dtype"),
    [(True, None, jnp.float32), (False, jnp.bfloat16, jnp.float32), (True, None, jnp.bfloat16)],
)
def test_training_matches_flax(use_scale, dtype, x_dtype):
    """Outputs and statistics bit for bit; gradients to rounding (the input's gradient in the
    input's dtype: bfloat16's rounding where a mixed-precision convolution hands it bfloat16)."""
    fields = dict(use_scale=use_scale, dtype=dtype, epsilon=1e-3)
    x = (jax.random.normal(jax.random.key(0), (6, 5, 7, 8)) * 3 + 1).astype(x_dtype)
    variables = nn.BatchNorm(use_running_average=False, **fields).init(jax.random.key(1), x)
    ours = BatchNorm(use_running_average=False, **fields).init(jax.random.key(1), x)
    assert jax.tree.map(jnp.shape, ours) == jax.tree.map(jnp.shape, variables)
    variables = perturbed(variables)

    y, stats, grads = train_outputs(BatchNorm, variables, x, **fields)
    y_ref, stats_ref, grads_ref = train_outputs(nn.BatchNorm, variables, x, **fields)
    assert y.dtype == y_ref.dtype and (y == y_ref).all()
    assert jax.tree.all(jax.tree.map(lambda a, b: bool((a == b).all()), stats, stats_ref))
    assert jax.tree.structure(grads) == jax.tree.structure(grads_ref)
    for grad, grad_ref in zip(jax.tree.leaves(grads), jax.tree.leaves(grads_ref), strict=True):
        assert grad.dtype == grad_ref.dtype
        assert relative_error(grad, grad_ref) <= (1e-5 if grad.dtype == jnp.float32 else 1e-2)


def test_evaluation_matches_flax_and_other_configurations_are_flax_own():
    """Running averages give flax's outputs bit for bit; masks and `axis_name` run flax's code."""
    x = jax.random.normal(jax.random.key(0), (4, 3, 3, 5))
    variables = nn.BatchNorm(use_running_average=True).init(jax.random.key(1), x)
    variables = perturbed(variables)
    assert (
        BatchNorm().apply(variables, x, use_running_average=True)
        == nn.BatchNorm().apply(variables, x, use_running_average=True)
    ).all()
    mask = jnp.arange(4 * 3 * 3 * 5).reshape(x.shape) % 3 > 0
    outputs = [
        cls(use_running_average=False).apply(variables, x, mask=mask, mutable=["batch_stats"])
        for cls in (BatchNorm, nn.BatchNorm)
    ]
    assert jax.tree.all(jax.tree.map(lambda a, b: bool((a == b).all()), *outputs))


def test_initialization_leaves_running_averages_and_outputs_flaxs():
    x = jax.random.normal(jax.random.key(0), (4, 2, 2, 3)) + 5
    y, variables = BatchNorm(use_running_average=False).init_with_output(jax.random.key(1), x)
    stats = variables["batch_stats"]
    assert (stats["mean"] == 0).all() and (stats["var"] == 1).all()
    y_ref, _ = nn.BatchNorm(use_running_average=False).init_with_output(jax.random.key(1), x)
    assert (y == y_ref).all()

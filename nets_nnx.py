"""A network of the registry as a Flax NNX module (`nets_factory.to_nnx`), holding its variables:
the Flax documentation's recommended API for new code, on top of our Linen modules through
`flax.nnx.bridge`, with nothing converted but the container.

    model = nets_factory.to_nnx(network_fn, variables)        # eval or training, as network_fn
    logits, end_points = model(images)
    optimizer = nnx.Optimizer(model, optax.sgd(0.1), wrt=nnx.Param)  # training: BatchNorm
    grads = nnx.grad(loss)(model); optimizer.update(model, grads)    # statistics update in place
    variables = nets_nnx.to_linen_variables(model)            # back to {'params', 'batch_stats'}
"""

from collections.abc import Mapping
from typing import Any

import jax
from flax import nnx
from flax.nnx import bridge
from flax.nnx.bridge import variables as bridge_variables

from nets_weights import published


class Network(nnx.Module):
    """A `NetworkFn`'s module and variables as NNX state: parameters are `nnx.Param`, BatchNorm
    statistics `nnx.BatchStat`. `training` (set from `network_fn.is_training`, changed by
    `model.train()` / `model.eval()`) picks batch statistics and dropout, whose keys come from
    `rngs`."""

    def __init__(self, network_fn: Any, variables: dict[str, Any], rngs: nnx.Rngs):
        self.name = network_fn.name
        self.training = network_fn.is_training
        self.rngs = rngs
        # Static (field, value) pairs, given back by `to_linen_variables` as the collection.
        self.conventions = tuple(published.conventions_of(variables).items())
        self.linen = bridge.ToNNX(network_fn.module, rngs=None)
        linen_vars = published.without_mark(variables)
        for name, value in bridge_variables.linen_vars_to_nnx_attrs(linen_vars).items():
            setattr(self.linen, name, nnx.data(value))

    def __call__(self, images: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
        """`(logits, end_points)`; in training, BatchNorm's running statistics update in place."""
        if not self.training:
            return self.linen(images, train=False)
        return self.linen(images, train=True, rngs=self.rngs, mutable=["batch_stats"])

    def train(self, **attributes: Any) -> None:
        """Training mode: batch statistics, dropout."""
        self.training = True
        super().train(**attributes)

    def eval(self, **attributes: Any) -> None:
        """Evaluation mode: running statistics, no dropout."""
        self.training = False
        super().eval(**attributes)


def to_nnx(network_fn: Any, variables: dict[str, Any], seed: int = 0) -> Network:
    """`network_fn` (from `get_network_fn` or `load_pretrained`) with `variables` as an NNX
    module; `seed` seeds its dropout stream."""
    if not isinstance(variables, Mapping) or "params" not in variables:
        got = type(variables).__name__ if not isinstance(variables, Mapping) else list(variables)
        raise TypeError(
            f"to_nnx needs the network's variables, {{'params': ...}} as `init` or "
            f"`load_pretrained` return them; got {got}"
        )
    published.check(variables, network_fn.module, network_fn.name)
    return Network(network_fn, variables, nnx.Rngs(dropout=seed))


def to_linen_variables(model: Network) -> dict[str, Any]:
    """The model's current variables as Linen's `{'params': ..., 'batch_stats': ...}`, for
    `network_fn.apply`, checkpoints and `export.py` (published weights' `conventions` too)."""
    attributes = {
        name: value
        for name, value in vars(model.linen).items()
        if not name.startswith(("to_nnx__", "_pytree__"))
    }
    variables = bridge_variables.nnx_attrs_to_linen_vars(attributes)
    return published.mark(variables, dict(model.conventions))

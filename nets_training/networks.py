"""The networks a config builds: `get_network_fn` for training and for evaluation, at the
config's compute dtype, with a config's mistakes as one-line errors naming its key."""

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

import nets_factory
from nets_training import optim
from nets_training.config import ModelConfig, check_types
from nets_training.errors import UserError


class Networks(NamedTuple):
    train: nets_factory.NetworkFn  # batch statistics, dropout
    eval: nets_factory.NetworkFn  # running statistics


def compute_dtype(dtype: str, backend: str | None = None) -> str:
    """`model.dtype` on `backend` (JAX's default): 'auto' is bfloat16 on accelerators, whose
    matrix units run it at several times float32's rate, and float32 on a CPU."""
    if dtype != "auto":
        return dtype
    return "float32" if (backend or jax.default_backend()) == "cpu" else "bfloat16"


def network_fns(model: ModelConfig, num_classes: int | None) -> Networks:
    """The training and evaluation networks, with config mistakes as one-line errors."""
    kwargs = dict(model.kwargs)
    if "dtype" in kwargs:
        raise UserError("model.kwargs.dtype: set model.dtype instead")
    build = functools.partial(
        nets_factory.get_network_fn,
        model.name,
        num_classes,
        weight_decay=model.weight_decay,
        dtype=jnp.dtype(compute_dtype(model.dtype)),
        **kwargs,
    )
    try:
        networks = Networks(build(is_training=True), build(is_training=False))
    except ValueError as e:  # an unknown name, or a field's value (remat's)
        key = "model.kwargs" if model.name in nets_factory.networks_map else "model.name"
        raise UserError(f"{key}: {e}") from None
    except TypeError as e:
        raise UserError(f"model.kwargs: {e}") from None
    check_types(type(networks.train.module), kwargs, "model.kwargs")
    check_no_names_for_functions(networks.train, kwargs)
    return networks


def check_no_names_for_functions(network_fn: nets_factory.NetworkFn, kwargs: dict) -> None:
    """Refuses a YAML value for a field whose value is a Python function or module class (an
    activation, a norm, a block: `act = relu` in `python -m nets_factory NAME`'s listing),
    which a config cannot name: the string would be called deep inside the first trace."""
    plain = nets_factory.networks_map[network_fn.name]()  # its fields without model.kwargs
    for key, value in kwargs.items():
        default = getattr(plain, key, None)
        if callable(default) and not callable(value):
            shown = getattr(default, "__name__", None) or type(default).__name__
            raise UserError(
                f"model.kwargs.{key}={value!r}: {network_fn.name}'s {key} is a Python function "
                f"or module ({shown} by default), which a config cannot name; set it in Python "
                f"(nets_factory.get_network_fn({network_fn.name!r}, ..., {key}=...)) or leave it"
            )


def classifier_params(network_fn: nets_factory.NetworkFn) -> frozenset[str]:
    """The classifier's parameters by path ('Dense_0/kernel'): those the network has and its
    features-mode twin (no classes) has not. Abstract traces: nothing is computed."""

    def names(fn: nets_factory.NetworkFn) -> set[str]:
        size = fn.default_image_size
        images = jax.ShapeDtypeStruct((1, size, size, 3), jnp.float32)
        params = jax.eval_shape(fn.init, jax.random.key(0), images)["params"]
        return {optim.path_name(path) for path, _ in jax.tree_util.tree_leaves_with_path(params)}

    features = dataclasses.replace(network_fn, module=network_fn.module.clone(num_classes=0))
    return frozenset(names(network_fn) - names(features))

"""nets_training.initial_state: a run's first state, compiled for a short compile, the same under
any threefry setting of the user's, and its shapes alone for a restore."""

import dataclasses

import jax
import numpy as np
import optax
import pytest

import nets_factory
from nets_training import initial_state, sharding
from nets_training.config import Config, DataConfig, ModelConfig, OptimConfig
from nets_training.errors import UserError

CONFIG = Config(data=DataConfig(image_size=28), optim=OptimConfig(ema_decay=0.9))


@pytest.fixture(scope="module")
def network():
    return nets_factory.get_network_fn("lenet", num_classes=10, is_training=True)


def make(network, partitionable: bool):
    tx = optax.sgd(0.1, momentum=0.9)
    mesh = sharding.make_mesh()
    with jax.threefry_partitionable(partitionable):
        state, notes = initial_state.initial_state(CONFIG, network, tx, 3, mesh)
        abstract = initial_state.abstract_state(CONFIG, network, tx, 3, mesh)
        assert jax.config.jax_threefry_partitionable == partitionable  # given back
    return state, notes, abstract


def test_the_state_is_the_same_under_either_threefry_and_its_shapes_are_the_restores(network):
    """The user's `jax_threefry_partitionable` changes no variable of a run; the abstract state
    has the state's tree, shapes, dtypes and shardings (all a restore reads from it)."""
    state, notes, abstract = make(network, partitionable=True)
    other, _, _ = make(network, partitionable=False)
    assert notes == []
    same = jax.tree.map(lambda a, b: np.array_equal(np.asarray(a), np.asarray(b)), state, other)
    assert all(jax.tree.leaves(same))
    assert jax.tree.structure(abstract) == jax.tree.structure(state)
    for a, s in zip(jax.tree.leaves(abstract), jax.tree.leaves(state), strict=True):
        assert (a.shape, a.dtype, a.sharding) == (s.shape, s.dtype, s.sharding)
    assert jax.tree.leaves(state.ema_params)  # EMA on: its copy is in both


def test_a_variables_initialisation_is_compiled_with_the_run_once_options(network, monkeypatch):
    """The options reach XLA: one it does not know is refused."""
    options = {jax.default_backend(): {"xla_no_such_option": 1}}
    monkeypatch.setattr(initial_state, "RUN_ONCE_OPTIONS", options)
    state = dataclasses.replace(CONFIG, optim=OptimConfig())
    with pytest.raises(Exception, match="xla_no_such_option"):
        initial_state.initial_state(state, network, optax.sgd(0.1), 3, sharding.make_mesh())


@pytest.mark.parametrize("restore", [False, True])
def test_a_size_whose_maps_disagree_is_the_configs_one_line_error(restore):
    """DLA's maps disagree at 112 px (as timm's): `NetworkFn`'s `ImageSizeError` becomes the
    run's `UserError`, named by the key to change, when it starts and when it resumes."""
    dla = nets_factory.get_network_fn("dla34", num_classes=10, is_training=True)
    config = Config(data=DataConfig(image_size=112))
    make = initial_state.abstract_state if restore else initial_state.initial_state
    with pytest.raises(UserError, match=r"^data.image_size=112: dla34 does not run on 112x112"):
        make(config, dla, optax.sgd(0.1), 3, sharding.make_mesh())


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({"padding": "FOO"}, "ValueError: padding must be 'SAME', 'SYMMETRIC', 'VALID'"),
        ({"num_filters": 0}, "ZeroDivisionError: float division by zero"),
        ({"drop_path_rate": 2.0}, "ValueError: drop_path_rate must be in [0, 1), got 2.0"),
    ],
)
def test_a_field_value_the_network_refuses_is_one_line_naming_model_kwargs(kwargs, said):
    """Values of the types a config holds, that only the network's code refuses at its first
    trace: one line naming model.kwargs, where a traceback was."""
    config = Config(
        model=ModelConfig(name="resnet20", kwargs=kwargs), data=DataConfig(image_size=8)
    )
    fn = nets_factory.get_network_fn("resnet20", num_classes=10, is_training=True, **kwargs)
    with pytest.raises(UserError) as error:
        initial_state.abstract_state(config, fn, optax.sgd(0.1), 3, sharding.make_mesh())
    ((key, value),) = kwargs.items()
    assert str(error.value).startswith(
        f"model.kwargs {{{key}: {value!r}}}: resnet20 could not be built with them: {said}"
    )
    assert "\n" not in str(error.value)

"""A run's first train state: fresh variables (or `finetune.init_from`'s), and the same state as
shapes alone for a restore, which needs nothing more.

Initialising is compiled and run once, so it is compiled for a short compile, not a fast run:
on a cold cache it was the larger part of a run's start (ResNet-50 on a CPU: 13.7 s compiling
its 161 random initialisers, against 9.3 s for the train step).
"""

import contextlib
import functools
import re
from collections.abc import Iterator

import jax
import jax.numpy as jnp

import nets_factory
import nets_weights
from nets_training import checkpoint, optim, sharding, steps
from nets_training.config import Config
from nets_training.errors import UserError

# XLA:CPU's backend optimisations off: ResNet-50's initialisation (64 px, on 2 cores) compiled
# in 2.6x less time and ran in 3 s more, 8.6 s less in all. Unmeasured on GPUs, left as they are.
RUN_ONCE_OPTIONS = {"cpu": {"xla_backend_optimization_level": 0}}


def initial_state(
    config: Config, train_fn: nets_factory.NetworkFn, tx, channels: int, mesh
) -> tuple[steps.TrainState, list[str]]:
    """Fresh variables, or `finetune.init_from`'s where not excluded, replicated on the mesh;
    and what fine-tuning did besides restoring: the variables it left at their initialisation,
    published RGB weights adapted to the data's `channels` (one phrase each)."""
    makers = _Makers(config, train_fn, tx, channels, mesh)
    init_from, exclude = config.finetune.init_from, config.finetune.exclude
    if not init_from:  # variables and state in one compilation
        state = makers.run(makers.state)
        check_trainable(config.finetune.trainable, {"params": state.params})
        return state, []
    variables = makers.run(makers.variables)
    notes = []
    if nets_weights.is_weights(init_from):
        try:
            variables, fresh, info = nets_weights.fill(
                config.model.name,
                init_from,
                train_fn,
                variables,
                nets_factory.networks_map,
                exclude,
                in_chans=channels,
            )
        except ValueError as e:
            raise UserError(f"finetune.init_from: {e}") from None
        if info.in_chans != nets_weights.convert.RGB:
            notes.append(
                f"its RGB input convolution adapted to {channels} channel"
                f"{'s' if channels > 1 else ''} as timm's in_chans"
            )
    else:
        variables, fresh = checkpoint.merge_pretrained(init_from, variables, exclude)
    if fresh:
        notes.insert(0, f"kept at initialisation: {', '.join(fresh)}")
    check_trainable(config.finetune.trainable, variables)
    state = run_once(jax.jit(makers.create, out_shardings=makers.replicated), variables)
    return state, notes


def abstract_state(
    config: Config, train_fn: nets_factory.NetworkFn, tx, channels: int, mesh
) -> steps.TrainState:
    """`initial_state`'s state from scratch as shapes, dtypes and shardings, for a trace's cost:
    what restoring a checkpoint needs to know."""
    makers = _Makers(config, train_fn, tx, channels, mesh)
    return jax.jit(makers.state, out_shardings=makers.replicated).eval_shape(*makers.args)


def check_trainable(trainable: tuple[str, ...], variables: dict) -> None:
    """Raises `UserError` when `finetune.trainable`'s patterns name no parameter."""
    if not trainable:
        return
    names = [optim.path_name(p) for p, _ in jax.tree_util.tree_leaves_with_path(variables)]
    if not any(re.search(t, n) for t in trainable for n in names if n.startswith("params/")):
        raise UserError(f"finetune.trainable: {list(trainable)} match no parameter")


def refused_fields(name: str, kwargs: dict, error: Exception) -> str:
    """One line for network `name` failing its first trace with `model.kwargs` set: their values
    are types a config can hold, so only the network's own code can refuse them (`num_filters:
    0`, `padding: FOO`). The error's first line names the value where the network checks it."""
    said = str(error).strip().splitlines()[0] if str(error).strip() else ""
    fields = ", ".join(f"{k}: {v!r}" for k, v in kwargs.items())
    return (
        f"model.kwargs {{{fields}}}: {name} could not be built with them: "
        f"{type(error).__name__}{': ' + said if said else ''} (`python -m nets_factory {name}` "
        f"lists its fields and their defaults)"
    )


class _Makers:
    """A run's variables and state from its seed: the functions that make them and their
    arguments (the initialisation's key and images)."""

    def __init__(self, config: Config, train_fn, tx, channels: int, mesh):
        with random_bits_to_compile_fast():  # the same keys under any threefry setting
            init_key, run_key = jax.random.split(jax.random.PRNGKey(config.train.seed))
        size = config.data.image_size
        self.args = (init_key, jnp.zeros((1, size, size, channels), jnp.float32))
        self.replicated = sharding.replicated(mesh)
        self.train_fn = train_fn
        self.kwargs = dict(config.model.kwargs)
        self.create = functools.partial(
            steps.create_state, tx=tx, ema=config.optim.ema_decay > 0, rng=run_key
        )

    def variables(self, key: jax.Array, images: jax.Array) -> dict:
        """The collections a train state keeps: parameters and batch statistics (none for a
        network without BatchNorm). Images its layers do not take are the config's error."""
        try:
            variables = self.train_fn.init(key, images)
        except nets_factory.ImageSizeError as e:
            raise UserError(f"data.image_size={images.shape[1]}: {e}") from None
        except Exception as e:  # a constructor field's value the network's code refuses
            if not self.kwargs or isinstance(e, UserError):
                raise
            raise UserError(refused_fields(self.train_fn.name, self.kwargs, e)) from None
        return {"params": variables["params"], "batch_stats": variables.get("batch_stats", {})}

    def state(self, key: jax.Array, images: jax.Array) -> steps.TrainState:
        return self.create(self.variables(key, images))

    def run(self, make):
        """`make(*args)`, replicated, with the random draws that compile fast."""
        with random_bits_to_compile_fast():
            return run_once(jax.jit(make, out_shardings=self.replicated), *self.args)


def run_once(jitted, *args):
    """`jitted(*args)`, compiled with `RUN_ONCE_OPTIONS` for the platform: for what runs once,
    where a shorter compile beats a faster run."""
    options = RUN_ONCE_OPTIONS.get(jax.default_backend(), {})
    return jitted.lower(*args).compile(compiler_options=options)(*args)


@contextlib.contextmanager
def random_bits_to_compile_fast() -> Iterator[None]:
    """Random draws that compile fast, for an initialisation: JAX's original threefry layout
    (`jax_threefry_partitionable` off: ResNet-50's initialisation compiled in 10.9 s against
    13.8 on 2 CPU cores) and, on a GPU, each draw as one CUDA kernel rather than threefry's
    rounds unrolled into the program (`jax_threefry_gpu_kernel_lowering`; not measured yet).
    The bits are other than under JAX's defaults, and the same on every platform; the layout
    costs only where the variables are sharded, not replicated as here. The train step keeps
    JAX's defaults, under which XLA fuses dropout's bits into their use."""
    before = jax.config.jax_threefry_gpu_kernel_lowering
    jax.config.update("jax_threefry_gpu_kernel_lowering", True)
    try:
        with jax.threefry_partitionable(False):  # over the user's setting, context or global
            yield
    finally:
        jax.config.update("jax_threefry_gpu_kernel_lowering", before)

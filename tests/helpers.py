"""Shared test helpers."""

import contextlib
import dataclasses
import fcntl
import functools
import json
import math
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax.core import scope as flax_scope
from jax._src import core as jax_core
from jax._src.nn import initializers as jax_initializers
from safetensors.numpy import load_file

import nets_factory
import nets_summary
from nets.layers import Conv


def equations(jaxpr):
    """Every equation of `jaxpr` and of the jaxprs its equations call (`pjit`, `custom_jvp`,
    `jax.checkpoint`'s, whether closed or not)."""
    for eqn in jaxpr.eqns:
        yield eqn
        for param in eqn.params.values():
            inner = getattr(param, "jaxpr", param)  # a ClosedJaxpr's, or a Jaxpr itself
            if hasattr(inner, "eqns"):
                yield from equations(inner)


def softmax_dtypes(attn, x: jax.Array) -> tuple[set, jax.ShapeDtypeStruct]:
    """The dtypes of every `exp` in attention module `attn`'s evaluation call `(x, False)` (its
    softmax's, for the tests that half-precision attention normalises in float32), and the
    call's abstract output; nothing is compiled."""
    variables = jax.eval_shape(lambda x: attn.init(jax.random.key(0), x, False), x)
    jaxpr = jax.make_jaxpr(lambda v, x: attn.apply(v, x, False))(variables, x)
    exps = {e.outvars[0].aval.dtype for e in equations(jaxpr.jaxpr) if e.primitive.name == "exp"}
    return exps, jax.eval_shape(lambda v, x: attn.apply(v, x, False), variables, x)


def numpy_variables(abstract_variables, seed: int = 0):
    """Real values for the abstract variables of `jax.eval_shape(fn.init, ...)`, drawn in numpy.

    Compiling `init` costs CPU seconds per distinct initialiser (~20 s for a small network), more
    than the forward pass it serves, so tests that need values draw them here: He-normal kernels,
    BatchNorm scales and variances 1, everything else 0, each in the dtype `init` gives it (so
    that tests of parameter dtypes can read these).
    """
    rng = np.random.default_rng(seed)

    def value(path, leaf):
        name = path[-1].key
        if name == "kernel":
            fan_in = math.prod(leaf.shape[:-1])
            return rng.normal(0.0, math.sqrt(2.0 / fan_in), leaf.shape).astype(leaf.dtype)
        return np.full(leaf.shape, 1.0 if name in ("scale", "var") else 0.0, leaf.dtype)

    return jax.tree_util.tree_map_with_path(value, abstract_variables)


# timm's `feature_info` for the networks it builds too (tools/fixtures_feature_info.py).
TIMM_FEATURE_INFO = json.loads(
    (Path(__file__).parent / "fixtures" / "feature_info_timm.json").read_text()
)
TIMM_OUTPUT_STRIDES = json.loads(
    (Path(__file__).parent / "fixtures" / "output_stride_timm.json").read_text()
)

# A digits run small enough to train in a test: ResNet-20 with one block per stage, 4 filters.
TINY_NETWORK = "model.kwargs={stage_sizes: [1, 1], num_filters: 4}"
TINY_RUN = [TINY_NETWORK, "train.steps=3"]


def train_tiny_run(workdir, *overrides: str):
    """Trains `TINY_RUN` (then `overrides`) into `workdir`, in this process; its `Summary`."""
    from nets_training import config, loop

    default = Path(__file__).resolve().parents[1] / "configs" / "default.yaml"
    return loop.train(config.load(default, [*TINY_RUN, *overrides]), workdir)


def damage(checkpoint_folder: Path) -> Path:
    """Truncates the largest data file (tensorstore's, in a `d/` folder) of `checkpoint_folder`
    (a `<step>` folder) to 1000 bytes, as a disk that filled up or a copy cut short leaves it;
    the file."""
    files = [f for f in (checkpoint_folder / "state").rglob("*") if f.parent.name == "d"]
    largest = max(files, key=lambda f: f.stat().st_size)
    os.truncate(largest, 1000)
    return largest


def session_folder(tmp_path_factory) -> Path:
    """The test session's temporary folder, the same for all of pytest-xdist's workers (each
    worker's `getbasetemp()` is a folder of its own inside it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def made_once(tmp_path_factory, name: str, make: Callable[[Path], None]) -> Path:
    """A private copy of the folder `make(folder)` fills once per test session, whichever of
    pytest-xdist's workers asks first (the others wait on a lock, then copy it): a run that
    several tests read costs one training, not one per worker. Each worker gets its own copy, as
    the tests write into their run's folder."""
    root = session_folder(tmp_path_factory)
    shared, complete = root / f"shared_{name}", root / f"shared_{name}.complete"
    with open(root / f"shared_{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not complete.exists():
            shutil.rmtree(shared, ignore_errors=True)
            make(shared)
            complete.touch()
    private = tmp_path_factory.mktemp(name)
    shutil.copytree(shared, private, dirs_exist_ok=True)
    return private


# XLA's own convolutions in place of the CPU path (`nets.layers.cpu.conv`, `Conv`'s default on
# CPU), whose shapes are XLA's: tests/test_conv.py checks the two against each other on each kind
# of shape, and the registry test (test_nets_factory.py::test_shapes_and_end_points) on each
# convolution of every network at its full size. A trace that reads only names, shapes, counts
# or MACs takes them in a half to a fifth of the CPU on networks of many convolutions (one
# operation each instead of the CPU path's formulations). Tests of dtypes keep the CPU path.
XLA_CONVS = {"conv": functools.partial(Conv, impl="xla")}


auxiliary = nets_summary.auxiliary_head  # a module path in a head that only training runs


@contextlib.contextmanager
def shapes_only_draws():
    """JAX's initialisers (flax's defaults and ours) draw zeros of the requested shape and dtype
    inside, and flax hands every module its parent's key unchanged: for traces that read shapes
    only (`jax.eval_shape` of `init`, or of `apply`, where flax checks each parameter's shape
    against its initialiser's). Each distinct shape's draw is a trace of its own, ~16% of the
    registry's shape traces; each parameter's key, folded from its path (a device scalar made
    and a `fold_in` traced), another ~8%. Only the initialisers' reference to `jax.random` and
    flax's `_fold_in_static` change, so no cached trace of a random function (dropout's, say)
    holds zeros afterwards; should either stop being read there, traces are slower, not wrong."""
    real_random, real_fold = jax_initializers.random, flax_scope._fold_in_static
    jax_initializers.random = _ZeroDraws(real_random)
    flax_scope._fold_in_static = lambda rng, data: rng
    try:
        yield
    finally:
        jax_initializers.random, flax_scope._fold_in_static = real_random, real_fold


class _ZeroDraws:
    """`jax.random`, but its normal, truncated normal and uniform draws are zeros."""

    def __init__(self, random):
        self._random = random

    def __getattr__(self, name):
        return getattr(self._random, name)

    @staticmethod
    def truncated_normal(key, lower, upper, shape=None, dtype=None, **kwargs):
        if shape is None:
            shape = np.broadcast_shapes(np.shape(lower), np.shape(upper))
        return zeros(shape, dtype)

    @staticmethod
    def normal(key, shape=(), dtype=None, **kwargs):
        return zeros(shape, dtype)

    @staticmethod
    def uniform(key, shape=(), dtype=None, minval=0.0, maxval=1.0, **kwargs):
        return zeros(shape, dtype)


@contextlib.contextmanager
def replayed_calls(distinct: Callable[[tuple[str, ...]], Any] = lambda path: None):
    """Within a shapes-only trace (`jax.eval_shape` of `init` or `apply`), a submodule's call
    identical to an earlier one of the same trace (its class, its fields but its name, its
    arguments' shapes and dtypes) is not traced again: its variables (of the first call's
    shapes, zeros) are put in its scope where mutable, and zeros of the first call's output
    shapes returned. Repeated blocks (ViT's,
    ResNet's in a stage, MaxViT's) are a network's trace many times over: replaying them takes
    a half to a quarter of the CPU, for the same variables, end points and MACs (the registry
    test compares them with the snapshots, which `tests.variable_trees` writes without this).

    Yields a list: the caller appends the lists its own interceptors (entered inside this one)
    append to, and a replay appends again what the first call appended to each (its MACs).
    `distinct(module path)` tells calls apart that the side effects do (the MACs counted outside
    auxiliary heads only). A module whose variables are named after itself (Inception's
    `MixedBlock` under its caller's name) is replayed under its own name only."""
    calls, side_effects = {}, []

    def replay(next_fun, args, kwargs, context):
        module = context.module
        if context.method_name != "__call__" or not isinstance(module.parent, nn.Module):
            return next_fun(*args, **kwargs)
        fields = tuple(
            (field.name, _static(getattr(module, field.name)))
            for field in dataclasses.fields(module)
            if field.name not in ("parent", "name")
        )
        key = (type(module), fields, _static(args), _static(kwargs), module.is_initializing())
        key += (distinct(module.path),)
        first = calls.get(key)
        if first is None or (first.own_name and first.name != module.name):
            marks = [len(effects) for effects in side_effects]
            out = next_fun(*args, **kwargs)
            variables = _abstract(flax.core.unfreeze(module.variables))
            own_name = any(module.name in tree for tree in variables.values())
            appended = [effects[mark:] for effects, mark in zip(side_effects, marks, strict=True)]
            calls.setdefault(key, _Call(module.name, own_name, variables, _abstract(out), appended))
            return out
        for collection, tree in first.variables.items():
            if module.scope.is_mutable_collection(collection):  # all in `init`
                for name, value in tree.items():
                    module.scope.put_variable(collection, name, _zeros(value))
        for effects, appended in zip(side_effects, first.appended, strict=True):
            effects.extend(appended)
        return _zeros(first.out)

    with nn.intercept_methods(replay):
        yield side_effects


class _Call(NamedTuple):
    """A submodule call's record for `replayed_calls`."""

    name: str
    own_name: bool  # its variables hold a module of its own name
    variables: dict
    out: Any
    appended: list


def _static(value):
    """`value` as a hashable key: arrays (tracers) by shape, dtype and weak type, containers
    element by element, the rest itself (by `==`: partials and functions by identity) or, where
    unhashable, its `repr`."""
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return ("array", tuple(value.shape), str(value.dtype), getattr(value, "weak_type", False))
    if isinstance(value, list | tuple):
        return (type(value).__name__, *map(_static, value))
    if isinstance(value, dict):
        return ("dict", *((k, _static(v)) for k, v in sorted(value.items())))
    try:
        hash(value)
    except TypeError:
        return ("repr", repr(value))
    return value


def _abstract(tree):
    return jax.tree.map(
        lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype) if hasattr(a, "shape") else a, tree
    )


def _zeros(tree):
    return jax.tree.map(
        lambda a: zeros(a.shape, a.dtype) if isinstance(a, jax.ShapeDtypeStruct) else a, tree
    )


def zeros(shape, dtype) -> jax.Array:
    """`jnp.zeros(shape, dtype)` in one primitive (a numpy scalar broadcast), a third of its
    trace; within one trace, once per shape and dtype (the values are immutable)."""
    dtype = jax.dtypes.canonicalize_dtype(float if dtype is None else dtype)
    trace, made = _ZEROS_MADE
    if trace is not jax_core.trace_ctx.trace:
        made.clear()
        _ZEROS_MADE[0] = jax_core.trace_ctx.trace
    key = (tuple(shape), dtype)
    if key not in made:
        made[key] = jax.lax.broadcast_in_dim(np.zeros((), dtype), key[0], ())
    return made[key]


# The trace that `zeros` last drew in, and its zeros by shape and dtype.
_ZEROS_MADE: list = [None, {}]


def training_gradients(fn, variables, images, rngs=None):
    """`(grads, updates)` of a training step's loss (the first class's log-probability) plus the
    new running means, with respect to `variables['params']`, jitted; `updates` holds the new
    batch statistics. The means make every parameter count in exact arithmetic: a batch-wide
    shift (a bias before a training-mode BatchNorm, outside dropped residuals) leaves the logits
    alone, so its gradient through them is zero up to rounding."""

    def loss(params):
        (logits, _), updates = fn.apply(
            {**variables, "params": params}, images, mutable=["batch_stats"], rngs=rngs
        )
        means = [v for p, v in jax.tree_util.tree_leaves_with_path(updates) if p[-1].key == "mean"]
        return jnp.sum(jax.nn.log_softmax(logits)[:, 0]) + sum(jnp.sum(m) for m in means), updates

    return jax.jit(jax.grad(loss, has_aux=True))(variables["params"])


def assert_fused_like_timms(
    params: dict, timm_fused: dict, paths: list[str], layout: Callable, atol: float
) -> None:
    """Each module `paths` (`'stages_1/blocks_2'`) of our reparameterized `params` holds the
    `reparam_conv` kernel and bias that timm's `reparameterize_model` gave (`timm_fused`, its
    state dict's tensors under `layout`'s prefixes; PyTorch's OIHW weights)."""
    for path in paths:
        ours = params
        for part in path.split("/"):
            ours = ours[part]
        prefix = layout(tuple(path.split("/")))
        theirs = timm_fused[f"{prefix}.reparam_conv.weight"].transpose(2, 3, 1, 0)
        np.testing.assert_allclose(ours["reparam_conv"]["kernel"], theirs, atol=atol)
        theirs_bias = timm_fused[f"{prefix}.reparam_conv.bias"]
        np.testing.assert_allclose(ours["reparam_conv"]["bias"], theirs_bias, atol=atol)


def assert_dilated_parity(
    name: str,
    case: str,
    kwargs: dict,
    output_stride: int = 8,
    tolerance: float = 1e-4,
    nominal_maps: bool = True,
) -> None:
    """Parity fixture `case` loaded as `name` with `kwargs` at `output_stride` gives timm's logits
    for the same weights at that stride (`tools/parity.write_output_strides`) within `tolerance`,
    where timm's differ from its undilated ones (`expected`) by more than 5%, so the fixture's
    network really dilates; with `nominal_maps`, its pyramid's maps have the sizes of its capped
    strides. 8 dilates a stride-32 network's last two stages, by 2 then 4: every rule that 16
    uses, and more."""
    folder = Path(__file__).with_name("fixtures") / "parity" / case
    undilated = load_file(folder / "expected.safetensors")
    reference = load_file(folder / "output_stride.safetensors")[f"logits_{output_stride}"]
    scale = np.max(np.abs(reference))
    assert np.max(np.abs(reference - undilated["logits"])) / scale > 0.05
    network_fn, variables = nets_factory.load_pretrained(
        name, folder, output_stride=output_stride, **kwargs
    )
    images = undilated["images"]
    logits, end_points = jax.jit(network_fn.apply)(variables, images)
    assert np.max(np.abs(np.asarray(logits) - reference)) / scale <= tolerance
    for level, stride in network_fn.module.feature_strides().items() if nominal_maps else ():
        size = tuple(-(-n // stride) for n in images.shape[1:3])
        assert end_points[level].shape[1:3] == size, (level, stride)

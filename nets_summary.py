"""Sizes of the networks in the registry, from `jax.eval_shape`: nothing is compiled or allocated.

MACs are counted here, not by XLA: every module that owns a `kernel` (convolutions, dense layers)
adds `output elements * prod(kernel.shape[:-1])` multiply-accumulates for one image, which is
exact for dense, grouped and depthwise convolutions alike; a module without parameters whose
products count (`nets.layers.DotProductAttention`: `q k^T` and `attention v`) declares them with
a static `macs(*args)` of its call's arguments, which a layer with a kernel that never sees the
images declares too (Swin V2's position bias MLP over constant coordinates: 0). Pooling,
normalisation, softmax and activations are not counted (the convention of the published GMAC
tables: fvcore's, which timm's use).

Tracing every network takes minutes, so the listing reads their figures at 1000 classes and
the default size from `nets/sizes.tsv`, which the registry tests compare with a live trace of
every network; `python -m nets_factory --update-sizes [NAME ...]` rewrites it (or those
networks' rows) after a change to `nets/`.
"""

import argparse
import contextlib
import dataclasses
import math
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

import nets_factory
from nets import features
from nets_cli import output
from nets_weights import catalogue
from nets_weights.architectures import ARCHITECTURES


@dataclasses.dataclass(frozen=True)
class Profile:
    """What one abstract forward pass on a `[1, size, size, 3]` image tells about a network."""

    image_size: int
    # Trainable parameters (the `params` collection) but the auxiliary heads' (`auxiliary_head`),
    # as published tables count them: Keras's and timm's Inception v3 23.8M, NASNet-A Mobile 5.3M.
    params: int
    macs: int  # multiply-accumulates for one image
    end_points: dict[str, tuple[int, ...]]  # name -> shape, in the order the network makes them
    auxiliary_params: int = 0  # those of the auxiliary heads, which training alone runs


def auxiliary_head(path: tuple[str, ...]) -> bool:
    """Whether a module path lies in an auxiliary head (Inception's AuxLogits, NASNet's aux_N,
    GoogLeNet's aux1 and aux2), which only training runs."""
    return bool(path) and path[0].lower().startswith("aux")


def profile(
    network_fn: nets_factory.NetworkFn, image_size: int | None = None, variables: Any = None
) -> Profile:
    """Traces `init` (unless given its `variables`) and `apply` with `jax.eval_shape`."""
    size = image_size or network_fn.default_image_size
    images = jax.ShapeDtypeStruct((1, size, size, 3), jnp.float32)
    if variables is None:
        variables = jax.eval_shape(network_fn.init, jax.random.key(0), images)
    order = []

    def forward(variables, images):
        _, end_points = network_fn.apply(variables, images)
        order.extend(end_points)
        return end_points

    with counting_macs() as macs:
        end_points = jax.eval_shape(forward, variables, images)
    params, auxiliary_params = parameter_counts(variables["params"])
    shapes = {name: tuple(end_points[name].shape) for name in order}
    return Profile(size, params, int(sum(macs)), shapes, auxiliary_params)


def parameter_counts(params: Any) -> tuple[int, int]:
    """`(published, auxiliary)`: the parameters in `params` but the auxiliary heads', as
    published tables count them, and the auxiliary heads' (`auxiliary_head`)."""
    counts = [0, 0]
    for path, leaf in jax.tree_util.tree_leaves_with_path(params):
        counts[auxiliary_head((path[0].key,))] += math.prod(leaf.shape)
    return counts[0], counts[1]


@contextlib.contextmanager
def counting_macs(
    exclude: Callable[[tuple[str, ...]], bool] = lambda path: False,
) -> Iterator[list[int]]:
    """Counts, into the list it yields, the multiply-accumulates of each layer called inside (as
    the module doc says), leaving out layers whose module path `exclude` accepts. `profile` counts
    a forward pass with it; the registry test counts a training `init` without its auxiliary
    heads, which checks `SIZES` without tracing evaluation as well."""
    macs: list[int] = []

    def record(next_fun, args, kwargs, context):
        out = next_fun(*args, **kwargs)
        if context.method_name != "__call__" or exclude(context.module.path):
            return out
        params = context.module.variables.get("params", {})
        if callable(declared := getattr(type(context.module), "macs", None)):
            macs.append(declared(*args, **kwargs))
        elif "kernel" in params:
            macs.append(out.size * math.prod(params["kernel"].shape[:-1]))
        return out

    with nn.intercept_methods(record):
        yield macs


SIZES = Path(__file__).with_name("nets") / "sizes.tsv"
_SIZES_HEADER = "network\timage_size\tparams\tmacs"


class Size(NamedTuple):
    """A network's figures at 1000 classes and its default image size."""

    image_size: int
    params: int
    macs: int


def measure(name: str) -> Size:
    """`name`'s `Size`, traced now."""
    p = profile(nets_factory.get_network_fn(name, num_classes=1000))
    return Size(p.image_size, p.params, p.macs)


def recorded_sizes() -> dict[str, Size]:
    """The committed figures of `SIZES`: network name -> `Size`."""
    rows = [line.split("\t") for line in SIZES.read_text().splitlines()[1:] if line]
    return {name: Size(*map(int, values)) for name, *values in rows}


def write_sizes(names: list[str] | None = None) -> None:
    """Traces `names` (default: every registered network) and rewrites their rows of `SIZES`,
    dropping rows of networks no longer registered."""
    sizes = recorded_sizes() if names and SIZES.exists() else {}
    sizes |= {name: measure(name) for name in names or nets_factory.networks_map}
    rows = [
        "\t".join(map(str, (name, *sizes[name])))
        for name in sorted(nets_factory.networks_map)
        if name in sizes
    ]
    SIZES.write_text("\n".join([_SIZES_HEADER, *rows]) + "\n")


def weight_sources(name: str) -> list[str]:
    """The published architectures (timm / torchvision names) whose weights `name` loads."""
    return sorted(arch for arch, spec in ARCHITECTURES.items() if spec.network == name)


def table(names: list[str], live: bool = False) -> str:
    """One line per network: default image size, parameters at 1000 classes, GMACs, and the
    published weights it loads. Figures come from `SIZES` unless `live` (or not recorded)."""
    recorded = {} if live else recorded_sizes()
    width = max(len("network"), *map(len, names)) + 2
    lines = [f"{'network':<{width}}{'size':>6}{'params':>14}{'GMACs':>9}  published weights"]
    for name in names:
        size = recorded.get(name) or measure(name)
        sources = ", ".join(weight_sources(name)) or "-"
        lines.append(
            f"{name:<{width}}{size.image_size:>6}{size.params:>14,}{size.macs / 1e9:>9.2f}"
            f"  {sources}"
        )
    return "\n".join(lines)


def describe(name: str) -> str:
    """Constructor fields and every end_point's shape of one network at its default size."""
    ctor = nets_factory.networks_map[name]
    fn = nets_factory.get_network_fn(name, num_classes=1000)
    p = profile(fn)
    lines = [f"{name}: {ctor.func.__module__}.{ctor.func.__qualname__}", "constructor fields:"]
    for field in nets_factory.constructor_fields(name):
        lines.append(f"  {field} = {_show(getattr(fn.module, field))}")
    lines.append(f"end_points at {p.image_size}x{p.image_size}, batch 1:")
    lines += [f"  {point:<28}{shape}" for point, shape in p.end_points.items()]
    levels = features.feature_info(fn.module.feature_strides(), p.end_points)
    lines.append(
        "feature pyramid (NetworkFn.feature_info): "
        + ", ".join(f"{level.name} /{level.stride} {level.channels}" for level in levels)
    )
    aux = (
        f" (and {p.auxiliary_params:,} in training's auxiliary heads)" if p.auxiliary_params else ""
    )
    lines.append(f"parameters at 1000 classes: {p.params:,}{aux}   GMACs: {p.macs / 1e9:.2f}")
    sources = weight_sources(name)
    lines.append(
        "published weights (nets_factory.load_pretrained): " + (", ".join(sources) or "none yet")
    )
    named = catalogue.for_network(name, nets_factory.networks_map)
    if named:
        lines.append(f"weights by name ({len(named)}; load_pretrained('<name>') downloads one):")
        lines += [f"  {weights}" for weights in named]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """`python -m nets_factory [NAME]`: the registry's table, or one network's description;
    piped to `head`, it ends quietly where the reader stopped."""
    parser = argparse.ArgumentParser(
        prog="python -m nets_factory", description="List the networks, or describe one."
    )
    parser.add_argument("name", nargs="?", help="a network to describe; none lists them all")
    parser.add_argument("--live", action="store_true", help="trace every network (minutes)")
    parser.add_argument(
        "--update-sizes",
        nargs="*",
        metavar="NAME",
        help=f"trace these networks (default: all) and rewrite their rows of {SIZES}",
    )
    args = parser.parse_args(argv)
    with output.quiet_when_the_reader_stops():  # `python -m nets_factory | head`
        _print(args)


def _print(args: argparse.Namespace) -> None:
    if args.update_sizes is not None:
        write_sizes(args.update_sizes)
        print(f"wrote {SIZES}")
        return
    if args.name is None:
        print(table(list(nets_factory.networks_map), live=args.live))
        print("GMACs: multiply-accumulates of one image at its default size, counted per layer.")
        return
    try:
        nets_factory.get_network_fn(args.name, num_classes=1000)
    except ValueError as error:
        sys.exit(f"error: {error}")
    print(describe(args.name))


def _show(value) -> str:
    """Readable field values: `relu` rather than `<custom_jvp object at 0x...>`."""
    if isinstance(value, type) or (callable(value) and hasattr(value, "__name__")):
        return value.__name__
    return repr(value)

"""Published ImageNet weights in our networks: the pieces `nets_factory.load_pretrained` puts
together, and `conventions` and `fill`, which fine-tuning in `train.py` uses.

The weights are found (`locate`: a local file or folder, or a Hub name or URL downloaded once into
its standard cache), read (`files`), their architecture found with the conventions they were
trained with (`architectures`), and every tensor placed into the network's variables
(`convert`), with one-line errors for a file that does not fit. Nothing here builds a network:
the caller builds it (`nets_factory`) and passes it in, with the registry where names matter.
"""

import dataclasses
import functools
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

from nets_weights import architectures, catalogue, convert, files, hub, published, urls
from nets_weights.architectures import Pretrained
from nets_weights.convert import Architecture
from nets_weights.files import WeightFile, WeightFileError

__all__ = [
    "Pretrained",
    "WeightFileError",
    "conventions",
    "fill",
    "find",
    "is_weights",
    "locate",
    "read",
]


def is_weights(spec: str | Path) -> bool:
    """Whether `spec` names published weights (a weight file, a Hub folder, a Hub name or a URL)
    rather than a training run's checkpoint."""
    if Path(spec).expanduser().exists():
        return files.is_weight_file(spec)
    return urls.is_url(str(spec)) or hub.is_hub_name(str(spec))


def locate(spec: str | Path, revision: str | None = None, local_files_only: bool = False) -> Path:
    """The local file or folder of the weights `spec`: itself, or a URL (`urls`) or Hub name
    (`hub`) downloaded into its standard cache once (later calls, and offline ones, read the
    cache). `revision` pins a Hub branch, tag or commit; `local_files_only` forbids the Hub's
    network."""
    path = Path(spec).expanduser()
    if path.exists():
        return path
    if urls.is_url(str(spec)):
        return urls.download(str(spec))
    if hub.is_hub_name(str(spec)):
        return hub.download(str(spec), revision, local_files_only)
    return path


def read(
    spec: str | Path, revision: str | None = None, local_files_only: bool = False
) -> WeightFile:
    """The tensors and config of the weights `spec` (`locate`); a spec that is no file and reads
    as a name says the catalogued weights' names closest to it (a misspelt one, or a network's
    name where its weights' is meant)."""
    path = locate(spec, revision, local_files_only)
    if not path.exists() and "/" not in str(spec) and not files.is_weight_file(spec):
        close = catalogue.closest(str(spec))
        hint = f"; catalogued weights close to it: {', '.join(close)}" if close else ""
        raise WeightFileError(f"no such weight file or folder: {spec}{hint}")
    return files.read(path)


def find(
    name: str | None, weights: WeightFile, networks: Mapping[str, Any]
) -> tuple[str, Architecture]:
    """The source architecture name and `Architecture` for loading `weights` into `name` (None:
    the network the weights' config names), in the key layout the file has. `networks` is the
    registry (`nets_factory.networks_map`): names bound to one constructor are one network."""
    file_arch = architectures.file_architecture(weights.config)
    if name is None:
        name = file_arch or _catalogued_architecture(weights)
    source, arch = architectures.find(name, file_arch, networks)
    return source, convert.for_keys(arch, weights.tensors)


def _catalogued_architecture(weights: WeightFile) -> str:
    """The architecture of a file without a config (a torchvision or Keras download), by the
    published file name."""
    arch = catalogue.architecture_of(weights.path.name)
    if arch is None:
        raise WeightFileError(
            f"{weights.path} does not say which network it holds (no config.json): name it, "
            f"e.g. load_pretrained('resnet50', '{weights.path}'); to the programs, "
            "--model=resnet50 (distill.teacher_model for a teacher)"
        )
    return arch


def conventions(
    name: str, spec: str | Path, kwargs: dict[str, Any], networks: Mapping[str, Any]
) -> dict[str, Any]:
    """`kwargs` with the constructor fields the weights `spec` need; raises `ValueError` when
    `kwargs` set one of them otherwise (the network would compute another function)."""
    path = locate(spec)
    config = files.read_config(path)
    source, arch = architectures.find(name, architectures.file_architecture(config), networks)
    if arch.alternatives:  # the file's keys tell its layout, whose conventions may differ
        source, arch = find(name, files.read(path), networks)
    return with_conventions(source, arch, kwargs)


def with_conventions(source: str, arch: Architecture, kwargs: dict[str, Any]) -> dict[str, Any]:
    """`kwargs` with `arch`'s conventions; a contradicting field raises `ValueError`."""
    for key, value in arch.convention.items():
        if key in kwargs and kwargs[key] != value:
            raise ValueError(
                f"{source}'s weights were trained with {key}={value!r}; "
                f"{key}={kwargs[key]!r} would compute another function"
            )
    return {**kwargs, **arch.convention}


def fill(
    name: str,
    spec: str | Path,
    network_fn: Any,
    variables: dict,
    networks: Mapping[str, Any],
    exclude: Sequence[str] = (),
    in_chans: int = convert.RGB,
) -> tuple[dict, list[str], Pretrained]:
    """`variables` (arrays, or abstract ones) with the tensors of the weights `spec`.

    `network_fn` must have been built with `conventions(name, spec, ...)`. A classifier whose
    class count differs from the file's keeps its values, and so does every variable whose
    `collection/path` matches a regex of `exclude`. `variables` made for images of `in_chans`
    channels take the file's RGB input convolutions adapted to them, as timm's `in_chans`.
    Returns the variables, the names of those kept, and what the weights expect of their inputs.
    """
    _check_channels(in_chans)
    weights = read(spec)
    source, arch = find(name, weights, networks)
    return _fill(weights, source, arch, network_fn, variables, exclude, in_chans)


def _check_channels(in_chans: int) -> None:
    if in_chans < 1:
        raise ValueError(f"in_chans={in_chans}: images have 1 channel or more (3: RGB)")


def _fill(
    weights: WeightFile,
    source: str,
    arch: Architecture,
    network_fn: Any,
    variables: dict,
    exclude: Sequence[str],
    in_chans: int,
) -> tuple[dict, list[str], Pretrained]:
    published.check_fields(
        f"{source}'s published weights", arch.convention, network_fn.module, network_fn.name
    )
    file_classes = file_class_count(weights, arch)
    tensors = arch.stable(weights.tensors)
    if arch.check is not None:
        arch.check(tensors, str(weights.path))
    shapes = convert.leaf_shapes(variables)
    head = arch.heads(shapes)
    keep_head = bool(head) and shapes[head[0][:-1] + ("bias",)][-1] == file_classes
    layout = arch.layout(network_fn.module)
    lacking = _lacking(arch, layout, tensors) if file_classes == 0 else ()
    steps = convert.plan(
        {k: v.shape for k, v in tensors.items()},
        shapes,
        layout,
        skip=lambda path: (path in head and not keep_head) or path[1:-1] in lacking,
        skip_sources=lambda key: (
            arch.drops(key)
            or (arch.in_head(key) and not keep_head)
            or (arch.feeds_head(key) and not head)
        ),
        what=str(weights.path),
        framework=arch.framework,
        in_chans=in_chans,
    )
    patterns = [re.compile(p) for p in exclude]
    excluded = lambda path: any(p.search("/".join(path)) for p in patterns)  # noqa: E731
    steps = [s for s in steps if not excluded(s.target)]
    filled = {s.target for s in steps}
    kept = ["/".join(p) for p in shapes if p not in filled]
    info = Pretrained(
        source=source,
        file=str(weights.path),
        **{
            "class_names": architectures.imagenet_class_names(file_classes),
            **arch.preprocessing,
            **architectures.preprocessing(weights.config),
            **({} if keep_head else {"class_names": ()}),
        },
    )
    if any(step.in_chans for step in steps):
        info = dataclasses.replace(
            info,
            in_chans=in_chans,
            mean=convert.channels_of(info.mean, in_chans),
            std=convert.channels_of(info.std, in_chans),
        )
    return convert.apply(steps, tensors, variables), kept, info


def _lacking(
    arch: Architecture, layout: convert.Layout, tensors: Mapping[str, Any]
) -> set[tuple[str, ...]]:
    """The modules of `arch.headless_lacks` that a headless file has no tensor of."""
    return {
        module
        for module in arch.headless_lacks
        if not any(key.startswith(layout(module) + ".") for key in tensors)
    }


def initialized(
    weights: WeightFile,
    source: str,
    arch: Architecture,
    network_fn: Any,
    rng: jax.Array | None = None,
    in_chans: int = convert.RGB,
) -> tuple[dict[str, Any], Pretrained]:
    """The variables of `network_fn` (built with `with_conventions(source, arch, ...)`) holding
    `weights`, for images of `in_chans` channels, and a `conventions` collection naming the
    fields they need (`published`); a classifier of another class count than the file's is
    initialised from `rng` as `init` would. Only that classifier is computed: the rest is traced
    abstractly."""
    _check_channels(in_chans)
    size = network_fn.default_image_size
    images = jax.ShapeDtypeStruct((1, size, size, in_chans), jnp.float32)
    try:
        abstract = _abstract_variables(network_fn.module, images.shape)
    except TypeError:  # a field flax cannot hash (a list from a config)
        abstract = _abstract_variables.__wrapped__(network_fn.module, images.shape)
    variables, kept, info = _fill(weights, source, arch, network_fn, abstract, (), in_chans)
    if kept:  # a new classifier: initialised as `init` would

        def new_leaves(rng, images):
            # Only the leaves still abstract come out (None elsewhere): XLA drops the rest of
            # `init`, a forward pass at full size (3.0 s of CPU against 0.3 s for a thinned
            # MobileNet V3 at 224 px), and the values are the same.
            fresh = network_fn.init(rng, images)
            return jax.tree.map(
                lambda ours, new: new if isinstance(ours, jax.ShapeDtypeStruct) else None,
                variables,
                fresh,
            )

        fresh = jax.jit(new_leaves)(rng if rng is not None else jax.random.key(0), images)
        variables = jax.tree.map(
            lambda ours, new: new if isinstance(ours, jax.ShapeDtypeStruct) else ours,
            variables,
            fresh,
        )
    variables = jax.tree.map(jnp.asarray, variables)
    variables = published.mark(variables, arch.convention)
    return variables, info


@functools.lru_cache(maxsize=16)
def _abstract_variables(module: Any, shape: tuple[int, ...]) -> dict[str, Any]:
    """The shapes of the variables `init` makes (training's, auxiliary heads included), traced
    once per network and image shape: loading two files into one network, or one under two
    names, traces it once (3.5 s of CPU for a full-size Inception-ResNet-v2)."""
    images = jax.ShapeDtypeStruct(shape, jnp.float32)
    rngs = {"params": jax.random.key(0), "dropout": jax.random.key(1)}
    return jax.eval_shape(functools.partial(module.init, train=True), rngs, images)


def file_class_count(weights: WeightFile, arch: Architecture) -> int:
    """The number of classes of the file's classifier: 0 for the features of a source that
    publishes them (`Architecture.headless`); one line when a file of another has none."""
    key, tensors = arch.head_kernel, arch.stable(weights.tensors)
    if key not in tensors and arch.headless:
        return 0
    if key not in tensors:
        names = architectures.names_for(arch.network, weights.tensors)
        hint = f" (files with its classifier key load as {', '.join(names)})" if names else ""
        raise WeightFileError(
            f"{weights.path} has no classifier {key!r}: not a {arch.network} file{hint}"
        )
    return int(tensors[key].shape[arch.framework.kernel_outputs])

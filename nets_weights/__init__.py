"""Published ImageNet weights in our networks: `load(name, path, ...)`, which
`nets_factory.load_pretrained` is, and `fill`, which fine-tuning in `train.py` uses.

The file is read (`files`), its architecture found with the conventions its weights were trained
with (`architectures`), the network built with them, and every tensor placed into the network's
variables (`convert`), with one-line errors for a file that does not fit.
"""

import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

from nets_weights import architectures, convert, files
from nets_weights.architectures import Pretrained
from nets_weights.convert import Architecture
from nets_weights.files import WeightFileError, is_weight_file

__all__ = ["Pretrained", "WeightFileError", "conventions", "fill", "is_weight_file", "load"]


def conventions(name: str, path: str | Path, kwargs: dict[str, Any]) -> dict[str, Any]:
    """`kwargs` with the constructor fields the weights at `path` need; raises `ValueError` when
    `kwargs` set one of them otherwise (the network would compute another function)."""
    config = files.read_config(path)
    source, arch = architectures.find(name, architectures.file_architecture(config))
    if arch.alternatives:  # the file's keys tell its layout, whose conventions may differ
        source, arch = _find(name, files.read(path))
    return _conventions(source, arch, kwargs)


def _conventions(source: str, arch: Architecture, kwargs: dict[str, Any]) -> dict[str, Any]:
    for key, value in arch.convention.items():
        if key in kwargs and kwargs[key] != value:
            raise ValueError(
                f"{source}'s weights were trained with {key}={value!r}; "
                f"{key}={kwargs[key]!r} would compute another function"
            )
    return {**kwargs, **arch.convention}


def fill(
    name: str, path: str | Path, network_fn: Any, variables: dict, exclude: Sequence[str] = ()
) -> tuple[dict, list[str], Pretrained]:
    """`variables` (arrays, or abstract ones) with the tensors of the file at `path`.

    `network_fn` must have been built with `conventions(name, path, ...)`. A classifier whose
    class count differs from the file's keeps its values, and so does every variable whose
    `collection/path` matches a regex of `exclude`. Returns the variables, the names of those
    kept, and what the weights expect of their inputs.
    """
    return _fill(files.read(path), name, network_fn, variables, exclude)


def _fill(
    weights: files.WeightFile, name: str, network_fn: Any, variables: dict, exclude: Sequence[str]
) -> tuple[dict, list[str], Pretrained]:
    source, arch = _find(name, weights)
    file_classes = _file_classes(weights, arch)
    tensors = arch.stable(weights.tensors)
    if arch.check is not None:
        arch.check(tensors, str(weights.path))
    shapes = convert.leaf_shapes(variables)
    head = arch.heads(shapes)
    keep_head = bool(head) and shapes[head[0][:-1] + ("bias",)][-1] == file_classes
    steps = convert.plan(
        {k: v.shape for k, v in tensors.items()},
        shapes,
        arch.layout(network_fn.module),
        skip=lambda path: path in head and not keep_head,
        skip_sources=lambda key: arch.drops(key) or (arch.in_head(key) and not keep_head),
        what=str(weights.path),
        framework=arch.framework,
    )
    patterns = [re.compile(p) for p in exclude]
    excluded = lambda path: any(p.search("/".join(path)) for p in patterns)  # noqa: E731
    steps = [s for s in steps if not excluded(s.target)]
    filled = {s.target for s in steps}
    kept = ["/".join(p) for p in shapes if p not in filled]
    info = Pretrained(
        source=source,
        file=str(weights.path),
        class_names=architectures.imagenet_class_names(file_classes) if keep_head else (),
        **{**arch.preprocessing, **architectures.preprocessing(weights.config)},
    )
    return convert.apply(steps, tensors, variables), kept, info


def load(
    name: str,
    path: str | Path,
    num_classes: int | None = None,
    weight_decay: float = 0.0,
    is_training: bool = False,
    rng: jax.Array | None = None,
    **kwargs: Any,
) -> tuple[Any, dict[str, Any]]:
    """The network `name` with the published weights at `path`, computing what their source
    does; `nets_factory.load_pretrained` is this function.

    Args:
      name: a registry name, or the source's architecture name where it differs (see
        `nets_weights.architectures.ARCHITECTURES`); the network is built with the conventions the
        weights were trained with (e.g. PyTorch's symmetric padding).
      path: a `.safetensors` file, a Hugging Face / timm folder (`model.safetensors` and
        `config.json`), a torchvision `.pth` (needs torch), or a Keras Applications `.h5` (needs
        h5py). Nothing is downloaded.
      num_classes: None keeps the file's classifier; another count (or 0: features) replaces it,
        initialised from `rng`, for fine-tuning.
      **kwargs: other constructor fields (`dtype=jnp.bfloat16`, ...); a field that contradicts
        the weights' convention raises.

    Returns:
      `(network_fn, variables)`: `network_fn.pretrained` says what inputs the weights expect
      (image size, crop fraction, mean/std, interpolation) and names the classes.

    Raises:
      nets_weights.WeightFileError: the file cannot be read or does not fit the network (one line).
      ValueError: no published weights load into `name`, or a contradicting field.
    """
    import nets_factory  # the door imports this package lazily; the loop closes here

    weights = files.read(path)
    source, arch = _find(name, weights)
    kwargs = _conventions(source, arch, kwargs)
    if num_classes is None:
        num_classes = _file_classes(weights, arch)
    network_fn = nets_factory.get_network_fn(
        arch.network, num_classes, weight_decay, is_training, **kwargs
    )
    size = network_fn.default_image_size
    images = jax.ShapeDtypeStruct((1, size, size, 3), jnp.float32)
    abstract = jax.eval_shape(network_fn.init, jax.random.key(0), images)
    variables, kept, info = _fill(weights, name, network_fn, abstract, ())
    if kept:  # a new classifier: initialised as `init` would
        fresh = jax.jit(network_fn.init)(rng if rng is not None else jax.random.key(0), images)
        variables = jax.tree.map(
            lambda ours, new: new if isinstance(ours, jax.ShapeDtypeStruct) else ours,
            variables,
            fresh,
        )
    network_fn = dataclasses.replace(network_fn, pretrained=info)
    return network_fn, jax.tree.map(jnp.asarray, variables)


def _find(name: str, weights: files.WeightFile) -> tuple[str, Architecture]:
    """The architecture for `name` and the file's config, in the key layout the file has."""
    source, arch = architectures.find(name, architectures.file_architecture(weights.config))
    return source, convert.for_keys(arch, weights.tensors)


def _file_classes(weights: files.WeightFile, arch: Architecture) -> int:
    key, tensors = arch.head_kernel, arch.stable(weights.tensors)
    if key not in tensors:
        names = architectures.names_for(arch.network, weights.tensors)
        hint = f" (files with its classifier key load as {', '.join(names)})" if names else ""
        raise WeightFileError(
            f"{weights.path} has no classifier {key!r}: not a {arch.network} file{hint}"
        )
    return int(tensors[key].shape[arch.framework.kernel_outputs])

"""A network with its variables as one serialized `jax.export` artifact (StableHLO), which a
process with only `jax` installed runs: `jax.export.deserialize(blob).call(images)`.

The exported function takes a batch of any size (a symbolic dimension) of square images at the
weights' size, `[batch, size, size, channels]`, either uint8 in [0, 255] or float32 in [0, 1]
(chosen at export), normalises them with the weights' mean and std inside, and returns the
logits `[batch, classes]`, or `(logits, probabilities)`; weights without a classifier (DINOv2's,
SigLIP's) return their pooled features `[batch, width]`. The variables are constants of the
program, so the file is the whole model. A JSON file beside it (`<out>.json`) says all this.
"""

import dataclasses
import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

import nets_factory
from nets.layers import Conv
from nets_inference.load import Network
from nets_training.atomic import write_atomically
from nets_training.errors import UserError

INPUT_DTYPES = {"uint8": jnp.uint8, "float32": jnp.float32}
PLATFORMS = ("cpu", "cuda", "rocm", "tpu")  # jax.export's lowering platforms


@dataclasses.dataclass(frozen=True)
class Options:
    input_dtype: str = "uint8"  # a key of INPUT_DTYPES
    probabilities: bool = False  # also return the softmax
    platforms: Sequence[str] = ("cpu",)  # those the artifact may run on: a few of PLATFORMS

    def __post_init__(self):
        unknown = [p for p in self.platforms if p not in PLATFORMS]
        if unknown or not self.platforms:
            raise UserError(
                f"--platforms: {', '.join(map(repr, unknown)) or 'none given'}: give some of "
                f"{', '.join(PLATFORMS)}"
            )


def outputs(network: Network, options: Options) -> list[str]:
    """The names of what the artifact returns: features for weights without a classifier
    (whose probabilities would be a softmax over feature channels: refused)."""
    if network.network_fn.module.num_classes:
        return ["logits", "probabilities"] if options.probabilities else ["logits"]
    if options.probabilities:
        raise UserError(
            f"--probabilities: {network.source} has no classifier; its artifact returns "
            "features [batch, width]: leave --probabilities out"
        )
    return ["features"]


def serving_fn(network: Network, options: Options):
    """images -> logits (or `(logits, probabilities)`, or features), preprocessing included. For
    platforms
    other than the CPU, convolutions are XLA's own (`nets.layers.Conv`'s CPU path is for CPUs;
    the parameters are the same either way)."""
    network_fn, inputs = network.network_fn, network.inputs
    if set(options.platforms) != {"cpu"} and "conv" in nets_factory.constructor_fields(
        network_fn.name
    ):
        module = network_fn.module.clone(conv=functools.partial(Conv, impl="xla"))
        network_fn = dataclasses.replace(network_fn, module=module)
    mean = jnp.asarray(inputs.mean, jnp.float32)
    std = jnp.asarray(inputs.std, jnp.float32)
    scale = 255.0 if options.input_dtype == "uint8" else 1.0

    def serve(images: jax.Array):
        x = (images.astype(jnp.float32) / scale - mean) / std
        logits, _ = network_fn.apply(network.variables, x)
        logits = logits.astype(jnp.float32)
        return (logits, jax.nn.softmax(logits)) if options.probabilities else logits

    return serve


def export(network: Network, options: Options) -> jax.export.Exported:
    """Traces the serving function with a symbolic batch dimension and lowers it for
    `options.platforms`."""
    if options.input_dtype not in INPUT_DTYPES:
        raise ValueError(
            f"input dtype {options.input_dtype!r}: expected one of {', '.join(INPUT_DTYPES)}"
        )
    outputs(network, options)  # refuses probabilities of features
    size, channels = network.inputs.image_size, network.inputs.channels
    (batch,) = jax.export.symbolic_shape("batch")
    spec = jax.ShapeDtypeStruct((batch, size, size, channels), INPUT_DTYPES[options.input_dtype])
    serve = jax.jit(serving_fn(network, options))
    return jax.export.export(serve, platforms=tuple(options.platforms))(spec)


def metadata(network: Network, options: Options, exported: jax.export.Exported) -> dict[str, Any]:
    """What a server needs to know about the artifact, as JSON."""
    inputs, names = network.inputs, outputs(network, options)
    return {
        "source": network.source,
        "network": network.network_fn.name,
        "input": {
            "shape": ["batch", inputs.image_size, inputs.image_size, inputs.channels],
            "dtype": options.input_dtype,
            "range": [0, 255] if options.input_dtype == "uint8" else [0.0, 1.0],
            "layout": "NHWC (RGB when 3 channels), square at the size given: resize and crop first",
            "normalised_inside": {"mean": list(inputs.mean), "std": list(inputs.std)},
        },
        "outputs": names,
        ("features" if names == ["features"] else "classes"): int(exported.out_avals[0].shape[-1]),
        "class_names": list(inputs.class_names),
        "platforms": list(exported.platforms),
        "jax_version": jax.__version__,
        "calling_convention_version": exported.calling_convention_version,
    }


def write(path: str | Path, exported: jax.export.Exported, info: dict[str, Any]) -> Path:
    """Writes the artifact to `path` and its metadata to `path.json`, each atomically (a
    temporary file renamed into place), so a reader never sees half a model."""
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, bytes(exported.serialize()))
    write_atomically(path.with_name(path.name + ".json"), json.dumps(info, indent=2).encode())
    return path

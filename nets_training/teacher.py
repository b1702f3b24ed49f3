"""The teacher the config's `distill.teacher` names, loaded once at the student's compute dtype
and checked against the student (classes, channels, image size).

Its variables stay on the devices beside the train state, never in it: a checkpoint holds the
student alone, and a resumed run loads the teacher again.
"""

from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import nets_factory
import nets_weights
from nets_inference import load
from nets_training.config import DistillConfig
from nets_training.distill import Distiller
from nets_training.errors import UserError
from nets_training.workdir import AVERAGED_DIR, BEST_DIR, CONFIG_FILE


def distiller(
    distill: DistillConfig,
    num_classes: int,
    channels: int,
    mean: tuple[float, ...],
    std: tuple[float, ...],
    dtype: str,
) -> tuple[Distiller, dict[str, Any]]:
    """The `Distiller` of `distill.teacher` for a student of `num_classes` classes whose images
    have `channels` channels normalised by `mean` and `std`, and the teacher's variables (on the
    host), computing in `dtype`.

    Raises:
      UserError: the teacher cannot be found or read, or does not fit the student: its classes,
        its channels, or its image size; the message names the key.
    """
    network = _network(distill, dtype)
    inputs = network.inputs
    if inputs.channels != channels:
        raise UserError(
            f"distill.teacher: {network.source} takes {inputs.channels}-channel images; the "
            f"student's have {channels}"
        )
    classes = getattr(network.network_fn.module, "num_classes", None)
    if not classes:
        raise UserError(f"distill.teacher: {network.source} has no classifier to learn from")
    if classes != num_classes:
        raise UserError(
            f"distill.teacher: {network.source} has {classes} classes, the student "
            f"{num_classes}: a teacher must predict the student's classes"
        )
    size = distill.teacher_image_size or inputs.image_size
    key = "distill.teacher_image_size" if distill.teacher_image_size else "distill.teacher"
    images = jax.ShapeDtypeStruct((1, size, size, channels), jnp.float32)
    try:
        jax.eval_shape(network.network_fn.apply, network.variables, images)
    except nets_factory.ImageSizeError as e:
        raise UserError(f"{key}: {size} px for {network.source}: {e}") from None
    scale = np.asarray(std) / np.asarray(inputs.std)
    shift = (np.asarray(mean) - np.asarray(inputs.mean)) / np.asarray(inputs.std)
    how = f"{distill.type}, alpha {distill.alpha:g}"
    if distill.type == "soft":
        how += f", temperature {distill.temperature:g}"
    distiller = Distiller(
        teacher=network.network_fn,
        scale=tuple(scale.tolist()),
        shift=tuple(shift.tolist()),
        image_size=size,
        kind=distill.type,
        temperature=distill.temperature,
        alpha=distill.alpha,
        description=f"distilling from {network.source} at {size} px ({how})",
    )
    return distiller, jax.tree.map(np.asarray, network.variables)


def _network(distill: DistillConfig, dtype: str) -> load.Network:
    """The teacher `distill.teacher` names: a training run's or published weights."""
    spec = distill.teacher
    found = _run(Path(spec).expanduser())
    if found is not None:
        run, step = found
        for key in ("teacher_model", "teacher_kwargs"):
            if getattr(distill, key):
                raise UserError(f"distill.{key}: {run}/{CONFIG_FILE} says the teacher's network")
        try:
            if isinstance(step, str):
                return load.from_workdir(run, dtype=dtype, kept=step)
            return load.from_workdir(run, step, dtype=dtype)
        except UserError as e:
            raise UserError(f"distill.teacher: {e}") from None
    if not nets_weights.is_weights(spec):
        raise UserError(
            f"distill.teacher: {spec} is neither a training workdir (no {CONFIG_FILE}) nor "
            "published weights (a .safetensors, .pth or .h5 file, a Hugging Face folder, a "
            "timm name or a URL)"
        )
    kwargs = {**distill.teacher_kwargs, "dtype": jnp.dtype(dtype)}
    try:
        return load.from_weights(distill.teacher_model, spec, **kwargs)
    except (ValueError, TypeError) as e:
        raise UserError(f"distill.teacher: {e}") from None


def _run(path: Path) -> tuple[Path, int | str | None] | None:
    """`(workdir, step)` where `path` is a training run's workdir, its `checkpoints/` folder (the
    newest checkpoint: step None), one `checkpoints/<step>` folder, or its kept weights
    (`<workdir>/best`, the best evaluation's, and `<workdir>/averaged`: step the folder's
    name); else None."""
    if (path / CONFIG_FILE).is_file():
        return path, None
    kept = ("checkpoints", BEST_DIR, AVERAGED_DIR)
    if path.name in kept and (path.parent / CONFIG_FILE).is_file():
        return path.parent, None if path.name == "checkpoints" else path.name
    workdir = path.parent.parent
    if (
        path.parent.name == "checkpoints"
        and path.name.isdigit()
        and (workdir / CONFIG_FILE).is_file()
    ):
        return workdir, int(path.name)
    return None

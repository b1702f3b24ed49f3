"""A network ready for inference, from either place weights come from: a training workdir (its
resolved `config.yaml` and a checkpoint) or a published weight file (`load_pretrained`).

Both give the evaluation-mode `NetworkFn`, its variables, and the input conventions the weights
were trained or evaluated with (image size, channels, per-channel mean and std in [0, 1] units).
"""

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import nets_factory
from nets_training import checkpoint, config, networks
from nets_training.errors import UserError
from nets_training.workdir import AVERAGED_DIR, BEST_DIR, CONFIG_FILE


@dataclasses.dataclass(frozen=True)
class Inputs:
    """What the network's weights expect: square images of `image_size` pixels with `channels`
    channels, scaled to [0, 1], then `(x - mean) / std` per channel."""

    image_size: int
    channels: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    class_names: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Network:
    network_fn: nets_factory.NetworkFn  # evaluation mode
    variables: dict[str, Any]
    inputs: Inputs
    source: str  # where it came from, for messages and metadata


def from_workdir(
    workdir: str | Path,
    step: int | None = None,
    ema: bool = True,
    dtype: str | None = None,
    kept: str | None = None,
) -> Network:
    """The network a training run wrote: `workdir/config.yaml` says which network and inputs,
    the checkpoint at `step` (default: the newest) holds its variables, or the weights `kept`
    names (`BEST_DIR`: those of the run's best evaluation; `AVERAGED_DIR`: `nets-average`'s);
    the EMA's when the run kept one and `ema` is set, as the run's own evaluation used. `dtype`:
    the compute dtype (`model.dtype`'s values), None: the run's."""
    workdir = Path(workdir).expanduser()
    cfg = run_config(workdir)
    if kept:
        where = kept_checkpoint(workdir, kept)[1]
    else:
        where = workdir if step is None else checkpoint_folder(workdir, step)
    variables = checkpoint.load_variables(where, use_ema=ema)
    model, data = cfg.model, cfg.data
    if dtype is not None:
        model = dataclasses.replace(model, dtype=dtype)
    network_fn = networks.network_fns(model, model.num_classes).eval
    if data.image_size is None or data.mean is None or data.std is None:
        raise UserError(f"{workdir}/config.yaml: data.image_size, mean and std must be resolved")
    inputs = Inputs(data.image_size, len(data.mean), tuple(data.mean), tuple(data.std))
    return Network(network_fn, variables, inputs, f"{where} ({model.name})")


def checkpoint_folder(workdir: Path, step: int) -> Path:
    """The folder of the run's checkpoint `step`; a one-line error when it has none, naming the
    steps it has (and its kept weights)."""
    folder = workdir / "checkpoints" / str(step)
    if not (folder / "state").is_dir():
        raise UserError(
            f"--step {step}: {workdir} has no checkpoint {step}; {checkpoint.available(workdir)}"
        )
    return folder


# Why a run's folder of kept weights may hold none.
_NONE_KEPT = {
    BEST_DIR: "the run has not evaluated yet, or it ran with train.keep_best=0",
    AVERAGED_DIR: "nets-average (average.py in a checkout) writes them",
}


def kept_checkpoint(workdir: Path, kept: str) -> tuple[int, Path]:
    """The step and folder of the weights `kept` names (`BEST_DIR`: the best of the run's best
    evaluations; `AVERAGED_DIR`: the average `nets-average` wrote, at the newest step it
    averaged); a one-line error when the run has none."""
    folder = workdir / kept
    try:
        state = checkpoint.find_state(folder)
    except UserError:
        what = "best" if kept == BEST_DIR else kept
        raise UserError(f"{folder}: no {what} weights there ({_NONE_KEPT[kept]})") from None
    return int(state.parent.name), state.parent


def run_config(workdir: Path, overrides: Sequence[str] = ()) -> config.Config:
    """The config a training run resolved and wrote to `workdir/config.yaml`, with `key=value`
    `overrides` (`data.dir=...` for a run whose data moved)."""
    resolved = workdir / CONFIG_FILE
    if not resolved.is_file():
        raise UserError(f"--workdir {workdir}: no config.yaml there (not a training run's folder)")
    if not resolved.read_text().strip():  # it would read as the defaults' network
        raise UserError(
            f"{resolved} is empty: its run wrote none (train.py writes it whole when it starts); "
            "start the run again, or restore the file"
        )
    return config.load(resolved, overrides)


def from_weights(model: str | None, weights: str | Path, **kwargs: Any) -> Network:
    """Published weights (`load_pretrained`: a file, folder, Hub name or URL) into `model` (None:
    the network the weights name, built with constructor fields `kwargs`), with their own
    preprocessing's size, mean, std."""
    network_fn, variables = nets_factory.load_pretrained(model, weights, **kwargs)
    info = network_fn.pretrained
    inputs = Inputs(info.image_size, info.in_chans, info.mean, info.std, info.class_names)
    return Network(network_fn, variables, inputs, f"{weights} ({network_fn.name})")

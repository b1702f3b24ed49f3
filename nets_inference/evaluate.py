"""Evaluating a training run's checkpoints on its config's eval split from another process, as
the run itself evaluates (the same data pipeline and eval step, on every device): Slim's
`eval_image_classifier.py`, and its continuous evaluation (`watch`).

Each evaluation appends one JSON object to `<workdir>/eval.jsonl` (`step`, `eval/loss`,
`eval/top1`, `eval/top5`, `eval/images`, `eval/seconds`, `ema`), beside the run's own
`metrics.jsonl`, which only the training process writes.
"""

import dataclasses
import functools
import json
import math
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import grain
import jax

from nets_inference import load
from nets_training import (
    checkpoint,
    config,
    data,
    loop,
    networks,
    out_of_memory,
    sharding,
    sources,
    steps,
)
from nets_training.config import FinetuneConfig
from nets_training.errors import ClassCountError, OutOfMemory, UserError
from nets_training.workdir import CONFIG_FILE, START_SECONDS, is_held
from nets_weights import predict
from nets_weights.architectures import imagenet_synsets

RECORDS = "eval.jsonl"
# What evaluation reads of a config, and so what `--set` may change: of a run's (`build`,
# `Evaluator`), the network, the eval data and the run's length (the last step `watch` waits
# for); of published weights' (`evaluate_weights`), the data alone (the weights name the network
# and its preprocessing).
RUN_KEYS = {
    "model": ("name", "num_classes", "dtype", "kwargs"),
    "data": (
        *("name", "dir", "tfds_name", "synthetic_examples", "image_size", "mean", "std"),
        *("batch_size", "eval_batch_size", "workers", "threads", "skip_unreadable"),
    ),
    "train": ("steps", "epochs"),
}
WEIGHTS_KEYS = {
    "data": (
        *("name", "dir", "tfds_name", "batch_size", "eval_batch_size", "workers", "threads"),
        "skip_unreadable",
    )
}


class Weights(NamedTuple):
    """The part of a train state that the eval step reads."""

    params: Any
    batch_stats: Any


@dataclasses.dataclass(frozen=True)
class Evaluator:
    """A run's eval split and eval step, built once for any of its checkpoints."""

    workdir: Path
    config: config.Config  # the run's resolved config
    images: int  # in the eval split
    last_step: int  # the run's final step
    mesh: jax.sharding.Mesh
    eval_step: Callable
    batches: Callable[[], grain.IterDataset]  # host batches (`data.eval_batches`)

    def checkpoint_steps(self) -> list[int]:
        """The steps of the run's checkpoints, oldest first."""
        return checkpoint.saved_steps(self.workdir / "checkpoints")

    def evaluate(
        self, step: int | None, ema: bool = True, kept: str | None = None
    ) -> dict[str, Any]:
        """The record of checkpoint `step`: loss, top-1, top-5, images, seconds (with the EMA
        of the weights when the run kept one and `ema` is set, as the run's evaluation did).
        `kept`: the weights it names instead (`load.kept_checkpoint`: `BEST_DIR`, the run's best
        evaluation's, or `AVERAGED_DIR`; `step` None), whose step the record gives, with `kept`
        true (`"best": true`, `"averaged": true`)."""
        started = time.perf_counter()
        if kept:
            step, folder = load.kept_checkpoint(self.workdir, kept)
        else:
            folder = load.checkpoint_folder(self.workdir, step)
        variables = checkpoint.load_variables(folder, use_ema=ema)
        dtype = networks.compute_dtype(self.config.model.dtype)
        batch = self.config.data.eval_batch_size
        metrics = _evaluate(self.eval_step, variables, self.batches(), self.mesh, batch, dtype)
        return {
            "step": step,
            **metrics,
            "eval/images": self.images,
            "eval/seconds": round(time.perf_counter() - started, 3),
            "ema": ema and self.config.optim.ema_decay > 0,
            **({kept: True} if kept else {}),
        }

    def append(self, record: dict[str, Any]) -> None:
        """Appends `record` to `eval.jsonl` (process 0 writes)."""
        if jax.process_index() == 0:
            with open(self.workdir / RECORDS, "a") as f:
                f.write(json.dumps(record) + "\n")


def build(workdir: str | Path, overrides: Sequence[str] = ()) -> Evaluator:
    """The evaluator of the run in `workdir`, from the config it resolved (`config.yaml`) with
    `key=value` `overrides` (`data.dir=...` where the data moved)."""
    workdir = Path(workdir).expanduser()
    # The checkpoints hold the weights, and config.yaml the conventions of any weights the run
    # was fine-tuned from: the file it started from is not needed (nor read) again.
    cfg = dataclasses.replace(load.run_config(workdir, overrides), finetune=FinetuneConfig())
    try:
        cfg, dataset, networks = loop.resolve(cfg)
    except ClassCountError as e:  # its advice, model.num_classes, is for a new network
        trained, data_classes = cfg.model.num_classes, e.data_classes
        raise UserError(
            f"--workdir {workdir}: its network was trained for {trained} classes, and "
            f"{cfg.data.name}'s data has {data_classes} (labels 0..{data_classes - 1}): a trained "
            f"network's class count cannot change: give data of the run's {trained} classes (or "
            f"train a network for {data_classes})"
        ) from None
    d, t = cfg.data, cfg.train
    mesh = sharding.make_mesh()
    prepare = functools.partial(steps.preprocess, image_size=d.image_size, mean=d.mean, std=d.std)
    eval_step = steps.make_eval_step(networks.eval, prepare, use_ema=False)
    local_batch = sharding.local_batch_size(d.eval_batch_size, "data.eval_batch_size")
    where = (jax.process_index(), jax.process_count())
    return Evaluator(
        workdir=workdir,
        config=cfg,
        images=len(dataset.eval),
        last_step=t.steps or math.ceil(t.epochs * len(dataset.train) / d.batch_size),
        mesh=mesh,
        eval_step=jax.jit(eval_step, out_shardings=sharding.replicated(mesh)),
        batches=functools.partial(data.eval_batches, dataset, d, d.image_size, local_batch, *where),
    )


def watch(
    evaluator: Evaluator,
    ema: bool = True,
    poll_seconds: float = 30.0,
    give_up_seconds: float = 900.0,
) -> Iterator[dict[str, Any]]:
    """Evaluates the newest checkpoint each time one appears, until the run's last step is
    evaluated. Checkpoints that appeared and were replaced while it evaluated are skipped, as
    Slim's continuous evaluation skips them; one deleted before it could be read (the run keeps
    only the last few) is skipped too. Gives up (`UserError`) after `give_up_seconds` with no new
    checkpoint while no run holds the workdir: the run died or was stopped before its end; after
    `START_SECONDS` at most while the run has no checkpoint at all (it stopped before its
    first)."""
    done, waiting_since = -1, time.monotonic()
    while done < evaluator.last_step:
        newer = [s for s in evaluator.checkpoint_steps() if s > done]
        if not newer:
            waited, first = time.monotonic() - waiting_since, min(give_up_seconds, START_SECONDS)
            if done < 0 and waited > first and not is_held(evaluator.workdir):
                raise UserError(_never_saved(evaluator, first))
            if waited > give_up_seconds:
                if not is_held(evaluator.workdir):
                    raise UserError(_given_up(evaluator, done, give_up_seconds))
                waiting_since = time.monotonic()  # a live run: it may be slow, not dead
            time.sleep(poll_seconds)
            continue
        try:
            yield evaluator.evaluate(newer[-1], ema)
        except (FileNotFoundError, UserError):
            if newer[-1] in evaluator.checkpoint_steps():
                raise
        done, waiting_since = newer[-1], time.monotonic()


def wait_for_start(
    workdir: Path, poll_seconds: float, give_up_seconds: float, say: Callable[[str], None]
) -> None:
    """Waits for a run that is starting in `workdir` to write its `config.yaml` (`--watch`
    started before the run), as long as a run holds the workdir or, while none does, for as
    long as a run takes to start (`START_SECONDS`; `give_up_seconds` if less): the limit of a
    run with no checkpoint (`watch`), which a mistyped `--workdir` meets too. Says at once, in
    one line given to `say`, what it waits for; says nothing when the run has started."""
    if (workdir / CONFIG_FILE).is_file():
        return
    started, limit = time.monotonic(), min(give_up_seconds, START_SECONDS)
    missing = "" if workdir.is_dir() else ", a folder that does not exist yet"
    say(
        f"waiting for {workdir / CONFIG_FILE} (a run starting in {workdir}{missing}); "
        f"giving up after {limit:g} s unless a run holds the workdir"
    )
    while not (workdir / CONFIG_FILE).is_file():
        if time.monotonic() - started > limit and not is_held(workdir):
            raise UserError(
                f"--watch: {workdir} has no config.yaml after {limit:g} s and no run holds it: "
                f"start the run (train.py --workdir={workdir}) first"
            )
        time.sleep(poll_seconds)


def _never_saved(evaluator: Evaluator, seconds: float) -> str:
    return (
        f"--watch: no checkpoint in {evaluator.workdir} after {seconds:g} s and no run holds it: "
        "the run stopped before its first checkpoint (its own output says why); start it again "
        f"with train.py --workdir={evaluator.workdir}, and watch again"
    )


def _given_up(evaluator: Evaluator, done: int, seconds: float) -> str:
    return (
        f"--watch: no new checkpoint in {evaluator.workdir} for {seconds:g} s and no run holds "
        f"it: the run stopped before its last step {evaluator.last_step} (evaluated: step "
        f"{done}); resume it with train.py --workdir={evaluator.workdir}, and watch again"
    )


def _evaluate(
    eval_step: Callable,
    variables: dict,
    batches: grain.IterDataset,
    mesh: jax.sharding.Mesh,
    batch: int,
    compute_dtype: str | None,
) -> dict:
    """`loop.evaluate` of `variables` (`params`, `batch_stats`), replicated on `mesh`, in
    batches of `batch` images; a device's out of memory is `OutOfMemory`, which says what to
    change (`compute_dtype`: None where the network's is not a setting)."""
    try:
        weights = Weights(variables["params"], variables.get("batch_stats", {}))
        weights = jax.device_put(weights, sharding.replicated(mesh))
        return loop.evaluate(eval_step, weights, batches, mesh)
    except jax.errors.JaxRuntimeError as e:
        if not out_of_memory.is_out_of_memory(e):
            raise
        raise OutOfMemory(out_of_memory.explain_evaluation(e, batch, compute_dtype)) from None


def evaluate_weights(model: str | None, weights: str | Path, cfg: config.Config) -> dict[str, Any]:
    """Published weights on the eval split of `cfg.data`, with the weights' own preprocessing
    (their resize, centre crop, interpolation, mean and std, as `classify.py` uses). The
    dataset's labels must be the weights' classes in the same order (an image folder of
    ImageNet's validation set, one folder per WordNet id, sorted, is timm's order)."""
    started = time.perf_counter()
    network = load.from_weights(model, weights)
    d = cfg.data
    dataset = with_weights_classes(
        sources.load(d), network.network_fn.module.num_classes, str(weights), d.name
    )
    inputs, mesh = network.inputs, sharding.make_mesh()
    prepare = functools.partial(
        steps.preprocess, image_size=inputs.image_size, mean=inputs.mean, std=inputs.std
    )
    eval_step = jax.jit(
        steps.make_eval_step(network.network_fn, prepare, use_ema=False),
        out_shardings=sharding.replicated(mesh),
    )
    batch = fitting_batch(d.eval_batch_size or d.batch_size, len(dataset.eval))
    local_batch = sharding.local_batch_size(batch, "data.eval_batch_size")
    crop = functools.partial(predict.crop, info=network.network_fn.pretrained)
    where = (jax.process_index(), jax.process_count())
    batches = data.eval_batches(dataset, d, inputs.image_size, local_batch, *where, crop=crop)
    metrics = _evaluate(eval_step, network.variables, batches, mesh, batch, None)
    return {
        "weights": str(weights),
        **metrics,
        "eval/images": len(dataset.eval),
        "eval/seconds": round(time.perf_counter() - started, 3),
    }


def with_weights_classes(
    dataset: sources.Dataset, classes: int, weights: str, name: str
) -> sources.Dataset:
    """`dataset` with eval labels that are the weights' logit indices: as they are when the
    class counts agree; an ImageNet subset (an image folder of WordNet-id folders, `n01440764`,
    ...) under 1000- or 1001-class weights gets each folder's ImageNet index."""
    if classes == dataset.num_classes:
        return dataset
    if not classes:
        raise UserError(f"--weights {predict.without_classifier(weights)}")
    folders = [Path(p).parent.name for p in getattr(dataset.eval, "paths", ())]
    index = {synset: i + classes - 1000 for i, synset in enumerate(imagenet_synsets())}
    if classes in (1000, 1001) and folders and all(f in index for f in folders):
        labels = tuple(index[f] for f in folders)
        subset = sources.FileSource(dataset.eval.paths, labels)
        return dataclasses.replace(dataset, eval=subset, num_classes=classes)
    raise UserError(
        f"--weights {weights}: {classes} classes, but {name}'s eval split has "
        f"{dataset.num_classes}; give data whose labels are the weights' classes (for ImageNet "
        "weights, class folders named by WordNet id, n01440764 ..., any subset of them)"
    )


def fitting_batch(batch: int, images: int) -> int:
    """`batch`, or fewer where the data is smaller: the images rounded up to a multiple of the
    devices, so 64 images are not padded to a batch of 1024."""
    devices = jax.device_count()
    return min(batch, max(devices, -(-images // devices) * devices))

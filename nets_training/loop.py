"""The training program: `train(config, workdir)`.

Builds the mesh, the dataset, the network (`get_network_fn`), the optimizer and the state,
restores the latest checkpoint of `workdir` (or fine-tunes from `finetune.init_from`), then for
each batch: shard, `train_step`, log; evaluate and save on their cadence, and when stopped. The
workdir is locked while the run lasts (`nets_training.workdir`).
"""

import contextlib
import dataclasses
import functools
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import grain
import jax
import numpy as np
import optax
from absl import logging

import nets_factory
import nets_weights
from nets_training import (
    checkpoint,
    data,
    device_augment,
    image_sizes,
    initial_state,
    networks,
    optim,
    preemption,
    sharding,
    sources,
    steps,
    teacher,
)
from nets_training.config import (
    Config,
    DataConfig,
    FinetuneConfig,
    ModelConfig,
    OptimConfig,
    TrainConfig,
    changes,
    dump,
    merge,
    parse_yaml,
    to_dict,
)
from nets_training.errors import ClassCountError, PeerLost, UserError
from nets_training.metrics import Console, MetricsLog, Throughput, Window
from nets_training.workdir import BEST_DIR, CONFIG_FILE, hold_workdir, write_config

# DataConfig keys whose None means "the source's default" (a `sources.Dataset` field of that name).
SOURCE_DEFAULTS = ("mean", "std", "crop", "flip", "crop_padding")


@dataclasses.dataclass(frozen=True)
class Summary:
    workdir: Path
    steps: int
    best_top1: float | None
    best_step: int | None  # of best_top1: the first of equals, whose weights `best/` keeps
    final_top1: float | None
    wall_seconds: float
    images_per_second: float | None  # None when no step was timed (a 1-step run)

    def __str__(self) -> str:
        pct = lambda v: "n/a" if v is None else f"{100 * v:.2f}%"  # noqa: E731
        rate = "n/a" if self.images_per_second is None else f"{self.images_per_second:.0f}"
        at = "" if self.best_step is None else f" at step {self.best_step}"
        return (
            f"done: {self.steps} steps, best eval top-1 {pct(self.best_top1)}{at}, final "
            f"{pct(self.final_top1)}, {self.wall_seconds:.1f} s wall, {rate} img/s training; "
            f"workdir {self.workdir}"
        )


def load_data_and_networks(
    model: ModelConfig, data: DataConfig
) -> tuple[sources.Dataset, networks.Networks]:
    """The dataset and the networks, each built once, in the order their needs allow.

    The networks' logits take the data's classes; but synthetic data is made to the network's
    measure (its image size, and the model's classes), so for it the networks come first.
    """
    if data.name != "synthetic":
        dataset = sources.load(data)
        check_classes(model.num_classes, dataset, data.name)
        return dataset, networks.network_fns(model, model.num_classes or dataset.num_classes)
    num_classes = model.num_classes or sources.SYNTHETIC_CLASSES
    built = networks.network_fns(model, num_classes)
    image_size = data.image_size or built.train.default_image_size
    return sources.load(data, image_size, num_classes), built


def check_classes(num_classes: int | None, dataset: sources.Dataset, name: str) -> None:
    """Refuses fewer logits than the data's labels (the loss would read past the logits); warns
    of more (they train, but the extra classes are never a target)."""
    if num_classes is None or num_classes == dataset.num_classes:
        return
    if num_classes < dataset.num_classes:
        raise ClassCountError(
            f"model.num_classes={num_classes}: {name} has {dataset.num_classes} classes (labels "
            f"0..{dataset.num_classes - 1}); set it to {dataset.num_classes} or leave it unset",
            dataset.num_classes,
        )
    logging.warning(
        "model.num_classes=%d but %s has %d classes: logits %d..%d are never a target",
        num_classes,
        name,
        dataset.num_classes,
        dataset.num_classes,
        num_classes - 1,
    )


def fit_warmup(
    o: OptimConfig, steps_per_epoch: float, total_steps: int
) -> tuple[OptimConfig, str | None]:
    """`o` with a warmup that leaves its schedule room to decay, and the note that says so when
    it had to be shortened.

    A warmup counted in epochs can fill a short run: one epoch of an image folder under a
    1-epoch warmup, or a recipe's 5 epochs on a test run, would end at the peak learning rate,
    its schedule never begun. A warmup of half the run or more becomes a tenth of it.
    """
    warmup = round(o.warmup_epochs * steps_per_epoch)
    if o.schedule == "constant" or 2 * warmup < total_steps:
        return o, None
    epochs = total_steps / steps_per_epoch
    fitted = dataclasses.replace(o, warmup_epochs=float(f"{0.1 * epochs:.3g}"))
    return fitted, (
        f"optim.warmup_epochs={o.warmup_epochs:g} would take {min(warmup, total_steps)} of this "
        f"run's {total_steps} steps and leave the {o.schedule} schedule no room: warming up for "
        f"{fitted.warmup_epochs:g} epochs instead, a tenth of the run (set optim.warmup_epochs "
        f"below {epochs / 2:.3g} to choose, or optim.schedule=constant to end at the peak)"
    )


def check_batch_norm_decay(network_fn: nets_factory.NetworkFn, total_steps: int) -> None:
    """Warns when the network's BatchNorm decay averages over too much of the run: evaluation
    uses those running averages, which then hold mostly their initial values and the early
    weights' statistics (Slim's 0.9997 on the digits' 450 steps: a network that learns evaluates
    at chance)."""
    momentum = getattr(network_fn.module, "bn_momentum", None)
    if momentum is None or 10 / (1 - momentum) <= total_steps:
        return
    fitting = math.floor(100 * (1 - 10 / total_steps)) / 100  # spans at most a tenth of the run
    if fitting >= 0.9:
        advice = "set model.kwargs.bn_momentum=0.9 (PyTorch's) for short runs"
    elif fitting > 0:
        advice = f"set model.kwargs.bn_momentum={fitting:g} or less, or train longer"
    else:
        advice = "train for 100 steps or more (with model.kwargs.bn_momentum=0.9, PyTorch's)"
    logging.warning(
        "%s's BatchNorm running averages (bn_momentum=%g) span about %d steps, too many for a "
        "run of %d: evaluation would see stale statistics; %s",
        network_fn.name,
        momentum,
        round(1 / (1 - momentum)),
        total_steps,
        advice,
    )


def check_normalisation(data: DataConfig, channels: int) -> None:
    """`data.mean` and `data.std` give one value per channel of the data."""
    for key in ("mean", "std"):
        values = getattr(data, key)
        if values is not None and len(values) != channels:
            raise UserError(
                f"data.{key}: {len(values)} values for {channels}-channel images ({data.name}); "
                f"give {channels}, one per channel, or leave it unset"
            )


def with_weight_conventions(config: Config) -> Config:
    """`model.kwargs` with the constructor fields that `finetune.init_from`'s published weights
    were trained with (PyTorch's padding, ...), so the network computes what their source did."""
    init_from = config.finetune.init_from
    if not init_from or not nets_weights.is_weights(init_from):
        return config
    try:
        kwargs = nets_weights.conventions(
            config.model.name, init_from, dict(config.model.kwargs), nets_factory.networks_map
        )
    except ValueError as e:
        raise UserError(f"finetune.init_from: {e}") from None
    return dataclasses.replace(config, model=dataclasses.replace(config.model, kwargs=kwargs))


def resolve(config: Config) -> tuple[Config, sources.Dataset, networks.Networks]:
    """Fills in every default that depends on the network or the data, so that the written
    config says exactly what ran; loads the dataset and builds the networks (for `build`)."""
    config = with_weight_conventions(config)
    dataset, nets = load_data_and_networks(config.model, config.data)
    d = data.with_parallelism(config.data, dataset.fixed_size is not None)
    check_normalisation(d, dataset.channels)
    resolved_data = dataclasses.replace(
        d,
        image_size=image_sizes.image_size(d.image_size, dataset, nets.train),
        eval_batch_size=d.eval_batch_size or d.batch_size,
        **{k: getattr(dataset, k) for k in SOURCE_DEFAULTS if getattr(d, k) is None},
    )
    num_classes = config.model.num_classes or dataset.num_classes
    model = dataclasses.replace(
        config.model, num_classes=num_classes, dtype=networks.compute_dtype(config.model.dtype)
    )
    train = dataclasses.replace(config.train, epochs=config.train.epochs or dataset.epochs)
    config = dataclasses.replace(config, model=model, data=resolved_data, train=train)
    return config, dataset, nets


def changes_since(saved: Path, config: Config, dataset: sources.Dataset) -> list[str]:
    """'key: old -> new' for each setting of the resolved `config` that differs from the config
    a previous run wrote to `saved`.

    Older versions wrote None for the `SOURCE_DEFAULTS` they did not set: it meant the source's
    value then as now, so it is compared as that value; and a key they did not know (such as
    `data.skip_unreadable`) as its default, which is what they did.
    """
    before = merge(to_dict(Config()), parse_yaml(saved.read_text(), str(saved)))
    old_data = before.get("data", {})
    defaults = {k: to_dict(getattr(dataset, k)) for k in SOURCE_DEFAULTS if old_data.get(k) is None}
    return changes({**before, "data": {**old_data, **defaults}}, to_dict(config))


def evaluate(eval_step, state, batches: grain.IterDataset, mesh) -> dict[str, float]:
    """Loss, top-1 and top-5 over the eval split (every process's part, `data.eval_batches`).
    The batches go on the devices ahead of the steps, from a thread of their own (as in
    training: `data.on_device`), and the sums stay there until the end."""
    sums = None
    placed = iter(data.on_device(batches, functools.partial(sharding.shard_batch, mesh=mesh)))
    try:
        for batch in placed:
            out = eval_step(state, batch)
            sums = out if sums is None else sums + out
    finally:
        placed.close()
    loss, top1, top5, count = np.asarray(sums, np.float64).tolist()
    return {"eval/loss": loss / count, "eval/top1": top1 / count, "eval/top5": top5 / count}


def check_finite(state: steps.TrainState, checkpoints: checkpoint.Checkpointer) -> None:
    """Stops the run if a loss was not finite (the state then holds the last good step)."""
    bad = int(state.nonfinite_step)
    if bad >= 0:
        last = checkpoints.latest_step()
        kept = (
            f"the last good checkpoint is step {last} in {checkpoints.directory}"
            if last
            else "no checkpoint was saved"
        )
        raise UserError(f"loss became non-finite at step {bad}; stopped there, {kept}")


@dataclasses.dataclass
class Run:
    """Everything `train` builds before its first step."""

    config: Config  # resolved: every default filled in
    dataset: sources.Dataset
    mesh: jax.sharding.Mesh
    total_steps: int
    steps_per_epoch: float
    lr: optax.Schedule  # of the train step (with accumulation, the optimizer step's)
    train_step: Callable[[steps.TrainState, dict], tuple[steps.TrainState, steps.Metrics]]
    eval_step: Callable
    init_seconds: float  # how long the state took to restore, or its initialisation to compile
    batches: grain.DatasetIterator  # global batches, on the devices
    eval_batches: Callable[[], grain.IterDataset]  # host batches (`data.eval_batches`)
    checkpoints: checkpoint.Checkpointer
    best: checkpoint.BestCheckpointer | None  # train.keep_best: the best evaluations' weights
    state: steps.TrainState
    teacher: dict | None  # the teacher's variables on the devices (`distill.teacher`), or None
    window: Window  # the train metrics that the next record averages
    start_step: int
    note: str  # how it started: resumed, or fine-tuned from where
    notices: list[str]  # lines to print at the start: checkpoints skipped, config changes
    said_input_bound: bool = False  # the input-bound line is said once a run

    def describe(self) -> str:
        c, d = self.config, self.config.data
        return (
            f"{c.model.name} on {d.name} ({len(self.dataset.train)} train / "
            f"{len(self.dataset.eval)} eval images, {c.model.num_classes} classes, "
            f"{d.image_size} px): {self.total_steps} steps of {d.batch_size} images on "
            f"{jax.device_count()} {jax.devices()[0].platform} device(s)" + self.note
        )


def train_steps(train: TrainConfig, accumulate: int, steps_per_epoch: float) -> int:
    """The run's length in train steps: `train.steps`, or its epochs rounded up to whole
    optimizer steps (each of `accumulate` train steps, `optim.accumulate_steps`)."""
    if train.steps is None:
        return math.ceil(train.epochs * steps_per_epoch / accumulate) * accumulate
    if train.steps % accumulate:
        below = train.steps // accumulate * accumulate
        raise UserError(
            f"train.steps={train.steps} does not divide into optimizer steps of "
            f"optim.accumulate_steps={accumulate} train steps; set train.steps to a multiple of "
            f"{accumulate} ({below or accumulate} or {below + accumulate})"
        )
    return train.steps


def check_not_past_the_end(
    restored: checkpoint.Restored | None, total: int, t: TrainConfig
) -> None:
    """Refuses to resume a run whose checkpoint is past the config's last step: it would say
    it was done at a step its weights are not at, and config.yaml would say that end."""
    if restored is None or restored.step <= total:
        return
    key = f"train.steps={t.steps}" if t.steps else f"train.epochs={t.epochs} ({total} steps)"
    raise UserError(
        f"{key}: the run in this workdir is at step {restored.step}, past that end; set "
        f"train.steps={restored.step} or more to go on from it, or use another workdir"
    )


def build(config: Config, workdir: Path) -> Run:
    """Resolves the config, builds data, network, optimizer and steps; restores or initialises."""
    mesh = sharding.make_mesh()
    config, dataset, nets = resolve(config)
    d, t, o = config.data, config.train, config.optim
    local_batch = sharding.local_batch_size(d.batch_size, "data.batch_size")
    local_eval_batch = sharding.local_batch_size(d.eval_batch_size, "data.eval_batch_size")
    steps_per_epoch = len(dataset.train) / d.batch_size  # train steps: (micro-)batches
    total = train_steps(t, o.accumulate_steps, steps_per_epoch)
    check_batch_norm_decay(nets.train, total)
    o, warmup_note = fit_warmup(o, steps_per_epoch, total)
    config = dataclasses.replace(config, optim=o)  # config.yaml says the warmup that ran
    k = o.accumulate_steps  # the schedule counts optimizer steps, of k train steps each
    lr = optim.schedule(o, d.batch_size * k, total // k, steps_per_epoch / k)
    classifier = networks.classifier_params(nets.train) if o.agc else ()
    tx = optim.optimizer(o, lr, config.finetune.trainable, nets.train.module, classifier)
    prepare = functools.partial(steps.preprocess, image_size=d.image_size, mean=d.mean, std=d.std)
    replicated = sharding.replicated(mesh)
    augment = device_augment.make_augment(
        d, config.mixup, config.model.num_classes, o.label_smoothing
    )
    distiller, teacher_variables = None, None
    if config.distill.teacher:
        distiller, host_variables = teacher.distiller(
            config.distill,
            config.model.num_classes,
            dataset.channels,
            d.mean,
            d.std,
            config.model.dtype,
        )
        teacher_variables = initial_state.run_once(
            jax.jit(lambda v: v, out_shardings=replicated), host_variables
        )
    train_step = steps.make_train_step(
        nets.train, tx, prepare, augment, steps.make_loss(o), o.ema_decay, total, distiller
    )
    eval_step = steps.make_eval_step(nets.eval, prepare, o.ema_decay > 0)
    train_step = jax.jit(train_step, donate_argnums=0, out_shardings=replicated)
    eval_step = jax.jit(eval_step, out_shardings=replicated)
    where = (jax.process_index(), jax.process_count())

    checkpoints = checkpoint.Checkpointer(workdir / "checkpoints", t.keep_checkpoints)
    started = time.perf_counter()
    restored, notices = None, [warmup_note] if warmup_note else []
    if checkpoints.latest_step() is not None:
        restored, skipped = resume(config, dataset, nets.train, tx, mesh, checkpoints)
        notices += skipped
        check_not_past_the_end(restored, total, t)
    if restored is None:
        state, finetuned = initial_state.initial_state(
            config, nets.train, tx, dataset.channels, mesh
        )
        init_from = config.finetune.init_from
        note = f"; fine-tuning from {init_from}" if init_from else ""
        note += "".join(f", {phrase}" for phrase in finetuned)
    else:
        state, note = restored.state, f"; resumed at step {restored.step}"
    if distiller is not None:
        note += f"; {distiller.description}"
    init_seconds = time.perf_counter() - started  # a fresh state computes on, beside the trace
    start_step = restored.step if restored else 0
    batches = data.train_dataset(dataset, d, d.image_size, local_batch, t.seed, *where, start_step)
    batches = iter(data.on_device(batches, functools.partial(sharding.shard_batch, mesh=mesh)))
    batches.start_prefetch()  # the first batches are made while the train step compiles
    return Run(
        config=config,
        dataset=dataset,
        mesh=mesh,
        total_steps=total,
        steps_per_epoch=steps_per_epoch,
        lr=lambda step: lr(step // k),
        train_step=train_step,
        eval_step=eval_step,
        init_seconds=init_seconds,
        batches=batches,
        eval_batches=functools.partial(
            data.eval_batches, dataset, d, d.image_size, local_eval_batch, *where
        ),
        checkpoints=checkpoints,
        best=(
            checkpoint.BestCheckpointer(workdir / BEST_DIR, checkpoints, t.keep_best, start_step)
            if t.keep_best
            else None
        ),
        state=state,
        teacher=teacher_variables,
        window=Window(restored.log_window if restored else []),
        start_step=start_step,
        note=note,
        notices=notices,
    )


def resume(
    config: Config,
    dataset: sources.Dataset,
    train_fn,
    tx,
    mesh,
    checkpoints: checkpoint.Checkpointer,
) -> tuple[checkpoint.Restored | None, list[str]]:
    """The newest readable checkpoint, and the lines that say what the resumed run does
    differently: the checkpoints it skipped, the config changes since the run that wrote them.

    The checkpoint has the weights, whatever `finetune.init_from` says.

    Raises:
      UserError: the checkpoint is of another configuration (the message lists the config
        changes that made it so), or none reads back.
    """
    saved = checkpoints.directory.parent / CONFIG_FILE
    changed = changes_since(saved, config, dataset) if saved.exists() else []
    scratch = dataclasses.replace(config, finetune=FinetuneConfig())
    like = initial_state.abstract_state(scratch, train_fn, tx, dataset.channels, mesh)
    try:
        restored = checkpoints.restore_latest(like)
    except checkpoint.IncompatibleCheckpoint as e:
        why = "; ".join(changed) if changed else f"{saved} does not say which setting changed"
        raise UserError(
            f"{e}: its workdir holds a run of another configuration (changed: {why}); undo "
            "the change to resume that run, or use another workdir to start a new one"
        ) from None
    notices = restored.skipped if restored else []
    if changed:
        notices.append(f"config changed since the last run: {'; '.join(changed)}")
    return restored, notices


def train(config: Config, workdir: str | Path) -> Summary:
    """Trains (or resumes, or fine-tunes) as `config` says; writes everything under `workdir`,
    which it locks while it runs (see `hold_workdir`)."""
    process0 = jax.process_index() == 0
    with hold_workdir(Path(workdir), enabled=process0):
        return train_in(config, Path(workdir), process0)


def train_in(config: Config, workdir: Path, process0: bool) -> Summary:
    """`train` once the workdir is held."""
    started = time.perf_counter()
    run = build(config, workdir)
    if process0:
        write_config(workdir, dump(run.config))
    log = MetricsLog(workdir, run.start_step, process0)
    console = Console(run.total_steps, run.start_step, process0)
    console.print(f"{run.describe()}; workdir {workdir}")
    for line in run.notices:
        console.print(line)
    throughput = Throughput(run.config.data.batch_size)
    try:
        evaluate_missed(run, log, console)
        stopping_now = (functools.partial(data.close, run.batches), console.close)
        with preemption.on_abrupt_exit(*stopping_now), contextlib.ExitStack() as signals:
            for step in range(run.start_step + 1, run.total_steps + 1):
                batch = next_batch(run, throughput)
                if step == run.start_step + 1:
                    compiled_in = compile_train_step(run, batch, console)
                run.state, metrics = run.train_step(run.state, batch, run.teacher)
                run.window.add(metrics)
                throughput.step()
                console.advance()
                if step == run.start_step + 1:  # leave compilation out of img/s
                    jax.block_until_ready(run.state.step)
                    since_start = time.perf_counter() - started
                    console.print(first_step_line(run.init_seconds, compiled_in, since_start))
                    throughput.restart()
                    # SIGTERM and Ctrl-C ask for a save from here on. During the first step's
                    # compile (minutes for a large network on a cold cache) they stop the run
                    # at once, as while it starts: there is nothing new to save.
                    stop = signals.enter_context(preemption.catch_signals())
                on_step_end(run, step, stop, log, console, throughput)
    except BaseException as e:
        if (why := sharding.peer_failure(e)) is not None:
            e = lost_peer(why, run.checkpoints)
        shut_down(run, log, console, failure=e)
        raise e from None
    shut_down(run, log, console, failure=None)
    best = log.best_record("eval/top1") or {}
    summary = Summary(
        workdir,
        run.total_steps,
        best.get("eval/top1"),
        best.get("step"),
        log.last("eval/top1"),
        time.perf_counter() - started,
        throughput.mean(),
    )
    console.print(str(summary))
    return summary


def compile_train_step(run: Run, batch: dict, console: Console) -> float:
    """Compiles the train step for the run's state and batches, saying so (on a cold cache, the
    longest silence of a run's start: a minute for ResNet-50 on a GPU); its seconds. The step's
    first call then finds the executable in JAX's cache."""
    console.print(compiling_line(jax.default_backend(), jax.config.jax_compilation_cache_dir))
    start = time.perf_counter()
    run.train_step.lower(run.state, batch, run.teacher).compile()
    return time.perf_counter() - start


def compiling_line(backend: str, cache_dir: str | None) -> str:
    """The line before the compile's silence; on a GPU, why it may last minutes: XLA times
    candidate kernels for each convolution and fusion (ResNet-50's step on an H200: 86-143 s
    cold, 9 s once another program's timings were cached), which JAX keeps beside the
    compilation cache."""
    if backend != "gpu":
        return "compiling the train step ..."
    if not cache_dir:
        return (
            "compiling the train step (XLA autotunes its GPU kernels, minutes for a large network; "
            "with no compilation cache, every run does) ..."
        )
    return (
        "compiling the train step (a first run on this GPU autotunes its kernels, minutes for a "
        f"large network; later runs reuse them from {cache_dir}) ..."
    )


def next_batch(run: Run, throughput: Throughput) -> Any:
    """The next training batch; an unreadable file among its images stops the run in one line
    that says how to go on without it (`data.skip_unreadable`) and from where."""
    try:
        return throughput.wait_for(run.batches)
    except sources.DataError as e:
        last = run.checkpoints.last_complete_step()
        since = f"and resume from step {last}" if last else "and start again"
        folder = run.config.data.dir
        listing = f" (`python -m nets_training.check_images {folder}` lists all)" if folder else ""
        raise sources.DataError(
            f"{e}; set data.skip_unreadable=true to leave such files out, {since}{listing}"
        ) from None


def first_step_line(init_seconds: float, compile_seconds: float, since_start: float) -> str:
    """What the start cost, said once: the state's restore or the compilation of its
    initialisation (which then runs while the train step compiles), the train step's trace and
    compilation, and the first step's end."""
    return (
        f"state set up in {init_seconds:.1f} s, train step compiled in {compile_seconds:.1f} s; "
        f"first step done {since_start:.1f} s after start"
    )


def lost_peer(why: str, checkpoints: checkpoint.Checkpointer) -> PeerLost:
    """The one line for a run whose other process ended: what failed, and what is left."""
    last = checkpoints.last_complete_step()
    kept = f"the last complete checkpoint is step {last}" if last else "no checkpoint is saved"
    return PeerLost(
        f"another process of this run ended ({why}); {kept} in {checkpoints.directory}; to "
        f"resume, start all {jax.process_count()} processes again"
    )


def shut_down(run: Run, log: MetricsLog, console: Console, failure: BaseException | None) -> None:
    """Closes the checkpoints (waiting for the last write), the data pipeline (its worker
    processes), the logs and the console: each one, even when another fails.

    A failed write is raised, whatever the run's `failure` (a stop that says it saved must not,
    when the save failed); a failure to close the others only when nothing failed before (a
    full disk refuses the logs after the checkpoint: the first failure tells the story). A
    Ctrl-C that stops the run at once, before (`failure`) or during the wait, is not waited for,
    nor is a write that the other processes of the run, gone, will not finish: the next run
    removes what the write left, a temporary folder.
    """
    write_failure = None
    try:
        if not isinstance(failure, KeyboardInterrupt | PeerLost):
            for checkpoints in (run.checkpoints, run.best):
                try:
                    if checkpoints is not None:
                        checkpoints.close()
                except Exception as e:  # UserError: the write failed
                    write_failure = write_failure or e
    finally:  # after a Ctrl-C in that wait too: these must not stop halfway
        with preemption.deferring_interrupts():
            close_failure = close_each(
                functools.partial(data.close, run.batches), log.close, console.close
            )
    if write_failure is not None:
        raise write_failure
    if failure is None and close_failure is not None:
        raise close_failure


def close_each(*closers: Callable[[], None]) -> Exception | None:
    """Calls each of `closers`, even after one fails; returns the first failure."""
    first = None
    for close in closers:
        try:
            close()
        except Exception as e:
            first = first or e
    return first


class Due(NamedTuple):
    """What a step end does, in this order."""

    log: bool
    eval: bool
    save: bool


def due(step: int, train: TrainConfig, last_step: int, stopping: bool) -> Due:
    """Whether `step` logs, evaluates and saves (big_vision's `itstime`): each every so many steps
    of `train` (`eval_every` 0: none before the end), all three at `last_step`, and a save when a
    signal asked the run to stop."""
    last = step == last_step
    every = lambda n: last or (n > 0 and step % n == 0)  # noqa: E731
    return Due(
        log=every(train.log_every),
        eval=every(train.eval_every),
        save=every(train.checkpoint_every) or stopping,
    )


def evaluate_missed(run: Run, log: MetricsLog, console: Console) -> None:
    """Evaluates the step the run resumes from when it was due an evaluation that the log does
    not have: the last run saved it and then failed to evaluate (`on_step_end`)."""
    step = run.start_step
    if not step or not due(step, run.config.train, run.total_steps, stopping=False).eval:
        return
    if not any(r["step"] == step and "eval/loss" in r for r in log.records):
        log_eval(run, step, log, console)


def on_step_end(
    run: Run, step: int, stop, log: MetricsLog, console: Console, throughput: Throughput
) -> None:
    """Logs, evaluates and saves when `due`, in that order (eval before save: a resumed run never
    redoes a step that has its records), and stops after saving when a signal asked it to.

    A step that does any of these first checks that no loss was non-finite, once: the check waits
    for the devices, and it keeps a non-finite step out of the records and the checkpoints.
    """
    stopping = bool(stop)  # a signal arriving from here on is answered at the next step
    todo = due(step, run.config.train, run.total_steps, stopping)
    if not any(todo):
        return
    check_finite(run.state, run.checkpoints)
    if todo.log:
        log_train(run, step, log, console, throughput)
    if todo.eval:
        try:
            log_eval(run, step, log, console)
        except (
            sources.DataError
        ) as e:  # an unreadable eval image: the steps trained so far are kept
            if not todo.save:
                raise
            run.checkpoints.save(step, run.state, run.window.fetch())
            raise sources.DataError(
                f"{e}; the training state of step {step} was saved first "
                f"({run.checkpoints.directory}): set data.skip_unreadable=true to leave such "
                "images out, and resume"
            ) from None
        throughput.restart()
    if todo.save:
        run.checkpoints.save(step, run.state, run.window.fetch())
        throughput.restart()
    if stopping:
        raise preemption.Interrupted(
            f"{stop.name} at step {step}: saved a checkpoint in {run.checkpoints.directory}",
            stop.signum,
        )


def log_train(
    run: Run, step: int, log: MetricsLog, console: Console, throughput: Throughput
) -> None:
    """A training record: the window's mean loss and top-1, the learning rate, img/s, epoch."""
    means = run.window.mean()
    lr, (rate, waiting) = float(run.lr(step - 1)), throughput.measure()
    # None: no step timed yet
    speed = {} if rate is None else {"train/img_per_sec": rate, "train/data_wait": waiting}
    if rate is not None and waiting > INPUT_BOUND and not run.said_input_bound:
        console.print(input_bound_line(waiting, run.config.data, data.available_cpus()))
        run.said_input_bound = True
    log.write(
        step,
        {
            "train/loss": means["loss"],
            "train/top1": means["top1"],
            **{f"train/{k}": means[k] for k in DISTILL_METRICS if k in means},
            "train/lr": lr,
            **speed,
            "epoch": step / run.steps_per_epoch,
        },
    )
    console.show(means["loss"], lr, rate, waiting)


DISTILL_METRICS = ("distill_loss", "teacher_top1")  # the train step's, with a teacher
INPUT_BOUND = 0.1  # the part of the training time spent waiting for data that is worth a word


def input_bound_line(waiting: float, d: DataConfig, cpus: int) -> str:
    """The one line for a run that waits for its data: how much, and what would feed it (more
    worker processes only where `cpus` has cores that neither the loop nor a worker uses)."""
    workers = f"{d.workers} worker processes" if d.workers else "no worker processes"
    advice = (
        "data.workers adds processes that decode"
        if d.workers + 2 < cpus
        else "every CPU is busy: a host with more CPUs, or a lighter host policy, would feed it"
    )
    return (
        f"input-bound: the steps waited for data {100 * waiting:.0f}% of the time ({workers}, "
        f"{d.threads} threads each, {cpus} CPUs): {advice} (train/data_wait in the records "
        "follows it)"
    )


def log_eval(run: Run, step: int, log: MetricsLog, console: Console) -> None:
    """An evaluation record, and its line on the console; the weights offered to `run.best`,
    which keeps them where their top-1 ranks among the run's best."""
    metrics = evaluate(run.eval_step, run.state, run.eval_batches(), run.mesh)
    log.write(step, metrics)
    if run.best is not None:
        run.best.offer(step, run.state, metrics)
    console.print(
        f"step {step}: eval loss {metrics['eval/loss']:.4f}, "
        f"top-1 {100 * metrics['eval/top1']:.2f}%, top-5 {100 * metrics['eval/top5']:.2f}%"
    )

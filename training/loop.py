"""The training program: `train(config, workdir)`.

Builds the mesh, the dataset, the network (`get_network_fn`), the optimizer and the state,
restores the latest checkpoint of `workdir` (or fine-tunes from `finetune.init_from`), then for
each batch: shard, `train_step`, log; evaluate and save on their cadence, and when stopped.
"""

import dataclasses
import functools
import math
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import nets_factory
from training import checkpoint, config as config_lib, data, optim, preemption, sharding, sources, steps
from training.config import Config, ModelConfig
from training.errors import UserError
from training.metrics import Console, MetricsLog, Throughput


@dataclasses.dataclass(frozen=True)
class Summary:
    workdir: Path
    steps: int
    best_top1: float | None
    final_top1: float | None
    wall_seconds: float
    images_per_second: float

    def __str__(self) -> str:
        pct = lambda v: "n/a" if v is None else f"{100 * v:.2f}%"  # noqa: E731
        return (
            f"done: {self.steps} steps, best eval top-1 {pct(self.best_top1)}, final "
            f"{pct(self.final_top1)}, {self.wall_seconds:.1f} s wall, "
            f"{self.images_per_second:.0f} img/s training; workdir {self.workdir}"
        )


def network_fns(model: ModelConfig, num_classes: int | None):
    """The training and evaluation networks, with config mistakes as one-line errors."""
    kwargs = dict(model.kwargs)
    if "dtype" in kwargs:
        raise UserError("model.kwargs.dtype: set model.dtype instead")
    build = functools.partial(
        nets_factory.get_network_fn,
        model.name,
        num_classes,
        weight_decay=model.weight_decay,
        dtype=jnp.dtype(model.dtype),
        **kwargs,
    )
    try:
        return build(is_training=True), build(is_training=False)
    except ValueError as e:
        raise UserError(f"model.name: {e}") from None
    except TypeError as e:
        raise UserError(f"model.kwargs: {e}") from None


def resolve(config: Config) -> tuple[Config, sources.Dataset]:
    """Fills the defaults that depend on the network and the data; loads the dataset."""
    probe, _ = network_fns(config.model, None)
    image_size = config.data.image_size or probe.default_image_size
    dataset = sources.load(config.data, image_size, config.model.num_classes)
    return dataclasses.replace(
        config,
        model=dataclasses.replace(config.model, num_classes=config.model.num_classes or dataset.num_classes),
        data=dataclasses.replace(
            config.data,
            image_size=image_size,
            eval_batch_size=config.data.eval_batch_size or config.data.batch_size,
        ),
    ), dataset


def initial_state(config: Config, train_fn, tx, channels: int, mesh) -> steps.TrainState:
    """Fresh variables, or `finetune.init_from`'s where not excluded; replicated on the mesh."""
    init_key, run_key = jax.random.split(jax.random.PRNGKey(config.train.seed))
    size = config.data.image_size
    images = jnp.zeros((1, size, size, channels), jnp.float32)
    replicated = sharding.replicated(mesh)
    variables = jax.jit(train_fn.init, out_shardings=replicated)(init_key, images)
    variables = {"params": variables["params"], "batch_stats": variables.get("batch_stats", {})}
    if config.finetune.init_from:
        variables, _ = checkpoint.merge_pretrained(
            config.finetune.init_from, variables, config.finetune.exclude
        )
    if config.finetune.trainable:
        names = [optim.path_name(p) for p, _ in jax.tree_util.tree_leaves_with_path(variables["params"])]
        if not any(any(__import__("re").search(t, "params/" + n) for t in config.finetune.trainable) for n in names):
            raise UserError(f"finetune.trainable: {list(config.finetune.trainable)} match no parameter")
    create = functools.partial(steps.create_state, tx=tx, ema=config.optim.ema_decay > 0)
    return jax.jit(create, out_shardings=replicated)(variables, rng=run_key)


def evaluate(eval_step, state, batches, mesh) -> dict[str, float]:
    """Loss, top-1 and top-5 over the eval split (every process's shard)."""
    sums = None
    for batch in batches:
        out = eval_step(state, sharding.shard_batch(batch, mesh))
        sums = out if sums is None else sums + out
    loss, top1, top5, count = np.asarray(sums, np.float64).tolist()
    return {"eval/loss": loss / count, "eval/top1": top1 / count, "eval/top5": top5 / count}


def check_finite(state: steps.TrainState, checkpoints: checkpoint.Checkpointer) -> None:
    bad = int(state.nonfinite_step)
    if bad >= 0:
        last = checkpoints.latest_step()
        kept = f"the last good checkpoint is step {last} in {checkpoints.directory}" if last else "no checkpoint was saved"
        raise UserError(f"loss became non-finite at step {bad}; stopped there, {kept}")


def train(config: Config, workdir: str | Path) -> Summary:
    """Trains (or resumes, or fine-tunes) as `config` says; writes everything under `workdir`."""
    started = time.perf_counter()
    workdir, mesh = Path(workdir), sharding.make_mesh()
    config, dataset = resolve(config)
    cfg_d, cfg_t, process0 = config.data, config.train, jax.process_index() == 0
    if process0:
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "config.yaml").write_text(config_lib.dump(config))
    train_fn, eval_fn = network_fns(config.model, config.model.num_classes)
    local_batch = sharding.local_batch_size(cfg_d.batch_size, "data.batch_size")
    local_eval_batch = sharding.local_batch_size(cfg_d.eval_batch_size, "data.eval_batch_size")
    steps_per_epoch = len(dataset.train) / cfg_d.batch_size
    total = cfg_t.steps or math.ceil(cfg_t.epochs * steps_per_epoch)
    lr = optim.schedule(config.optim, cfg_d.batch_size, total, steps_per_epoch)
    tx = optim.optimizer(config.optim, lr, config.finetune.trainable)
    prepare = functools.partial(
        steps.preprocess, image_size=cfg_d.image_size, mean=cfg_d.mean or dataset.mean, std=cfg_d.std or dataset.std
    )
    replicated = sharding.replicated(mesh)
    train_step = jax.jit(
        steps.make_train_step(train_fn, tx, prepare, config.optim.label_smoothing, config.optim.ema_decay, cfg_t.log_every),
        donate_argnums=0,
        out_shardings=replicated,
    )
    eval_step = jax.jit(steps.make_eval_step(eval_fn, prepare, config.optim.ema_decay > 0), out_shardings=replicated)
    pid, nproc = jax.process_index(), jax.process_count()
    batches = data.train_iterator(dataset, cfg_d, cfg_d.image_size, local_batch, cfg_t.seed, pid, nproc)
    eval_batches = functools.partial(data.eval_batches, dataset, cfg_d, cfg_d.image_size, local_eval_batch, pid, nproc)

    checkpoints = checkpoint.Checkpointer(workdir / "checkpoints", cfg_t.keep_checkpoints)
    start = checkpoints.latest_step()
    resume = start is not None
    state = initial_state(dataclasses.replace(config, finetune=config.finetune if not resume else config_lib.FinetuneConfig()), train_fn, tx, dataset.channels, mesh)
    if resume:
        state = checkpoints.restore(start, state, batches)
    start = start or 0
    log = MetricsLog(workdir, start, process0)
    console = Console(total, start, process0)
    console.print(
        f"{config.model.name} on {cfg_d.name} ({len(dataset.train)} train / {len(dataset.eval)} eval images, "
        f"{config.model.num_classes} classes, {cfg_d.image_size} px): {total} steps of {cfg_d.batch_size} "
        f"on {jax.device_count()} {jax.devices()[0].platform} device(s); workdir {workdir}"
        + (f"; resumed at step {start}" if resume else "")
    )
    throughput = Throughput(cfg_d.batch_size)
    try:
        with preemption.catch_signals() as stop:
            for step in range(start + 1, total + 1):
                state = train_step(state, sharding.shard_batch(next(batches), mesh))
                throughput.step()
                console.advance()
                if step == start + 1:  # leave compilation out of img/s
                    jax.block_until_ready(state.step)
                    throughput.restart()
                last = step == total
                if step % cfg_t.log_every == 0 or last:
                    check_finite(state, checkpoints)
                    loss, top1 = (np.asarray(state.window) / ((step - 1) % cfg_t.log_every + 1)).tolist()
                    rate = throughput.measure()
                    log.write(step, {"train/loss": loss, "train/top1": top1, "train/lr": float(lr(step - 1)), "train/img_per_sec": rate, "epoch": step / steps_per_epoch})
                    console.show(loss, float(lr(step - 1)), rate)
                if (cfg_t.eval_every and step % cfg_t.eval_every == 0) or last:
                    check_finite(state, checkpoints)
                    metrics = evaluate(eval_step, state, eval_batches(), mesh)
                    log.write(step, metrics)
                    console.print(f"step {step}: eval loss {metrics['eval/loss']:.4f}, top-1 {100 * metrics['eval/top1']:.2f}%, top-5 {100 * metrics['eval/top5']:.2f}%")
                    throughput.restart()
                if step % cfg_t.checkpoint_every == 0 or last or stop:
                    check_finite(state, checkpoints)
                    checkpoints.save(step, state, batches)
                    throughput.restart()
                if stop:
                    raise preemption.Interrupted(f"{stop.name} at step {step}: saved a checkpoint in {checkpoints.directory}; run the same command to resume", stop.signum)
    finally:
        checkpoints.close()
        log.close()
        console.close()
    summary = Summary(workdir, total, log.best("eval/top1"), log.last("eval/top1"), time.perf_counter() - started, throughput.mean())
    console.print(str(summary))
    return summary

"""The train state and the two pure steps: `train_step(state, batch) -> (state, metrics)` and
`eval_step(state, batch)`.

Both take uint8 images `[batch, h, w, c]` straight from the input pipeline and preprocess them
on the device. Nothing here knows about devices: `nets_training.sharding` places the arrays and the
loop jits these functions with their shardings.
"""

import inspect
from collections.abc import Callable
from typing import Any

import flax
import jax
import jax.numpy as jnp
import optax

from nets_factory import NetworkFn
from nets_training.config import OptimConfig
from nets_training.device_augment import Augment, smoothed_one_hot
from nets_training.distill import Distiller

AUX_LOSS_WEIGHT = 0.4  # Slim's train_image_classifier.py weighs Inception's aux logits by 0.4
# The augmentation's key is the step's (dropout's) folded with this: a stream of its own.
AUGMENT_STREAM = 1

Metrics = dict[str, jax.Array]  # one step's float32 scalars, by name


@flax.struct.dataclass
class TrainState:
    """Everything a run needs to continue exactly where it stopped (with the data position)."""

    step: jax.Array  # int32 scalar: steps taken
    params: Any
    batch_stats: Any
    opt_state: Any
    ema_params: Any  # the EMA of params, or {} when optim.ema_decay is 0
    rng: jax.Array  # uint32[2]: the run's key; step `s` uses fold_in(rng, s)
    nonfinite_step: jax.Array  # int32: the first step whose loss was not finite, or -1


def create_state(
    variables: dict, tx: optax.GradientTransformation, rng: jax.Array, ema: bool
) -> TrainState:
    params = variables["params"]
    return TrainState(
        step=jnp.zeros((), jnp.int32),
        params=params,
        batch_stats=variables.get("batch_stats", {}),
        opt_state=tx.init(params),
        ema_params=jax.tree.map(jnp.copy, params) if ema else {},
        rng=rng,
        nonfinite_step=jnp.full((), -1, jnp.int32),
    )


def preprocess(images: jax.Array, image_size: int, mean, std) -> jax.Array:
    """uint8 `[b, h, w, c]` -> float32 `[b, image_size, image_size, c]`, normalised per channel."""
    x = images.astype(jnp.float32) / 255.0
    if x.shape[1:3] != (image_size, image_size):
        x = jax.image.resize(x, (x.shape[0], image_size, image_size, x.shape[3]), "bilinear")
    return (x - jnp.asarray(mean, jnp.float32)) / jnp.asarray(std, jnp.float32)


def cross_entropy(logits: jax.Array, labels: jax.Array, label_smoothing: float = 0.0) -> jax.Array:
    """Per-example softmax cross-entropy `[batch]` against integer labels, with label smoothing."""
    targets = smoothed_one_hot(labels, logits.shape[-1], label_smoothing)
    return optax.softmax_cross_entropy(logits.astype(jnp.float32), targets)


Loss = Callable[[jax.Array, jax.Array], jax.Array]  # (logits, soft targets) -> per-example loss


def make_loss(optim: OptimConfig) -> Loss:
    """`optim.loss` on soft targets `[batch, classes]`: softmax cross-entropy (timm's
    SoftTargetCrossEntropy; on smoothed one-hot targets, its LabelSmoothingCrossEntropy), or
    timm's BinaryCrossEntropy: each logit's sigmoid cross-entropy against its target (made 0 or 1
    by `bce_target_threshold`), averaged over classes, or summed with `bce_sum`."""
    if optim.loss == "cross_entropy":
        return lambda logits, targets: optax.softmax_cross_entropy(
            logits.astype(jnp.float32), targets
        )
    threshold = optim.bce_target_threshold

    def bce(logits: jax.Array, targets: jax.Array) -> jax.Array:
        if threshold is not None:
            targets = (targets > threshold).astype(targets.dtype)
        per_class = optax.sigmoid_binary_cross_entropy(logits.astype(jnp.float32), targets)
        return per_class.sum(-1) if optim.bce_sum else per_class.mean(-1)

    return bce


def classification_loss(
    logits: jax.Array, end_points: dict, targets: jax.Array, loss: Loss
) -> jax.Array:
    """Mean `loss` over the batch, plus 0.4 x the auxiliary head's when `end_points` has
    'aux_logits'."""
    total = loss(logits, targets).mean()
    if "aux_logits" in end_points:
        total = total + AUX_LOSS_WEIGHT * loss(end_points["aux_logits"], targets).mean()
    return total


def make_train_step(
    network_fn: NetworkFn,
    tx: optax.GradientTransformation,
    prepare: Callable[[jax.Array], jax.Array],
    augment: Augment,
    loss: Loss,
    ema_decay: float,
    total_steps: int = 0,
    distiller: Distiller | None = None,
) -> Callable[..., tuple[TrainState, Metrics]]:
    """`train_step(state, batch, teacher=None) -> (state, metrics)`; `metrics` are this batch's
    float32 scalars `loss` (with the L2 penalty) and `top1` (of the unmixed labels), for the host
    to average when it logs.

    With a `distiller`, `teacher` is its variables: the teacher sees the student's images as they
    are augmented, and the loss is `(1 - alpha)` x the labels' plus `alpha` x the teacher's
    (`Distiller.objective`); `metrics` add `distill_loss` (the teacher's
    part) and `teacher_top1` (the teacher's hits on the unmixed labels).

    `augment(images, labels, key) -> (images, targets)` (`device_augment.make_augment`) erases and
    mixes the prepared images and gives the soft targets `loss` takes; its key is the step's.

    A step whose loss is not finite changes nothing but `step` and records itself in
    `state.nonfinite_step`, and so does every later step: the loop stops at its next check with
    the state of the last good step, which it does not save. Metrics are returned as computed,
    non-finite ones included: the loop checks before it logs them.

    A network with a drop-path schedule (NASNet's `drop_path_progress`) gets the run's progress,
    `min(1, step / total_steps)`, as Slim's training gives it. With gradient accumulation (`tx`
    an `optax.MultiSteps`) the parameters change, and their EMA with them, only at the steps
    that apply the accumulated gradient.
    """

    def loss_fn(params, state, images, targets, teacher_logits):
        variables = {"params": params, "batch_stats": state.batch_stats}
        rngs = {"dropout": jax.random.fold_in(state.rng, state.step)}
        (logits, end_points), updates = network_fn.apply(
            variables,
            images,
            mutable=["batch_stats"],
            rngs=rngs,
            **progress_arguments(network_fn, state.step, total_steps),
        )
        extra = {}
        if distiller is None:
            total = classification_loss(logits, end_points, targets, loss)
        else:
            total, extra["distill_loss"] = distiller.objective(
                logits,
                end_points,
                lambda labels_logits: classification_loss(labels_logits, end_points, targets, loss),
                teacher_logits,
            )
        total = total + network_fn.regularization_loss(params)
        return total, (logits, updates.get("batch_stats", {}), extra)

    def train_step(
        state: TrainState, batch: dict, teacher: dict | None = None
    ) -> tuple[TrainState, Metrics]:
        labels = batch["label"]
        key = jax.random.fold_in(jax.random.fold_in(state.rng, state.step), AUGMENT_STREAM)
        images, targets = augment(prepare(batch["image"]), labels, key)
        teacher_logits = None if distiller is None else distiller.teacher_logits(teacher, images)
        grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
        (total, (logits, batch_stats, extra)), grads = grad_fn(
            state.params, state, images, targets, teacher_logits
        )
        if teacher_logits is not None:
            extra["teacher_top1"] = jnp.mean(jnp.argmax(teacher_logits, -1) == labels)
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        ema = state.ema_params
        if ema_decay:
            new_ema = jax.tree.map(lambda e, p: ema_decay * e + (1 - ema_decay) * p, ema, params)
            stepped = tx.has_updated(opt_state) if isinstance(tx, optax.MultiSteps) else True
            ema = jax.tree.map(lambda n, o: jnp.where(stepped, n, o), new_ema, ema)
        top1 = jnp.mean(jnp.argmax(logits, -1) == labels)

        ok = jnp.isfinite(total) & (state.nonfinite_step < 0)
        keep = lambda new, old: jax.tree.map(lambda n, o: jnp.where(ok, n, o), new, old)  # noqa: E731
        state = state.replace(
            step=state.step + 1,
            params=keep(params, state.params),
            batch_stats=keep(batch_stats, state.batch_stats),
            opt_state=keep(opt_state, state.opt_state),
            ema_params=keep(ema, state.ema_params),
            nonfinite_step=jnp.where(
                ok | (state.nonfinite_step >= 0), state.nonfinite_step, state.step + 1
            ),
        )
        return state, {"loss": total, "top1": top1, **extra}

    return train_step


def progress_arguments(network_fn: NetworkFn, step: jax.Array, total_steps: int) -> dict:
    """`{'drop_path_progress': min(1, step / total_steps)}` for a network whose drop path follows
    the run's progress (NASNet's, Slim's schedule), else nothing."""
    call = inspect.signature(type(network_fn.module).__call__).parameters
    if "drop_path_progress" not in call or not total_steps:
        return {}
    return {"drop_path_progress": jnp.minimum(1.0, step / total_steps)}


def make_eval_step(
    eval_fn: NetworkFn, prepare: Callable[[jax.Array], jax.Array], use_ema: bool
) -> Callable[[TrainState, dict], jax.Array]:
    """`eval_step(state, batch) -> float32[4]`: summed loss, top-1, top-5 hits, and count.

    Padded examples (`batch['mask']` 0) count for nothing. With `use_ema`, it evaluates the EMA
    of the weights.
    """

    def eval_step(state: TrainState, batch: dict) -> jax.Array:
        params = state.ema_params if use_ema else state.params
        variables = {"params": params, "batch_stats": state.batch_stats}
        logits, _ = eval_fn.apply(variables, prepare(batch["image"]))
        labels, mask = batch["label"], batch["mask"]
        k = min(5, logits.shape[-1])
        top5 = jnp.any(jax.lax.top_k(logits, k)[1] == labels[:, None], axis=-1)
        top1 = jnp.argmax(logits, -1) == labels
        per_example = jnp.stack([cross_entropy(logits, labels), top1, top5, jnp.ones_like(mask)])
        return jnp.sum(per_example * mask, axis=1)

    return eval_step

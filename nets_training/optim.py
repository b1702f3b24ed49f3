"""Learning-rate schedules and optimizers from `OptimConfig`.

Weight decay, once: `model.weight_decay` is Slim's L2 penalty, added to the loss by
`network_fn.regularization_loss` (so sgd/momentum/rmsprop see it through the gradient, as in
Slim); `optim.decoupled_weight_decay` is the decay of adamw/lamb/lars (Loshchilov & Hutter),
applied by optax to the same conv and dense kernels. The config refuses both at once.
"""

import re
from collections.abc import Sequence

import jax
import optax

from nets_training.config import OptimConfig


def peak_lr(optim: OptimConfig, batch_size: int) -> float:
    """`optim.lr`, scaled linearly by batch_size / lr_reference_batch when that is set."""
    if optim.lr_reference_batch:
        return optim.lr * batch_size / optim.lr_reference_batch
    return optim.lr


def schedule(
    optim: OptimConfig, batch_size: int, total_steps: int, steps_per_epoch: float
) -> optax.Schedule:
    """Linear warmup from 0 over `warmup_epochs`, then `optim.schedule` over the other steps."""
    peak = peak_lr(optim, batch_size)
    warmup = min(round(optim.warmup_epochs * steps_per_epoch), total_steps - 1)
    decay_steps = max(total_steps - warmup, 1)
    if optim.schedule == "constant":
        main = optax.constant_schedule(peak)
    elif optim.schedule == "cosine":
        main = optax.cosine_decay_schedule(peak, decay_steps, alpha=optim.end_lr / peak)
    elif optim.schedule == "exponential":  # Slim's staircase decay every decay_epochs
        every = max(round(optim.decay_epochs * steps_per_epoch), 1)
        main = optax.exponential_decay(peak, every, optim.decay_rate, staircase=True)
    elif optim.schedule == "polynomial":
        main = optax.polynomial_schedule(peak, optim.end_lr, optim.power, decay_steps)
    else:  # step: multiply by decay_rate at each boundary (fractions of the whole run)
        points = sorted({max(round(b * total_steps) - warmup, 1) for b in optim.boundaries})
        main = optax.piecewise_constant_schedule(peak, {p: optim.decay_rate for p in points})
    if not warmup:
        return main
    return optax.join_schedules([optax.linear_schedule(0.0, peak, warmup), main], [warmup])


def kernel_mask(params):
    """True on convolution and dense kernels: what weight decay applies to."""
    return jax.tree_util.tree_map_with_path(
        lambda p, _: getattr(p[-1], "key", None) == "kernel", params
    )


def path_name(path) -> str:
    """'Dense_0/kernel' for a flax parameter path: what finetune regexes match."""
    return "/".join(str(getattr(k, "key", k)) for k in path)


def optimizer(
    optim: OptimConfig, learning_rate: optax.Schedule, trainable: Sequence[str] = ()
) -> optax.GradientTransformation:
    """The optimizer `optim.name`, with gradient clipping and, if `trainable`, frozen params.

    `trainable` regexes are searched in 'params/<module path>/<name>'; params that match none of
    them get zero updates (and so no decoupled decay either).
    """
    wd = optim.decoupled_weight_decay
    if optim.name == "sgd":
        tx = optax.sgd(learning_rate)
    elif optim.name in ("momentum", "nesterov"):
        tx = optax.sgd(learning_rate, optim.momentum, nesterov=optim.name == "nesterov")
    elif optim.name == "adamw":
        tx = optax.adamw(
            learning_rate, optim.beta1, optim.beta2, optim.eps, weight_decay=wd, mask=kernel_mask
        )
    elif optim.name == "rmsprop":
        tx = optax.rmsprop(learning_rate, optim.rms_decay, optim.eps, momentum=optim.momentum)
    elif optim.name == "lamb":
        tx = optax.lamb(
            learning_rate, optim.beta1, optim.beta2, optim.eps, weight_decay=wd, mask=kernel_mask
        )
    else:
        tx = optax.lars(
            learning_rate,
            weight_decay=wd,
            weight_decay_mask=kernel_mask,
            trust_ratio_mask=kernel_mask,
            momentum=optim.momentum,
        )
    if optim.clip_grad_norm:
        tx = optax.chain(optax.clip_by_global_norm(optim.clip_grad_norm), tx)
    if not trainable:
        return tx
    patterns = [re.compile(p) for p in trainable]

    def labels(params):
        return jax.tree_util.tree_map_with_path(
            lambda p, _: (
                "train" if any(r.search("params/" + path_name(p)) for r in patterns) else "freeze"
            ),
            params,
        )

    return optax.multi_transform({"train": tx, "freeze": optax.set_to_zero()}, labels)

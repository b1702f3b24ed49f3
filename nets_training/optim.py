"""Learning-rate schedules and optimizers from `OptimConfig`.

Weight decay, once: `model.weight_decay` is Slim's L2 penalty, added to the loss by
`network_fn.regularization_loss` (so sgd/momentum/rmsprop see it through the gradient, as in
Slim); `optim.decoupled_weight_decay` is the decay of adamw/lamb/lars (Loshchilov & Hutter),
applied by optax to the same conv and dense kernels. The config refuses both at once. Kernels
are every parameter timm decays: its optimizers leave out 1-D parameters (norms, biases, layer
scales) and each network's `no_weight_decay()` (position embeddings, tokens, Swin's relative
position tables), which are the zoo's parameters not named `kernel`
(tests/test_layer_decay.py checks the groups of vit_small and convnext_tiny against timm's).

Layer-wise learning-rate decay scales each parameter's update by `layer_decay ** (L - 1 - d)`,
`d` the parameter's depth that the network itself gives (`module.layer_id(path)`), as timm's
`param_groups_layer_decay` scales each group's learning rate. Gradient accumulation wraps the
whole optimizer in `optax.MultiSteps`, whose inner optimizer (and so the schedule) counts
optimizer steps.
"""

import re
from collections.abc import Collection, Sequence

import flax.linen as nn
import jax
import optax

import nets_factory
from nets_training.config import OptimConfig
from nets_training.errors import UserError


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


def layer_scales(module: nn.Module, params, decay: float):
    """Each parameter's learning-rate scale, `decay ** (L - 1 - d)`: `d` its depth by
    `module.layer_id`, `L` the number of depths (timm's: the largest plus one)."""
    depths = jax.tree_util.tree_map_with_path(
        lambda p, _: module.layer_id(tuple(str(k.key) for k in p[:-1])), params
    )
    top = max(jax.tree.leaves(depths))
    return jax.tree.map(lambda d: decay ** (top - d), depths)


def modules_with_depths() -> list[str]:
    """The registry's module classes that give their parameters' depths (`layer_id`), by name."""
    ctors = nets_factory.networks_map.values()
    return sorted({c.func.__name__ for c in ctors if hasattr(c.func, "layer_id")})


def scale_by_layer(module: nn.Module, decay: float) -> optax.GradientTransformation:
    """Multiplies each update by its `layer_scales`: the same as scaling each group's learning
    rate (the updates are linear in it), whatever the optimizer."""
    if not hasattr(module, "layer_id"):
        raise UserError(
            f"optim.layer_decay={decay}: {type(module).__name__} does not say its parameters' "
            f"depths; layer decay is for {', '.join(modules_with_depths())} (or set "
            "layer_decay=1)"
        )

    def scale(updates, params=None):
        scales = layer_scales(module, updates, decay)
        return jax.tree.map(lambda u, s: u * s, updates, scales)

    return optax.stateless(scale)


def optimizer(
    optim: OptimConfig,
    learning_rate: optax.Schedule,
    trainable: Sequence[str] = (),
    module: nn.Module | None = None,
    classifier: Collection[str] = (),
) -> optax.GradientTransformation:
    """The optimizer `optim.name`, with gradient clipping, layer decay (of `module`'s depths),
    frozen params if `trainable`, and accumulation (`optax.MultiSteps`).

    `trainable` regexes are searched in 'params/<module path>/<name>'; params that match none of
    them get zero updates (and so no decoupled decay either). `classifier`: the paths of the
    params that adaptive gradient clipping leaves alone (`networks.classifier_params`).
    """
    tx = _frozen(_base(optim, learning_rate, module, classifier), trainable)
    if optim.accumulate_steps > 1:
        return optax.MultiSteps(tx, every_k_schedule=optim.accumulate_steps)
    return tx


def _base(
    optim: OptimConfig,
    learning_rate: optax.Schedule,
    module: nn.Module | None,
    classifier: Collection[str],
) -> optax.GradientTransformation:
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
    if optim.agc:
        tx = optax.chain(adaptive_clipping(optim.agc, classifier), tx)
    if optim.layer_decay < 1:
        tx = optax.chain(tx, scale_by_layer(module, optim.layer_decay))
    return tx


def adaptive_clipping(factor: float, classifier: Collection[str]) -> optax.GradientTransformation:
    """optax's adaptive gradient clipping on every param but the `classifier` paths (timm's
    train.py leaves its last two parameters, the head's, unclipped; the NFNet paper the final
    linear layer), with timm's units: a kernel's output channel (its last axis here, its first
    in PyTorch), a bias or norm vector whole, and each output channel's gain of a
    weight-standardised convolution alone (`[out, 1, 1, 1]` in timm's `ScaledStdConv2d`, a
    vector here)."""

    def mask(gains: bool):
        def clipped(params):
            return jax.tree_util.tree_map_with_path(
                lambda p, _: (
                    path_name(p) not in classifier
                    and (getattr(p[-1], "key", None) == "gain") == gains
                ),
                params,
            )

        return clipped

    return optax.chain(
        optax.masked(optax.adaptive_grad_clip(factor), mask(gains=False)),
        optax.masked(optax.adaptive_grad_clip(factor, axis=()), mask(gains=True)),
    )


def _frozen(tx: optax.GradientTransformation, trainable: Sequence[str]):
    """`tx` on the params `trainable` matches (all when empty), zero updates on the others."""
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

"""The training batch's augmentation on the device, inside the jitted train step: random erasing
(Zhong et al. 2020) and Mixup / CutMix (Zhang et al. 2018, Yun et al. 2019), as timm does them
(`timm.data.random_erasing.RandomErasing`, `timm.data.mixup.Mixup`, timm 1.0.31), in the order
of timm's train.py: mixing (its loader's collate), then erasing each mixed image (its prefetcher,
on the GPU). DeiT's train loop erases first; the other order would read the erased pixels twice,
which XLA:CPU computes twice (its noise, for 'pixel', costs 3x the erasing then).

Both work on normalised float32 images at the network's size, as timm's do. Their randomness is
the step's key folded with the example's (or mixing unit's) index in the global batch: a run draws
the same from its seed, step and example index whatever the number of devices or processes, and
a resumed run draws what the uninterrupted one did.

Mixup and CutMix, timm's semantics:
- example i mixes with example B - 1 - i (timm's `flip(0)`); one draw per batch (`mode` 'batch'),
  per pair (i, B - 1 - i) ('pair'), or per example ('elem');
- a draw mixes with probability `prob`; with both on, it is CutMix with probability `switch_prob`;
  lam ~ Beta(alpha, alpha) of the chosen one is the example's own weight;
- CutMix pastes the partner's box: of sides sqrt(1 - lam) of the image's, centred at a uniform
  pixel and clipped to the image (`rand_bbox`), or with `cutmix_minmax` of uniform sides in
  [min, max) of the image's, placed uniformly (`rand_bbox_minmax`); lam becomes the kept area's
  share (timm's `correct_lam`);
- targets: one-hot, smoothed by `label_smoothing` (on 1 - s + s/K, off s/K), mixed by lam with
  the partner's (`mixup_target`).
"""

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from nets_training.config import DataConfig, MixupConfig

# timm's RandomErasing defaults, which its --reprob/--remode/--recount leave as they are.
ERASE_AREA = (0.02, 1 / 3)  # of the image, shared between the boxes of one image
ERASE_LOG_ASPECT = (math.log(0.3), math.log(1 / 0.3))
ERASE_ATTEMPTS = 10  # box draws until one fits inside the image; none fits: nothing erased

Augment = Callable[[jax.Array, jax.Array, jax.Array], tuple[jax.Array, jax.Array]]


def smoothed_one_hot(labels: jax.Array, num_classes: int, smoothing: float) -> jax.Array:
    """float32 `[batch, num_classes]`: 1 - s + s / K at the label, s / K elsewhere."""
    targets = jax.nn.one_hot(labels, num_classes)
    return optax.smooth_labels(targets, smoothing) if smoothing else targets


# ---------------------------------------------------------------------------------------------
# Random erasing.


def erase(images: jax.Array, key: jax.Array, prob: float, mode: str, count: int) -> jax.Array:
    """timm's `RandomErasing(prob, mode=mode, max_count=count)` on each image of `[b, h, w, c]`
    (normalised): with probability `prob`, 1 to `count` boxes (a uniform number), each of area
    uniform in `ERASE_AREA` / number and log-uniform aspect in [0.3, 1/0.3], the first of
    `ERASE_ATTEMPTS` draws that fits inside the image, at a uniform place; filled with 0
    ('const'), one N(0, 1) colour ('rand') or N(0, 1) pixels ('pixel')."""
    index = jnp.arange(images.shape[0])
    return jax.vmap(
        lambda i, image: _erase_one(image, jax.random.fold_in(key, i), prob, mode, count)
    )(index, images)


def _below(u: jax.Array, n: jax.Array) -> jax.Array:
    """A uniform integer in [0, n) from a uniform `u` in [0, 1) (numpy's randint(0, n))."""
    return jnp.minimum(jnp.floor(u * n).astype(jnp.int32), n - 1)


def erase_boxes(u: jax.Array, height: int, width: int, count: int) -> tuple[jax.Array, ...]:
    """One image's boxes from uniforms `u` `[1 + count, 2 * ERASE_ATTEMPTS + 2]`: `(top, left,
    h, w, used)`, each `[count]`; the number of boxes is uniform in [1, count] (timm's
    `random.randint(1, count)`), box j is used where j is below it and a draw fitted."""
    n = 1 + _below(u[0, 0], count)
    lo, hi = ERASE_AREA
    area = (lo + (hi - lo) * u[1:, :ERASE_ATTEMPTS]) * (height * width) / n
    log_lo, log_hi = ERASE_LOG_ASPECT
    aspect = jnp.exp(log_lo + (log_hi - log_lo) * u[1:, ERASE_ATTEMPTS : 2 * ERASE_ATTEMPTS])
    h = jnp.round(jnp.sqrt(area * aspect)).astype(jnp.int32)  # Python's round: half to even
    w = jnp.round(jnp.sqrt(area / aspect)).astype(jnp.int32)
    fits = (w < width) & (h < height)
    first = jnp.argmax(fits, axis=1)[:, None]  # the first draw that fits
    h, w = jnp.take_along_axis(h, first, 1)[:, 0], jnp.take_along_axis(w, first, 1)[:, 0]
    top = _below(u[1:, -2], height - h + 1)
    left = _below(u[1:, -1], width - w + 1)
    return top, left, h, w, jnp.any(fits, axis=1) & (jnp.arange(count) < n)


def _erase_one(image: jax.Array, key: jax.Array, prob: float, mode: str, count: int) -> jax.Array:
    height, width, channels = image.shape
    k_boxes, k_fill = jax.random.split(key)
    u = jax.random.uniform(k_boxes, (1 + count, 2 * ERASE_ATTEMPTS + 2))
    top, left, h, w, used = erase_boxes(u, height, width, count)
    used = used & (u[0, 1] < prob)
    fill_shape = {"const": (count, channels), "rand": (count, channels)}.get(
        mode, (count, *image.shape)
    )
    fills = jnp.zeros(fill_shape) if mode == "const" else jax.random.normal(k_fill, fill_shape)
    rows, cols = jnp.arange(height)[:, None], jnp.arange(width)[None, :]
    for j in range(count):  # in order: a later box overwrites an earlier one, as in timm
        inside = (rows >= top[j]) & (rows < top[j] + h[j])
        inside = inside & (cols >= left[j]) & (cols < left[j] + w[j]) & used[j]
        image = jnp.where(inside[..., None], fills[j].astype(image.dtype), image)
    return image


# ---------------------------------------------------------------------------------------------
# Mixup and CutMix.


class MixParams(NamedTuple):
    """Each example's mix: what timm's `Mixup` decides before it touches the pixels."""

    lam: jax.Array  # float32 [b]: the example's own weight, in pixels and targets (1: unmixed)
    cutmix: jax.Array  # bool [b]: the partner's pixels replace `box` (else the two blend by lam)
    box: jax.Array  # int32 [b, 4]: top, bottom, left, right (exclusive) of the pasted box


def centred_box(lam: jax.Array, cy: jax.Array, cx: jax.Array, height: int, width: int):
    """timm's `rand_bbox` given its centre draw: `(box [4], kept area share)`."""
    ratio = jnp.sqrt(1.0 - lam)
    cut_h = jnp.floor(height * ratio).astype(jnp.int32)
    cut_w = jnp.floor(width * ratio).astype(jnp.int32)
    box = jnp.stack(
        [
            jnp.clip(cy - cut_h // 2, 0, height),
            jnp.clip(cy + (cut_h + 1) // 2, 0, height),
            jnp.clip(cx - cut_w // 2, 0, width),
            jnp.clip(cx + (cut_w + 1) // 2, 0, width),
        ]
    )
    return box, _kept(box, height, width)


def _kept(box: jax.Array, height: int, width: int) -> jax.Array:
    return 1.0 - ((box[1] - box[0]) * (box[3] - box[2])).astype(jnp.float32) / (height * width)


def _cutmix_box(u: jax.Array, lam: jax.Array, config: MixupConfig, height: int, width: int):
    """timm's box for `lam` from 4 uniforms: `(box, kept share)`."""
    if config.cutmix_minmax is None:
        return centred_box(lam, _below(u[0], height), _below(u[1], width), height, width)
    lo, hi = config.cutmix_minmax  # timm's rand_bbox_minmax
    cut_h = int(height * lo) + _below(u[0], max(int(height * hi) - int(height * lo), 1))
    cut_w = int(width * lo) + _below(u[1], max(int(width * hi) - int(width * lo), 1))
    top, left = _below(u[2], height - cut_h + 1), _below(u[3], width - cut_w + 1)
    box = jnp.stack([top, top + cut_h, left, left + cut_w])
    return box, _kept(box, height, width)


def _draw(key: jax.Array, config: MixupConfig, height: int, width: int) -> MixParams:
    """One draw of timm's `_params_per_batch` / `_params_per_elem`, and its box."""
    k_uniform, k_beta = jax.random.split(key)
    u = jax.random.uniform(k_uniform, (6,))  # mix?, cutmix?, and the box's four
    # timm forces cutmix_alpha to 1 when cutmix_minmax is set (the box ignores lam then).
    cutmix_alpha = 1.0 if config.cutmix_minmax is not None else config.cutmix_alpha
    if config.mixup_alpha > 0 and cutmix_alpha > 0:
        use_cutmix = u[1] < config.switch_prob
    else:
        use_cutmix = jnp.asarray(cutmix_alpha > 0)
    # Both Beta draws at once (one sampler to compile); the one not chosen is unused.
    alphas = jnp.asarray([config.mixup_alpha or 1.0, cutmix_alpha or 1.0])
    lam_mixup, lam_cutmix = jax.random.beta(k_beta, alphas, alphas)
    mixed = u[0] < config.prob
    lam = jnp.where(mixed, jnp.where(use_cutmix, lam_cutmix, lam_mixup), 1.0)
    box, kept = _cutmix_box(u[2:], lam, config, height, width)
    use_cutmix = use_cutmix & mixed
    return MixParams(jnp.where(use_cutmix, kept, lam), use_cutmix, box)


def sample(key: jax.Array, config: MixupConfig, batch: int, height: int, width: int) -> MixParams:
    """Every example's `MixParams`: one draw per batch, pair or example (`config.mode`), each from
    `key` folded with the draw's index."""
    draws = {"batch": 1, "pair": batch // 2, "elem": batch}[config.mode]
    params = jax.vmap(lambda i: _draw(jax.random.fold_in(key, i), config, height, width))(
        jnp.arange(draws)
    )
    if config.mode == "batch":
        return jax.tree.map(lambda p: jnp.repeat(p, batch, axis=0), params)
    if config.mode == "pair":  # example B - 1 - i shares draw i (timm's lam_batch[::-1])
        return jax.tree.map(lambda p: jnp.concatenate([p, p[::-1]]), params)
    return params


def partners(images: jax.Array, labels: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Example b - 1 - i's image and label for each i, flipped together: one collective when the
    batch is sharded. (Two independent ones, images' and targets', let XLA:CPU's devices run the
    targets' and the forward pass's BatchNorm reductions in different orders: a deadlock.)"""
    b = images.shape[0]
    packed = jnp.concatenate([images.reshape(b, -1), labels[:, None].astype(images.dtype)], 1)
    flipped = packed[::-1]
    return flipped[:, :-1].reshape(images.shape), flipped[:, -1].astype(labels.dtype)


def mix(
    images: jax.Array,
    labels: jax.Array,
    params: MixParams,
    num_classes: int,
    label_smoothing: float,
) -> tuple[jax.Array, jax.Array]:
    """Images `[b, h, w, c]` mixed as `params` say, each example with example b - 1 - i, and
    the soft targets `[b, classes]`: the smoothed one-hot labels mixed alike."""
    _, height, width, _ = images.shape
    partner, partner_labels = partners(images, labels)
    lam = params.lam[:, None, None, None]
    blended = jnp.where(
        params.cutmix[:, None, None, None] | (lam == 1), images, images * lam + partner * (1 - lam)
    )
    top, bottom, left, right = (params.box[:, i, None, None] for i in range(4))
    rows, cols = jnp.arange(height)[None, :, None], jnp.arange(width)[None, None, :]
    inside = (rows >= top) & (rows < bottom) & (cols >= left) & (cols < right)
    inside = inside & params.cutmix[:, None, None]
    mixed = jnp.where(inside[..., None], partner, blended)
    own = smoothed_one_hot(labels, num_classes, label_smoothing)
    other = smoothed_one_hot(partner_labels, num_classes, label_smoothing)
    lam = params.lam[:, None]
    return mixed, own * lam + other * (1 - lam)


# ---------------------------------------------------------------------------------------------


def make_augment(
    data: DataConfig, mixup: MixupConfig, num_classes: int, label_smoothing: float
) -> Augment:
    """`augment(images, labels, key) -> (images, targets)` for the train step: erasing and mixing
    as `data` and `mixup` say (nothing when they are off), and the soft targets."""

    def augment(images: jax.Array, labels: jax.Array, key: jax.Array):
        k_erase, k_mix = jax.random.split(key)
        if mixup.active:
            b, h, w, _ = images.shape
            params = sample(k_mix, mixup, b, h, w)
            images, targets = mix(images, labels, params, num_classes, label_smoothing)
        else:
            targets = smoothed_one_hot(labels, num_classes, label_smoothing)
        if data.reprob > 0:
            images = erase(images, k_erase, data.reprob, data.remode, data.recount)
        return images, targets

    return augment

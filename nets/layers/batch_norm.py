"""`flax.linen.BatchNorm` with its training-mode gradient written by hand, traced in `lax`.

Autodiff of flax's BatchNorm goes through the mean, the mean of squares, the clipped variance and
the normalisation one primitive at a time, and XLA:CPU runs what it gives as many small loops and
reductions (ResNet-20's train step on the 8 px digits: 624 kernels, 325 of them BatchNorm's). The
gradient in closed form needs one reduction pass (`sum(dy)`, `sum(dy * x_hat)`) and one
elementwise pass (548 and 253 kernels; that step 1.04x faster, ResNet-20's at 32 px unchanged):

    dx = scale / sigma * (dy - mean(dy) - x_hat * mean(dy * x_hat))

The forward computes exactly what flax's does (same operations, same order), so outputs and
running statistics are bit-identical; gradients agree to rounding. The backward pass keeps the
input as it came (bfloat16 under mixed precision) rather than its float32 copy: ResNet-50's
`jax.vjp` residuals at batch 16 fall from 165 to 137 MiB. A jitted step compiles to the same
temporaries on XLA:CPU, which drops the copy itself; on an H200, BatchNorm, shortcut and ReLU
over a [256, 56, 56, 256] map alone ran 1.08x faster (`bench/elementwise_layers.py`).

It is written in `lax`'s primitives, in training, evaluation and initialisation alike: each
`jax.numpy` call is a nested trace of its own, and flax's BatchNorm through them was a third of the
trace of a BatchNorm network (ResNet-50's `init` 0.44 -> 0.27 s, its training forward
0.55 -> 0.42 s; Inception V3's 0.84 -> 0.46 and 1.13 -> 0.68 s), which every program pays before it
compiles. The other configurations (`axis_name`, masks, other axes, `use_fast_variance=False`) are
flax's own code.
"""

from functools import partial

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax.linen import dtypes
from jax import lax


class BatchNorm(nn.BatchNorm):
    """`nn.BatchNorm` (same fields, variables and names) with a closed-form training gradient."""

    @nn.compact
    def __call__(self, x, use_running_average: bool | None = None, *, mask=None):
        running = nn.merge_param(
            "use_running_average", self.use_running_average, use_running_average
        )
        if not self._closed_form_applies(x, mask):
            return nn.BatchNorm.__call__(self, x, use_running_average, mask=mask)

        features = (x.shape[-1],)
        ra_mean = self.variable("batch_stats", "mean", jnp.zeros, features, jnp.float32)
        ra_var = self.variable("batch_stats", "var", jnp.ones, features, jnp.float32)
        stats_dtype = jnp.promote_types(self.dtype or x.dtype, jnp.float32)
        args = [x]
        scale = bias = None
        if self.use_scale:
            scale = self.param("scale", self.scale_init, features, self.param_dtype)
            args.append(scale)
        if self.use_bias:
            bias = self.param("bias", self.bias_init, features, self.param_dtype)
            args.append(bias)
        out_dtype = jnp.dtype(dtypes.canonicalize_dtype(*args, dtype=self.dtype))
        scale = _value_or(scale, jnp.ones, features, stats_dtype)
        bias = _value_or(bias, jnp.zeros, features, stats_dtype)
        if running:
            x = x.astype(stats_dtype)
            return _normalized(x, ra_mean.value, ra_var.value, scale, bias, self.epsilon, out_dtype)
        if self.is_initializing():  # never differentiated, and the averages stay as made
            return _forward(x, scale, bias, self.epsilon, out_dtype)[0][0]
        y, mean, var = normalize_batch(x, scale, bias, self.epsilon, out_dtype)
        ra_mean.value = self.momentum * ra_mean.value + (1 - self.momentum) * mean
        ra_var.value = self.momentum * ra_var.value + (1 - self.momentum) * var
        return y

    def _closed_form_applies(self, x, mask) -> bool:
        """The configurations whose training path `normalize_batch` computes: features on the
        last axis, statistics over all others, float32 reductions, E[x^2] - E[x]^2 variance."""
        return (
            mask is None
            and self.axis in (-1, x.ndim - 1)
            and self.axis_name is None
            and self.use_fast_variance
            and self.force_float32_reductions
        )


def _value_or(value, make, shape, dtype):
    """`value` in `dtype`, or `make(shape, dtype)` where the module has no such parameter."""
    return make(shape, dtype) if value is None else value.astype(dtype)


@partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def normalize_batch(x, scale, bias, epsilon: float, out_dtype):
    """`(y, mean, var)`: `x` normalised with its own statistics over every axis but the last,
    as flax's BatchNorm computes it in training; `mean` and `var` are the batch's, in `scale`'s
    dtype (at least float32), in which `x` is normalised."""
    return _forward(x, scale, bias, epsilon, out_dtype)[0]


def _forward(x_in, scale, bias, epsilon, out_dtype):
    # lax's primitives, not jax.numpy's: the same operations as flax's, in its order, without a
    # nested trace per call (a third of a BatchNorm network's trace, which every program pays).
    # The backward pass keeps `x` as it came (bfloat16 in mixed precision), never a float32 copy.
    x = x_in.astype(scale.dtype)
    axes = tuple(range(x.ndim - 1))
    count = np.asarray(x.size // x.shape[-1], x.dtype)
    mean = lax.div(lax.reduce_sum(x, axes), count)
    mean_sq = lax.div(lax.reduce_sum(lax.square(x), axes), count)
    var = lax.max(lax.sub(mean_sq, lax.square(mean)), np.zeros(mean.shape, mean.dtype))
    y, inv = _scaled(x, mean, var, scale, bias, epsilon)
    return (y.astype(out_dtype), mean, var), (x_in, mean, inv, scale)


def _normalized(x, mean, var, scale, bias, epsilon, out_dtype):
    """`x` normalised with the running statistics `mean` and `var`, as flax's evaluation."""
    return _scaled(x, mean, var, scale, bias, epsilon)[0].astype(out_dtype)


def _scaled(x, mean, var, scale, bias, epsilon):
    """flax's `(x - mean) * (rsqrt(var + epsilon) * scale) + bias`, and the rsqrt."""
    inv = lax.rsqrt(lax.add(var, np.asarray(epsilon, var.dtype)))
    features = lambda v: lax.broadcast_in_dim(v, x.shape, (x.ndim - 1,))  # noqa: E731
    y = lax.add(lax.mul(lax.sub(x, features(mean)), features(lax.mul(inv, scale))), features(bias))
    return y, inv


def _backward(epsilon, out_dtype, residuals, cotangents):
    del epsilon, out_dtype
    x_in, mean, inv, scale = residuals
    dy, dmean, dvar = cotangents
    x = x_in.astype(mean.dtype)
    axes = tuple(range(x.ndim - 1))
    count = x.size // x.shape[-1]
    dy = dy.astype(x.dtype)
    centred = x - mean
    x_hat = centred * inv
    dbias, dscale = dy.sum(axes), (dy * x_hat).sum(axes)
    dx = (scale * inv) * (dy - dbias / count - x_hat * (dscale / count))
    # The batch statistics are outputs too (the running averages read them): their cotangents,
    # zero in a train step, through mean = sum(x) / count and var = sum(x^2) / count - mean^2.
    dx = dx + dmean / count + centred * (2 * dvar / count)
    return dx.astype(x_in.dtype), dscale, dbias


normalize_batch.defvjp(_forward, _backward)

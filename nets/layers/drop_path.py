"""Stochastic depth (Huang et al. 2016), as timm's `DropPath`: shared by ConvNeXt and Swin."""

import flax.linen as nn
import jax
import jax.numpy as jnp


def drop_path(module: nn.Module, x: jax.Array, rate: float, train: bool) -> jax.Array:
    """In training, each example's residual branch `x` is zeroed with probability `rate` and the
    others scaled by `1 / (1 - rate)`; the identity otherwise. Uses `module`'s 'dropout' rng."""
    if not train or rate == 0.0:
        return x
    keep = 1.0 - rate
    mask = jax.random.bernoulli(
        module.make_rng("dropout"), keep, (x.shape[0],) + (1,) * (x.ndim - 1)
    )
    return jnp.where(mask, x / keep, jnp.zeros_like(x))

"""Stochastic depth (Huang et al. 2016), as timm's `DropPath`, under one field name in every
family that has it: `drop_path_rate` (ResNet, EfficientNet, ConvNeXt, ViT/DeiT, Swin, NASNet)."""

import flax.linen as nn
import jax
import jax.numpy as jnp


def drop_path(module: nn.Module, x: jax.Array, rate: float, train: bool) -> jax.Array:
    """In training, each example's residual branch `x` is zeroed with probability `rate` and the
    others scaled by `1 / (1 - rate)` (so its expected value is unchanged); the identity
    otherwise. Uses `module`'s 'dropout' rng."""
    if not train or rate == 0.0:
        return x
    keep = 1.0 - rate
    mask = jax.random.bernoulli(
        module.make_rng("dropout"), keep, (x.shape[0],) + (1,) * (x.ndim - 1)
    )
    return jnp.where(mask, x / keep, jnp.zeros_like(x))


def check_drop_path_rate(rate: float) -> None:
    """Refuses a rate outside [0, 1) (1 would drop every branch and divide by zero)."""
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"drop_path_rate must be in [0, 1), got {rate}")


def linear_drop_path_rates(rate: float, blocks: int) -> list[float]:
    """The linear decay rule of Huang et al. as timm sets it for ResNet, ConvNeXt, ViT and Swin
    (`torch.linspace(0, rate, blocks)`): 0 at the first block, `rate` at the last."""
    return [rate * i / max(blocks - 1, 1) for i in range(blocks)]

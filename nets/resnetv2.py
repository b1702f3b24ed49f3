"""timm's ResNetV2 family: pre-activation ResNets (He et al. 2016, "Identity Mappings in Deep
Residual Networks", arXiv:1603.05027) and Big Transfer (BiT: Kolesnikov et al. 2020, "Big
Transfer (BiT): General Visual Representation Learning", arXiv:1912.11370), as timm's
`resnetv2.py` builds them.

All are `nets.resnet.ResNet` with pre-activation blocks (`PreActBottleneckBlock`, and
`PreActBasicBlock` for ResNetV2-18/34): norm and ReLU before each convolution, the projection
shortcut reading the pre-activated input, a final norm and ReLU before the pooling; timm's
convolutions have no biases (`bias_without_norm=False`, where Slim's `resnet_v2_*` have them).
What sets the variants apart is data:

- `resnetv2_18/34/50/101`: BatchNorm, a 7x7 stem.
- `resnetv2_18d/34d`, `resnetv2_50d_gn`, `resnetv2_50d_evos`: ResNet-D's deep stem (3x3
  convolutions of 32, 32 and 64 filters) and averaging shortcuts; the last two normalise with
  GroupNorm (32 groups) or EvoNorm-S0 (Liu et al. 2020, "Evolving Normalization-Activation
  Layers", arXiv:2004.02967: `x * sigmoid(v * x) / group_std(x) * scale + bias`, 32 groups; a
  normalisation and activation in one, so the network's `act` is the identity).
- BiT (`resnetv2_50x1_bit` ... `resnetv2_152x4_bit`): weight-standardised convolutions
  (`kernel_transform=WeightStandardization(1e-8)`), GroupNorm of 32 groups, the widths times 1
  to 4, and the stem's max pool over one pixel of zero padding (`stem_pool_zeros`: BiT's
  TensorFlow pads with zeros, which timm's 'fixed' stem keeps).

End points and feature pyramid are ResNet's: `conv_init` (the stem convolution's map, timm's
`stem.conv` / `stem.conv3`, stride 2), `stem`, `block1`..`block4` (before the final norm),
`pre_logits`, `logits`, `predictions`. timm's `resnetv2_50d/101d/152/152d/50t/50d_frn` have no
published weights and are not here (FilterResponseNorm's only user is `resnetv2_50d_frn`).
"""

from functools import partial
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from nets.layers.conv import WeightStandardization
from nets.resnet import PreActBasicBlock, PreActBottleneckBlock, ResNet


class EvoNormS0(nn.Module):
    """EvoNorm-S0 (timm's `EvoNorm2dS0`): `x * sigmoid(v * x) / std * scale + bias`, `std` the
    biased standard deviation over each example's `groups` contiguous channel groups and its
    pixels (epsilon added to the variance), computed in float32. No running statistics: the
    same function in training and evaluation."""

    groups: int = 32
    epsilon: float = 1e-5
    dtype: Any = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """`[batch, height, width, channels]` -> the same shape."""
        channels = x.shape[-1]
        if channels % self.groups:
            raise ValueError(f"EvoNormS0: {channels} channels do not split into {self.groups}")
        scale = self.param("scale", nn.initializers.ones_init(), (channels,))
        bias = self.param("bias", nn.initializers.zeros_init(), (channels,))
        v = self.param("v", nn.initializers.ones_init(), (channels,))
        dtype = self.dtype or x.dtype
        grouped = x.astype(jnp.float32).reshape(*x.shape[:-1], self.groups, -1)
        var = jnp.var(grouped, axis=(1, 2, 4), keepdims=True)
        std = jnp.broadcast_to(jnp.sqrt(var + self.epsilon), grouped.shape).reshape(x.shape)
        x = x.astype(dtype)
        y = x * nn.sigmoid(x * v.astype(dtype)) / std.astype(dtype)
        return y * scale.astype(dtype) + bias.astype(dtype)


def no_activation(x: jax.Array) -> jax.Array:
    """The network's `act` where the norm is its own nonlinearity (EvoNorm-S0)."""
    return x


# timm's GroupNormAct and EvoNorm2dS0 defaults: 32 groups, epsilon 1e-5.
GROUP_NORM = partial(nn.GroupNorm, num_groups=32, epsilon=1e-5)
EVO_NORM_S0 = partial(EvoNormS0, groups=32, epsilon=1e-5)
BIT_WEIGHT_STANDARDIZATION = WeightStandardization(epsilon=1e-8)  # timm's StdConv2d(eps=1e-8)

_R18, _R34, _R50 = (2, 2, 2, 2), (3, 4, 6, 3), (3, 4, 6, 3)
_R101, _R152 = (3, 4, 23, 3), (3, 8, 36, 3)
_TIMM = {"bias_without_norm": False}
_D = {**_TIMM, "stem_widths": (32, 32), "avg_down": True}
_BIT = {
    **_TIMM,
    "kernel_transform": BIT_WEIGHT_STANDARDIZATION,
    "norm": GROUP_NORM,
    "stem_pool_zeros": True,
}
_basic = partial(ResNet, block_cls=PreActBasicBlock)
_bottleneck = partial(ResNet, block_cls=PreActBottleneckBlock)

resnetv2_18 = partial(_basic, stage_sizes=_R18, **_TIMM)
resnetv2_18d = partial(_basic, stage_sizes=_R18, **_D)
resnetv2_34 = partial(_basic, stage_sizes=_R34, **_TIMM)
resnetv2_34d = partial(_basic, stage_sizes=_R34, **_D)
resnetv2_50 = partial(_bottleneck, stage_sizes=_R50, **_TIMM)
resnetv2_101 = partial(_bottleneck, stage_sizes=_R101, **_TIMM)
resnetv2_50d_gn = partial(_bottleneck, stage_sizes=_R50, norm=GROUP_NORM, **_D)
resnetv2_50d_evos = partial(
    _bottleneck, stage_sizes=_R50, norm=EVO_NORM_S0, act=no_activation, **_D
)

# BiT-M/S: the width factor multiplies the stem and every stage (ResNet's `num_filters`).
resnetv2_50x1_bit = partial(_bottleneck, stage_sizes=_R50, num_filters=64, **_BIT)
resnetv2_50x3_bit = partial(_bottleneck, stage_sizes=_R50, num_filters=192, **_BIT)
resnetv2_101x1_bit = partial(_bottleneck, stage_sizes=_R101, num_filters=64, **_BIT)
resnetv2_101x3_bit = partial(_bottleneck, stage_sizes=_R101, num_filters=192, **_BIT)
resnetv2_152x2_bit = partial(_bottleneck, stage_sizes=_R152, num_filters=128, **_BIT)
resnetv2_152x4_bit = partial(_bottleneck, stage_sizes=_R152, num_filters=256, **_BIT)

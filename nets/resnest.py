"""ResNeSt: Zhang et al. 2020, "ResNeSt: Split-Attention Networks" (arXiv:2004.08955), as timm
builds it (`timm/models/resnest.py`, weights ported from GluonCV and the authors'): a
`nets.resnet.ResNet` with ResNet-D's deep stem and averaging shortcuts whose bottleneck's 3x3
convolution is split attention.

Split attention: a grouped 3x3 convolution makes `radix` splits of each of `cardinality` groups;
their sum, globally pooled, goes through a grouped two-layer MLP (with BatchNorm) to one logit per
split and channel; a softmax across the radix (a sigmoid when `radix == 1`) weighs the splits,
which are then summed. A strided block average-pools 3x3 (padding counted) instead of striding
the convolution (`avd`), before it (`avd_first`) or after.
"""

from collections.abc import Callable
from functools import partial

import flax.linen as nn
import jax
import jax.numpy as jnp

from nets.layers import ModuleDef, avg_pool, make_divisible
from nets.resnet import PoolingBottleneck, ResNet, add_shortcut


class SplitAttention(nn.Module):
    """`[n, h, w, c]` -> `[n, h', w', features]`: timm's `SplitAttn` (its names: `conv`, `bn0`,
    `fc1`, `bn1`, `fc2`). The MLP's hidden width is a quarter of `features * radix`, a multiple
    of 8, at least 32."""

    features: int
    conv: ModuleDef
    norm: ModuleDef
    act: Callable
    radix: int = 2
    groups: int = 1  # the cardinality
    strides: tuple[int, int] = (1, 1)
    dilation: int = 1

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        r, c = self.radix, self.features
        hidden = make_divisible(c * r * 0.25, 8, min_value=32)
        x = self.conv(
            c * r,
            (3, 3),
            self.strides,
            kernel_dilation=self.dilation,
            feature_group_count=self.groups * r,
            name="conv",
        )(x)
        x = self.act(self.norm(name="bn0")(x))
        # The convolution's groups run radix-major: split `j` of group `g` is its group
        # `j * groups + g`.
        splits = x.reshape(*x.shape[:3], r, c)
        pooled = jnp.mean(splits.sum(axis=3), axis=(1, 2), keepdims=True)
        a = self.conv(hidden, (1, 1), feature_group_count=self.groups, use_bias=True, name="fc1")(
            pooled
        )
        a = self.act(self.norm(name="bn1")(a))
        a = self.conv(c * r, (1, 1), feature_group_count=self.groups, use_bias=True, name="fc2")(a)
        # fc2's outputs run group-major (`[groups, radix, c / groups]`), the splits radix-major.
        a = a.reshape(a.shape[0], self.groups, r, c // self.groups)
        a = jax.nn.softmax(a, axis=2) if r > 1 else jax.nn.sigmoid(a)
        a = jnp.swapaxes(a, 1, 2).reshape(a.shape[0], 1, 1, r, c)
        return (splits * a).sum(axis=3)


class ResNeStBottleneck(PoolingBottleneck):
    """1x1 -> split attention 3x3 -> 1x1 with `4 * filters` outputs; inner width
    `int(filters * base_width / 64) * cardinality`. With `avd`, a strided block pools 3x3 at its
    stride (padding counted, timm's `AvgPool2d(3, s, 1)`) before or after the split attention,
    which then runs at stride 1. Unlike timm's block, whose drop path applies (by a slip) to the
    shortcut's input, drop path applies to the residual branch, as in every other block."""

    radix: int = 2
    cardinality: int = 1
    base_width: int = 64
    avd: bool = True
    avd_first: bool = False

    @nn.compact
    def __call__(self, x):
        width = int(self.filters * self.base_width / 64) * self.cardinality
        pool_strides = self.strides if self.avd and self.strides != (1, 1) else None
        pool = partial(avg_pool, window_shape=(3, 3), strides=pool_strides, padding=self.padding)
        y = self.act(self.norm(name="bn1")(self.conv(width, (1, 1), name="conv1")(x)))
        if pool_strides and self.avd_first:
            y = pool(y)
        y = SplitAttention(
            width,
            self.conv,
            self.norm,
            self.act,
            radix=self.radix,
            groups=self.cardinality,
            strides=(1, 1) if pool_strides else self.strides,
            dilation=self.first_dilation,
            name="conv2",
        )(y)
        if pool_strides and not self.avd_first:
            y = pool(y)
        y = self.conv(self.filters * 4, (1, 1), name="conv3")(y)
        y = self.norm(scale_init=nn.initializers.zeros_init(), name="bn3")(y)
        return add_shortcut(self, y, x)


# timm's: ResNet-D's deep stem (32, 32 -> 64; `*e`: 64, 64 -> 128) and averaging shortcuts.
_d = {"stem_widths": (32, 32), "avg_down": True}
_e = {"stem_widths": (64, 64), "stem_features": 128, "avg_down": True}
_2s1x64d = ResNeStBottleneck
resnest14d = partial(ResNet, stage_sizes=(1, 1, 1, 1), block_cls=_2s1x64d, **_d)
resnest26d = partial(ResNet, stage_sizes=(2, 2, 2, 2), block_cls=_2s1x64d, **_d)
resnest50d = partial(ResNet, stage_sizes=(3, 4, 6, 3), block_cls=_2s1x64d, **_d)
resnest101e = partial(ResNet, stage_sizes=(3, 4, 23, 3), block_cls=_2s1x64d, **_e)
resnest200e = partial(ResNet, stage_sizes=(3, 24, 36, 3), block_cls=_2s1x64d, **_e)
resnest269e = partial(ResNet, stage_sizes=(3, 30, 48, 8), block_cls=_2s1x64d, **_e)
# The paper's ablations: radix, cardinality and width, the pool before the split attention.
_4s2x40d = partial(ResNeStBottleneck, radix=4, cardinality=2, base_width=40, avd_first=True)
_1s4x24d = partial(ResNeStBottleneck, radix=1, cardinality=4, base_width=24, avd_first=True)
resnest50d_4s2x40d = partial(ResNet, stage_sizes=(3, 4, 6, 3), block_cls=_4s2x40d, **_d)
resnest50d_1s4x24d = partial(ResNet, stage_sizes=(3, 4, 6, 3), block_cls=_1s4x24d, **_d)

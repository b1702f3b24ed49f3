"""Res2Net: Gao et al. 2019, "Res2Net: A New Multi-scale Backbone Architecture"
(arXiv:1904.01169), as timm builds it (`timm/models/res2net.py`, the authors' weights): a
`nets.resnet.ResNet` whose bottleneck's 3x3 convolution is a hierarchy over `scale` channel splits.

Each split but the last has its own 3x3 convolution, BatchNorm and ReLU. In a stage's first block
(strided, or changing the width) every convolution reads its own split and the last split is
average-pooled 3x3 at the block's stride (padding counted: timm's `AvgPool2d(3, s, 1)`, which its
FIXME keeps for the weights); in the other blocks each convolution reads its split plus the
previous convolution's output, and the last split passes through. `res2net*d`: ResNet-D's deep
stem and averaging shortcuts.
"""

import math
from functools import partial

import flax.linen as nn
import jax.numpy as jnp

from nets.layers import ModuleDef, avg_pool
from nets.resnet import PoolingBottleneck, ResNet, add_shortcut


class Res2NetBottleneck(PoolingBottleneck):
    """1x1 -> `scale` hierarchical 3x3 splits -> 1x1 with `4 * filters` outputs; each split
    `floor(filters * base_width / 64) * cardinality` wide, its convolution in `cardinality`
    groups (Res2NeXt). timm's names: `conv1`, `bn1`, `convs_i`, `bns_i`, `conv3`, `bn3`."""

    scale: int = 4
    base_width: int = 26
    cardinality: int = 1

    @nn.compact
    def __call__(self, x):
        width = math.floor(self.filters * self.base_width / 64) * self.cardinality
        first = self.strides != (1, 1) or x.shape[-1] != self.filters * 4
        y = self.act(self.norm(name="bn1")(self.conv(width * self.scale, (1, 1), name="conv1")(x)))
        splits = jnp.split(y, self.scale, axis=-1)
        outs = []
        for i in range(max(1, self.scale - 1)):
            s = splits[i] if i == 0 or first else outs[-1] + splits[i]
            s = self.conv(
                width,
                (3, 3),
                self.strides,
                kernel_dilation=self.first_dilation,
                feature_group_count=self.cardinality,
                name=f"convs_{i}",
            )(s)
            s = self.act(self.norm(name=f"bns_{i}")(s))
            outs.append(s)
        if self.scale > 1:
            last = splits[-1]
            if first:
                last = avg_pool(last, (3, 3), self.strides, padding=self.padding)
            outs.append(last)
        y = self.conv(self.filters * 4, (1, 1), name="conv3")(jnp.concatenate(outs, axis=-1))
        y = self.norm(scale_init=nn.initializers.zeros_init(), name="bn3")(y)
        return add_shortcut(self, y, x)


def _res2net(stage_sizes, base_width, scale, cardinality=1, **network) -> ModuleDef:
    block = partial(Res2NetBottleneck, scale=scale, base_width=base_width, cardinality=cardinality)
    return partial(ResNet, stage_sizes=stage_sizes, block_cls=block, **network)


_d = {"stem_widths": (32, 32), "avg_down": True}
res2net50_26w_4s = _res2net((3, 4, 6, 3), 26, 4)
res2net101_26w_4s = _res2net((3, 4, 23, 3), 26, 4)
res2net50_26w_6s = _res2net((3, 4, 6, 3), 26, 6)
res2net50_26w_8s = _res2net((3, 4, 6, 3), 26, 8)
res2net50_48w_2s = _res2net((3, 4, 6, 3), 48, 2)
res2net50_14w_8s = _res2net((3, 4, 6, 3), 14, 8)
res2next50 = _res2net((3, 4, 6, 3), 4, 4, cardinality=8)
res2net50d = _res2net((3, 4, 6, 3), 26, 4, **_d)
res2net101d = _res2net((3, 4, 23, 3), 26, 4, **_d)

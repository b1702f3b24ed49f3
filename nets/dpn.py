"""Dual Path Networks: Chen et al. 2017, "Dual Path Networks" (arXiv:1707.01629), as timm builds
them (`timm/models/dpn.py`, whose weights, converted from the authors' MXNet ones, load).

A block reads one tensor holding two paths side by side: a residual path (the first `width`
channels, which each block adds to, as ResNeXt does) and a densely connected path (the rest,
which each block appends `increment` channels to, as DenseNet does). Its branch is three
pre-activation convolutions (BatchNorm, activation, convolution): a 1x1, a grouped 3x3 (strided
in a stage's first block) and a 1x1 to `width + increment` channels, split between the paths.
A stage's first block projects its input first (a pre-activation 1x1 to `width + 2 *
increment`, strided in all but the first stage), whose split starts both paths anew. The stem is
a convolution (7x7/2, the small networks' 3x3/2), BatchNorm, activation and a 3x3/2 max pool;
after the stages a last BatchNorm and activation, global average pooling and a 1x1 convolution
classifier. BatchNorm's epsilon is 1e-3 and every window pads PyTorch's symmetric way, as the
weights were trained (`bn_epsilon`, `padding`); the blocks activate with ReLU, the stem and the
last BatchNorm with the network's `act` (SiLU in dpn48b), as timm builds them.

The "b" networks (timm's `b=True`: dpn48b, dpn68b) write the branch's last 1x1 as two
convolutions after one pre-activation, `c1x1_c1` to the residual path and `c1x1_c2` to the
dense one: the same function as one convolution split, with other weights' keys.

Submodules carry timm's names, its flat `features` sequence without the prefix: `conv1_1/conv`,
`conv1_1/bn`, `conv2_1/c1x1_w_s1/bn` (a projection at stride 1; `c1x1_w_s2` at stride 2),
`conv3_4/c3x3_b/conv`, `conv5_bn_ac/bn`, `classifier`. End points: `conv1_1` (the stem
convolution's activations), `stem` (after the pool), `conv2` .. `conv5` (each stage's output,
both paths), `conv5_bn_ac`, `pre_logits`; the feature pyramid is timm's `feature_info`
(`conv1_1`, then the stages before the last BatchNorm).
"""

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from nets.layers import (
    TORCH,
    Conv,
    ConvNormAct,
    ModuleDef,
    batch_norm,
    checkpointed,
    classify,
    global_avg_pool,
    max_pool,
)


class PreActConv(nn.Module):
    """BatchNorm (`bn`), activation, then a convolution (`conv`) to `features` channels; without
    `features` the pre-activation alone (timm's `BnActConv2d` and `BnAct`)."""

    features: int | None
    conv: ModuleDef
    norm: ModuleDef
    act: Callable
    kernel_size: int = 1
    strides: int = 1
    groups: int = 1

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = self.act(self.norm(name="bn")(x))
        if self.features is None:
            return x
        k, s = self.kernel_size, self.strides
        return self.conv(
            self.features, (k, k), (s, s), feature_group_count=self.groups, name="conv"
        )(x)


class DualPathBlock(nn.Module):
    """`[residual + new residual, dense, new dense]` from `x = [residual, dense]`, its first
    `width` channels the residual path; `increment` dense channels more than it read (after a
    projection: `x` projected to `width + 2 * increment` channels, split the same way).

    `projection`: None, or the projection's stride (1: `c1x1_w_s1`, 2: `c1x1_w_s2`), which the
    3x3 convolution shares. `separate_outputs`: the "b" networks' two last convolutions.
    """

    inner_width: int  # the 1x1 and grouped 3x3 convolutions' (timm's num_1x1_a, num_3x3_b)
    width: int  # the residual path's (timm's num_1x1_c)
    increment: int  # the dense path's growth (timm's inc)
    groups: int
    conv: ModuleDef
    norm: ModuleDef
    act: Callable
    projection: int | None = None
    separate_outputs: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        layer = partial(PreActConv, conv=self.conv, norm=self.norm, act=self.act)
        strides = self.projection or 1
        shortcut = x
        if self.projection is not None:
            features = self.width + 2 * self.increment
            shortcut = layer(features, strides=strides, name=f"c1x1_w_s{strides}")(x)
        y = layer(self.inner_width, name="c1x1_a")(x)
        y = layer(
            self.inner_width, kernel_size=3, strides=strides, groups=self.groups, name="c3x3_b"
        )(y)
        if self.separate_outputs:
            y = layer(None, name="c1x1_c")(y)
            residual = self.conv(self.width, (1, 1), name="c1x1_c1")(y)
            dense = self.conv(self.increment, (1, 1), name="c1x1_c2")(y)
        else:
            y = layer(self.width + self.increment, name="c1x1_c")(y)
            residual, dense = y[..., : self.width], y[..., self.width :]
        return jnp.concatenate(
            [shortcut[..., : self.width] + residual, shortcut[..., self.width :], dense], axis=-1
        )


class DPN(nn.Module):
    """A Dual Path Network for ImageNet-sized inputs.

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the pooled features
    `[batch, channels]` when `num_classes` is 0 or None. Stage `i`'s residual path is
    `width_factor * 64 * 2**i` channels wide, its inner convolutions `inner_width * 2**i`.
    """

    default_image_size: ClassVar[int] = 224

    depths: Sequence[int]  # blocks per stage (timm's k_sec)
    increments: Sequence[int]  # dense channels each block of a stage adds (timm's inc_sec)
    inner_width: int  # the first stage's 1x1 and 3x3 convolutions' width (timm's k_r)
    groups: int  # of the 3x3 convolutions
    stem_features: int = 64  # timm's num_init_features
    stem_kernel_size: int = 7  # 3 in the small networks (timm's `small`)
    width_factor: int = 4  # 1 in the small networks (timm's `small`: bw_factor)
    separate_outputs: bool = False  # the "b" networks' (timm's `b`)
    num_classes: int | None = 1000
    dropout_rate: float = 0.0  # before the classifier (timm's drop_rate)
    dtype: Any = jnp.float32
    act: Callable = nn.relu  # the stem's and the last BatchNorm's (timm's act_layer)
    # The blocks': ReLU whatever `act` is, as timm builds them (its blocks' BatchNorms take their
    # default activation, not `act_layer`: dpn48b's SiLU reaches only the stem and `conv5_bn_ac`).
    block_act: Callable = nn.relu
    conv: ModuleDef = Conv
    # PyTorch's symmetric padding of every window and BatchNorm epsilon 1e-3, as the weights (the
    # authors' MXNet ones) were trained; 'SAME' and 1e-5 compute other functions with them.
    padding: str = "SYMMETRIC"
    bn_epsilon: float = 1e-3
    remat: bool | str = False  # stem, blocks recomputed in backward (nets.layers.remat.POLICIES)

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: the stem convolution's map, then each stage's output."""
        return {"conv1_1": 2, **{f"conv{i + 2}": 4 * 2**i for i in range(len(self.depths))}}

    @nn.compact
    def __call__(self, x, train: bool = True):
        if len(self.increments) != len(self.depths):
            raise ValueError(
                f"increments has {len(self.increments)} entries for {len(self.depths)} stages"
            )
        conv = partial(self.conv, use_bias=False, dtype=self.dtype, padding=self.padding)
        norm = batch_norm(TORCH._replace(epsilon=self.bn_epsilon), train, self.dtype)
        end_points = {}

        def stem(module: nn.Module, x: jax.Array) -> tuple[jax.Array, jax.Array]:
            # The largest maps: one unit for `remat`, its layer at timm's path.
            k = self.stem_kernel_size
            x = ConvNormAct(
                self.stem_features, k, conv, norm, self.act, 2, self.padding, name="conv1_1"
            )(x)
            return x, max_pool(x, (3, 3), strides=(2, 2), padding=self.padding)

        end_points["conv1_1"], x = checkpointed(stem, self.remat)(self, jnp.asarray(x, self.dtype))
        end_points["stem"] = x

        # timm has no checkpointing here: the unit is the dual path block, ResNeXt's and
        # DenseNet's at once.
        block = checkpointed(DualPathBlock, self.remat)
        block = partial(block, conv=conv, norm=norm, act=self.block_act, groups=self.groups)
        block = partial(block, separate_outputs=self.separate_outputs)
        for i, (depth, increment) in enumerate(zip(self.depths, self.increments, strict=True)):
            widths = {
                "inner_width": self.inner_width * 2**i,
                "width": self.width_factor * 64 * 2**i,
                "increment": increment,
            }
            for j in range(depth):
                projection = (1 if i == 0 else 2) if j == 0 else None
                x = block(**widths, projection=projection, name=f"conv{i + 2}_{j + 1}")(x)
            end_points[f"conv{i + 2}"] = x
        x = PreActConv(None, conv=conv, norm=norm, act=self.act, name="conv5_bn_ac")(x)
        end_points["conv5_bn_ac"] = x

        x = global_avg_pool(x)
        return classify(
            x,
            end_points,
            self.num_classes,
            train=train,
            dropout_rate=self.dropout_rate,
            dtype=self.dtype,
            conv=partial(self.conv, dtype=self.dtype),
            name="classifier",
        )


# timm's seven (the paper's Table 1 and the "b" networks): the stages' depths and dense
# increments, the first stage's inner width and the 3x3 convolutions' groups. The small ones (48b,
# 68, 68b) have a 3x3 stem of 10 channels and residual paths a quarter as wide; dpn48b has SiLU
# in its stem and last BatchNorm (its blocks keep ReLU: `block_act`).
_SMALL = {"stem_features": 10, "stem_kernel_size": 3, "width_factor": 1}
dpn48b = partial(
    DPN,
    depths=(3, 4, 6, 3),
    increments=(16, 32, 32, 64),
    inner_width=128,
    groups=32,
    **_SMALL,
    separate_outputs=True,
    act=nn.silu,
)
dpn68 = partial(
    DPN, depths=(3, 4, 12, 3), increments=(16, 32, 32, 64), inner_width=128, groups=32, **_SMALL
)
dpn68b = partial(dpn68, separate_outputs=True)
dpn92 = partial(DPN, depths=(3, 4, 20, 3), increments=(16, 32, 24, 128), inner_width=96, groups=32)
dpn98 = partial(
    DPN,
    depths=(3, 6, 20, 3),
    increments=(16, 32, 32, 128),
    inner_width=160,
    groups=40,
    stem_features=96,
)
dpn107 = partial(
    DPN,
    depths=(4, 8, 20, 3),
    increments=(20, 64, 64, 128),
    inner_width=200,
    groups=50,
    stem_features=128,
)
dpn131 = partial(
    DPN,
    depths=(4, 8, 28, 3),
    increments=(16, 32, 32, 128),
    inner_width=160,
    groups=40,
    stem_features=128,
)

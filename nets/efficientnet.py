"""EfficientNet B0-B7: Tan & Le 2019, "EfficientNet: Rethinking Model Scaling for Convolutional
Neural Networks" (arXiv:1905.11946), as timm builds it (`timm.models.efficientnet`).

B0 (the paper's Table 1): a 3x3 stride-2 convolution to 32 channels, seven stages of MBConv
blocks (`nets.layers.InvertedResidual`: 1x1 expansion, kxk depthwise, squeeze-excite to a
quarter of the block's input width with a sigmoid gate, linear 1x1 projection, the input added
when the shapes agree), a 1x1 convolution to 1280, average pooling, dropout and the logits; SiLU
(swish) everywhere. B1-B7 scale it by compound scaling: a width multiplier (every width
`make_divisible(c * width, 8)`, timm's `round_channels`), a depth multiplier (each stage's
repeats `ceil(n * depth)`, timm's `_scale_stage_depth`) and the resolution (`default_image_size`).
These are constructor fields of one module, not copies of the table.

Where this differs from timm: nothing in the function. Parameters are named by scope
(`stem`, `blocks_{stage}_{block}/{expand,depthwise,squeeze_excite,project}`, `head`,
`classifier`; `pretrained/efficientnet.py` maps them to timm's `conv_stem`, `blocks.S.B.conv_dw`,
...). timm's `efficientnet_b*` were trained in PyTorch (symmetric padding, BatchNorm epsilon
1e-5, decay 0.9); its `tf_efficientnet_b*` are the TF checkpoints ported, with TensorFlow's
'SAME' padding and epsilon 1e-3 (decay 0.99): `padding`, `bn_epsilon` and `bn_momentum` fields,
set by the registry's two names. Training defaults differ from timm's constructors, which leave
both regularisers at 0 for its training scripts to set: dropout before the logits defaults to the
paper's rate per variant (0.2-0.5, `dropout_rate`); stochastic depth (`drop_path_rate`, 0.2 in
the paper's training) is off by default and grows linearly with the block's index, as in timm.

Parameters at 1000 classes are timm's: 5,288,548 (B0), 7,794,184 (B1), 9,109,994 (B2),
12,233,232 (B3), 19,341,616 (B4), 30,389,784 (B5), 43,040,704 (B6), 66,347,960 (B7); the `tf_`
ports have the same counts.
"""

import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NamedTuple

import flax.linen as nn
import jax.numpy as jnp

from nets.features import cumulative_strides, deepest_per_stride
from nets.layers import (
    BatchNormConvention,
    Conv,
    ConvNormAct,
    InvertedResidual,
    ModuleDef,
    batch_norm,
    classify,
    global_avg_pool,
    make_divisible,
)


class StageDef(NamedTuple):
    """A stage of MBConv blocks: a row of Table 1 (timm's `ir_r{n}_k{k}_s{s}_e{t}_c{c}`)."""

    expansion: float
    filters: int
    repeats: int
    kernel_size: int
    strides: int


# EfficientNet-B0, the paper's Table 1 after the stem (stage 1 is timm's depthwise-separable
# block: an expansion of 1 has no expansion convolution).
B0 = (
    StageDef(1, 16, 1, 3, 1),
    StageDef(6, 24, 2, 3, 2),
    StageDef(6, 40, 2, 5, 2),
    StageDef(6, 80, 3, 3, 2),
    StageDef(6, 112, 3, 5, 1),
    StageDef(6, 192, 4, 5, 2),
    StageDef(6, 320, 1, 3, 1),
)


class EfficientNet(nn.Module):
    """EfficientNet: `stages` of MBConv blocks scaled by `width_multiplier` and `depth_multiplier`.

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the pooled features
    `[batch, channels]` when `num_classes` is 0 or None. End points: `stem`, `blocks_{s}` (the
    output of stage `s`, timm's `blocks.{s}`), `head` (the 1x1 convolution before the pool),
    `global_pool` (`[batch, 1, 1, c]`), `pre_logits`, `logits`, `predictions`.
    """

    default_image_size: int = 224  # the compound scaling's resolution
    width_multiplier: float = 1.0
    depth_multiplier: float = 1.0
    stages: Sequence[StageDef] = B0
    stem_filters: int = 32
    head_filters: int = 1280
    se_ratio: float = 0.25  # squeeze-excite width, a fraction of each block's input
    num_classes: int | None = 1000
    dropout_rate: float = 0.2
    drop_path_rate: float = 0.0
    act: Callable = nn.silu
    dtype: Any = jnp.float32
    conv: ModuleDef = Conv
    # Conventions of published weights (`pretrained/efficientnet.py`): timm's own were trained
    # with PyTorch's symmetric padding and BatchNorm epsilon 1e-5 (decay 0.9, PyTorch's momentum
    # 0.1); the TF checkpoints (timm's `tf_` ports) with 'SAME' padding, epsilon 1e-3, decay 0.99.
    padding: str = "SYMMETRIC"
    bn_epsilon: float = 1e-5
    bn_momentum: float = 0.9

    def width(self, channels: int) -> int:
        """timm's `round_channels`: `make_divisible(channels * width_multiplier, 8)`."""
        return make_divisible(channels * self.width_multiplier, 8)

    def repeats(self, stage: StageDef) -> int:
        """timm's `_scale_stage_depth` for a stage of one block kind: `ceil(n * depth)`."""
        return int(math.ceil(stage.repeats * self.depth_multiplier))

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: the deepest stage at each stride, not the head convolution."""
        names = [f"blocks_{s}" for s in range(len(self.stages))]
        levels = cumulative_strides(names, [s.strides for s in self.stages], 2)
        return deepest_per_stride([("stem", 2), *levels])

    @nn.compact
    def __call__(self, x, train: bool = True):
        for field in ("width_multiplier", "depth_multiplier"):
            if getattr(self, field) <= 0:
                raise ValueError(f"{field} must be positive, got {getattr(self, field)}")
        if not 0 <= self.drop_path_rate < 1:
            raise ValueError(f"drop_path_rate must be in [0, 1), got {self.drop_path_rate}")
        conv = partial(self.conv, dtype=self.dtype)
        convention = BatchNormConvention(momentum=self.bn_momentum, epsilon=self.bn_epsilon)
        norm = batch_norm(convention, train, self.dtype)
        layer = partial(ConvNormAct, conv=conv, norm=norm, act=self.act, padding=self.padding)

        x = layer(self.width(self.stem_filters), 3, strides=2, name="stem")(
            jnp.asarray(x, self.dtype)
        )
        end_points = {"stem": x}
        total = sum(self.repeats(stage) for stage in self.stages)
        index = 0
        for s, stage in enumerate(self.stages):
            for j in range(self.repeats(stage)):
                x = InvertedResidual(
                    self.width(stage.filters),
                    stage.expansion,
                    conv=conv,
                    norm=norm,
                    act=self.act,
                    kernel_size=stage.kernel_size,
                    strides=stage.strides if j == 0 else 1,
                    squeeze_excite=self.se_ratio > 0,
                    padding=self.padding,
                    se_ratio=self.se_ratio,
                    drop_path_rate=self.drop_path_rate * index / total,
                    deterministic=not train,
                    name=f"blocks_{s}_{j}",
                )(x)
                index += 1
            end_points[f"blocks_{s}"] = x
        x = end_points["head"] = layer(self.width(self.head_filters), 1, name="head")(x)
        x = end_points["global_pool"] = global_avg_pool(x, keepdims=True)
        head = partial(classify, train=train, dropout_rate=self.dropout_rate, dtype=self.dtype)
        return head(x[:, 0, 0, :], end_points, self.num_classes, name="classifier")


def _variant(width: float, depth: float, size: int, dropout: float) -> partial:
    """The paper's compound-scaling coefficients (timm's `_gen_efficientnet` table)."""
    return partial(
        EfficientNet,
        width_multiplier=width,
        depth_multiplier=depth,
        default_image_size=size,
        dropout_rate=dropout,
    )


efficientnet_b0 = _variant(1.0, 1.0, 224, 0.2)
efficientnet_b1 = _variant(1.0, 1.1, 240, 0.2)
efficientnet_b2 = _variant(1.1, 1.2, 260, 0.3)
efficientnet_b3 = _variant(1.2, 1.4, 300, 0.3)
efficientnet_b4 = _variant(1.4, 1.8, 380, 0.4)
efficientnet_b5 = _variant(1.6, 2.2, 456, 0.4)
efficientnet_b6 = _variant(1.8, 2.6, 528, 0.5)
efficientnet_b7 = _variant(2.0, 3.1, 600, 0.5)

# TensorFlow's conventions (the TF checkpoints timm ports as `tf_efficientnet_b*`).
TF_CONVENTIONS = {"padding": "SAME", "bn_epsilon": 1e-3, "bn_momentum": 0.99}


def _tf(variant: partial) -> partial:
    return partial(variant, **TF_CONVENTIONS)


tf_efficientnet_b0 = _tf(efficientnet_b0)
tf_efficientnet_b1 = _tf(efficientnet_b1)
tf_efficientnet_b2 = _tf(efficientnet_b2)
tf_efficientnet_b3 = _tf(efficientnet_b3)
tf_efficientnet_b4 = _tf(efficientnet_b4)
tf_efficientnet_b5 = _tf(efficientnet_b5)
tf_efficientnet_b6 = _tf(efficientnet_b6)
tf_efficientnet_b7 = _tf(efficientnet_b7)

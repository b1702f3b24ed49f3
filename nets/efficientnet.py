"""EfficientNet B0-B7 and EfficientNetV2-S/M/L, as timm builds them (`timm.models.efficientnet`).

EfficientNet: Tan & Le 2019, "EfficientNet: Rethinking Model Scaling for Convolutional Neural
Networks" (arXiv:1905.11946). EfficientNetV2: Tan & Le 2021, "EfficientNetV2: Smaller Models and
Faster Training" (arXiv:2104.00298).

B0 (the paper's Table 1): a 3x3 stride-2 convolution to 32 channels, seven stages of MBConv
blocks (`nets.layers.InvertedResidual`: 1x1 expansion, kxk depthwise, squeeze-excite to a
quarter of the block's input width with a sigmoid gate, linear 1x1 projection, the input added
when the shapes agree), a 1x1 convolution to 1280, average pooling, dropout and the logits; SiLU
(swish) everywhere. B1-B7 scale it by compound scaling: a width multiplier (every width
`make_divisible(c * width, 8)`, timm's `round_channels`), a depth multiplier (each stage's
repeats `ceil(n * depth)`, timm's `_scale_stage_depth`) and the resolution (`default_image_size`).
These are constructor fields of one module, not copies of the table.

V2 is the same module with other tables (`StageDef.kind`): its first stages are Fused-MBConv
blocks (`nets.layers.FusedMBConv`: a 3x3 strided expansion convolution and a 1x1 projection,
without squeeze-excite; the first stage, without expansion, one 3x3 convolution with its
residual: timm's 'cn' block), the others MBConv with squeeze-excite. V2-S is the paper's Table 4
(stem 24); V2-M and V2-L are timm's `_gen_efficientnetv2_m/_l` tables (stems 24 and 32), whose
head keeps 1280 channels at any width multiplier (`scale_head=False`; V2-S's, like B0's, scales).
All three are at multipliers 1.0; `default_image_size` is the paper's evaluation size (384, 480,
480: timm's `test_input_size` of the TF checkpoints; timm's untrained `efficientnetv2_m` cfg says
416), and the dropout rate the reference implementation's (0.2, 0.3, 0.4).

`output_stride` (timm's, for dense prediction; None: the network as it is) takes a stride the
network reaches after a strided stage (4, 8, 16, 32): past it, strided stages stride 1 and
dilate their blocks' kxk convolutions by the stride they give up, as timm's `EfficientNetBuilder`
(a stage's first block keeps the dilation before it, the others take the new one). The
parameters do not change; `feature_strides()` keeps its levels, the deeper ones at that stride.

Where this differs from timm: nothing in the function. Parameters are named by scope
(`stem`, `blocks_{stage}_{block}/{expand,depthwise,squeeze_excite,project}` or `/conv` for V2's
unexpanded block, `head`, `classifier`; `nets_weights/efficientnet.py` maps them to timm's
`conv_stem`, `blocks.S.B.conv_dw`, ...). timm's `efficientnet_b*`/`efficientnetv2_*` are its
PyTorch definitions (symmetric padding, BatchNorm epsilon 1e-5, decay 0.9); its `tf_` names are
the TF checkpoints ported, with TensorFlow's 'SAME' padding and epsilon 1e-3 (decay 0.99 for V1,
0.9 for V2, as the reference implementations train): `padding`, `bn_epsilon` and `bn_momentum`
fields, set by the registry's names. torchvision's `efficientnet_v2_s/m/l` are the same networks
with symmetric padding and epsilon 1e-3. Training defaults differ from timm's constructors, which
leave both regularisers at 0 for its training scripts to set: dropout before the logits defaults
to the paper's rate per variant (`dropout_rate`); stochastic depth (`drop_path_rate`, 0.2 in the
papers' training) is off by default and grows linearly with the block's index, as in timm.

Parameters at 1000 classes are timm's: 5,288,548 (B0), 7,794,184 (B1), 9,109,994 (B2),
12,233,232 (B3), 19,341,616 (B4), 30,389,784 (B5), 43,040,704 (B6), 66,347,960 (B7); 21,458,488
(V2-S), 54,139,356 (V2-M), 118,515,272 (V2-L); the `tf_` ports and torchvision's V2 have the
same counts.
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
    FusedMBConv,
    InvertedResidual,
    ModuleDef,
    batch_norm,
    checkpointed,
    classify,
    global_avg_pool,
    make_divisible,
)
from nets.layers.dilation import StageStride, capped_strides, stage_strides
from nets.layers.drop_path import check_drop_path_rate


class StageDef(NamedTuple):
    """A stage of blocks: a row of V1's Table 1 or V2's Table 4 (timm's
    `{ir,er,cn}_r{n}_k{k}_s{s}_e{t}_c{c}_se{se_ratio}`).

    `kind` is 'mbconv' (`InvertedResidual`, timm's 'ir'; at expansion 1 its depthwise-separable
    'ds') or 'fused' (`FusedMBConv`, timm's 'er'; at expansion 1 its 'cn'); `se_ratio` the
    squeeze-excite width as a fraction of the block's input, 0 for none.
    """

    expansion: float
    filters: int
    repeats: int
    kernel_size: int
    strides: int
    kind: str = "mbconv"
    se_ratio: float = 0.25


BLOCK_KINDS = ("mbconv", "fused")


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

# EfficientNetV2-S, the paper's Table 4 (timm's `_gen_efficientnetv2_s`): three Fused-MBConv
# stages without squeeze-excite, then MBConv with it.
V2_S = (
    StageDef(1, 24, 2, 3, 1, "fused", 0.0),
    StageDef(4, 48, 4, 3, 2, "fused", 0.0),
    StageDef(4, 64, 4, 3, 2, "fused", 0.0),
    StageDef(4, 128, 6, 3, 2),
    StageDef(6, 160, 9, 3, 1),
    StageDef(6, 256, 15, 3, 2),
)
# V2-M and V2-L: timm's `_gen_efficientnetv2_m` and `_l` (the reference implementation's).
V2_M = (
    StageDef(1, 24, 3, 3, 1, "fused", 0.0),
    StageDef(4, 48, 5, 3, 2, "fused", 0.0),
    StageDef(4, 80, 5, 3, 2, "fused", 0.0),
    StageDef(4, 160, 7, 3, 2),
    StageDef(6, 176, 14, 3, 1),
    StageDef(6, 304, 18, 3, 2),
    StageDef(6, 512, 5, 3, 1),
)
V2_L = (
    StageDef(1, 32, 4, 3, 1, "fused", 0.0),
    StageDef(4, 64, 7, 3, 2, "fused", 0.0),
    StageDef(4, 96, 7, 3, 2, "fused", 0.0),
    StageDef(4, 192, 10, 3, 2),
    StageDef(6, 224, 19, 3, 1),
    StageDef(6, 384, 25, 3, 2),
    StageDef(6, 640, 7, 3, 1),
)


def checked_layers(module: nn.Module, train: bool) -> tuple[ModuleDef, ModuleDef, ModuleDef]:
    """`(conv, norm, layer)` of a multiplied mobile network (EfficientNet's, ReXNet's fields:
    `width_multiplier`, `depth_multiplier`, `drop_path_rate`, `conv`, `dtype`, the BatchNorm
    convention, `act`, `padding`), after refusing a multiplier that is not positive or a bad
    drop path rate; `layer` is `ConvNormAct` on the other two."""
    for field in ("width_multiplier", "depth_multiplier"):
        if getattr(module, field) <= 0:
            raise ValueError(f"{field} must be positive, got {getattr(module, field)}")
    check_drop_path_rate(module.drop_path_rate)
    conv = partial(module.conv, dtype=module.dtype)
    convention = BatchNormConvention(momentum=module.bn_momentum, epsilon=module.bn_epsilon)
    norm = batch_norm(convention, train, module.dtype)
    layer = partial(ConvNormAct, conv=conv, norm=norm, act=module.act, padding=module.padding)
    return conv, norm, layer


class EfficientNet(nn.Module):
    """EfficientNet (V1 and V2): `stages` of MBConv or Fused-MBConv blocks, scaled by
    `width_multiplier` and `depth_multiplier`.

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
    scale_head: bool = True  # False: `head_filters` at any width (timm's V2-M/L)
    num_classes: int | None = 1000
    dropout_rate: float = 0.2
    drop_path_rate: float = 0.0
    act: Callable = nn.silu
    dtype: Any = jnp.float32
    conv: ModuleDef = Conv
    # Conventions of published weights (`nets_weights/efficientnet.py`): timm's own were trained
    # with PyTorch's symmetric padding and BatchNorm epsilon 1e-5 (decay 0.9, PyTorch's momentum
    # 0.1); the TF checkpoints (timm's `tf_` ports) with 'SAME' padding, epsilon 1e-3, decay 0.99
    # (V1) or 0.9 (V2); torchvision's V2 with symmetric padding, epsilon 1e-3.
    padding: str = "SYMMETRIC"
    bn_epsilon: float = 1e-5
    bn_momentum: float = 0.9
    remat: bool | str = False  # stem, blocks recomputed in backward (nets.layers.remat.POLICIES)
    # timm's `output_stride` (8 or 16; 4 too, and 32 is the network as it is): past it, stages
    # stride 1 and dilate their blocks' kxk convolutions (`stage_plan`); None: no dilation.
    output_stride: int | None = None

    def width(self, channels: int) -> int:
        """timm's `round_channels`: `make_divisible(channels * width_multiplier, 8)`."""
        return make_divisible(channels * self.width_multiplier, 8)

    def stage_plan(self) -> list[StageStride]:
        """Each stage's stride and dilations under `output_stride` (`nets.layers.dilation`): the
        first block of a stage that stops striding keeps the dilation before it (timm's
        `EfficientNetBuilder` gives each block the dilation current when it is made, and raises
        it after), the stage's other blocks take the new one."""
        strides = [stage.strides for stage in self.stages]
        return stage_strides(strides, self.output_stride, 2)

    def head_width(self) -> int:
        """The head's channels: `width(head_filters)`, or `head_filters` unscaled (timm's V2-M/L
        set `num_features=1280` outright)."""
        return self.width(self.head_filters) if self.scale_head else self.head_filters

    def repeats(self, stage: StageDef) -> int:
        """timm's `_scale_stage_depth` for a stage of one block kind: `ceil(n * depth)`."""
        return int(math.ceil(stage.repeats * self.depth_multiplier))

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: the deepest stage at each stride, not the head convolution."""
        names = [f"blocks_{s}" for s in range(len(self.stages))]
        levels = cumulative_strides(names, [s.strides for s in self.stages], 2)
        strides = deepest_per_stride([("stem", 2), *levels])
        self.stage_plan()  # refuses an output_stride the network does not reach
        return capped_strides(strides, self.output_stride)

    @nn.compact
    def __call__(self, x, train: bool = True):
        conv, norm, layer = checked_layers(self, train)

        stem = checkpointed(layer, self.remat)  # the largest maps: one unit for remat
        x = stem(self.width(self.stem_filters), 3, strides=2, name="stem")(
            jnp.asarray(x, self.dtype)
        )
        end_points = {"stem": x}
        total = sum(self.repeats(stage) for stage in self.stages)
        index = 0
        for s, (stage, plan) in enumerate(zip(self.stages, self.stage_plan(), strict=True)):
            if stage.kind not in BLOCK_KINDS:
                raise ValueError(
                    f"stage {s}'s kind must be one of {BLOCK_KINDS}, got {stage.kind!r}"
                )
            for j in range(self.repeats(stage)):
                if stage.kind == "fused":
                    block = FusedMBConv
                else:
                    block = partial(InvertedResidual, squeeze_excite=stage.se_ratio > 0)
                x = checkpointed(block, self.remat)(
                    self.width(stage.filters),
                    stage.expansion,
                    conv=conv,
                    norm=norm,
                    act=self.act,
                    kernel_size=stage.kernel_size,
                    strides=plan.stride if j == 0 else 1,
                    dilation=plan.first_dilation if j == 0 else plan.dilation,
                    padding=self.padding,
                    se_ratio=stage.se_ratio,
                    drop_path_rate=self.drop_path_rate * index / total,
                    deterministic=not train,
                    name=f"blocks_{s}_{j}",
                )(x)
                index += 1
            end_points[f"blocks_{s}"] = x
        x = end_points["head"] = layer(self.head_width(), 1, name="head")(x)
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


def _v2(stages: Sequence[StageDef], stem: int, size: int, dropout: float, **kw) -> partial:
    """EfficientNetV2 at multipliers 1.0: timm's `_gen_efficientnetv2_*` tables and stems, the
    paper's evaluation size and the reference implementation's dropout."""
    return partial(
        EfficientNet,
        stages=stages,
        stem_filters=stem,
        default_image_size=size,
        dropout_rate=dropout,
        **kw,
    )


efficientnetv2_s = _v2(V2_S, 24, 384, 0.2)
efficientnetv2_m = _v2(V2_M, 24, 480, 0.3, scale_head=False)
efficientnetv2_l = _v2(V2_L, 32, 480, 0.4, scale_head=False)

# The TF checkpoints of V2 (timm's `tf_efficientnetv2_*`): 'SAME' and epsilon 1e-3 as V1's, but
# BatchNorm decay 0.9 (google/automl's efficientnetv2 `bn_momentum`), which is the default.
TF_V2_CONVENTIONS = {"padding": "SAME", "bn_epsilon": 1e-3}
tf_efficientnetv2_s = partial(efficientnetv2_s, **TF_V2_CONVENTIONS)
tf_efficientnetv2_m = partial(efficientnetv2_m, **TF_V2_CONVENTIONS)
tf_efficientnetv2_l = partial(efficientnetv2_l, **TF_V2_CONVENTIONS)

# torchvision's `efficientnet_v2_s/m/l`: the same networks (its heads are 1280 wide, it has no
# width multiplier) with PyTorch's symmetric padding and BatchNorm epsilon 1e-3, decay 0.9.
TORCHVISION_V2_CONVENTIONS = {"bn_epsilon": 1e-3}
efficientnet_v2_s = partial(efficientnetv2_s, **TORCHVISION_V2_CONVENTIONS)
efficientnet_v2_m = partial(efficientnetv2_m, **TORCHVISION_V2_CONVENTIONS)
efficientnet_v2_l = partial(efficientnetv2_l, **TORCHVISION_V2_CONVENTIONS)

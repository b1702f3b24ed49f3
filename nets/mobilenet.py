"""MobileNet V2, V3 and EdgeTPU: TF-Slim's `nets/mobilenet/`, one builder and three tables.

- MobileNet V2: Sandler et al. 2018, "MobileNetV2: Inverted Residuals and Linear Bottlenecks"
  (arXiv:1801.04381), Slim's `V2_DEF`: a 3x3 stride-2 convolution to 32 channels, 17
  inverted-residual bottlenecks (expansion 6, linear projection), a 1x1 convolution to 1280, all
  with ReLU6; average pooling, dropout and the logits.
- MobileNet V3: Howard et al. 2019, "Searching for MobileNetV3" (arXiv:1905.02244): inverted
  residuals (`nets.layers.InvertedResidual`) with squeeze-excite gated by a hard sigmoid,
  hard-swish in the later layers, and a head that pools before its last 1x1 convolution: conv to
  960 (Large) / 576 (Small) with BatchNorm, average pool, biased conv to 1280 / 1024 without
  BatchNorm, dropout, logits.
- Minimalistic V3 (Slim's `large_minimalistic`/`small_minimalistic`): the same widths without
  squeeze-excite, hard-swish or 5x5 kernels (`minimalistic()` derives the tables).
- MobileNet EdgeTPU (Gupta & Tan 2019, "MobileNetEdgeTPU", Google AI blog; Slim's `V3_EDGETPU`):
  fused inverted bottlenecks (one full 3x3 conv instead of 1x1 + depthwise) in the early stages,
  ReLU throughout, and a 1x1 conv to 1280 with BatchNorm before the pool.

`output_stride` (timm's, for dense prediction; None: as the tables are) takes a stride the network
reaches after a strided block (4, 8, 16, 32): past it, strided blocks stride 1 and the kxk
convolutions from there on dilate by the strides given up, block by block as timm's
`EfficientNetBuilder` builds V2 and V3 (a block that stops striding keeps the dilation before
it). timm's V3 classifier takes no `output_stride`, its `features_only` trunk does: that rule.

BatchNorm: decay 0.997, epsilon 0.001 (Slim's mobilenet training_scope). Widths scale with
`make_divisible(width * depth_multiplier, 8)`; expansion widths follow from the input width, and
`finegrain_classification_mode` keeps the network's last convolution unscaled when the multiplier
is below 1 (Slim sets it for `mobilenet_v2_035`). Parameter paths
and end_points follow Slim's scopes: `Conv`, `expanded_conv`, `expanded_conv_1`, ..., `Conv_1`,
`Conv_2`, `Logits`; `layer_1` (stem) ... `layer_N`, `global_pool`.

Parameters at 1000 classes: 5,483,032 (Large) and 2,542,856 (Small), exactly torchvision's:
Slim's expansion widths `make_divisible(c_in * t, 8)` and squeeze widths `make_divisible(c / 4, 8)`
come out as torchvision's listed ones, and torchvision's `Linear(960, 1280)` classifier layer has
the parameters of Slim's biased 1x1 `Conv_2`.
"""

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, ClassVar, NamedTuple

import flax.linen as nn
import jax.numpy as jnp

from nets.features import cumulative_strides, deepest_per_stride
from nets.layers import (
    SLIM_MOBILENET,
    Conv,
    ConvNormAct,
    InvertedResidual,
    ModuleDef,
    batch_norm,
    checkpointed,
    classify,
    global_avg_pool,
    make_divisible,
)
from nets.layers.dilation import StageStride, capped_strides, stage_strides


class BlockDef(NamedTuple):
    """One `expanded_conv`: Slim's `mbv3_op(ef, n, k, s, act, se)` / `mbv3_fused` / V2's `op`."""

    expansion: float
    filters: int
    kernel_size: int
    strides: int = 1
    se: bool = False  # squeeze-excite after the depthwise convolution
    hswish: bool = False  # hard-swish instead of the network's `act` inside the block
    fused: bool = False
    residual: bool = True


def minimalistic(blocks: Sequence[BlockDef]) -> tuple[BlockDef, ...]:
    """Slim's minimalistic tables: no squeeze-excite, no hard-swish, 3x3 kernels only."""
    return tuple(b._replace(se=False, hswish=False, kernel_size=3) for b in blocks)


def expand(table: Sequence[tuple[float, int, int, int]]) -> tuple[BlockDef, ...]:
    """The paper's `(t, c, n, s)` rows (expansion, channels, repeats, first stride) as blocks."""
    return tuple(BlockDef(t, c, 3, s if i == 0 else 1) for t, c, n, s in table for i in range(n))


# V2: the paper's Table 2 after the stem.
V2 = expand(
    (
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    )
)
V3_LARGE = (
    BlockDef(1, 16, 3),
    BlockDef(4, 24, 3, 2),
    BlockDef(3, 24, 3),
    BlockDef(3, 40, 5, 2, se=True),
    BlockDef(3, 40, 5, se=True),
    BlockDef(3, 40, 5, se=True),
    BlockDef(6, 80, 3, 2, hswish=True),
    BlockDef(2.5, 80, 3, hswish=True),
    BlockDef(184 / 80, 80, 3, hswish=True),
    BlockDef(184 / 80, 80, 3, hswish=True),
    BlockDef(6, 112, 3, se=True, hswish=True),
    BlockDef(6, 112, 3, se=True, hswish=True),
    BlockDef(6, 160, 5, 2, se=True, hswish=True),
    BlockDef(6, 160, 5, se=True, hswish=True),
    BlockDef(6, 160, 5, se=True, hswish=True),
)
V3_SMALL = (
    BlockDef(1, 16, 3, 2, se=True),
    BlockDef(72 / 16, 24, 3, 2),
    BlockDef(88 / 24, 24, 3),
    BlockDef(4, 40, 5, 2, se=True, hswish=True),
    BlockDef(6, 40, 5, se=True, hswish=True),
    BlockDef(6, 40, 5, se=True, hswish=True),
    BlockDef(3, 48, 5, se=True, hswish=True),
    BlockDef(3, 48, 5, se=True, hswish=True),
    BlockDef(6, 96, 5, 2, se=True, hswish=True),
    BlockDef(6, 96, 5, se=True, hswish=True),
    BlockDef(6, 96, 5, se=True, hswish=True),
)
V3_EDGETPU = (
    BlockDef(1, 16, 3, fused=True),  # 32 -> 32 is no expansion: only the 1x1 projection remains
    BlockDef(8, 32, 3, 2, fused=True),
    BlockDef(4, 32, 3, fused=True),
    BlockDef(4, 32, 3, fused=True),
    BlockDef(4, 32, 3, fused=True),
    BlockDef(8, 48, 3, 2, fused=True),
    BlockDef(4, 48, 3, fused=True),
    BlockDef(4, 48, 3, fused=True),
    BlockDef(4, 48, 3, fused=True),
    BlockDef(8, 96, 3, 2),
    BlockDef(4, 96, 3),
    BlockDef(4, 96, 3),
    BlockDef(4, 96, 3),
    BlockDef(8, 96, 3, residual=False),
    BlockDef(4, 96, 3),
    BlockDef(4, 96, 3),
    BlockDef(4, 96, 3),
    BlockDef(8, 160, 5, 2),
    BlockDef(4, 160, 5),
    BlockDef(4, 160, 5),
    BlockDef(4, 160, 5),
    BlockDef(8, 192, 3),
)


class MobileNet(nn.Module):
    """MobileNet V2 / V3 / EdgeTPU for 224x224 images.

    Layers: a 3x3 stride-2 stem conv (`stem_filters`), the `blocks`, a 1x1 conv with BatchNorm to
    `head_filters`, global average pooling, then (V3 only) a biased 1x1 conv without BatchNorm to
    `last_filters`. Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the pooled
    features `[batch, channels]` when `num_classes` is 0 or None. End points: Slim's `layer_<i>`
    (`layer_1` is also `stem`; with `last_filters` the pool and the last conv are layers too),
    `global_pool` (`[batch, 1, 1, c]`), `pre_logits`, and `logits`/`predictions`.
    """

    default_image_size: ClassVar[int] = 224

    blocks: Sequence[BlockDef]
    head_filters: int
    last_filters: int | None  # None: no conv after the pool (V2, EdgeTPU)
    stem_filters: int = 16
    hard_swish: bool = True  # in the stem and head convolutions; blocks choose their own
    act: Callable = nn.relu  # where there is no hard-swish (V2: ReLU6)
    num_classes: int | None = 1000
    depth_multiplier: float = 1.0
    finegrain_classification_mode: bool = False
    dropout_rate: float = 0.2  # Slim's mobilenet training_scope: dropout_keep_prob=0.8
    dtype: Any = jnp.float32
    conv: ModuleDef = Conv
    # Conventions of published weights (`nets_weights/mobilenet.py`): Slim's and timm's `tf_` ports
    # pad kxk convolutions 'SAME' with BatchNorm epsilon 1e-3; timm's and torchvision's own
    # weights were trained with PyTorch's symmetric padding ('SYMMETRIC') and epsilon 1e-5.
    padding: str = "SAME"
    bn_epsilon: float = SLIM_MOBILENET.epsilon
    # The decay of BatchNorm's running averages: Slim's 0.997 suits ImageNet's long runs; short
    # ones (a few hundred steps) need less, or evaluation sees mostly their initial values.
    bn_momentum: float = SLIM_MOBILENET.momentum
    remat: bool | str = False  # stem, blocks recomputed in backward (nets.layers.remat.POLICIES)
    # timm's `output_stride` (8 or 16; 4 too, and 32 is the network as it is): past it, strided
    # blocks stride 1 and dilate the kxk convolutions from there on (`block_plan`); None: none.
    output_stride: int | None = None

    def block_plan(self) -> list[StageStride]:
        """Each block's stride and dilation (`first_dilation`) under `output_stride`
        (`nets.layers.dilation`, each block a stage): timm's `EfficientNetBuilder` gives each
        block the dilation current when it is made and raises it after a block that stops
        striding, so that block keeps the dilation before it."""
        strides = [b.strides for b in self.blocks]
        return stage_strides(strides, self.output_stride, 2)

    def depth(self, channels: int) -> int:
        """Slim's `depth_multiplier` op: `make_divisible(channels * multiplier, 8)`, at least 8."""
        return make_divisible(channels * self.depth_multiplier, 8)

    def last_width(self, channels: int) -> int:
        """The network's last convolution: unscaled in finegrain mode below multiplier 1."""
        if self.finegrain_classification_mode and self.depth_multiplier < 1:
            return self.depth(channels / self.depth_multiplier)
        return self.depth(channels)

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: the deepest map at each stride. V3's `Conv_1` before the pool is
        one of its blocks in timm; V2's and EdgeTPU's is the classifier's head, left out."""
        n = len(self.blocks)
        names = [f"layer_{i + 2}" for i in range(n)]
        levels = cumulative_strides(names, [b.strides for b in self.blocks], 2)
        if self.last_filters:
            levels.append((f"layer_{n + 2}", levels[-1][1]))
        strides = deepest_per_stride([("layer_1", 2), *levels])
        self.block_plan()  # refuses an output_stride the network does not reach
        return capped_strides(strides, self.output_stride)

    @nn.compact
    def __call__(self, x, train: bool = True):
        if self.depth_multiplier <= 0:
            raise ValueError(f"depth_multiplier must be positive, got {self.depth_multiplier}")
        conv = partial(self.conv, dtype=self.dtype)
        convention = SLIM_MOBILENET._replace(epsilon=self.bn_epsilon, momentum=self.bn_momentum)
        norm = batch_norm(convention, train, self.dtype)
        act = nn.hard_swish if self.hard_swish else self.act
        layer = partial(ConvNormAct, conv=conv, norm=norm, act=act, padding=self.padding)
        # Slim's finegrain mode exempts the last op of the spec from the multiplier.
        if self.last_filters:
            head, last = self.depth(self.head_filters), self.last_width(self.last_filters)
        else:
            head, last = self.last_width(self.head_filters), None

        stem = checkpointed(layer, self.remat)  # the largest maps: one unit for remat
        x = stem(self.depth(self.stem_filters), 3, strides=2, name="Conv")(
            jnp.asarray(x, self.dtype)
        )
        end_points = {"layer_1": x, "stem": x}
        n = len(self.blocks)
        for i, (b, plan) in enumerate(zip(self.blocks, self.block_plan(), strict=True)):
            x = checkpointed(InvertedResidual, self.remat)(
                self.depth(b.filters),
                b.expansion,
                conv=conv,
                norm=norm,
                act=nn.hard_swish if b.hswish else self.act,
                kernel_size=b.kernel_size,
                strides=plan.stride,
                dilation=plan.first_dilation,
                squeeze_excite=b.se,
                fused=b.fused,
                residual=b.residual,
                padding=self.padding,
                name=f"expanded_conv_{i}" if i else "expanded_conv",
            )(x)
            end_points[f"layer_{i + 2}"] = x
        # V3's `Conv_1` is the last of timm's blocks (`cn_r1_k1_s1_c960`), so `remat` recomputes
        # it as timm's checkpointing does; V2's and EdgeTPU's is timm's `conv_head`, outside them.
        head_block = checkpointed(layer, self.remat) if self.last_filters else layer
        x = head_block(head, 1, name="Conv_1")(x)
        end_points[f"layer_{n + 2}"] = x

        x = global_avg_pool(x, keepdims=True)
        if last:  # in Slim's V3 specs the pool and this conv are layers of their own
            end_points[f"layer_{n + 3}"] = x
            x = layer(last, 1, norm=None, name="Conv_2")(x)
            end_points[f"layer_{n + 4}"] = x
        end_points["global_pool"] = x
        head = partial(classify, train=train, dropout_rate=self.dropout_rate, dtype=self.dtype)
        return head(x[:, 0, 0, :], end_points, self.num_classes, name="Logits")


V3_LARGE_MINIMALISTIC = minimalistic(V3_LARGE)
V3_SMALL_MINIMALISTIC = minimalistic(V3_SMALL)

mobilenet_v2 = partial(
    MobileNet,
    blocks=V2,
    head_filters=1280,
    last_filters=None,
    stem_filters=32,
    hard_swish=False,
    act=nn.relu6,
)
mobilenet_v2_140 = partial(mobilenet_v2, depth_multiplier=1.4)
mobilenet_v2_035 = partial(mobilenet_v2, depth_multiplier=0.35, finegrain_classification_mode=True)

mobilenet_v3_large = partial(MobileNet, blocks=V3_LARGE, head_filters=960, last_filters=1280)
mobilenet_v3_small = partial(MobileNet, blocks=V3_SMALL, head_filters=576, last_filters=1024)
mobilenet_v3_large_minimalistic = partial(
    mobilenet_v3_large, blocks=V3_LARGE_MINIMALISTIC, hard_swish=False
)
mobilenet_v3_small_minimalistic = partial(
    mobilenet_v3_small, blocks=V3_SMALL_MINIMALISTIC, hard_swish=False
)
mobilenet_edgetpu = partial(
    MobileNet,
    blocks=V3_EDGETPU,
    head_filters=1280,
    last_filters=None,
    stem_filters=32,
    hard_swish=False,
)
mobilenet_edgetpu_075 = partial(
    mobilenet_edgetpu, depth_multiplier=0.75, finegrain_classification_mode=True
)

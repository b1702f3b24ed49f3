"""ReXNet, as timm builds it (`timm.models.rexnet`, after NAVER's clovaai/rexnet).

Han et al. 2021, "Rethinking Channel Dimensions for Efficient Model Design" (arXiv:2007.00992).

The paper's point is the channel schedule: instead of MobileNetV2's few wide steps, every
inverted-residual block widens its output by the same amount (`final_filters / blocks`, from
`initial_filters`), so each is an expanding layer and none is a representational bottleneck. A
3x3 stride-2 stem (SiLU) to 32, sixteen linear bottlenecks in six stages of (1, 2, 2, 3, 3, 5)
blocks with strides (1, 2, 2, 2, 1, 2), a 1x1 convolution with BatchNorm and SiLU to 1280, average
pooling, dropout and the logits. A bottleneck: a 1x1 expansion (6x, SiLU; none in the first
stage), a 3x3 depthwise convolution with BatchNorm, from the third stage a squeeze-excite to a
twelfth of the inner width whose squeezed layer has BatchNorm (ReLU, sigmoid gate), then ReLU6
(after the gate, not before it), the 1x1 linear projection; at stride 1 the input is added to the
first `input channels` of the output (the output is never narrower), the rest passed on. Widths
scale by `width_multiplier` (below 1 the first widths stay: timm divides them first) rounded to
multiples of `divisor` (1; 8 for timm's `rexnetr_*`, 16 for `rexnetr_300`).

`output_stride` (8 or 16; 32 or None: none) dilates as timm's, block by block: a block past that
stride keeps the map (its depthwise convolution at stride 1, with the dilation of the blocks
before it; it adds no shortcut, as at stride 2) and the blocks after it dilate their depthwise
convolutions by the stride it skipped (times the dilation before); every dilated convolution
pads by its dilation on both sides. The same weights load; `feature_strides()` caps the deep
levels' strides at `output_stride`.

Where this differs from timm: nothing in the function. Parameters are named as timm's (`stem`,
`features_{i}` with `conv_exp`, `conv_dw`, `se` (`fc1`, `bn`, `fc2`), `conv_pwl`; the last 1x1
convolution `features_{blocks}`; `head/fc`), so `nets_weights/rexnet.py` only turns `_` into
`.`. Parameters at 1000 classes are timm's:
4,796,873; 7,557,091; 9,728,593; 16,366,620; 34,708,792 (rexnet_100/130/150/200/300) and
4,883,304; 7,608,080; 9,782,256; 16,522,432; 34,810,008 (rexnetr_*).
"""

import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from nets.efficientnet import checked_layers
from nets.features import deepest_per_stride
from nets.layers import (
    Conv,
    ConvNormAct,
    ModuleDef,
    SqueezeExcite,
    checkpointed,
    classify,
    drop_path,
    global_avg_pool,
    make_divisible,
)
from nets.layers.dilation import STANDARD_OUTPUT_STRIDES, StageStride, capped_strides, stage_strides
from nets.layers.drop_path import linear_drop_path_rates


class BlockDef(NamedTuple):
    """One linear bottleneck (timm's `_block_cfg` row)."""

    filters: int
    expansion: float
    strides: int
    se_ratio: float
    # timm's pair under `output_stride`: the depthwise convolution's dilation and the blocks
    # after's (where they differ, a block that no longer strides, there is no shortcut).
    dilation: tuple[int, int] = (1, 1)


class LinearBottleneck(nn.Module):
    """ReXNet's inverted residual (module docstring): `[n, h, w, c] -> [n, h / s, w / s,
    filters]`; at stride 1 the input is added to the output's first `c` channels."""

    block: BlockDef
    conv: ModuleDef
    norm: ModuleDef
    act: Callable
    dw_act: Callable
    divisor: int = 1
    padding: str = "SYMMETRIC"
    drop_path_rate: float = 0.0

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
        b, inputs, channels = self.block, x, x.shape[-1]
        layer = partial(ConvNormAct, conv=self.conv, norm=self.norm, padding=self.padding)
        if b.expansion != 1:
            inner = make_divisible(round(channels * b.expansion), self.divisor)
            x = layer(inner, 1, act=self.act, name="conv_exp")(x)
        inner = x.shape[-1]
        x = layer(
            inner, 3, strides=b.strides, groups=inner, dilation=b.dilation[0], name="conv_dw"
        )(x)
        if b.se_ratio:
            se = {
                "squeeze_channels": make_divisible(int(inner * b.se_ratio), self.divisor),
                "gate": nn.sigmoid,
                "layer_names": ("fc1", "fc2"),
                "norm": self.norm,
            }
            x = SqueezeExcite(self.conv, **se, name="se")(x)
        x = layer(b.filters, 1, name="conv_pwl")(self.dw_act(x))
        if b.strides == 1 and b.dilation[0] == b.dilation[1] and channels <= b.filters:
            x = drop_path(self, x, self.drop_path_rate, train)
            x = jnp.concatenate([x[..., :channels] + inputs, x[..., channels:]], axis=-1)
        return x


class ReXNet(nn.Module):
    """ReXNet: linear bottlenecks whose widths grow linearly (module docstring).

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the pooled features when
    `num_classes` is 0 or None. End points: `stem`, `features_{i}` for the last block of each
    stage (timm's `features.{i}`) and for the last 1x1 convolution (`features_{blocks}`),
    `global_pool`, `pre_logits`, `logits`, `predictions`.
    """

    default_image_size: int = 224
    width_multiplier: float = 1.0
    depth_multiplier: float = 1.0
    repeats: Sequence[int] = (1, 2, 2, 3, 3, 5)
    strides: Sequence[int] = (1, 2, 2, 2, 1, 2)
    expansion: float = 6.0  # of every stage but the first (which has none)
    se_ratio: float = 1 / 12  # of every stage from the third
    divisor: int = 1  # channel rounding; timm's `ch_div` (8 or 16 for `rexnetr_*`)
    stem_filters: int = 32
    initial_filters: int = 16
    final_filters: float = 180  # added to `initial_filters` over the blocks
    head_filters: int = 1280
    num_classes: int | None = 1000
    dropout_rate: float = 0.2
    drop_path_rate: float = 0.0
    act: Callable = nn.silu
    dw_act: Callable = jax.nn.relu6
    dtype: Any = jnp.float32
    conv: ModuleDef = Conv
    # timm's (the original PyTorch code's) conventions: symmetric padding, BatchNorm epsilon 1e-5.
    padding: str = "SYMMETRIC"
    bn_epsilon: float = 1e-5
    bn_momentum: float = 0.9
    remat: bool | str = False  # stem, blocks recomputed in backward (nets.layers.remat.POLICIES)
    # Dilation for dense prediction (module docstring): 8 or 16 keep the maps at that stride;
    # None (or 32): none.
    output_stride: int | None = None

    def _width(self, base: float) -> int:
        """timm's rounding of a base width: below width 1 the base was divided by it first."""
        w = self.width_multiplier
        return make_divisible(round((base / w if w < 1 else base) * w), self.divisor)

    def stage_depths(self) -> list[int]:
        """Each stage's blocks: its repeats times `depth_multiplier`, rounded up (timm's)."""
        return [math.ceil(r * self.depth_multiplier) for r in self.repeats]

    def blocks(self) -> tuple[BlockDef, ...]:
        """timm's `_block_cfg`: the blocks' widths grow by `final_filters / blocks` each."""
        w = self.width_multiplier
        counts = self.stage_depths()
        total, base = sum(counts), self.initial_filters / w if w < 1 else self.initial_filters
        blocks = []
        for s, (count, stride) in enumerate(zip(counts, self.strides, strict=True)):
            for j in range(count):
                filters = make_divisible(round(base * w), self.divisor)
                expansion = 1 if s == 0 else self.expansion
                se = self.se_ratio if s > 1 else 0.0
                blocks.append(BlockDef(filters, expansion, stride if j == 0 else 1, se))
                base += self.final_filters / total
        return tuple(blocks)

    def stage_strides(self) -> list[StageStride]:
        """Each stage's stride and dilations (`nets.layers.dilation`): timm's rule runs block by
        block (`curr_stride >= output_stride` at a block of stride 2), the same per stage, its
        first block's depthwise convolution at the dilation before; `output_stride` is one of
        the 8, 16 and 32 timm asserts (its stages reach 4 too)."""
        return stage_strides(self.strides, self.output_stride, 2, taken=STANDARD_OUTPUT_STRIDES)

    def dilated_blocks(self) -> tuple[BlockDef, ...]:
        """`blocks()` under `output_stride`: each stage's first block at its stride, its
        depthwise convolution at the stage before's dilation, the others' at the stage's."""
        counts = self.stage_depths()
        plan = [
            (st.stride, (st.first_dilation, st.dilation)) if j == 0 else (1, (st.dilation,) * 2)
            for count, st in zip(counts, self.stage_strides(), strict=True)
            for j in range(count)
        ]
        return tuple(
            b._replace(strides=stride, dilation=dilation)
            for b, (stride, dilation) in zip(self.blocks(), plan, strict=True)
        )

    def stage_ends(self) -> list[int]:
        """The index of each stage's last block."""
        counts = self.stage_depths()
        return [sum(counts[: s + 1]) - 1 for s in range(len(counts))]

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: the deepest block at each stride, not the last convolution;
        the deep levels at `output_stride` under it (the levels of stride 32)."""
        stride, levels, blocks = 2, [("stem", 2)], self.blocks()
        for i, b in enumerate(blocks):
            stride *= b.strides
            levels.append((f"features_{i}", stride))
        ends = {f"features_{i}" for i in self.stage_ends()} | {"stem"}
        strides = deepest_per_stride(level for level in levels if level[0] in ends)
        self.stage_strides()  # refuses a stride the network does not reach
        return capped_strides(strides, self.output_stride)

    @nn.compact
    def __call__(self, x, train: bool = True):
        conv, norm, layer = checked_layers(self, train)
        stem = checkpointed(layer, self.remat)  # the largest maps: one unit for remat
        x = stem(self._width(self.stem_filters), 3, strides=2, name="stem")(
            jnp.asarray(x, self.dtype)
        )
        end_points = {"stem": x}
        blocks, ends = self.dilated_blocks(), self.stage_ends()
        rates = linear_drop_path_rates(self.drop_path_rate, len(blocks))
        for i, b in enumerate(blocks):
            x = checkpointed(LinearBottleneck, self.remat, takes_train=True)(
                b,
                conv,
                norm,
                self.act,
                self.dw_act,
                divisor=self.divisor,
                padding=self.padding,
                drop_path_rate=rates[i],
                name=f"features_{i}",
            )(x, train)
            if i in ends:
                end_points[f"features_{i}"] = x
        head = make_divisible(self.head_filters * self.width_multiplier, self.divisor)
        name = f"features_{len(blocks)}"
        x = end_points[name] = layer(head, 1, name=name)(x)
        x = end_points["global_pool"] = global_avg_pool(x, keepdims=True)
        fc = partial(classify, train=train, dropout_rate=self.dropout_rate, dtype=self.dtype)
        return fc(x[:, 0, 0, :], end_points, self.num_classes, name="fc", scope="head")


rexnet_100 = partial(ReXNet)
rexnet_130 = partial(ReXNet, width_multiplier=1.3)
rexnet_150 = partial(ReXNet, width_multiplier=1.5)
rexnet_200 = partial(ReXNet, width_multiplier=2.0)
rexnet_300 = partial(ReXNet, width_multiplier=3.0)
# timm's rounded variants: every width a multiple of 8 (of 16 at width 3).
rexnetr_100 = partial(ReXNet, divisor=8)
rexnetr_130 = partial(ReXNet, width_multiplier=1.3, divisor=8)
rexnetr_150 = partial(ReXNet, width_multiplier=1.5, divisor=8)
rexnetr_200 = partial(ReXNet, width_multiplier=2.0, divisor=8)
rexnetr_300 = partial(ReXNet, width_multiplier=3.0, divisor=16)  # timm rounds this one to 16

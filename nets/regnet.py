"""RegNet X and Y: Radosavovic et al. 2020, "Designing Network Design Spaces" (arXiv:2003.13678).

A network is six numbers, not a table: the initial width `w0`, the slope `wa`, the width
multiplier `wm`, the depth, the group width and (RegNet-Y) the squeeze-excite ratio. `widths`
generates the stages from them by the paper's rule (section 3.3): block `j` wants the width
`u_j = w0 + wa * j`, which is quantized to `w0 * wm ** round(log(u_j / w0) / log(wm))`, rounded
to a multiple of 8; runs of equal widths are the stages. Each stage's width is then made a
multiple of its group width (which never exceeds the width): torchvision rounds it with the
MobileNet rule (`make_divisible`, never more than 10% down: `width_rounding='divisible'`, our
default, giving torchvision's `regnet_*` counts), the paper's pycls code to the nearest multiple
(`'nearest'`: timm's `regnetx_004`, `regnety_008`, `regnety_080`, where the two rules differ).

The block is the paper's X block: 1x1 conv, 3x3 grouped conv (stride 2 in a stage's first
block), (Y: squeeze-excite with a sigmoid gate, a quarter of the block's input width wide), 1x1
conv, each with BatchNorm, ReLU but the last, added to the input (through a strided 1x1 conv and
BatchNorm where the shape changes), then ReLU. The stem is a 3x3/2 conv of 32 filters; the head
global average pooling and the classifier. As in torchvision and timm, every convolution pads
symmetrically and BatchNorm has PyTorch's epsilon (`padding`: Keras's RegNets pad TensorFlow's
'SAME', `nets_weights/regnet.py`).

`output_stride` (8 or 16; 32 or None: none) dilates as timm's: a stage past that stride keeps
the map (its first block's 3x3 convolution and 1x1 shortcut at stride 1) and dilates its 3x3
convolutions by the stride it skipped (times the stage before's), but its first block's, which
keeps the stage before's dilation (timm's `first_dilation`: 1 for a stage of dilation 2, else
2); every dilated convolution pads by its dilation on both sides. The same weights load;
`feature_strides()` caps the deep stages' strides at `output_stride`.

Submodules carry timm's names (`stem/conv`, `s1/b1/conv2/bn`, `s1/b1/se/fc1`,
`s1/b1/downsample/conv`, `head/fc`). Differences from timm: none in the function; timm's
options outside the paper's X/Y spaces (pre-activation, average-pool shortcuts, stochastic
depth) are left out. End points: `stem`, `s1`..`s4`, `pre_logits`.
"""

from collections.abc import Callable
from functools import partial
from typing import Any, ClassVar, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from nets.layers import (
    TORCH,
    Conv,
    ConvNormAct,
    ModuleDef,
    SqueezeExcite,
    batch_norm,
    checkpointed,
    classify,
    global_avg_pool,
    make_divisible,
)
from nets.layers.dilation import STANDARD_OUTPUT_STRIDES, StageStride, capped_strides, stage_strides

WIDTH_ROUNDINGS = ("divisible", "nearest")


class Stage(NamedTuple):
    width: int  # output channels of each block
    depth: int  # blocks
    group_width: int  # channels per group of the 3x3 convolution


def widths(
    w0: int,
    wa: float,
    wm: float,
    depth: int,
    group_width: int,
    bottleneck_ratio: float = 1.0,
    width_rounding: str = "divisible",
    quantum: int = 8,
) -> tuple[Stage, ...]:
    """The stages of the RegNet with these parameters (the module docstring's rule).

    Computed in float32, as both torchvision and timm compute it (a width on a rounding boundary
    would otherwise depend on the precision).
    """
    if width_rounding not in WIDTH_ROUNDINGS:
        raise ValueError(f"width_rounding must be one of {WIDTH_ROUNDINGS}, got {width_rounding!r}")
    if not (wa >= 0 and w0 > 0 and wm > 1 and w0 % quantum == 0):
        raise ValueError(
            f"RegNet needs wa >= 0, wm > 1 and w0 > 0 a multiple of {quantum}; "
            f"got w0={w0}, wa={wa}, wm={wm}"
        )
    f32 = np.float32
    continuous = np.arange(depth, dtype=f32) * f32(wa) + f32(w0)
    exponents = np.round(np.log(continuous / f32(w0)) / f32(np.log(wm)))
    quantized = np.round(f32(w0) * np.power(f32(wm), exponents) / quantum) * quantum
    block_widths = quantized.astype(int)
    stage_widths, stage_depths = np.unique(block_widths, return_counts=True)
    stages = []
    for width, count in zip(stage_widths.tolist(), stage_depths.tolist(), strict=True):
        inner = int(width * bottleneck_ratio)
        group = min(group_width, inner)
        if width_rounding == "divisible":
            inner = make_divisible(inner, group)
        else:
            inner = int(round(inner / group) * group)
        stages.append(Stage(int(inner / bottleneck_ratio), count, group))
    return tuple(stages)


class Bottleneck(nn.Module):
    """The X block (with `se_ratio`, the Y block): `features` output channels."""

    features: int
    group_width: int
    conv: ModuleDef
    norm: ModuleDef
    act: Callable
    strides: int = 1
    bottleneck_ratio: float = 1.0
    se_ratio: float = 0.0  # of the block's input width
    padding: str = "SYMMETRIC"  # of the strided 3x3 convolution (`nets.layers.padding`)
    # timm's pair under `output_stride`: the 3x3 convolution's dilation and the stage's (where
    # they differ, the first block of a dilated stage, the shortcut is a 1x1 convolution).
    dilation: tuple[int, int] = (1, 1)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        inner = int(round(self.features * self.bottleneck_ratio))
        layer = partial(ConvNormAct, conv=self.conv, norm=self.norm, padding=self.padding)
        y = layer(inner, 1, act=self.act, name="conv1")(x)
        y = layer(
            inner,
            3,
            dilation=self.dilation[0],
            act=self.act,
            strides=self.strides,
            groups=inner // self.group_width,
            name="conv2",
        )(y)
        if self.se_ratio:
            y = SqueezeExcite(
                self.conv,
                squeeze_channels=int(round(x.shape[-1] * self.se_ratio)),
                gate=nn.sigmoid,
                layer_names=("fc1", "fc2"),
                name="se",
            )(y)
        y = layer(self.features, 1, name="conv3")(y)
        if x.shape[-1] != self.features or self.strides != 1 or len(set(self.dilation)) > 1:
            x = layer(self.features, 1, strides=self.strides, name="downsample")(x)
        return self.act(x + y)


class RegStage(nn.Module):
    """`stage.depth` blocks `b1`, `b2`, ...; the first strided (by `stride.stride`: 1 where
    the stage dilates, its 3x3 convolution dilated by `stride.first_dilation`, the others' by
    `stride.dilation`)."""

    stage: Stage
    block: ModuleDef
    stride: StageStride = StageStride(2, 1, 1)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        stride, dilation, first_dilation = self.stride
        for j in range(self.stage.depth):
            x = self.block(
                self.stage.width,
                self.stage.group_width,
                strides=stride if j == 0 else 1,
                dilation=(first_dilation if j == 0 else dilation, dilation),
                name=f"b{j + 1}",
            )(x)
        return x


class RegNet(nn.Module):
    """RegNet X/Y from the paper's parameters.

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the pooled features
    `[batch, channels]` when `num_classes` is 0 or None.
    """

    default_image_size: ClassVar[int] = 224

    w0: int
    wa: float
    wm: float
    depth: int
    group_width: int
    se_ratio: float = 0.0  # Y: 0.25 of each block's input width
    bottleneck_ratio: float = 1.0
    stem_width: int = 32
    width_rounding: str = "divisible"  # torchvision's; 'nearest' is pycls's (module docstring)
    num_classes: int | None = 1000
    dropout_rate: float = 0.0
    dtype: Any = jnp.float32
    act: Callable = nn.relu
    conv: ModuleDef = Conv
    # Of the stem and the 3x3 convolutions: PyTorch's symmetric padding, as torchvision's and
    # timm's weights were trained; Keras's RegNets pad TensorFlow's 'SAME' (one pixel at the
    # bottom and right only where a stride-2 layer sees an even map: `nets_weights/regnet.py`).
    padding: str = "SYMMETRIC"
    remat: bool | str = False  # stem, blocks recomputed in backward (nets.layers.remat.POLICIES)
    # Dilation for dense prediction (module docstring): 8 or 16 keep the maps at that stride;
    # None (or 32): none.
    output_stride: int | None = None

    @property
    def stages(self) -> tuple[Stage, ...]:
        return widths(
            self.w0,
            self.wa,
            self.wm,
            self.depth,
            self.group_width,
            self.bottleneck_ratio,
            self.width_rounding,
        )

    def stage_strides(self) -> list[StageStride]:
        """Each stage's stride and dilations (`nets.layers.dilation`), timm's rule: each stage
        halves the map until `output_stride`, one of the 8, 16 and 32 timm asserts (its stages
        reach 4 too); its `first_dilation` (1 for a stage of dilation 2, else 2) is the stage
        before's dilation at those strides."""
        strides = [2] * len(self.stages)
        return stage_strides(strides, self.output_stride, 2, taken=STANDARD_OUTPUT_STRIDES)

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: the stride-2 stem and each stage's output; the deep ones at
        `output_stride` under it."""
        strides = {"stem": 2, **{f"s{i + 1}": 2 ** (i + 2) for i in range(len(self.stages))}}
        self.stage_strides()  # refuses a stride the network does not reach
        return capped_strides(strides, self.output_stride)

    @nn.compact
    def __call__(self, x, train: bool = True):
        conv = partial(self.conv, use_bias=False, dtype=self.dtype)
        norm = batch_norm(TORCH, train, self.dtype)
        end_points = {}

        x = checkpointed(ConvNormAct, self.remat)(  # the largest maps: one unit for remat
            self.stem_width, 3, conv, norm, self.act, strides=2, padding=self.padding, name="stem"
        )(jnp.asarray(x, self.dtype))
        end_points["stem"] = x
        # timm's unit: each stage's blocks (`checkpoint_seq` over `b1`, `b2`, ...).
        block = partial(
            checkpointed(Bottleneck, self.remat),
            conv=conv,
            norm=norm,
            act=self.act,
            bottleneck_ratio=self.bottleneck_ratio,
            se_ratio=self.se_ratio,
            padding=self.padding,
        )
        for i, (stage, stride) in enumerate(zip(self.stages, self.stage_strides(), strict=True)):
            x = end_points[f"s{i + 1}"] = RegStage(stage, block, stride, name=f"s{i + 1}")(x)

        x = global_avg_pool(x)
        return classify(
            x,
            end_points,
            self.num_classes,
            train=train,
            dropout_rate=self.dropout_rate,
            dtype=self.dtype,
            name="fc",
            scope="head",
        )


# torchvision's twelve (the paper's Tables 4 and 5; timm's `regnetx_004_tv`, `regnetx_008`, ...).
_x = partial(RegNet, se_ratio=0.0)
_y = partial(RegNet, se_ratio=0.25)
regnet_x_400mf = partial(_x, w0=24, wa=24.48, wm=2.54, depth=22, group_width=16)
regnet_x_800mf = partial(_x, w0=56, wa=35.73, wm=2.28, depth=16, group_width=16)
regnet_x_1_6gf = partial(_x, w0=80, wa=34.01, wm=2.25, depth=18, group_width=24)
regnet_x_3_2gf = partial(_x, w0=88, wa=26.31, wm=2.25, depth=25, group_width=48)
regnet_x_8gf = partial(_x, w0=80, wa=49.56, wm=2.88, depth=23, group_width=120)
regnet_x_16gf = partial(_x, w0=216, wa=55.59, wm=2.1, depth=22, group_width=128)
regnet_y_400mf = partial(_y, w0=48, wa=27.89, wm=2.09, depth=16, group_width=8)
regnet_y_800mf = partial(_y, w0=56, wa=38.84, wm=2.4, depth=14, group_width=16)
regnet_y_1_6gf = partial(_y, w0=48, wa=20.71, wm=2.65, depth=27, group_width=24)
regnet_y_3_2gf = partial(_y, w0=80, wa=42.63, wm=2.66, depth=21, group_width=24)
regnet_y_8gf = partial(_y, w0=192, wa=76.82, wm=2.19, depth=17, group_width=56)
regnet_y_16gf = partial(_y, w0=200, wa=106.23, wm=2.48, depth=18, group_width=112)

# timm's pycls-weight networks where pycls's rounding gives other widths than torchvision's.
regnetx_004 = partial(regnet_x_400mf, width_rounding="nearest")
regnety_008 = partial(regnet_y_800mf, width_rounding="nearest")
regnety_080 = partial(regnet_y_8gf, width_rounding="nearest")

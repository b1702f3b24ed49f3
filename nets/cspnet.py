"""Cross Stage Partial networks: Wang et al. 2019, "CSPNet: A New Backbone that can Enhance
Learning Capability of CNN" (arXiv:1911.11929), with the backbones built from it, as timm builds
them (`timm/models/cspnet.py`, whose weights load): CSPResNet(X)t-50, YOLOv4's CSPDarkNet-53
(Bochkovskiy et al. 2020, arXiv:2004.10934), DarkNet-53 (Redmon & Farhadi 2018, arXiv:1804.02767)
and timm's CS3 networks (YOLOv5's cross stage, one transition).

A stem (convolutions, the first strided; CSPResNet's a max pool after them), then stages, each
opening with a strided 3x3 convolution (`conv_down`; DarkNet-AA's: a 2x2 average pool and a 1x1
convolution) and running blocks:

- `CrossStage` (CSPNet's): a 1x1 expansion (`conv_exp`, linear in CSPResNet), its channels split
  in two; the second half runs the blocks and a 1x1 transition (`conv_transition_b`), then both
  halves, concatenated, a last 1x1 (`conv_transition`).
- `CrossStage3` (CS3): the same with the blocks on the first half and no transition on their path.
- `DarkStage` (DarkNet): the blocks alone.

Blocks: `BottleneckBlock` (ResNet's 1x1, 3x3, linear 1x1; activation after the sum),
`DarkBlock` (1x1 then 3x3, both activated; the sum not) and `EdgeBlock` (3x3 then 1x1, as
DarkBlock), with a squeeze-and-excite gate on the inner width where `se_ratio` is set. Every
convolution has BatchNorm (PyTorch's epsilon) and the activation (leaky ReLU of slope 0.01, SiLU
in CS3) unless said otherwise, and pads PyTorch's symmetric way (`padding`); the focus stem's
6x6/2 convolution pads 2, which is that way too. Global average pooling, then the classifier.

Submodules carry timm's names: `stem/conv1/conv`, `stages_0/conv_down/bn`,
`stages_1/blocks_0/conv2/conv`, `.../attn/fc1`, `head/fc`. End points: `stem_conv` (the last
stem convolution's map, before the pool, where there is one), `stem`, `stages_0` ... `pre_logits`;
the feature pyramid is timm's `feature_info` (DarkNet's starts at stride 1, the stem's map).
`output_stride` (8 or 16) dilates the stages past it as timm's (`CspStage`); the parameters are
the same. Left out: timm's anti-aliasing layer, which no configuration uses.
"""

import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from nets.features import deepest_per_stride
from nets.layers import (
    TORCH,
    Conv,
    ConvNormAct,
    ModuleDef,
    SqueezeExcite,
    avg_pool,
    batch_norm,
    checkpointed,
    classify,
    drop_path,
    global_avg_pool,
    make_divisible,
    max_pool,
)
from nets.layers import dilation as dilation_rule
from nets.layers.drop_path import check_drop_path_rate, linear_drop_path_rates
from nets.layers.padding import smallest_input


class DarkBlock(nn.Module):
    """DarkNet's residual block: 1x1 to `round(features * bottle_ratio)`, the gate, 3x3 back to
    `features` (both with BatchNorm and activation), plus the input. timm's names: `conv1`,
    `attn`, `conv2`."""

    features: int
    bottle_ratio: float
    groups: int
    layer: ModuleDef  # `ConvNormAct` with the network's conv, norm, activation and padding
    conv: ModuleDef  # the gate's convolutions
    act: Callable
    se_ratio: float | None = None
    drop_path_rate: float = 0.0
    deterministic: bool = True
    dilation: int = 1  # of the 3x3 convolution (timm's `dilation`, the stage's)

    def gate(self, x: jax.Array, name: str) -> jax.Array:
        """timm's `SEModule` where `se_ratio` is set: `round(channels * se_ratio)` to a multiple
        of 8 (never up by the 10% rule), the block's activation, a logistic gate."""
        if self.se_ratio is None:
            return x
        squeeze = make_divisible(x.shape[-1] * self.se_ratio, 8, round_limit=0.0)
        gate = SqueezeExcite(
            self.conv,
            squeeze_channels=squeeze,
            act=self.act,
            gate=nn.sigmoid,
            name=name,
            layer_names=("fc1", "fc2"),
        )
        return gate(x)

    def residual(self, y: jax.Array, x: jax.Array) -> jax.Array:
        return x + drop_path(self, y, self.drop_path_rate, not self.deterministic)

    @property
    def width(self) -> int:
        return int(round(self.features * self.bottle_ratio))

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        y = self.gate(self.layer(self.width, 1, name="conv1")(x), "attn")
        y = self.layer(self.features, 3, groups=self.groups, dilation=self.dilation, name="conv2")(
            y
        )
        return self.residual(y, x)


class EdgeBlock(DarkBlock):
    """DarkBlock's kernels swapped (a fused-MBConv): 3x3 to the inner width, the gate, 1x1 back."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        y = self.layer(self.width, 3, groups=self.groups, dilation=self.dilation, name="conv1")(x)
        y = self.layer(self.features, 1, name="conv2")(self.gate(y, "attn"))
        return self.residual(y, x)


class BottleneckBlock(DarkBlock):
    """ResNe(X)t's bottleneck: 1x1, 3x3 in `groups`, the gate (`attn2`), a linear 1x1 (`conv3`),
    the sum, then the activation."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        y = self.layer(self.width, 1, name="conv1")(x)
        y = self.layer(self.width, 3, groups=self.groups, dilation=self.dilation, name="conv2")(y)
        y = self.layer(self.features, 1, act=None, name="conv3")(self.gate(y, "attn2"))
        return self.act(self.residual(y, x))


class Entry(nn.Module):
    """A stage's layers before its blocks: the downsampling where `down_features` is set
    (`conv_down`, a strided 3x3; DarkNet-AA's a 2x2 average pool where the stage strides and a 1x1,
    `conv_down_1`) and, in a cross stage, the 1x1 expansion (`conv_exp`) split in halves.

    The stage shares its scope with it (`nn.share_scope`), so its layers keep timm's paths while
    `remat` recomputes them as one unit, which keeps the stage's input only."""

    down_features: int | None
    strides: int
    groups: int
    avg_down: bool
    expansion: int | None  # conv_exp's width; None: no expansion, the map itself returned
    linear: bool  # the expansion has no activation (CSPResNet's)
    layer: ModuleDef
    dilation: int = 1  # of `conv_down` (timm's `first_dilation`)

    def down(self, x: jax.Array) -> jax.Array:
        if self.avg_down:  # timm's Sequential: the pool (index 0), the 1x1 convolution
            if self.strides == 2:  # a stage dilated in its place strides by 1: no pool
                x = avg_pool(x, (2, 2), (2, 2))
            return self.layer(self.down_features, 1, groups=self.groups, name="conv_down_1")(x)
        layer = self.layer(
            self.down_features,
            3,
            strides=self.strides,
            groups=self.groups,
            dilation=self.dilation,
            name="conv_down",
        )
        return layer(x)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array | tuple[jax.Array, jax.Array]:
        if self.down_features is not None:
            x = self.down(x)
        if self.expansion is None:
            return x
        act = {"act": None} if self.linear else {}
        x = self.layer(self.expansion, 1, **act, name="conv_exp")(x)
        return x[..., : self.expansion // 2], x[..., self.expansion // 2 :]


class Transition(nn.Module):
    """A cross stage's layers after its blocks: the second map's 1x1 where `width_b` is set
    (CSPNet's `conv_transition_b`, on the blocks' map), the two maps concatenated, the 1x1
    `conv_transition` to `features`. Shares the stage's scope as `Entry` does; as a unit of
    `remat` it keeps the two maps."""

    features: int
    width_b: int | None
    layer: ModuleDef

    @nn.compact
    def __call__(self, first: jax.Array, second: jax.Array) -> jax.Array:
        if self.width_b is not None:
            second = self.layer(self.width_b, 1, name="conv_transition_b")(second)
        x = jnp.concatenate([first, second], -1)
        return self.layer(self.features, 1, name="conv_transition")(x)


class CspStage(nn.Module):
    """What the three stages share: the entry (`Entry`) and the blocks. `down_growth`: the strided
    convolution widens to `features` (CSPDarkNet's) rather than keeping its input's width.

    Dilated (`CspNet.output_stride`), `strides` is 1, the blocks' 3x3 convolutions take
    `dilation` and the downsampling convolution `first_dilation` (timm's: the stage before's);
    a cross stage keeps its downsampling convolution where the two differ (its parameters)."""

    features: int
    strides: int
    groups: int
    block_ratio: float
    bottle_ratio: float
    expand_ratio: float
    cross_linear: bool  # the expansion has no activation (CSPResNet's)
    down_growth: bool
    avg_down: bool
    block: ModuleDef  # a block with all but `features`, `bottle_ratio`, `groups`, its rate
    layer: ModuleDef
    drop_path_rates: Sequence[float]  # one a block: the stage's depth
    remat: bool | str = False  # the entry and transition recomputed (`block` is already)
    dilation: int = 1
    first_dilation: int = 1

    def unit(self, module: ModuleDef, *fields: Any, name: str) -> nn.Module:
        """`module(*fields)`, one unit of `remat`, its layers at the stage's paths."""
        unit = checkpointed(module, self.remat)(*fields, name=name)
        nn.share_scope(self, unit)  # its layers at timm's paths (`Entry`'s docstring)
        return unit

    def entry(self, x: jax.Array, down_features: int | None, expansion: int | None) -> Any:
        fields = (self.strides, self.groups, self.avg_down, expansion, self.cross_linear)
        fields += (self.layer, self.first_dilation)
        return self.unit(Entry, down_features, *fields, name="entry")(x)

    def blocks(self, x: jax.Array) -> jax.Array:
        width = int(round(self.features * self.block_ratio))
        for j, rate in enumerate(self.drop_path_rates):
            block = self.block(
                width,
                self.bottle_ratio,
                self.groups,
                drop_path_rate=rate,
                dilation=self.dilation,
                name=f"blocks_{j}",
            )
            x = block(x)
        return x

    def expand(self, x: jax.Array) -> tuple[jax.Array, jax.Array, int]:
        """A cross stage's entry: the strided convolution where the stage strides, the
        expansion, its two halves."""
        down = None
        if self.strides != 1 or self.first_dilation != self.dilation:
            grows = self.down_growth or self.avg_down  # the average pool's 1x1: to `features`
            down = self.features if grows else x.shape[-1]
        width = int(round(self.features * self.expand_ratio))
        return *self.entry(x, down, width), width


class CrossStage(CspStage):
    """CSPNet's stage (module docstring): the blocks on the second half."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        cross, x, width = self.expand(x)
        transition = self.unit(Transition, self.features, width // 2, self.layer, name="transition")
        return transition(cross, self.blocks(x))


class CrossStage3(CspStage):
    """CS3's stage: the blocks on the first half, one transition."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x, cross, _ = self.expand(x)
        transition = self.unit(Transition, self.features, None, self.layer, name="transition")
        return transition(self.blocks(x), cross)


class DarkStage(CspStage):
    """DarkNet's stage: the strided convolution to `features`, then the blocks."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return self.blocks(self.entry(x, self.features, None))


def _per_stage(value: Any, stages: int, field: str) -> tuple:
    """A field's value for each stage: one for all, or one each."""
    if not isinstance(value, Sequence):
        return (value,) * stages
    if len(value) != stages:
        raise ValueError(f"{field} has {len(value)} entries for {stages} stages: {value}")
    return tuple(value)


class CspNet(nn.Module):
    """CSPNet, DarkNet and CS3 networks (module docstring) for ImageNet-sized inputs.

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the pooled features
    `[batch, widths[-1]]` when `num_classes` is 0 or None. The per-stage fields take one value
    for every stage or a tuple of one each.
    """

    default_image_size: ClassVar[int] = 256  # timm's input size for every variant

    depths: Sequence[int]
    widths: Sequence[int]
    stage: ModuleDef = CrossStage  # CrossStage, CrossStage3 or DarkStage
    block: ModuleDef = BottleneckBlock  # BottleneckBlock, DarkBlock or EdgeBlock
    stem_widths: Sequence[int] = (32,)
    stem_kernel_size: int = 3
    stem_strides: int = 2  # 1, 2 or 4; 4 strides the first and (without the pool) last conv
    stem_pool: bool = False  # a 3x3/2 max pool after the stem convolutions (CSPResNet's)
    strides: int | Sequence[int] = 2
    groups: int | Sequence[int] = 1
    block_ratio: float | Sequence[float] = 1.0  # the blocks' width over the stage's
    bottle_ratio: float | Sequence[float] = 1.0  # a block's inner width over its own
    expand_ratio: float | Sequence[float] = 1.0  # the cross stage's expansion over its width
    cross_linear: bool = False
    down_growth: bool = False
    avg_down: bool = False  # downsample by a 2x2 average pool and a 1x1 convolution
    se_ratio: float | None = None  # each block's squeeze-and-excite over its inner width
    num_classes: int | None = 1000
    dropout_rate: float = 0.0
    # Stochastic depth of each block's residual branch, rising linearly from 0 at the first block
    # to this rate at the last (timm's rule); training only, from the 'dropout' rng.
    drop_path_rate: float = 0.0
    padding: Any = "SYMMETRIC"  # timm's; 'SAME' computes another function with its weights
    dtype: Any = jnp.float32
    act: Callable = nn.leaky_relu
    conv: ModuleDef = Conv
    # The stem, the blocks and the layers around them recomputed in backward, each unit keeping
    # its input (str: nets.layers.remat.POLICIES, what a unit keeps besides).
    remat: bool | str = False
    # timm's dilation for dense prediction: 8 or 16 keeps the deepest maps at that stride, the
    # stages past it dilated (`CspStage`); None (or 32): the network as published.
    output_stride: int | None = None

    def stem_conv_strides(self) -> list[int]:
        """timm's rule: the first strided; at 4 without the pool, the last too."""
        last, s = len(self.stem_widths) - 1, self.stem_strides
        return [
            2 if (i == 0 and s > 1) or (i == last and s > 2 and not self.stem_pool) else 1
            for i in range(last + 1)
        ]

    def stage_strides(self) -> tuple[int, ...]:
        """Each stage's own stride (the published network's)."""
        return _per_stage(self.strides, len(self.depths), "strides")

    def stem_stride(self) -> int:
        return math.prod(self.stem_conv_strides()) * (2 if self.stem_pool else 1)

    def dilated_strides(self) -> list[dilation_rule.StageStride]:
        """Each stage's stride and dilations at `output_stride` (timm's `create_csp_stages`:
        a stage that would stride past it strides by 1 and multiplies the dilation; its
        downsampling convolution's `first_dilation = 1 if dilation in (1, 2) else 2`, which is
        the stage before's dilation wherever 8, 16 and 32 reach: at most 4)."""
        return dilation_rule.stage_strides(  # timm's values (DarkNet's stages reach 2, 4 too)
            self.stage_strides(),
            self.output_stride,
            self.stem_stride(),
            taken=dilation_rule.STANDARD_OUTPUT_STRIDES,
        )

    @property
    def min_image_size(self) -> int:
        """Every window pads symmetrically and rounds up but the focus stem's 6x6/2 and the 2x2
        average pools, which floor (a stage dilated in place of its stride keeps its map)."""
        k = self.stem_kernel_size
        windows = [(k, s, 2 * ((k - 1) // 2)) for s in self.stem_conv_strides()]
        windows += [(3, 2, 2)] if self.stem_pool else []
        strides = [s.stride for s in self.dilated_strides()]
        windows += [(2, s, 0) if self.avg_down and s == 2 else (3, s, 2) for s in strides]
        return smallest_input(windows)

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: the stem's last convolution (before the pool), the stem, each
        stage; the deepest map at each (published) stride; at `output_stride`, the deeper levels
        at that stride."""
        stride = math.prod(self.stem_conv_strides())
        levels = [("stem_conv", stride)] if self.stem_pool else []
        stride *= 2 if self.stem_pool else 1
        levels.append(("stem", stride))
        for i, s in enumerate(self.stage_strides()):
            stride *= s
            levels.append((f"stages_{i}", stride))
        self.dilated_strides()  # a bad `output_stride`'s error, here too
        return dilation_rule.capped_strides(deepest_per_stride(levels), self.output_stride)

    @nn.compact
    def __call__(self, x, train: bool = True):
        check_drop_path_rate(self.drop_path_rate)
        norm = batch_norm(TORCH, train, self.dtype)
        conv = partial(self.conv, dtype=self.dtype)
        layer = partial(ConvNormAct, conv=conv, norm=norm, act=self.act, padding=self.padding)
        end_points = {}

        x = jnp.asarray(x, self.dtype)
        stem = checkpointed(Stem, self.remat)(
            self.stem_widths,
            self.stem_kernel_size,
            self.stem_conv_strides(),
            layer,
            self.stem_pool,
            self.padding,
            name="stem",
        )
        stem_conv, x = stem(x)
        if self.stem_pool:
            end_points["stem_conv"] = stem_conv
        end_points["stem"] = x

        n = len(self.depths)
        per_stage = {
            field: _per_stage(getattr(self, field), n, field)
            for field in ("widths", "groups", "block_ratio", "bottle_ratio", "expand_ratio")
        }
        rates = iter(linear_drop_path_rates(self.drop_path_rate, sum(self.depths)))
        # timm checkpoints each stage's blocks only; here the stem and each stage's layers before
        # and after its blocks (`Entry`, `Transition`) are units too: they work at the highest
        # resolutions (with the blocks alone, CSPDarkNet-53 kept 3/4 of its activations).
        block = partial(
            checkpointed(self.block, self.remat),
            layer=layer,
            conv=conv,
            act=self.act,
            se_ratio=self.se_ratio,
            deterministic=not train,
        )
        for i, (depth, s) in enumerate(zip(self.depths, self.dilated_strides(), strict=True)):
            x = self.stage(
                per_stage["widths"][i],
                s.stride,
                *(per_stage[f][i] for f in ("groups", "block_ratio", "bottle_ratio")),
                per_stage["expand_ratio"][i],
                cross_linear=self.cross_linear,
                down_growth=self.down_growth,
                avg_down=self.avg_down,
                block=block,
                layer=layer,
                drop_path_rates=tuple(next(rates) for _ in range(depth)),
                remat=self.remat,
                dilation=s.dilation,
                first_dilation=s.first_dilation,
                name=f"stages_{i}",
            )(x)
            end_points[f"stages_{i}"] = x
        return classify(
            global_avg_pool(x),
            end_points,
            self.num_classes,
            train=train,
            dropout_rate=self.dropout_rate,
            dtype=self.dtype,
            name="fc",
            scope="head",
        )


class Stem(nn.Module):
    """The stem's convolutions, `conv1`, `conv2`, ... (timm's `stem` Sequential), then its 3x3/2
    max pool where `pool`. Returns the last convolution's map and the stem's (the pooled one, or
    the same): one unit of `remat`, which keeps the image only."""

    widths: Sequence[int]
    kernel_size: int
    strides: Sequence[int]
    layer: ModuleDef
    pool: bool
    padding: Any  # the pool's

    @nn.compact
    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        for i, (width, s) in enumerate(zip(self.widths, self.strides, strict=True)):
            x = self.layer(width, self.kernel_size, strides=s, name=f"conv{i + 1}")(x)
        if not self.pool:
            return x, x
        return x, max_pool(x, (3, 3), (2, 2), padding=self.padding)


def _cs3(
    width: float = 1.0,
    depth: float = 1.0,
    focus: bool = False,
    block: ModuleDef = DarkBlock,
    **fields: Any,
) -> partial:
    """timm's CS3 table (`_cs3_cfg`): CSPDarkNet-53's widths and YOLOv5's depths (3, 6, 9, 3),
    each scaled; the stem two 3x3 convolutions, or the focus stem's one 6x6/2."""
    stem = (64,) if focus else (32, 64)
    return partial(
        CspNet,
        depths=tuple(int(d * depth) for d in (3, 6, 9, 3)),
        widths=tuple(make_divisible(c * width) for c in (128, 256, 512, 1024)),
        stage=CrossStage3,
        block=block,
        stem_widths=tuple(make_divisible(c * width) for c in stem),
        stem_kernel_size=6 if focus else 3,
        block_ratio=0.5,
        act=nn.silu,
        **fields,
    )


_CSPRESNET = {
    "depths": (3, 3, 5, 2),
    "strides": (1, 2, 2, 2),
    "stem_strides": 4,
    "stem_pool": True,
    "cross_linear": True,
}
_DEEP_STEM = {"stem_widths": (32, 32, 64)}
_RESNET_STEM = {"stem_widths": (64,), "stem_kernel_size": 7}
_WIDE = (256, 512, 1024, 2048)
_DARKNET = {
    "widths": (64, 128, 256, 512, 1024),
    "stage": DarkStage,
    "block": DarkBlock,
    "stem_strides": 1,
    "bottle_ratio": 0.5,
}
_NARROW = {"widths": (128, 256, 512, 1024), "expand_ratio": 2.0, "bottle_ratio": 0.5}
cspresnet50 = partial(CspNet, **_NARROW, **_CSPRESNET, **_RESNET_STEM)
cspresnet50d = partial(CspNet, **_NARROW, **_CSPRESNET, **_DEEP_STEM)
cspresnet50w = partial(
    CspNet, widths=_WIDE, bottle_ratio=0.25, block_ratio=0.5, **_CSPRESNET, **_DEEP_STEM
)
cspresnext50 = partial(
    CspNet, widths=_WIDE, groups=32, block_ratio=0.5, **_CSPRESNET, **_RESNET_STEM
)
cspdarknet53 = partial(
    CspNet,
    depths=(1, 2, 8, 8, 4),
    **{**_DARKNET, "stage": CrossStage, "bottle_ratio": (0.5, 1.0, 1.0, 1.0, 1.0)},
    expand_ratio=(2.0, 1.0, 1.0, 1.0, 1.0),
    block_ratio=(1.0, 0.5, 0.5, 0.5, 0.5),
    down_growth=True,
)
darknet17 = partial(CspNet, depths=(1, 1, 1, 1, 1), **_DARKNET)
darknet21 = partial(CspNet, depths=(1, 1, 1, 2, 2), **_DARKNET)
sedarknet21 = partial(CspNet, depths=(1, 1, 1, 2, 2), se_ratio=1 / 16, **_DARKNET)
darknet53 = partial(CspNet, depths=(1, 2, 8, 8, 4), **_DARKNET)
darknetaa53 = partial(CspNet, depths=(1, 2, 8, 8, 4), avg_down=True, **_DARKNET)
cs3darknet_s = _cs3(0.5, 0.5)
cs3darknet_m = _cs3(0.75, 0.67)
cs3darknet_l = _cs3()
cs3darknet_x = _cs3(1.25, 1.33)
cs3darknet_focus_s = _cs3(0.5, 0.5, focus=True)
cs3darknet_focus_m = _cs3(0.75, 0.67, focus=True)
cs3darknet_focus_l = _cs3(focus=True)
cs3darknet_focus_x = _cs3(1.25, 1.33, focus=True)
cs3sedarknet_l = _cs3(se_ratio=0.25)
cs3sedarknet_x = _cs3(1.25, 1.33, se_ratio=1 / 16)
# timm's "xdw": CSPNet's cross stages of grouped bottlenecks (1, 1, 256 and 512 groups).
cs3sedarknet_xdw = partial(
    CspNet,
    depths=(3, 6, 12, 4),
    widths=_WIDE,
    stem_widths=(32, 64),
    groups=(1, 1, 256, 512),
    bottle_ratio=0.5,
    block_ratio=0.5,
    se_ratio=1 / 16,
    act=nn.silu,
)
cs3edgenet_x = _cs3(1.25, 1.33, bottle_ratio=1.5, block=EdgeBlock)
cs3se_edgenet_x = _cs3(1.25, 1.33, bottle_ratio=1.5, block=EdgeBlock, se_ratio=0.25)

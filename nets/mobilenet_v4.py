"""MobileNetV4's convolutional and hybrid networks, as timm builds them (`timm.models.mobilenetv3`'s
`_gen_mobilenet_v4`).

Qin et al. 2024, "MobileNetV4 - Universal Models for the Mobile Ecosystem" (arXiv:2404.10518).
A 3x3 stride-2 convolution (the stem), five stages of blocks, global average pooling, then a 1x1
convolution to 1280 with BatchNorm and the activation (after the pool, as V3's head, but
normalised: timm's `head_norm=True`, no bias), dropout and the logits. ReLU everywhere (exact
GELU in Hybrid-Large). Blocks:

- the Universal Inverted Bottleneck (`UniversalInvertedResidual`, the paper's UIB, timm's `uir`):
  an optional kxk depthwise convolution on the block's input (`start_kernel`, BatchNorm, no
  activation), a 1x1 expansion, an optional kxk depthwise convolution on the expanded map
  (`kernel_size`), a linear 1x1 projection, plus the input when the stride is 1 and the widths
  agree. The paper's four instances are settings of the two kernels: ExtraDW (both), IB (the
  middle one: MobileNet V2's block), ConvNeXt-like (the start one), FFN (neither). The stride is
  the middle convolution's, or the start one's where there is no middle one.
- the Fused IB (`nets.layers.FusedMBConv`, timm's `EdgeResidual`, `er`): a kxk strided expansion
  and a 1x1 projection (Medium's and Large's first stage);
- plain convolutions with BatchNorm and ReLU (timm's `ConvBnAct`, `cn`, without residual): Small's
  first stages, and every variant's last stage, a 1x1 convolution to 960 before the pool;
- in the hybrids, Mobile MQA (`MobileMultiQueryAttention`): BatchNorm, multi-query attention
  (one key and value shared by the heads, downsampled 2x by a strided depthwise convolution in
  the stride-16 stage), a 1x1 projection and the residual; the hybrids' UIBs and attention
  blocks scale their branch by a learnt per-channel layer scale from 1e-5 (timm's).

The stage tables are timm's `arch_def`s (the paper's Tables 11-14). Conventions: PyTorch's
symmetric padding and BatchNorm epsilon 1e-5, decay 0.9 (timm's definitions, with which its
weights were trained). Widths are `make_divisible(c * width_multiplier, 8)` (timm's
`round_channels`); below multiplier 1 the stem keeps its 32 channels (timm's `fix_stem`), and the
head is 1280 at any width. Stochastic depth (`drop_path_rate`, off by default) grows linearly with
the block's index over all blocks, as timm's builder sets it; dropout before the logits is 0.2 by
default (timm's constructor leaves it 0 for its training scripts to set).

`output_stride` (timm's, for dense prediction; None: the network as it is): 4, 8, 16 or 32; past
it a stage's first block strides 1 with the dilation before it, and the rest dilate their kxk
convolutions by the strides given up (timm's `EfficientNetBuilder`: the UIB's two depthwise
convolutions, the Mobile MQA block's strided key and value convolutions, the plain ones). timm's
classifier builds at 32 whatever it is given; its `features_only` trunk takes `output_stride`.

Parameters are named by scope: `stem`, `blocks_{stage}_{block}` (a UIB's `dw_start`, `pw_exp`,
`dw_mid`, `pw_proj`, timm's names; a Fused IB's `expand`, `project`; a plain convolution's `conv`
and `bn`; a Mobile MQA block's `norm`, `query_proj`, `key_down_conv`, `key_norm`, `key_proj`,
`value_*`, `output_proj`; the hybrids' `layer_scale/gamma`), `head`, `classifier`
(`nets_weights/mobilenet_v4.py` maps them to timm's keys).
End points: `stem`, `blocks_{s}` (stage `s`'s output), `global_pool` (`[batch, 1, 1, c]`), `head`
(`[batch, 1, 1, 1280]`), `pre_logits`, `logits`, `predictions`.

Left out: timm's anti-aliased `conv_aa_*` / `conv_blur_*` variants (average or blur pooling in
the strided convolutions), its untrained `hybrid_*_075`, and the UIB's end depthwise convolution,
which no MobileNetV4 table uses.

Parameters at 1000 classes are timm's: 3,774,024 (Small), 9,715,512 (Medium), 32,590,864 (Large);
2,238,952 (Small at width 0.5), 1,905,384 (at 0.35); 11,074,648 (Hybrid-Medium), 37,764,624
(Hybrid-Large).
"""

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from nets.features import cumulative_strides, deepest_per_stride
from nets.layers import (
    TORCH,
    Conv,
    ConvNormAct,
    DotProductAttention,
    FusedMBConv,
    LayerScale,
    ModuleDef,
    batch_norm,
    checkpointed,
    classify,
    gelu,
    global_avg_pool,
    make_divisible,
)
from nets.layers.dilation import StageStride, capped_strides, dilated, stage_strides
from nets.layers.drop_path import check_drop_path_rate
from nets.layers.inverted_residual import add_residual
from nets.layers.padding import PaddingLike


class UniversalInvertedResidual(nn.Module):
    """The Universal Inverted Bottleneck (the paper's Figure 4; timm's
    `UniversalInvertedResidual`): `[n, h, w, c] -> [n, h / strides, w / strides, filters]`.

    Optional depthwise `start_kernel` (BatchNorm, no activation) -> 1x1 expansion to
    `make_divisible(c * expansion, 8)` -> optional depthwise `kernel_size` -> linear 1x1
    projection, plus the input when the stride is 1 and the widths agree (stochastic depth on the
    branch: `add_residual`). A kernel of 0 leaves its convolution out; the stride is taken by the
    middle convolution, or by the start one where there is no middle one.
    """

    filters: int
    expansion: float
    conv: ModuleDef
    norm: ModuleDef
    act: Callable
    start_kernel: int = 0
    kernel_size: int = 3
    strides: int = 1
    padding: PaddingLike = "SYMMETRIC"
    layer_scale_init_value: float | None = None  # the hybrids' 1e-5; None: no layer scale
    drop_path_rate: float = 0.0
    deterministic: bool = True
    dilation: int = 1  # of both depthwise convolutions (timm's: an `output_stride`)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        inputs, channels = x, x.shape[-1]
        s = self.strides
        if s > 1 and not (self.start_kernel or self.kernel_size):
            raise ValueError("a strided UniversalInvertedResidual needs a depthwise convolution")
        layer = partial(ConvNormAct, conv=self.conv, norm=self.norm, padding=self.padding)
        depthwise = partial(layer, dilation=self.dilation)
        if self.start_kernel:
            stride = 1 if self.kernel_size else s
            x = depthwise(
                channels, self.start_kernel, strides=stride, groups=channels, name="dw_start"
            )(x)
        inner = make_divisible(channels * self.expansion, 8)
        x = layer(inner, 1, act=self.act, name="pw_exp")(x)
        if self.kernel_size:
            x = depthwise(
                inner, self.kernel_size, act=self.act, strides=s, groups=inner, name="dw_mid"
            )(x)
        x = layer(self.filters, 1, name="pw_proj")(x)
        if self.layer_scale_init_value is not None:
            x = LayerScale(self.layer_scale_init_value, name="layer_scale")(x)
        if s == 1 and channels == self.filters:
            x = add_residual(x, inputs, self.drop_path_rate, self.deterministic)
        return x


class MobileMultiQueryAttention(nn.Module):
    """The hybrids' Mobile MQA block (the paper's section 4; timm's `MobileAttention` with
    `MultiQueryAttention2d`): `x + layer_scale(attention(norm(x)))`, `[n, h, w, c] -> [n, h, w,
    filters]` (the residual where the widths agree).

    BatchNorm without activation, then multi-query attention: `heads` queries of `key_dim` from a
    1x1 convolution of every position, one key and one value of `key_dim` shared by the heads,
    each from a 1x1 convolution of the map, which `kv_stride` 2 first downsamples by a strided
    depthwise `kernel_size` convolution with BatchNorm (the paper's spatially reduced attention);
    softmax(q k^T / sqrt(key_dim)) v, the heads concatenated (head-major channels) and projected by
    a 1x1 convolution. Convolutions without biases.
    """

    filters: int
    heads: int
    key_dim: int
    conv: ModuleDef
    norm: ModuleDef
    kernel_size: int = 3
    kv_stride: int = 1
    padding: PaddingLike = "SYMMETRIC"
    layer_scale_init_value: float | None = None
    drop_path_rate: float = 0.0
    deterministic: bool = True
    dilation: int = 1  # of the keys' and values' strided depthwise convolutions (timm's)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        inputs, (n, h, w, c) = x, x.shape
        x = self.norm(name="norm")(x)
        one = partial(self.conv, kernel_size=(1, 1), use_bias=False)
        query = one(self.heads * self.key_dim, name="query_proj")(x)
        query = query.reshape(n, h * w, self.heads, self.key_dim)

        def shared(kind: str) -> jax.Array:  # the key or the value, one head
            y = x
            if self.kv_stride > 1:
                k, s = (self.kernel_size,) * 2, (self.kv_stride,) * 2
                down = dilated(self.conv, self.dilation)
                y = down(c, k, s, padding=self.padding, feature_group_count=c, use_bias=False,
                         name=f"{kind}_down_conv")(y)  # fmt: skip
                y = self.norm(name=f"{kind}_norm")(y)
            y = one(self.key_dim, name=f"{kind}_proj")(y)
            return y.reshape(n, -1, 1, self.key_dim)

        out = DotProductAttention()(query, shared("key"), shared("value"))
        x = one(self.filters, name="output_proj")(out.reshape(n, h, w, -1))
        if self.layer_scale_init_value is not None:
            x = LayerScale(self.layer_scale_init_value, name="layer_scale")(x)
        if c == self.filters:
            x = add_residual(x, inputs, self.drop_path_rate, self.deterministic)
        return x


class BlockDef(NamedTuple):
    """A row of timm's MobileNetV4 `arch_def`: `kind` 'uir' (`uir_r{repeats}_a{start_kernel}
    _k{kernel_size}_s{strides}_e{expansion}_c{filters}`), 'fused' (`er_..._k_s_e_c`) or 'conv'
    (`cn_..._k_s_c`), and in the hybrids 'mqa' (`mqa_r1_k{kernel_size}_h{heads}_s1_v{kv_stride}
    _d{key_dim}_c{filters}`, a Mobile MQA block). Only a stage's first block is strided."""

    kind: str
    filters: int
    kernel_size: int
    strides: int = 1
    expansion: float = 1.0
    start_kernel: int = 0
    repeats: int = 1
    heads: int = 0
    key_dim: int = 0
    kv_stride: int = 1


BLOCK_KINDS = ("uir", "fused", "conv", "mqa")


def uir(filters, start_kernel, kernel_size, strides, expansion, repeats=1) -> BlockDef:
    """timm's `uir_r{repeats}_a{start_kernel}_k{kernel_size}_s{strides}_e{expansion}_c{filters}`."""
    return BlockDef("uir", filters, kernel_size, strides, expansion, start_kernel, repeats)


def cn(filters, kernel_size, strides=1) -> BlockDef:
    """timm's `cn_r1_k{kernel_size}_s{strides}_c{filters}`: a convolution, BatchNorm, ReLU."""
    return BlockDef("conv", filters, kernel_size, strides)


def er(filters, kernel_size, strides, expansion) -> BlockDef:
    """timm's `er_r1_k{kernel_size}_s{strides}_e{expansion}_c{filters}`: a Fused IB."""
    return BlockDef("fused", filters, kernel_size, strides, expansion)


def mqa(filters, heads, key_dim, kv_stride=1) -> BlockDef:
    """timm's `mqa_r1_k3_h{heads}_s1_v{kv_stride}_d{key_dim}_c{filters}`: Mobile MQA."""
    return BlockDef("mqa", filters, 3, heads=heads, key_dim=key_dim, kv_stride=kv_stride)


# The last stage of every variant: a 1x1 convolution to 960 before the pool.
HEAD_STAGE = (cn(960, 1),)

# timm's `_gen_mobilenet_v4` conv tables (the paper's Tables 11, 12 and 13).
CONV_SMALL = (
    (cn(32, 3, 2), cn(32, 1)),
    (cn(96, 3, 2), cn(64, 1)),
    (uir(96, 5, 5, 2, 3), uir(96, 0, 3, 1, 2, repeats=4), uir(96, 3, 0, 1, 4)),
    (
        uir(128, 3, 3, 2, 6),
        uir(128, 5, 5, 1, 4),
        uir(128, 0, 5, 1, 4),
        uir(128, 0, 5, 1, 3),
        uir(128, 0, 3, 1, 4, repeats=2),
    ),
    HEAD_STAGE,
)
CONV_MEDIUM = (
    (er(48, 3, 2, 4),),
    (uir(80, 3, 5, 2, 4), uir(80, 3, 3, 1, 2)),
    (
        uir(160, 3, 5, 2, 6),
        uir(160, 3, 3, 1, 4, repeats=2),
        uir(160, 3, 5, 1, 4),
        uir(160, 3, 3, 1, 4),
        uir(160, 3, 0, 1, 4),
        uir(160, 0, 0, 1, 2),
        uir(160, 3, 0, 1, 4),
    ),
    (
        uir(256, 5, 5, 2, 6),
        uir(256, 5, 5, 1, 4),
        uir(256, 3, 5, 1, 4, repeats=2),
        uir(256, 0, 0, 1, 4),
        uir(256, 3, 0, 1, 4),
        uir(256, 3, 5, 1, 2),
        uir(256, 5, 5, 1, 4),
        uir(256, 0, 0, 1, 4, repeats=2),
        uir(256, 5, 0, 1, 2),
    ),
    HEAD_STAGE,
)
CONV_LARGE = (
    (er(48, 3, 2, 4),),
    (uir(96, 3, 5, 2, 4), uir(96, 3, 3, 1, 4)),
    (
        uir(192, 3, 5, 2, 4),
        uir(192, 3, 3, 1, 4, repeats=3),
        uir(192, 3, 5, 1, 4),
        uir(192, 5, 3, 1, 4, repeats=5),
        uir(192, 3, 0, 1, 4),
    ),
    (
        uir(512, 5, 5, 2, 4, repeats=4),
        uir(512, 5, 0, 1, 4),
        uir(512, 5, 3, 1, 4),
        uir(512, 5, 0, 1, 4, repeats=2),
        uir(512, 5, 3, 1, 4),
        uir(512, 5, 5, 1, 4),
        uir(512, 5, 0, 1, 4, repeats=3),
    ),
    HEAD_STAGE,
)


# The hybrids' (timm's tables, the paper's Table 14 for Medium): Conv-Medium's and Conv-Large's
# stages with Mobile MQA blocks interleaved in the last two, keys and values downsampled 2x in
# the 16-stride stage.
_M16, _M32 = mqa(160, 4, 64, kv_stride=2), mqa(256, 4, 64)
HYBRID_MEDIUM = (
    CONV_MEDIUM[0],
    CONV_MEDIUM[1],
    (
        uir(160, 3, 5, 2, 6),
        uir(160, 0, 0, 1, 2),
        uir(160, 3, 3, 1, 4),
        uir(160, 3, 5, 1, 4),
        _M16,
        uir(160, 3, 3, 1, 4),
        _M16,
        uir(160, 3, 0, 1, 4),
        _M16,
        uir(160, 3, 3, 1, 4),
        _M16,
        uir(160, 3, 0, 1, 4),
    ),
    (
        uir(256, 5, 5, 2, 6),
        uir(256, 5, 5, 1, 4),
        uir(256, 3, 5, 1, 4, repeats=2),
        uir(256, 0, 0, 1, 2),
        uir(256, 3, 5, 1, 2),
        uir(256, 0, 0, 1, 2),
        uir(256, 0, 0, 1, 4),
        _M32,
        uir(256, 3, 0, 1, 4),
        _M32,
        uir(256, 5, 5, 1, 4),
        _M32,
        uir(256, 5, 0, 1, 4),
        _M32,
        uir(256, 5, 0, 1, 4),
    ),
    HEAD_STAGE,
)
_L16, _L32 = mqa(192, 8, 48, kv_stride=2), mqa(512, 8, 64)
HYBRID_LARGE = (
    CONV_LARGE[0],
    CONV_LARGE[1],
    (
        uir(192, 3, 5, 2, 4),
        uir(192, 3, 3, 1, 4, repeats=3),
        uir(192, 3, 5, 1, 4),
        uir(192, 5, 3, 1, 4, repeats=2),
        _L16,
        uir(192, 5, 3, 1, 4),
        _L16,
        uir(192, 5, 3, 1, 4),
        _L16,
        uir(192, 5, 3, 1, 4),
        _L16,
        uir(192, 3, 0, 1, 4),
    ),
    (
        uir(512, 5, 5, 2, 4, repeats=4),
        uir(512, 5, 0, 1, 4),
        uir(512, 5, 3, 1, 4),
        uir(512, 5, 0, 1, 4, repeats=2),
        uir(512, 5, 3, 1, 4),
        uir(512, 5, 5, 1, 4),
        _L32,
        uir(512, 5, 0, 1, 4),
        _L32,
        uir(512, 5, 0, 1, 4),
        _L32,
        uir(512, 5, 0, 1, 4),
        _L32,
        uir(512, 5, 0, 1, 4),
    ),
    HEAD_STAGE,
)


class MobileNetV4(nn.Module):
    """MobileNetV4: `stages` of blocks (`BlockDef` rows) scaled by `width_multiplier`.

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the pooled and
    head-convolved features `[batch, head_filters]` when `num_classes` is 0 or None (timm's
    `pre_logits`). End points: `stem`, `blocks_{s}`, `global_pool`, `head`, `pre_logits`,
    `logits`, `predictions`.
    """

    stages: Sequence[Sequence[BlockDef]]
    default_image_size: int = 224  # timm's default weights' training size
    stem_filters: int = 32
    head_filters: int = 1280  # unscaled at any width (timm's `num_features`)
    width_multiplier: float = 1.0
    num_classes: int | None = 1000
    dropout_rate: float = 0.2
    drop_path_rate: float = 0.0
    act: Callable = nn.relu
    # The hybrids' layer scale of each UIB's and Mobile MQA block's branch; None: none.
    layer_scale_init_value: float | None = None
    dtype: Any = jnp.float32
    conv: ModuleDef = Conv
    # timm's own definitions: PyTorch's symmetric padding, BatchNorm epsilon 1e-5 and decay 0.9.
    padding: str = "SYMMETRIC"
    bn_epsilon: float = TORCH.epsilon
    bn_momentum: float = TORCH.momentum
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
        strides = [stage[0].strides for stage in self.stages]
        return stage_strides(strides, self.output_stride, 2)

    def stem_width(self) -> int:
        """The stem's channels: scaled at multipliers of 1 and more, else kept (`fix_stem`)."""
        return self.stem_filters if self.width_multiplier < 1 else self.width(self.stem_filters)

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: the stem and the deepest stage at each stride (the 960-wide
        last stage at 32, a stage of blocks in timm)."""
        names = [f"blocks_{s}" for s in range(len(self.stages))]
        levels = cumulative_strides(names, [stage[0].strides for stage in self.stages], 2)
        strides = deepest_per_stride([("stem", 2), *levels])
        self.stage_plan()  # refuses an output_stride the network does not reach
        return capped_strides(strides, self.output_stride)

    @nn.compact
    def __call__(self, x, train: bool = True):
        if self.width_multiplier <= 0:
            raise ValueError(f"width_multiplier must be positive, got {self.width_multiplier}")
        check_drop_path_rate(self.drop_path_rate)
        conv = partial(self.conv, dtype=self.dtype)
        convention = TORCH._replace(epsilon=self.bn_epsilon, momentum=self.bn_momentum)
        norm = batch_norm(convention, train, self.dtype)
        layer = partial(ConvNormAct, conv=conv, norm=norm, act=self.act, padding=self.padding)
        common = {"conv": conv, "norm": norm, "act": self.act, "padding": self.padding}

        stem = checkpointed(layer, self.remat)  # the largest maps: one unit for remat
        x = stem(self.stem_width(), 3, strides=2, name="stem")(jnp.asarray(x, self.dtype))
        end_points = {"stem": x}
        blocks = [[b for b in stage for _ in range(b.repeats)] for stage in self.stages]
        total, index = sum(map(len, blocks)), 0
        for s, (stage, plan) in enumerate(zip(blocks, self.stage_plan(), strict=True)):
            for j, b in enumerate(stage):
                name, strides = f"blocks_{s}_{j}", plan.stride if j == 0 else 1
                dilation = plan.first_dilation if j == 0 else plan.dilation
                # What every kind but the plain convolution takes: drop path and dilation.
                each = {"drop_path_rate": self.drop_path_rate * index / total}
                each |= {"deterministic": not train, "dilation": dilation}
                scale = {"layer_scale_init_value": self.layer_scale_init_value}
                filters = self.width(b.filters)
                if b.kind == "conv":
                    x = checkpointed(layer, self.remat)(
                        filters, b.kernel_size, strides=strides, dilation=dilation,
                        name=name,
                    )(x)  # fmt: skip
                elif b.kind == "fused":
                    x = checkpointed(FusedMBConv, self.remat)(
                        filters, b.expansion, **common, kernel_size=b.kernel_size,
                        strides=strides, **each, name=name,
                    )(x)  # fmt: skip
                elif b.kind == "uir":
                    x = checkpointed(UniversalInvertedResidual, self.remat)(
                        filters, b.expansion, **common, start_kernel=b.start_kernel,
                        kernel_size=b.kernel_size, strides=strides, **scale, **each, name=name,
                    )(x)  # fmt: skip
                elif b.kind == "mqa":
                    x = checkpointed(MobileMultiQueryAttention, self.remat)(
                        filters, b.heads, b.key_dim, conv, norm, b.kernel_size, b.kv_stride,
                        self.padding, **scale, **each, name=name,
                    )(x)  # fmt: skip
                else:
                    raise ValueError(f"block kinds are {BLOCK_KINDS}, got {b.kind!r}")
                index += 1
            end_points[f"blocks_{s}"] = x
        x = end_points["global_pool"] = global_avg_pool(x, keepdims=True)
        x = end_points["head"] = layer(self.head_filters, 1, name="head")(x)
        head = partial(classify, train=train, dropout_rate=self.dropout_rate, dtype=self.dtype)
        return head(x[:, 0, 0, :], end_points, self.num_classes, name="classifier")


mobilenetv4_conv_small = partial(MobileNetV4, stages=CONV_SMALL)
mobilenetv4_conv_small_050 = partial(mobilenetv4_conv_small, width_multiplier=0.5)
mobilenetv4_conv_small_035 = partial(mobilenetv4_conv_small, width_multiplier=0.35)
mobilenetv4_conv_medium = partial(MobileNetV4, stages=CONV_MEDIUM, default_image_size=256)
mobilenetv4_conv_large = partial(
    MobileNetV4, stages=CONV_LARGE, stem_filters=24, default_image_size=384
)

# The hybrids: layer scale from 1e-5 (timm's); Large with exact GELU everywhere.
mobilenetv4_hybrid_medium = partial(
    MobileNetV4, stages=HYBRID_MEDIUM, default_image_size=256, layer_scale_init_value=1e-5
)
mobilenetv4_hybrid_large = partial(
    MobileNetV4,
    stages=HYBRID_LARGE,
    stem_filters=24,
    default_image_size=384,
    layer_scale_init_value=1e-5,
    act=gelu,
)

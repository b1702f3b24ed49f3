"""The inverted-residual bottleneck and its squeeze-excite gate, as TF-Slim's
`nets/mobilenet/conv_blocks.py` defines them (MobileNet V2, V3, EdgeTPU; EfficientNet's MBConv).

- `make_divisible`: Slim's channel rounding (MobileNet V2/V3 and every depth multiplier there).
- `SqueezeExcite`, `InvertedResidual`: the inverted-residual bottleneck of V2 (Sandler et al.
  2018, arXiv:1801.04381) with V3's squeeze-excite and fused variants (Howard et al. 2019,
  arXiv:1905.02244).
- `FusedMBConv`: EfficientNetV2's Fused-MBConv (Tan & Le 2021, arXiv:2104.00298), timm's
  `EdgeResidual` and, without expansion, its `ConvBnAct`.

`dilation` (a backbone's `output_stride`, `nets.layers.dilation`) goes to each block's kxk
convolution(s), as timm's `_efficientnet_blocks` give it: the depthwise one, or the fused
expansion; the 1x1 convolutions take none.

Submodules carry Slim's scope names (`expand`, `depthwise`, `squeeze_excite`, `project`), so a
parameter path reads like the checkpoint variable it corresponds to.
"""

from collections.abc import Callable
from functools import partial

import flax.linen as nn
import jax

from nets.layers.conv import ModuleDef
from nets.layers.conv_norm_act import ConvNormAct
from nets.layers.padding import PaddingLike
from nets.layers.pooling import global_avg_pool


def make_divisible(
    value: float, divisor: int = 8, min_value: int | None = None, round_limit: float = 0.9
) -> int:
    """Rounds `value` to the nearest multiple of `divisor`, never below `min_value` (default
    `divisor`) and never more than 10% below `value`: Slim's `_make_divisible`. timm's takes
    `round_limit`, the fraction of `value` below which it rounds up instead (0: never, as its
    squeeze-and-excite widths are rounded)."""
    min_value = divisor if min_value is None else min_value
    rounded = max(min_value, int(value + divisor / 2) // divisor * divisor)
    if rounded < round_limit * value:
        rounded += divisor
    return rounded


class SqueezeExcite(nn.Module):
    """Squeeze-and-excite gate: `x * gate(W2 act(W1 mean(x)))`.

    V3's flavour (the defaults): the squeeze width is `make_divisible(channels / 4, 8)`, ReLU and
    a hard sigmoid. Slim writes that gate as `relu6(x + 3) * 0.16667`; `hard_sigmoid` divides by
    6 (a 2e-6 relative difference). EfficientNet's (Tan & Le 2019) sets `squeeze_channels` (a
    quarter of the block's input), `act` (the block's SiLU) and `gate=nn.sigmoid`; RegNet-Y's
    its own width, `gate=nn.sigmoid` and torchvision's names. Both 1x1 convolutions are biased;
    `norm` (ReXNet's BatchNorm, named `bn`) normalises the squeezed one before its activation,
    which none of the others do.
    """

    conv: ModuleDef
    squeeze_factor: int = 4
    # Other families' gates: a squeeze width set outright (RegNet-Y's and EfficientNet's quarter
    # of the block's input width), the block's activation (EfficientNet's SiLU), the logistic
    # sigmoid (Hu et al.'s), the two layers' names.
    squeeze_channels: int | None = None
    act: Callable = nn.relu
    gate: Callable = nn.hard_sigmoid
    layer_names: tuple[str, str] = ("Conv", "Conv_1")
    norm: ModuleDef | None = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        channels = x.shape[-1]
        squeeze = self.squeeze_channels or make_divisible(channels / self.squeeze_factor, 8)
        reduce, expand = self.layer_names
        gate = global_avg_pool(x, keepdims=True)
        gate = self.conv(squeeze, (1, 1), use_bias=True, name=reduce)(gate)
        if self.norm is not None:
            gate = self.norm(name="bn")(gate)
        gate = self.act(gate)
        gate = self.gate(self.conv(channels, (1, 1), use_bias=True, name=expand)(gate))
        return x * gate


class InvertedResidual(nn.Module):
    """Slim's `expanded_conv`: 1x1 expansion -> kxk depthwise -> (squeeze-excite) -> 1x1 linear
    projection, plus the input when the stride is 1 and the widths agree.

    The inner width is `make_divisible(input channels * expansion, 8)`; as in Slim, the expansion
    convolution exists only when that is wider than the input (so `expansion=1` has none).
    `fused=True` (EdgeTPU) replaces expansion + depthwise by one full kxk strided convolution;
    a fused block without expansion is just the projection, as Slim builds it. `padding` is of
    the kxk convolution (`nets.layers.padding`: 'SAME' as Slim, 'SYMMETRIC' as PyTorch).

    EfficientNet's blocks set `se_ratio`: squeeze-excite to `round(width * (se_ratio /
    expansion))` channels (timm's rule: a fraction of the block's input), with the block's
    activation and a sigmoid gate; and `drop_path_rate`: in training (`deterministic=False`,
    an rng named 'dropout'), the residual branch of each example is dropped with that
    probability and the kept ones scaled by `1 / (1 - rate)` (stochastic depth, timm's
    `drop_path`). Blocks without a residual connection have no drop path.
    """

    filters: int
    expansion: float
    conv: ModuleDef
    norm: ModuleDef
    act: Callable
    kernel_size: int = 3
    strides: int = 1
    squeeze_excite: bool = False
    fused: bool = False
    residual: bool = True
    padding: PaddingLike = "SAME"
    se_ratio: float | None = None  # None: V3's squeeze-excite
    drop_path_rate: float = 0.0
    deterministic: bool = True
    dilation: int = 1  # of the kxk convolution (timm's `dilation`: an `output_stride`)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        inputs, channels = x, x.shape[-1]
        inner = make_divisible(channels * self.expansion, 8)
        layer = partial(ConvNormAct, conv=self.conv, norm=self.norm, padding=self.padding)
        kxk = partial(layer, dilation=self.dilation)
        k, s = self.kernel_size, self.strides
        if inner > channels:
            if self.fused:
                x = kxk(inner, k, act=self.act, strides=s, name="expand")(x)
            else:
                x = layer(inner, 1, act=self.act, name="expand")(x)
        if not self.fused:
            width = x.shape[-1]
            x = kxk(width, k, act=self.act, strides=s, groups=width, name="depthwise")(x)
        if self.squeeze_excite and self.se_ratio is None:  # V3's
            x = SqueezeExcite(self.conv, name="squeeze_excite")(x)
        elif self.squeeze_excite:
            x = ratio_squeeze_excite(self.conv, x, self.se_ratio, self.expansion, self.act)
        x = layer(self.filters, 1, name="project")(x)
        if self.residual and s == 1 and channels == self.filters:
            x = add_residual(x, inputs, self.drop_path_rate, self.deterministic)
        return x


def ratio_squeeze_excite(conv, x, se_ratio: float, expansion: float, act) -> jax.Array:
    """EfficientNet's squeeze-excite of `x` (V1's and V2's blocks): to `round(width * (se_ratio /
    expansion))` channels, a fraction of the block's input (timm's rule), with the block's
    activation and a sigmoid gate. Call it inside a compact module."""
    squeeze = max(round(x.shape[-1] * (se_ratio / expansion)), 1)
    se = {"squeeze_channels": squeeze, "act": act, "gate": nn.sigmoid}
    return SqueezeExcite(conv, **se, name="squeeze_excite")(x)


def add_residual(branch: jax.Array, inputs: jax.Array, rate: float, deterministic: bool):
    """`inputs + branch`, the branch dropped per example with probability `rate` in training
    (`deterministic=False`, an rng named 'dropout') and the kept ones scaled by `1 / (1 - rate)`:
    stochastic depth, timm's `drop_path`. Call it inside a compact module (it adds a Dropout)."""
    if rate:
        branch = nn.Dropout(rate, broadcast_dims=(1, 2, 3))(branch, deterministic=deterministic)
    return branch + inputs


class FusedMBConv(nn.Module):
    """EfficientNetV2's Fused-MBConv (Tan & Le 2021, Figure 2): a kxk strided expansion
    convolution -> (squeeze-excite) -> 1x1 linear projection, plus the input when the stride is 1
    and the widths agree (timm's `EdgeResidual`, submodules `expand`, `squeeze_excite`, `project`).

    The inner width is `make_divisible(input channels * expansion, 8)`. With `expansion=1` the
    block is one kxk convolution with BatchNorm and the activation, named `conv` (the reference
    implementation's Fused-MBConv without expansion; timm's `ConvBnAct`, its 'cn' block); it has
    no squeeze-excite. `se_ratio` is `InvertedResidual`'s (`ratio_squeeze_excite`: a fraction of
    the block's input); `drop_path_rate` is stochastic depth
    on the residual branch (`add_residual`); `residual=False` drops the shortcut (timm's
    `noskip`).
    """

    filters: int
    expansion: float
    conv: ModuleDef
    norm: ModuleDef
    act: Callable
    kernel_size: int = 3
    strides: int = 1
    se_ratio: float = 0.0
    residual: bool = True
    padding: PaddingLike = "SAME"
    drop_path_rate: float = 0.0
    deterministic: bool = True
    dilation: int = 1  # of the kxk convolution (timm's `dilation`: an `output_stride`)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """`[n, h, w, c] -> [n, h / strides, w / strides, filters]`."""
        inputs, channels = x, x.shape[-1]
        layer = partial(ConvNormAct, conv=self.conv, norm=self.norm, padding=self.padding)
        kxk = partial(layer, dilation=self.dilation)
        k, s = self.kernel_size, self.strides
        if self.expansion == 1:
            if self.se_ratio:
                raise ValueError(
                    f"FusedMBConv without expansion has no squeeze-excite: se_ratio must be 0, "
                    f"got {self.se_ratio}"
                )
            x = kxk(self.filters, k, act=self.act, strides=s, name="conv")(x)
        else:
            inner = make_divisible(channels * self.expansion, 8)
            x = kxk(inner, k, act=self.act, strides=s, name="expand")(x)
            if self.se_ratio:
                x = ratio_squeeze_excite(self.conv, x, self.se_ratio, self.expansion, self.act)
            x = layer(self.filters, 1, name="project")(x)
        if self.residual and s == 1 and channels == self.filters:
            x = add_residual(x, inputs, self.drop_path_rate, self.deterministic)
        return x

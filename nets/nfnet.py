"""Normalizer-free networks: Brock et al. 2021, "High-Performance Large-Scale Image Recognition
Without Normalization" (arXiv:2102.06171), with the signal-propagation tools of Brock et al.
2021, "Characterizing signal propagation to close the performance gap in unnormalized ResNets"
(arXiv:2101.08692), as timm's `nets/nfnet.py` builds them.

No BatchNorm: every convolution standardises its kernel at apply time (`ScaledStandardization`: per
output channel, `(w - mean) / sqrt(var + epsilon) * gain * gamma / sqrt(fan_in)`, the biased
variance, epsilon 1e-5 as timm's NFNets set it), and the residual branches are scaled so the
variance of the activations is known: each block's input is multiplied by `beta = 1 /
sqrt(expected variance)` (reset to 1 after each stage's first block, grown by `alpha**2 = 0.04`
by each block), its branch by `alpha = 0.2`. `gamma` (DeepMind's constants, `GAMMA`) brings the
activation's output back to unit variance.

- `dm_nfnet_f0` ... `f6`: DeepMind's NFNet-F with their weights. TensorFlow's 'SAME' padding,
  exact (erf) GELU multiplied by its gamma (`gamma_in_act`), a skip-init gain per block
  (`skipinit_gain`, a scalar learnt from 0; the last convolution's gain starts at 1).
- `nfnet_l0`, `eca_nfnet_l0`, `eca_nfnet_l1`, `eca_nfnet_l2`: timm's lighter NFNets, SiLU with
  its gamma folded into the convolutions' scale (the same function up to rounding: the
  convolution is linear), PyTorch's symmetric padding, no skip-init (the last convolution's
  gain starts at 0), a quarter bottleneck of groups of 64; `nfnet_l0` squeeze-excites, the
  others gate with ECA (`nets.resnet.EfficientChannelAttention`).

Every network: a stem of four 3x3 convolutions (an eighth, a quarter, half and all of 128
channels, strides 2, 1, 1, 2) with the activation between them; four stages of bottleneck
blocks (1x1, grouped 3x3, grouped 3x3, 1x1 convolutions with the activation before each, then
the channel gate times `attn_gain = 2`); projection shortcuts from the pre-activated input,
average-pooled 2x2 (ceil mode, padding not counted) before a strided stage's 1x1 convolution;
a final 1x1 convolution to `num_features` channels (twice the last stage's, 1.5 times for
`nfnet_l0`), the activation, average pooling and the classifier.

End points: `stem_conv3` (the stem's third convolution, stride 2: timm's stem feature), `stem`,
`stage1`..`stage4`, `final_conv` (before its activation: timm's last feature), `pre_logits`,
`logits`, `predictions`. Weight decay (`NetworkFn.regularization_loss`) covers the kernels,
not the gains, the skip-init gains or the biases. `output_stride` (8 or 16) dilates the stages
past it as timm's (`NormFreeBlock`); the parameters are the same.
"""

import dataclasses
import math
from collections.abc import Callable
from functools import partial
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from nets.layers import (
    Conv,
    ModuleDef,
    SqueezeExcite,
    avg_pool,
    checkpointed,
    classify,
    drop_path,
    gelu,
    global_avg_pool,
    make_divisible,
)
from nets.layers.conv import standardize
from nets.layers.dilation import StageStride, capped_strides, stage_strides
from nets.layers.drop_path import check_drop_path_rate, linear_drop_path_rates
from nets.resnet import EfficientChannelAttention

# DeepMind's gains that give each activation of a unit Gaussian unit variance (their
# `nfnets/base.py`, timm's `_nonlin_gamma`).
GAMMA = {"gelu": 1.7015043497085571, "silu": 1.7881293296813965}
ACTIVATIONS = {"gelu": gelu, "silu": nn.silu}


@dataclasses.dataclass(frozen=True)
class ScaledStandardization:
    """timm's `ScaledStdConv2d` as a `Conv.kernel_transform`: the stored kernel standardised per
    output channel at every call, `(w - mean) / sqrt(var + epsilon) * gain * gamma * fan_in**-0.5`,
    mean and (biased) variance over its `kh * kw * in` taps; `gain` [features] is a parameter
    of the convolution, from `gain_init`."""

    gamma: float = 1.0
    epsilon: float = 1e-5
    gain_init: float = 1.0

    def __call__(self, module: nn.Module, kernel: jax.Array) -> jax.Array:
        init = nn.initializers.constant(self.gain_init)
        gain = module.param("gain", init, kernel.shape[-1:], kernel.dtype)
        scale = gain * (self.gamma * math.prod(kernel.shape[:3]) ** -0.5)
        return standardize(kernel, self.epsilon, scale)


def scaled_std_conv(
    conv: ModuleDef,
    features: int,
    kernel_size: int,
    *,
    padding: str,
    gamma: float,
    epsilon: float,
    strides: int = 1,
    groups: int = 1,
    dilation: int = 1,
    gain_init: float = 1.0,
    name: str,
) -> nn.Module:
    """The injected `conv`, biased, its kernel standardised (`ScaledStandardization`) and drawn
    as timm's (normal, variance 1 / fan_in: it only sets the direction)."""
    return conv(
        features,
        (kernel_size, kernel_size),
        (strides, strides),
        padding=padding,
        kernel_dilation=dilation,
        feature_group_count=groups,
        kernel_init=nn.initializers.variance_scaling(1.0, "fan_in", "normal"),
        kernel_transform=ScaledStandardization(gamma, epsilon, gain_init),
        name=name,
    )


class NormFreeBlock(nn.Module):
    """timm's `NormFreeBlock` (not RegNet's): `alpha * gate(conv3(act(conv2b(act(conv2(act(
    conv1(act(x) * beta)))))))) + shortcut`, the shortcut a projection of `act(x) * beta` where
    widths, strides or dilations change, the branch times `skipinit_gain` when `skipinit`.

    Dilated (`NormFreeNet.output_stride`), `conv2` takes `first_dilation` (the stage before's,
    in a stage's first block) and `conv2b` `dilation`; the first block's shortcut, no longer
    strided, pools 2x2 at stride 1 as timm's `AvgPool2dSame`: one pixel of zeros after each
    row and column, counted in the mean."""

    features: int
    mid_features: int
    groups: int
    conv: Callable[..., nn.Module]  # `scaled_std_conv` with its padding, gamma and epsilon
    act: Callable
    alpha: float
    beta: float
    strides: int = 1
    attention: ModuleDef | None = None
    attn_gain: float = 2.0
    skipinit: bool = False
    drop_path_rate: float = 0.0
    dilation: int = 1
    first_dilation: int = 1

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        out = self.act(x) * self.beta
        shortcut = x
        dilated = self.dilation != self.first_dilation
        if x.shape[-1] != self.features or self.strides != 1 or dilated:
            pooled = out
            if self.strides != 1:  # 'SAME' of a 2x2/2 window is ceil mode: a last lone pixel
                stride = (self.strides, self.strides)
                pooled = avg_pool(out, (2, 2), stride, padding="SAME", count_include_pad=False)
            elif self.dilation > 1:  # timm's AvgPool2dSame: zeros padded, then counted
                pooled = avg_pool(out, (2, 2), (1, 1), padding="SAME", count_include_pad=True)
            shortcut = self.conv(self.features, 1, name="downsample")(pooled)
        grouped = partial(self.conv, self.mid_features, 3, groups=self.groups)
        y = self.conv(self.mid_features, 1, name="conv1")(out)
        y = grouped(strides=self.strides, dilation=self.first_dilation, name="conv2")(self.act(y))
        y = grouped(dilation=self.dilation, name="conv2b")(self.act(y))
        # Without skip-init the branch starts at zero through the last convolution's gain.
        gain_init = 1.0 if self.skipinit else 0.0
        y = self.conv(self.features, 1, gain_init=gain_init, name="conv3")(self.act(y))
        if self.attention is not None:
            y = self.attn_gain * self.attention(name="attn_last")(y)
        y = drop_path(self, y, self.drop_path_rate, train)
        if self.skipinit:
            y = y * self.param("skipinit_gain", nn.initializers.zeros_init(), ()).astype(y.dtype)
        return y * self.alpha + shortcut


class NormFreeNet(nn.Module):
    """An NFNet with the deep (four-convolution) stem; `(logits, end_points)`, or the pooled
    features `[batch, num_features]` when `num_classes` is 0 or None.

    `gamma_in_act`, `padding` and `skipinit` are DeepMind's conventions (True, 'SAME', True) or
    timm's (False, 'SYMMETRIC', False): their weights compute another function under the other.
    """

    depths: tuple[int, ...]  # blocks per stage; the first stage at stride 4, each next one 2x
    channels: tuple[int, ...] = (256, 512, 1536, 1536)
    stem_features: int = 128
    group_size: int = 128
    bottle_ratio: float = 0.5
    feature_multiplier: float = 2.0  # num_features = int(channels[-1] * feature_multiplier)
    act: str = "gelu"  # a key of GAMMA
    attention: str = "se"  # 'se' or 'eca'
    se_ratio: float = 0.5  # of the block's output width, rounded to a multiple of 8
    alpha: float = 0.2
    attn_gain: float = 2.0
    gamma_in_act: bool = True  # DeepMind's: gamma scales the activation, not the kernel
    padding: str = "SAME"  # DeepMind's TensorFlow padding; 'SYMMETRIC' is timm's own
    skipinit: bool = True
    std_epsilon: float = 1e-5  # of the kernel's variance
    default_image_size: int = 224
    num_classes: int | None = 1000
    dropout_rate: float = 0.0
    drop_path_rate: float = 0.0
    dtype: Any = jnp.float32
    conv: ModuleDef = Conv
    remat: bool | str = False  # stem, blocks recomputed in backward (nets.layers.remat.POLICIES)
    # timm's dilation for dense prediction: 8 or 16 keeps the deepest maps at that stride, the
    # stages past it dilated (`NormFreeBlock`); None (or 32): the network as published.
    output_stride: int | None = None

    def dilated_strides(self) -> list[StageStride]:
        """Each stage's stride and dilations at `output_stride`: after the stride-4 stem, the
        first stage keeps its maps, each next one halves them (timm's rule: a stage that would
        stride past `output_stride` strides by 1 and multiplies the dilation; its first block's
        `first_dilation = 1 if dilation in (1, 2) else 2`, the stage before's dilation at the 8,
        16 and 32 it takes, which are the strides its stages reach after the stem's 4)."""
        strides = (1,) + (2,) * (len(self.depths) - 1)
        return stage_strides(strides, self.output_stride, 4)

    @property
    def num_features(self) -> int:
        """The final convolution's width: timm's `num_features`, what `pre_logits` holds."""
        return make_divisible(int(self.channels[-1] * self.feature_multiplier), 8)

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: the stem's third convolution, the stages but the last, the
        final convolution (in place of the last stage, which it follows); at `output_stride`,
        the deeper levels at that stride."""
        stages = {f"stage{i + 1}": 4 * 2**i for i in range(len(self.depths) - 1)}
        levels = {"stem_conv3": 2, **stages, "final_conv": 2 ** (len(self.depths) + 1)}
        self.dilated_strides()  # a bad `output_stride`'s error, here too
        return capped_strides(levels, self.output_stride)

    @nn.compact
    def __call__(self, x, train: bool = True):
        check_drop_path_rate(self.drop_path_rate)
        gamma = GAMMA[self.act]
        base = ACTIVATIONS[self.act]
        act = (lambda y: base(y) * gamma) if self.gamma_in_act else base
        conv = partial(
            scaled_std_conv,
            partial(self.conv, dtype=self.dtype),
            padding=self.padding,
            gamma=1.0 if self.gamma_in_act else gamma,
            epsilon=self.std_epsilon,
        )
        end_points = {}

        def stem(module: nn.Module, x: jax.Array) -> tuple[jax.Array, jax.Array]:
            # The largest maps: one unit for `remat`, its layers at timm's flat paths.
            c = self.stem_features
            for i, (features, strides) in enumerate(((c // 8, 2), (c // 4, 1), (c // 2, 1))):
                x = conv(features, 3, strides=strides, name=f"stem_conv{i + 1}")(x)
                third = x
                x = act(x)
            return third, conv(c, 3, strides=2, name="stem_conv4")(x)

        x = jnp.asarray(x, self.dtype)
        end_points["stem_conv3"], x = checkpointed(stem, self.remat)(self, x)
        end_points["stem"] = x

        rates = iter(linear_drop_path_rates(self.drop_path_rate, sum(self.depths)))
        block = checkpointed(NormFreeBlock, self.remat, takes_train=True)
        expected_var = 1.0
        stages = zip(self.depths, self.channels, self.dilated_strides(), strict=True)
        for i, (depth, width, s) in enumerate(stages):
            mid = make_divisible(width * self.bottle_ratio, 8)
            groups = mid // self.group_size
            if not groups:
                raise ValueError(
                    f"stage {i + 1}'s {mid} inner channels hold no group of {self.group_size}"
                )
            mid = self.group_size * groups  # group_size is a multiple of 8 in every variant
            for j in range(depth):
                x = block(
                    width,
                    mid,
                    groups,
                    conv,
                    act,
                    self.alpha,
                    expected_var**-0.5,
                    strides=s.stride if j == 0 else 1,
                    attention=self._attention(width),
                    attn_gain=self.attn_gain,
                    skipinit=self.skipinit,
                    drop_path_rate=next(rates),
                    dilation=s.dilation,
                    first_dilation=s.first_dilation if j == 0 else s.dilation,
                    name=f"stages_{i}_{j}",
                )(x, train)
                expected_var = (1.0 if j == 0 else expected_var) + self.alpha**2
            end_points[f"stage{i + 1}"] = x

        x = end_points["final_conv"] = conv(self.num_features, 1, name="final_conv")(x)
        x = global_avg_pool(act(x))
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

    def _attention(self, width: int) -> ModuleDef:
        if self.attention == "eca":
            return partial(EfficientChannelAttention, self.dtype)
        if self.attention == "se":
            squeeze = make_divisible(width * self.se_ratio, 8, round_limit=0.0)
            return partial(
                SqueezeExcite,
                partial(self.conv, dtype=self.dtype),
                squeeze_channels=squeeze,
                gate=nn.sigmoid,
                layer_names=("fc1", "fc2"),
            )
        raise ValueError(f"attention={self.attention!r}: expected 'se' or 'eca'")


# DeepMind's NFNet-F (timm's `dm_nfnet_f*`): depths (1, 2, 6, 3) times 1 ... 7, each at the
# resolution its weights were trained at.
_dm = partial(NormFreeNet, gamma_in_act=True, padding="SAME", skipinit=True)
dm_nfnet_f0 = partial(_dm, depths=(1, 2, 6, 3), default_image_size=192)
dm_nfnet_f1 = partial(_dm, depths=(2, 4, 12, 6), default_image_size=224)
dm_nfnet_f2 = partial(_dm, depths=(3, 6, 18, 9), default_image_size=256)
dm_nfnet_f3 = partial(_dm, depths=(4, 8, 24, 12), default_image_size=320)
dm_nfnet_f4 = partial(_dm, depths=(5, 10, 30, 15), default_image_size=384)
dm_nfnet_f5 = partial(_dm, depths=(6, 12, 36, 18), default_image_size=416)
dm_nfnet_f6 = partial(_dm, depths=(7, 14, 42, 21), default_image_size=448)

# timm's light NFNets: SiLU, a quarter bottleneck of 64-channel groups.
_light = partial(
    NormFreeNet,
    act="silu",
    group_size=64,
    bottle_ratio=0.25,
    gamma_in_act=False,
    padding="SYMMETRIC",
    skipinit=False,
)
nfnet_l0 = partial(_light, depths=(1, 2, 6, 3), feature_multiplier=1.5, se_ratio=0.25)
eca_nfnet_l0 = partial(_light, depths=(1, 2, 6, 3), feature_multiplier=1.5, attention="eca")
eca_nfnet_l1 = partial(_light, depths=(2, 4, 12, 6), attention="eca", default_image_size=256)
eca_nfnet_l2 = partial(_light, depths=(3, 6, 18, 9), attention="eca", default_image_size=320)

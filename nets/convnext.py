"""ConvNeXt: Liu et al. 2022, "A ConvNet for the 2020s" (arXiv:2201.03545), and ConvNeXt V2: Woo et
al. 2023, "Co-designing and Scaling ConvNets with Masked Autoencoders" (arXiv:2301.00808), as timm
builds them.

A 4x4/4 patchify stem with LayerNorm; four stages, each (but the first) opened by LayerNorm and a
2x2/2 convolution; blocks of a 7x7 depthwise convolution, LayerNorm, a 4x MLP with exact (erf)
GELU, a per-channel layer scale `gamma` and stochastic depth on the residual branch; global
average pooling, LayerNorm, and the classifier. Parameter counts are timm's (and torchvision's,
the same networks): 28,589,128 for convnext_tiny at 1000 classes.

ConvNeXt V2 (`grn=True`, no layer scale) adds a global response normalisation after the MLP's
GELU (`GlobalResponseNorm`). timm's small sizes, `atto` (3.7M parameters) to `nano`, of both
versions build their MLP from 1x1 convolutions (`conv_mlp=True`): on NHWC activations that is
the same function as our dense layers, and their weights load into them.

Where this differs from timm's `ConvNeXt`:
- Activations are NHWC throughout, so timm's channels-first `LayerNorm2d` and its channels-last
  `LayerNorm` are both flax's `LayerNorm` over the last axis, and the MLP is two dense layers
  (timm's `conv_mlp=False` path). Epsilon 1e-6 as timm's (`norm_epsilon`).
- timm's `head_norm_first` (`convnext_tiny_hnf`), overlapping stems (`*_ols`) and RMSNorm
  (`*_rms`) are not here.
- Initialisation: every kernel from a normal of standard deviation 0.02 as timm's, biases zero,
  LayerNorm ones and zeros; timm cuts its normal at +-2 (absolute: in effect never), flax's
  `truncated_normal(0.02)` at two standard deviations, rescaled to keep the 0.02.
- Weight decay (`NetworkFn.regularization_loss`) covers the convolution and dense kernels only:
  not the LayerNorm scales and offsets, the layer scales `gamma`, GRN's scale and bias or the
  biases (timm's `param_groups_weight_decay` leaves out the same one-dimensional parameters).

`output_stride` (8 or 16; 32 or None: none) dilates as timm's: a stage past that stride keeps the
map (its 2x2 downsampling convolution at stride 1, padded by TensorFlow's 'SAME', the extra pixel
at the bottom and right as timm's `Conv2dSame`) and dilates its blocks' depthwise convolutions by
the stride it skipped (times the stage before's); the downsampling convolution takes the stage
before's dilation (timm's `first_dilation`, 1 for a stage of dilation 2, else 2). The same
weights load; `feature_strides()` caps the deep stages' strides at `output_stride`.

End points: `stem`, `stage1`..`stage4` (each stage's output), `pre_logits` (pooled and normalised
features), `logits`, `predictions`.
"""

from collections.abc import Sequence
from functools import partial
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from nets.layers import Conv, ModuleDef, checkpointed, classify, drop_path, gelu, global_avg_pool
from nets.layers.dilation import StageStride, capped_strides, stage_strides
from nets.layers.drop_path import check_drop_path_rate, linear_drop_path_rates
from nets.layers.layer_depth import stem_stages_head_layer_id
from nets.layers.padding import smallest_input

_INIT = nn.initializers.truncated_normal(0.02)


class GlobalResponseNorm(nn.Module):
    """ConvNeXt V2's GRN, timm's `GlobalResponseNorm`: `x + bias + scale * x * n`, where `n` is
    each channel's L2 norm over the image divided by the mean of those norms over the channels
    (plus `epsilon`). It makes the channels compete; `scale` and `bias` start at zero (the
    identity). The norms are computed in float32 whatever `dtype`."""

    epsilon: float = 1e-6
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        channels = x.shape[-1]
        scale = self.param("scale", nn.initializers.zeros, (channels,), jnp.float32)
        bias = self.param("bias", nn.initializers.zeros, (channels,), jnp.float32)
        norms = jnp.sqrt(jnp.sum(jnp.square(x.astype(jnp.float32)), axis=(1, 2), keepdims=True))
        response = norms / (jnp.mean(norms, axis=-1, keepdims=True) + self.epsilon)
        x = jnp.asarray(x, self.dtype)
        scale, bias, response = (a.astype(self.dtype) for a in (scale, bias, response))
        return x + (bias + scale * (x * response))  # timm's `x + addcmul(bias, weight, x * n)`


class ConvNeXtBlock(nn.Module):
    """`x + drop_path(gamma * fc2(grn(gelu(fc1(norm(conv_dw(x)))))))`, timm's `ConvNeXtBlock`
    (GRN in V2 only, `gamma` in V1 only). EdgeNeXt's `ConvBlock` is this block with its own
    depthwise `kernel_size`; with `strides` 2 or a width other than the input's (its
    `downsample_block`), the residual is `conv_dw(x)`, as timm's `shortcut_after_dw`."""

    features: int
    conv: ModuleDef
    dtype: Any = jnp.float32
    mlp_ratio: int = 4
    layer_scale_init_value: float | None = 1e-6
    norm_epsilon: float = 1e-6
    drop_path_rate: float = 0.0
    grn: bool = False
    kernel_size: int = 7  # odd: padded by half of its dilated extent on each side
    strides: int = 1
    dilation: int = 1  # of the depthwise convolution (`output_stride`)

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        half = self.kernel_size // 2 * self.dilation
        y = self.conv(
            self.features,
            (self.kernel_size, self.kernel_size),
            self.strides,
            padding=[(half, half), (half, half)],
            kernel_dilation=self.dilation,
            feature_group_count=x.shape[-1],
            name="conv_dw",
        )(x)
        shortcut = y if self.strides > 1 or x.shape[-1] != self.features else x
        y = nn.LayerNorm(epsilon=self.norm_epsilon, dtype=self.dtype, name="norm")(y)
        dense = partial(nn.Dense, dtype=self.dtype, kernel_init=_INIT)
        y = dense(self.mlp_ratio * self.features, name="fc1")(y)
        y = gelu(y)
        if self.grn:
            y = GlobalResponseNorm(dtype=self.dtype, name="grn")(y)
        y = dense(self.features, name="fc2")(y)
        if self.layer_scale_init_value is not None:
            init = nn.initializers.constant(self.layer_scale_init_value)
            gamma = self.param("gamma", init, (self.features,), jnp.float32)
            y = y * gamma.astype(y.dtype)
        return shortcut + drop_path(self, y, self.drop_path_rate, train)


class ConvNeXt(nn.Module):
    """ConvNeXt for ImageNet-sized inputs (any size of at least `min_image_size`).

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the pooled, normalised
    features `[batch, widths[-1]]` when `num_classes` is 0 or None.
    """

    default_image_size: ClassVar[int] = 224  # the paper's ImageNet-1k resolution

    depths: Sequence[int] = (3, 3, 9, 3)
    widths: Sequence[int] = (96, 192, 384, 768)
    num_classes: int | None = 1000
    # Stochastic depth of the residual branches, rising linearly from 0 at the first block to
    # this rate at the last (timm's and the paper's schedule: 0.1/0.4/0.5/0.5 for T/S/B/L on
    # ImageNet-1k); active only in training, with the 'dropout' rng.
    drop_path_rate: float = 0.0
    dropout_rate: float = 0.0  # before the classifier (timm's `drop_rate`)
    # Initial value of every block's per-channel layer scale `gamma`; None: no layer scale.
    layer_scale_init_value: float | None = 1e-6
    norm_epsilon: float = 1e-6  # of every LayerNorm, as timm and torchvision set it
    mlp_ratio: int = 4
    grn: bool = False  # ConvNeXt V2's global response normalisation in every block's MLP
    dtype: Any = jnp.float32
    conv: ModuleDef = Conv
    remat: bool | str = False  # stem, blocks recomputed in backward (nets.layers.remat.POLICIES)
    # Dilation for dense prediction (module docstring): 8 or 16 keep the maps at that stride;
    # None (or 32): none.
    output_stride: int | None = None

    @property
    def min_image_size(self) -> int:
        """The 4x4/4 stem and a 2x2/2 downsampling per later stage, all 'VALID': 32 for four
        (less under `output_stride`: a dilated stage's downsampling keeps the map)."""
        strided = sum(s.stride > 1 for s in self.stage_strides())
        return smallest_input([(4, 4, 0)] + [(2, 2, 0)] * strided)

    def stage_strides(self) -> list[StageStride]:
        """Each stage's stride and dilations (`nets.layers.dilation`): the first stage keeps
        the stem's stride 4, each later one halves the map until `output_stride`. timm's
        `first_dilation` (1 for a stage of dilation 2, else 2) is the stage before's dilation at
        every `output_stride` it takes (8, 16, 32)."""
        strides = [1] + [2] * (len(self.depths) - 1)
        return stage_strides(strides, self.output_stride, 4)

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: each stage's output, from the stride-4 stem; the deep ones
        at `output_stride` under it."""
        strides = {f"stage{i + 1}": 4 * 2**i for i in range(len(self.depths))}
        self.stage_strides()  # refuses a stride the network does not reach
        return capped_strides(strides, self.output_stride)

    def layer_id(self, path: tuple[str, ...]) -> int:
        """The depth of the parameter under module `path`, for layer-wise learning-rate decay
        (timm's `group_matcher`): 0 for the stem, `1 + n` for the network's block `n` (counted
        over all stages; a stage's downsampling with its first block), the head (its norm too)
        last."""
        return stem_stages_head_layer_id(self.depths, path)

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = True):
        if len(self.depths) != len(self.widths) or not self.depths:
            raise ValueError(
                f"ConvNeXt needs one width per stage: depths {tuple(self.depths)}, "
                f"widths {tuple(self.widths)}"
            )
        check_drop_path_rate(self.drop_path_rate)
        conv = partial(self.conv, dtype=self.dtype, kernel_init=_INIT)
        norm = partial(nn.LayerNorm, epsilon=self.norm_epsilon, dtype=self.dtype)
        end_points = {}

        def stem(module: nn.Module, x: jax.Array) -> jax.Array:
            # The largest maps: one unit for `remat`, its layers at timm's flat paths.
            x = conv(self.widths[0], (4, 4), (4, 4), padding="VALID", name="stem_conv")(x)
            return norm(name="stem_norm")(x)

        x = end_points["stem"] = checkpointed(stem, self.remat)(self, jnp.asarray(x, self.dtype))

        rates = linear_drop_path_rates(self.drop_path_rate, sum(self.depths))
        strides = self.stage_strides()
        for i, (depth, width) in enumerate(zip(self.depths, self.widths, strict=True)):
            x = ConvNeXtStage(
                depth,
                width,
                conv,
                self.dtype,
                self.mlp_ratio,
                self.layer_scale_init_value,
                self.norm_epsilon,
                tuple(rates[sum(self.depths[:i]) : sum(self.depths[: i + 1])]),
                downsample=i > 0,
                grn=self.grn,
                remat=self.remat,
                stride=strides[i],
                name=f"stages_{i}",
            )(x, train)
            end_points[f"stage{i + 1}"] = x

        x = norm(name="head_norm")(global_avg_pool(x))
        return classify(
            x,
            end_points,
            self.num_classes,
            train=train,
            dropout_rate=self.dropout_rate,
            dtype=self.dtype,
            name="head",
            kernel_init=_INIT,
        )


class ConvNeXtStage(nn.Module):
    """timm's `ConvNeXtStage`: LayerNorm and a 2x2/2 convolution (`downsample`), then blocks;
    under `output_stride` (`stride` of a dilated stage) the convolution is 2x2/1, dilated by
    `first_dilation` and padded 'SAME' (timm's `padding='same'`), the blocks by `dilation`."""

    depth: int
    features: int
    conv: ModuleDef
    dtype: Any
    mlp_ratio: int
    layer_scale_init_value: float | None
    norm_epsilon: float
    drop_path_rates: tuple[float, ...]
    downsample: bool = True
    grn: bool = False
    remat: bool | str = False
    stride: StageStride = StageStride(2, 1, 1)

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        stride, dilation, first_dilation = self.stride
        if self.downsample:
            x = nn.LayerNorm(epsilon=self.norm_epsilon, dtype=self.dtype, name="downsample_norm")(x)
            x = self.conv(
                self.features,
                (2, 2),
                stride,
                # timm's 'same' where the stage dilates: its total of `first_dilation` pixels
                # split with the odd one at the bottom and right (`Conv2dSame` where odd).
                padding="SAME" if dilation > 1 else "VALID",
                kernel_dilation=first_dilation,
                name="downsample_conv",
            )(x)
        block = checkpointed(ConvNeXtBlock, self.remat, takes_train=True)
        for j in range(self.depth):
            x = block(
                self.features,
                self.conv,
                self.dtype,
                self.mlp_ratio,
                self.layer_scale_init_value,
                self.norm_epsilon,
                self.drop_path_rates[j],
                self.grn,
                dilation=dilation,
                name=f"blocks_{j}",
            )(x, train)
        return x


# timm's sizes: its small ones (`atto` .. `nano`: 1x1-convolution MLPs in timm, the same function
# here), the paper's four, the ImageNet-22k `xlarge` and LAION's CLIP `xxlarge` (LayerNorm epsilon
# 1e-5, as its weights were trained).
convnext_atto = partial(ConvNeXt, depths=(2, 2, 6, 2), widths=(40, 80, 160, 320))
convnext_femto = partial(ConvNeXt, depths=(2, 2, 6, 2), widths=(48, 96, 192, 384))
convnext_pico = partial(ConvNeXt, depths=(2, 2, 6, 2), widths=(64, 128, 256, 512))
convnext_nano = partial(ConvNeXt, depths=(2, 2, 8, 2), widths=(80, 160, 320, 640))
convnext_tiny = partial(ConvNeXt, depths=(3, 3, 9, 3), widths=(96, 192, 384, 768))
convnext_small = partial(ConvNeXt, depths=(3, 3, 27, 3), widths=(96, 192, 384, 768))
convnext_base = partial(ConvNeXt, depths=(3, 3, 27, 3), widths=(128, 256, 512, 1024))
convnext_large = partial(ConvNeXt, depths=(3, 3, 27, 3), widths=(192, 384, 768, 1536))
convnext_xlarge = partial(ConvNeXt, depths=(3, 3, 27, 3), widths=(256, 512, 1024, 2048))
convnext_xxlarge = partial(
    ConvNeXt, depths=(3, 4, 30, 3), widths=(384, 768, 1536, 3072), norm_epsilon=1e-5
)

# ConvNeXt V2: GRN, no layer scale; timm's sizes.
_V2 = partial(ConvNeXt, grn=True, layer_scale_init_value=None)
convnextv2_atto = partial(_V2, depths=(2, 2, 6, 2), widths=(40, 80, 160, 320))
convnextv2_femto = partial(_V2, depths=(2, 2, 6, 2), widths=(48, 96, 192, 384))
convnextv2_pico = partial(_V2, depths=(2, 2, 6, 2), widths=(64, 128, 256, 512))
convnextv2_nano = partial(_V2, depths=(2, 2, 8, 2), widths=(80, 160, 320, 640))
convnextv2_tiny = partial(_V2, depths=(3, 3, 9, 3), widths=(96, 192, 384, 768))
convnextv2_small = partial(_V2, depths=(3, 3, 27, 3), widths=(96, 192, 384, 768))
convnextv2_base = partial(_V2, depths=(3, 3, 27, 3), widths=(128, 256, 512, 1024))
convnextv2_large = partial(_V2, depths=(3, 3, 27, 3), widths=(192, 384, 768, 1536))
convnextv2_huge = partial(_V2, depths=(3, 3, 27, 3), widths=(352, 704, 1408, 2816))

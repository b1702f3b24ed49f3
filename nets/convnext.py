"""ConvNeXt: Liu et al. 2022, "A ConvNet for the 2020s" (arXiv:2201.03545), as timm builds it.

A 4x4/4 patchify stem with LayerNorm; four stages, each (but the first) opened by LayerNorm and a
2x2/2 convolution; blocks of a 7x7 depthwise convolution, LayerNorm, a 4x MLP with exact (erf)
GELU, a per-channel layer scale `gamma` and stochastic depth on the residual branch; global
average pooling, LayerNorm, and the classifier. Parameter counts are timm's (and torchvision's,
the same networks): 28,589,128 for convnext_tiny at 1000 classes.

Where this differs from timm's `ConvNeXt`:
- Activations are NHWC throughout, so timm's channels-first `LayerNorm2d` and its channels-last
  `LayerNorm` are both flax's `LayerNorm` over the last axis, and the MLP is two dense layers
  (timm's `conv_mlp=False` path). Epsilon 1e-6 as timm's (`norm_epsilon`).
- Only the original ConvNeXt block: timm's ConvNeXt-V2 options (GRN), `head_norm_first`,
  `conv_mlp`, `use_conv_mlp`, dilation ('output_stride') and the `atto`..`xxlarge` sizes are not
  here (the fields cover the four paper sizes and their small test configurations).
- Initialisation: every kernel from a normal of standard deviation 0.02 as timm's, biases zero,
  LayerNorm ones and zeros; timm cuts its normal at +-2 (absolute: in effect never), flax's
  `truncated_normal(0.02)` at two standard deviations, rescaled to keep the 0.02.
- Weight decay (`NetworkFn.regularization_loss`) covers the convolution and dense kernels only:
  not the LayerNorm scales and offsets, the layer scales `gamma` or the biases (timm's
  `param_groups_weight_decay` leaves out the same one-dimensional parameters).

End points: `stem`, `stage1`..`stage4` (each stage's output), `pre_logits` (pooled and normalised
features), `logits`, `predictions`.
"""

from collections.abc import Sequence
from functools import partial
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from nets.layers import Conv, ModuleDef, checkpointed, classify, drop_path, global_avg_pool
from nets.layers.drop_path import check_drop_path_rate, linear_drop_path_rates
from nets.layers.layer_depth import stage_block_index
from nets.layers.padding import smallest_input

_INIT = nn.initializers.truncated_normal(0.02)


class ConvNeXtBlock(nn.Module):
    """`x + drop_path(gamma * fc2(gelu(fc1(norm(conv_dw(x))))))`, timm's `ConvNeXtBlock`."""

    features: int
    conv: ModuleDef
    dtype: Any = jnp.float32
    mlp_ratio: int = 4
    layer_scale_init_value: float | None = 1e-6
    norm_epsilon: float = 1e-6
    drop_path_rate: float = 0.0

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        shortcut = x
        y = self.conv(
            self.features,
            (7, 7),
            padding=[(3, 3), (3, 3)],
            feature_group_count=self.features,
            name="conv_dw",
        )(x)
        y = nn.LayerNorm(epsilon=self.norm_epsilon, dtype=self.dtype, name="norm")(y)
        dense = partial(nn.Dense, dtype=self.dtype, kernel_init=_INIT)
        y = dense(self.mlp_ratio * self.features, name="fc1")(y)
        y = nn.gelu(y, approximate=False)
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
    dtype: Any = jnp.float32
    conv: ModuleDef = Conv
    remat: bool = False  # each block's activations recomputed in the backward pass, not kept

    @property
    def min_image_size(self) -> int:
        """The 4x4/4 stem and a 2x2/2 downsampling per later stage, all 'VALID': 32 for four."""
        return smallest_input([(4, 4, 0)] + [(2, 2, 0)] * (len(self.depths) - 1))

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: each stage's output, from the stride-4 stem."""
        return {f"stage{i + 1}": 4 * 2**i for i in range(len(self.depths))}

    def layer_id(self, path: tuple[str, ...]) -> int:
        """The depth of the parameter under module `path`, for layer-wise learning-rate decay
        (timm's `group_matcher`): 0 for the stem, `1 + n` for the network's block `n` (counted
        over all stages; a stage's downsampling with its first block), the head (its norm too)
        last."""
        if path[0].startswith("stem_"):
            return 0
        if path[0].startswith("stages_"):
            return 1 + stage_block_index(self.depths, path)
        return 1 + sum(self.depths)

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

        x = conv(self.widths[0], (4, 4), (4, 4), padding="VALID", name="stem_conv")(
            jnp.asarray(x, self.dtype)
        )
        x = end_points["stem"] = norm(name="stem_norm")(x)

        rates = linear_drop_path_rates(self.drop_path_rate, sum(self.depths))
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
                remat=self.remat,
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
    """timm's `ConvNeXtStage`: LayerNorm and a 2x2/2 convolution (`downsample`), then blocks."""

    depth: int
    features: int
    conv: ModuleDef
    dtype: Any
    mlp_ratio: int
    layer_scale_init_value: float | None
    norm_epsilon: float
    drop_path_rates: tuple[float, ...]
    downsample: bool = True
    remat: bool = False

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        if self.downsample:
            x = nn.LayerNorm(epsilon=self.norm_epsilon, dtype=self.dtype, name="downsample_norm")(x)
            x = self.conv(self.features, (2, 2), (2, 2), padding="VALID", name="downsample_conv")(x)
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
                name=f"blocks_{j}",
            )(x, train)
        return x


convnext_tiny = partial(ConvNeXt, depths=(3, 3, 9, 3), widths=(96, 192, 384, 768))
convnext_small = partial(ConvNeXt, depths=(3, 3, 27, 3), widths=(96, 192, 384, 768))
convnext_base = partial(ConvNeXt, depths=(3, 3, 27, 3), widths=(128, 256, 512, 1024))
convnext_large = partial(ConvNeXt, depths=(3, 3, 27, 3), widths=(192, 384, 768, 1536))

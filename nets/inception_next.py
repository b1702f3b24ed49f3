"""InceptionNeXt: Yu et al. 2024, "InceptionNeXt: When Inception Meets ConvNeXt" (arXiv:2303.16900),
as timm's `MetaNeXt` (`timm/models/inception_next.py`) builds it.

ConvNeXt's layout with an Inception token mixer: a 4x4/4 convolution stem with BatchNorm; four
stages, each but the first opened by BatchNorm and a 2x2/2 convolution (`MetaFormerStage`);
blocks of `x + gamma * mlp(norm(mixer(x)))` (a MetaFormer block with one residual, BatchNorm
after the mixer); global average pooling and timm's `MlpClassifierHead`. The mixer
(`InceptionDWConv`) passes most channels through untouched and splits off three groups of
`branch_ratio` of them: a 3x3 depthwise convolution, a `1 x band` and a `band x 1` one (band 11;
atto's 9, with a quarter of the channels per branch). The MLP is 4x wide (3x in the last stage)
with exact GELU and biases (timm's 1x1 convolutions: dense layers on NHWC maps).

Where this differs from timm's `MetaNeXt`:
- Activations are NHWC; BatchNorm is PyTorch's (momentum 0.1, epsilon 1e-5).
- The head is timm's: a dense layer to 3x the width, exact GELU, LayerNorm (epsilon 1e-6), then
  the classes. `pre_logits` is what timm's `forward_head(pre_logits=True)` gives, the hidden
  layer after its norm (`[batch, 3 * dims[-1]]`), and `num_classes` 0 returns it (timm's
  `num_classes=0` replaces only `fc2`); `dropout_rate` (timm's `drop_rate`) is before `fc2`.
- Weight decay (`NetworkFn.regularization_loss`) covers the convolution and dense kernels only.

`output_stride` (8 or 16; 32 or None: none) dilates as timm's `MetaNeXt`: a stage past that
stride keeps the map (its 2x2 downsampling convolution at stride 1, dilated by the stage
before's dilation and padded TensorFlow's 'SAME', the odd pixel at the bottom and right as
timm's `Conv2dSame`), and its mixers' convolutions dilate by the stride it skipped (times the
stage before's): the square one both ways, each band only along itself. The same weights load;
`feature_strides()` caps the deep stages' strides at `output_stride`.

End points: `stem`, `stage1`..`stage4`, `pre_logits`, `logits`, `predictions`.
"""

from collections.abc import Sequence
from functools import partial
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from nets.layers import Conv, ModuleDef, checkpointed, classify, drop_path, gelu, global_avg_pool
from nets.layers.dilation import StageStride, capped_strides, stage_strides
from nets.layers.drop_path import check_drop_path_rate
from nets.layers.layer_depth import stem_stages_head_layer_id
from nets.layers.norm import TORCH, batch_norm
from nets.layers.padding import smallest_input
from nets.metaformer import EPSILON, Mlp, stages

_INIT = nn.initializers.truncated_normal(0.02)  # timm's init of every Conv2d and Linear


class InceptionDWConv(nn.Module):
    """timm's `InceptionDWConv2d`: the channels split as `(rest, g, g, g)`, `g =
    int(channels * branch_ratio)`; the rest kept, the groups through a square depthwise
    convolution (`dwconv_hw`), a `1 x band` (`dwconv_w`) and a `band x 1` one (`dwconv_h`), all
    padded to keep the map, concatenated in that order. `dilation` dilates the square one both
    ways and each band along its length only (timm's `dilation=(1, d)` and `(d, 1)`)."""

    conv: ModuleDef
    band_kernel_size: int = 11
    branch_ratio: float = 0.125
    square_kernel_size: int = 3
    dilation: int = 1

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        channels = x.shape[-1]
        g = int(channels * self.branch_ratio)
        rest = channels - 3 * g
        square, band, d = self.square_kernel_size, self.band_kernel_size, self.dilation
        sp, bp = (square - 1) // 2 * d, (band - 1) // 2 * d
        dw = partial(self.conv, g, feature_group_count=g)
        branches = (
            dw((square, square), padding=[(sp, sp), (sp, sp)], kernel_dilation=d, name="dwconv_hw"),
            dw((1, band), padding=[(0, 0), (bp, bp)], kernel_dilation=(1, d), name="dwconv_w"),
            dw((band, 1), padding=[(bp, bp), (0, 0)], kernel_dilation=(d, 1), name="dwconv_h"),
        )
        parts = [x[..., :rest]]
        for i, branch in enumerate(branches):
            parts.append(branch(x[..., rest + i * g : rest + (i + 1) * g]))
        return jnp.concatenate(parts, axis=-1)


class MetaNeXtBlock(nn.Module):
    """`x + drop_path(gamma * mlp(norm(token_mixer(x))))`, timm's `MetaNeXtBlock`."""

    mixer: ModuleDef  # InceptionDWConv with the network's fields
    norm: ModuleDef  # BatchNorm, its mode bound
    mlp_ratio: float
    layer_scale_init_value: float | None = 1e-6
    drop_path_rate: float = 0.0
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        y = self.norm(name="norm")(self.mixer(name="token_mixer")(x))
        y = Mlp("gelu", True, self.dtype, self.mlp_ratio, name="mlp")(y)
        if self.layer_scale_init_value is not None:
            init = nn.initializers.constant(self.layer_scale_init_value)
            gamma = self.param("gamma", init, (x.shape[-1],), jnp.float32)
            y = y * gamma.astype(y.dtype)
        return x + drop_path(self, y, self.drop_path_rate, train)


class InceptionNeXt(nn.Module):
    """InceptionNeXt for ImageNet-sized inputs (any size of at least `min_image_size`).

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the head's hidden features
    `[batch, head_mlp_ratio * dims[-1]]` when `num_classes` is 0 or None. Parameter names are
    timm's: `stem_conv`, `stem_norm`, `stages_{i}/downsample_norm` / `downsample_conv`,
    `stages_{i}/blocks_{j}/token_mixer` / `norm` / `mlp` / `gamma`, `head_fc1`, `head_norm`,
    `head_fc2`.
    """

    default_image_size: ClassVar[int] = 224  # the paper's ImageNet-1k resolution

    depths: Sequence[int] = (3, 3, 9, 3)
    dims: Sequence[int] = (96, 192, 384, 768)
    mlp_ratios: Sequence[float] = (4, 4, 4, 3)
    band_kernel_size: int = 11  # the mixer's band convolutions, `1 x band` and `band x 1`
    branch_ratio: float = 0.125  # the channels of each of the mixer's three convolutions
    layer_scale_init_value: float | None = 1e-6  # every block's `gamma`; None: none
    head_mlp_ratio: float = 3.0
    num_classes: int | None = 1000
    dropout_rate: float = 0.0  # before the classifier (timm's `drop_rate`)
    # Stochastic depth of the residual branches, rising linearly from 0 at the first block to
    # this rate at the last (timm's rule); training only, with the 'dropout' rng.
    drop_path_rate: float = 0.0
    dtype: Any = jnp.float32
    conv: ModuleDef = Conv
    remat: bool | str = False  # stem, blocks recomputed in backward (nets.layers.remat.POLICIES)
    # Dilation for dense prediction (module docstring): 8 or 16 keep the maps at that stride;
    # None (or 32): none.
    output_stride: int | None = None

    @property
    def min_image_size(self) -> int:
        """The 4x4/4 stem and a 2x2/2 downsampling per later stage, all unpadded: 32 for four
        (less under `output_stride`: a dilated stage's downsampling keeps the map)."""
        strided = sum(s.stride > 1 for s in self.stage_strides())
        return smallest_input([(4, 4, 0)] + [(2, 2, 0)] * strided)

    def stage_strides(self) -> list[StageStride]:
        """Each stage's stride and dilations (`nets.layers.dilation`): the first stage keeps
        the stem's stride 4, each later one halves the map until `output_stride`. timm's rule
        (`curr_stride >= output_stride and stride > 1`; `first_dilation` 1 for a stage of
        dilation 2, else 2) gives the same at every stride it reaches (8, 16, 32)."""
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
        (timm's `group_matcher`, ConvNeXt's): 0 for the stem, `1 + n` for the network's block
        `n` (a stage's downsampling with its first block), the head last."""
        return stem_stages_head_layer_id(self.depths, path)

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = True):
        if not self.depths or not len(self.depths) == len(self.dims) == len(self.mlp_ratios):
            raise ValueError(
                "InceptionNeXt needs one width and MLP ratio per stage: depths "
                f"{tuple(self.depths)}, dims {tuple(self.dims)}, mlp_ratios "
                f"{tuple(self.mlp_ratios)}"
            )
        check_drop_path_rate(self.drop_path_rate)
        conv = partial(self.conv, dtype=self.dtype, kernel_init=_INIT)
        norm = batch_norm(TORCH, train, self.dtype)
        mixer = partial(InceptionDWConv, conv, self.band_kernel_size, self.branch_ratio)
        end_points = {}

        def stem(module: nn.Module, x: jax.Array) -> jax.Array:
            # The largest maps: one unit for `remat`, its layers at timm's flat paths.
            x = conv(self.dims[0], (4, 4), (4, 4), padding="VALID", name="stem_conv")(x)
            return norm(name="stem_norm")(x)

        x = end_points["stem"] = checkpointed(stem, self.remat)(self, jnp.asarray(x, self.dtype))

        block = checkpointed(MetaNeXtBlock, self.remat, takes_train=True)
        strides = self.stage_strides()
        blocks = [
            partial(
                block,
                partial(mixer, dilation=stride.dilation),
                norm,
                ratio,
                self.layer_scale_init_value,
                dtype=self.dtype,
            )
            for ratio, stride in zip(self.mlp_ratios, strides, strict=True)
        ]
        x = stages(
            x,
            train,
            end_points,
            self.depths,
            self.dims,
            blocks,
            conv,
            norm,
            self.drop_path_rate,
            downsample_kernel=2,
            strides=strides,
        )

        dense = partial(nn.Dense, dtype=self.dtype, kernel_init=_INIT)
        x = dense(int(self.head_mlp_ratio * self.dims[-1]), name="head_fc1")(global_avg_pool(x))
        x = gelu(x)
        x = nn.LayerNorm(EPSILON, dtype=self.dtype, name="head_norm")(x)
        return classify(
            x,
            end_points,
            self.num_classes,
            train=train,
            dropout_rate=self.dropout_rate,
            dtype=self.dtype,
            name="head_fc2",
            kernel_init=_INIT,
        )


# timm's sizes; atto's mixer has bands of 9 and a quarter of its channels in each branch.
inception_next_atto = partial(
    InceptionNeXt,
    depths=(2, 2, 6, 2),
    dims=(40, 80, 160, 320),
    band_kernel_size=9,
    branch_ratio=0.25,
)
inception_next_tiny = partial(InceptionNeXt, depths=(3, 3, 9, 3), dims=(96, 192, 384, 768))
inception_next_small = partial(InceptionNeXt, depths=(3, 3, 27, 3), dims=(96, 192, 384, 768))
inception_next_base = partial(InceptionNeXt, depths=(3, 3, 27, 3), dims=(128, 256, 512, 1024))

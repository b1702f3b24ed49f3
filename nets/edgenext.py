"""EdgeNeXt: Maaz et al. 2022, "EdgeNeXt: Efficiently Amalgamated CNN-Transformer Architecture for
Mobile Vision Applications" (arXiv:2206.10589), as timm's `EdgeNeXt` (`timm/models/edgenext.py`)
builds its `edgenext_*` networks.

ConvNeXt's layout (`nets.convnext`): a 4x4/4 patchify stem with LayerNorm, four stages, each but
the first opened by LayerNorm and a 2x2/2 convolution, global average pooling, LayerNorm and the
classifier. A stage's blocks are ConvNeXt's (`nets.convnext.ConvNeXtBlock`) with a depthwise
kernel that grows by stage (3, 5, 7, 9), and its last block (but in the first stage) is a split
depth-wise transpose attention block (`SplitTransposeBlock`, the paper's SDTA):
- the channels are cut into `scales` groups; the first goes through a depthwise 3x3
  convolution, each next is added to the previous output before its own, the last is kept as it
  is (Res2Net's hierarchy);
- in the second stage, XCiT's Fourier position encoding (`nets.xcit.PositionEncoding`) is added;
- `x + gamma_xca * xca(norm_xca(x))`, XCiT's cross-covariance attention (`nets.xcit.XCA`):
  attention between the channels, linear in the number of pixels;
- the block's output is its input plus `gamma * mlp(norm(.))` of that: the split convolutions
  and the attention reach it only through the MLP, as timm computes it.

`edgenext_small_rw` (Wightman's) has an overlapping 9x9/4 stem (padded 4), no biases in its
convolutions but the encoding's projection, and downsamples in each stage's first block: a
depthwise convolution of stride 2 that doubles the width, whose output is that block's residual.

Where this differs from timm's `EdgeNeXt`:
- Activations are NHWC throughout: timm's `LayerNorm2d` and `LayerNorm` are both flax's
  `LayerNorm` over the last axis, epsilon 1e-6.
- timm's `head_norm_first`, `global_pool` other than 'avg' and its attention and projection
  dropout (0 in its recipes) are not fields.
- Under bfloat16 the cross-covariance logits and softmax are float32 (`nets.xcit`).
- Weight decay (`NetworkFn.regularization_loss`) covers the convolution and dense kernels only:
  not the LayerNorms, biases, layer scales or temperatures (timm's optimizer factory spares the
  same one-dimensional parameters, and `no_weight_decay()` the temperatures).

End points: `stem`, `stage1`..`stage4` (each stage's output), `pre_logits` (pooled and normalised
features), `logits`, `predictions`.
"""

from collections.abc import Sequence
from functools import partial
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from nets.convnext import ConvNeXt, ConvNeXtBlock
from nets.layers import Conv, ModuleDef, checkpointed, classify, drop_path, global_avg_pool
from nets.layers.drop_path import check_drop_path_rate, linear_drop_path_rates
from nets.layers.padding import smallest_input
from nets.vit import Mlp
from nets.xcit import XCA, PositionEncoding

_INIT = nn.initializers.truncated_normal(0.02)  # timm's init of every convolution and Linear


class SplitTransposeBlock(nn.Module):
    """timm's `SplitTransposeBlock` (SDTA) on `[batch, h, w, c]`, as the module doc says; the
    layer scales are the block's parameters `gamma_xca` and `gamma`, as timm's and ConvNeXt's."""

    scales: int  # the channel groups, 2 or more; all but the last convolved
    num_heads: int
    conv: ModuleDef  # the split 3x3 convolutions'
    position_conv: ModuleDef | None  # the encoding's projection; None: no position encoding
    dtype: Any = jnp.float32
    mlp_ratio: int = 4
    layer_scale_init_value: float = 1e-6
    norm_epsilon: float = 1e-6
    drop_path_rate: float = 0.0

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        batch, height, width, channels = x.shape
        # torch.chunk's groups: ceil(c / scales) channels each, the last what remains.
        size = -(-channels // self.scales)
        groups = jnp.split(x, list(range(size, channels, size)), axis=-1)
        if self.scales < 2 or len(groups) != self.scales:
            raise ValueError(f"{channels} channels do not split into {self.scales} groups")
        outputs = []
        for i, group in enumerate(groups[:-1]):
            y = group if i == 0 else outputs[-1] + group
            depthwise = partial(self.conv, size, (3, 3), padding=[(1, 1)] * 2)
            outputs.append(depthwise(feature_group_count=size, name=f"convs_{i}")(y))
        tokens = jnp.concatenate([*outputs, groups[-1]], -1).reshape(batch, -1, channels)
        if self.position_conv is not None:
            encoding = PositionEncoding(channels, self.position_conv, self.dtype, name="pos_embd")
            tokens = tokens + encoding(batch, height, width).reshape(tokens.shape)

        def scaled(name: str, y: jax.Array) -> jax.Array:
            init = nn.initializers.constant(self.layer_scale_init_value)
            gamma = self.param(name, init, (channels,), jnp.float32)
            return drop_path(self, y * gamma.astype(y.dtype), self.drop_path_rate, train)

        norm = partial(nn.LayerNorm, epsilon=self.norm_epsilon, dtype=self.dtype)
        attn = XCA(self.num_heads, dtype=self.dtype, name="xca")
        tokens = tokens + scaled("gamma_xca", attn(norm(name="norm_xca")(tokens), train))
        y = norm(name="norm")(tokens.reshape(x.shape))
        y = Mlp(self.mlp_ratio * channels, dtype=self.dtype, name="mlp")(y, train)
        return x + scaled("gamma", y)


class EdgeNeXtStage(nn.Module):
    """timm's `EdgeNeXtStage`: LayerNorm and a 2x2/2 convolution (`downsample`, unless
    `downsample_block` leaves it to the first block's depthwise convolution), `conv_blocks`
    ConvNeXt blocks, then `global_blocks` SDTA blocks."""

    features: int
    num_heads: int
    kernel_size: int
    scales: int
    conv_blocks: int
    global_blocks: int
    conv: ModuleDef
    position_conv: ModuleDef | None  # the SDTA blocks' encoding projection; None: none
    drop_path_rates: tuple[float, ...]
    downsample: bool = True
    downsample_block: bool = False
    dtype: Any = jnp.float32
    mlp_ratio: int = 4
    layer_scale_init_value: float = 1e-6
    norm_epsilon: float = 1e-6
    remat: bool | str = False

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        if self.downsample and not self.downsample_block:
            x = nn.LayerNorm(epsilon=self.norm_epsilon, dtype=self.dtype, name="downsample_norm")(x)
            x = self.conv(self.features, (2, 2), 2, padding="VALID", name="downsample_conv")(x)
        shared = (self.dtype, self.mlp_ratio, self.layer_scale_init_value, self.norm_epsilon)
        block = checkpointed(ConvNeXtBlock, self.remat, takes_train=True)
        for j in range(self.conv_blocks):
            x = block(
                self.features,
                self.conv,
                *shared,
                self.drop_path_rates[j],
                kernel_size=self.kernel_size,
                strides=2 if self.downsample and self.downsample_block and j == 0 else 1,
                name=f"blocks_{j}",
            )(x, train)
        block = checkpointed(SplitTransposeBlock, self.remat, takes_train=True)
        for j in range(self.conv_blocks, self.conv_blocks + self.global_blocks):
            x = block(
                self.scales,
                self.num_heads,
                self.conv,
                self.position_conv,
                *shared,
                self.drop_path_rates[j],
                name=f"blocks_{j}",
            )(x, train)
        return x


class EdgeNeXt(nn.Module):
    """EdgeNeXt for ImageNet-sized inputs (any size of at least `min_image_size`).

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the pooled, normalised
    features `[batch, widths[-1]]` when `num_classes` is 0 or None. Parameter names are
    ConvNeXt's (`stem_conv`, `stem_norm`, `stages_{i}/downsample_norm`, `downsample_conv`,
    `stages_{i}/blocks_{j}/...`, `head_norm`, `head`); an SDTA block's are timm's:
    `convs_{k}`, `pos_embd/token_projection`, `norm_xca`, `gamma_xca`, `xca/{qkv,temperature,
    proj}`, `norm`, `mlp/{fc1,fc2}`, `gamma`.
    """

    default_image_size: ClassVar[int] = 256  # the weights' training and evaluation size

    depths: Sequence[int] = (3, 3, 9, 3)
    widths: Sequence[int] = (24, 48, 88, 168)
    num_heads: Sequence[int] = (8, 8, 8, 8)
    kernel_sizes: Sequence[int] = (3, 5, 7, 9)  # each stage's depthwise convolutions
    scales: Sequence[int] = (2, 2, 3, 4)  # the SDTA blocks' channel groups (timm's d2_scales)
    global_blocks: Sequence[int] = (0, 1, 1, 1)  # SDTA blocks closing each stage
    position_encoding: Sequence[bool] = (False, True, False, False)  # in the stage's SDTA
    # timm's edgenext_small_rw: the 9x9/4 stem, each stage downsampled by its first block's
    # depthwise convolution, no convolution biases (but the encoding's projection).
    overlapping_stem: bool = False
    downsample_block: bool = False
    conv_bias: bool = True
    num_classes: int | None = 1000
    # Stochastic depth of the residual branches, rising linearly from 0 at the first block to
    # this rate at the last (timm's schedule); training only, with the 'dropout' rng.
    drop_path_rate: float = 0.0
    dropout_rate: float = 0.0  # before the classifier (timm's `drop_rate`)
    layer_scale_init_value: float = 1e-6
    norm_epsilon: float = 1e-6
    mlp_ratio: int = 4
    dtype: Any = jnp.float32
    conv: ModuleDef = Conv
    remat: bool | str = False  # stem, blocks recomputed in backward (nets.layers.remat.POLICIES)

    layer_id = ConvNeXt.layer_id  # timm's group_matcher is ConvNeXt's

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`, ConvNeXt's: each stage's output, from the stride-4 stem
        (timm's EdgeNeXt does not dilate: no `output_stride`)."""
        return {f"stage{i + 1}": 4 * 2**i for i in range(len(self.depths))}

    @property
    def min_image_size(self) -> int:
        """The stride-4 stem, then a stride-2 downsampling per later stage."""
        stem = (9, 4, 8) if self.overlapping_stem else (4, 4, 0)
        if self.downsample_block:
            downsampling = [(k, 2, k // 2 * 2) for k in self.kernel_sizes[1:]]
        else:
            downsampling = [(2, 2, 0)] * (len(self.depths) - 1)
        return smallest_input([stem, *downsampling])

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = True):
        check_drop_path_rate(self.drop_path_rate)
        fields = (self.widths, self.num_heads, self.kernel_sizes, self.scales, self.global_blocks)
        if any(len(field) != len(self.depths) for field in (*fields, self.position_encoding)):
            raise ValueError("EdgeNeXt needs each stage's depth, width, heads, kernel, scales")
        biased = partial(self.conv, dtype=self.dtype, kernel_init=_INIT)
        conv = partial(biased, use_bias=self.conv_bias)
        norm = partial(nn.LayerNorm, epsilon=self.norm_epsilon, dtype=self.dtype)
        end_points = {}

        kernel, pad = (9, 4) if self.overlapping_stem else (4, 0)

        def stem(module: nn.Module, x: jax.Array) -> jax.Array:
            # The largest maps: one unit for `remat`, its layers at timm's flat paths.
            x = conv(
                self.widths[0], (kernel, kernel), 4, padding=[(pad, pad)] * 2, name="stem_conv"
            )(x)
            return norm(name="stem_norm")(x)

        x = end_points["stem"] = checkpointed(stem, self.remat)(self, jnp.asarray(x, self.dtype))

        rates = linear_drop_path_rates(self.drop_path_rate, sum(self.depths))
        stage_fields = zip(*fields, self.position_encoding, self.depths, strict=True)
        for i, (width, heads, kernel, scales, global_blocks, position, depth) in enumerate(
            stage_fields
        ):
            x = EdgeNeXtStage(
                width,
                heads,
                kernel,
                scales,
                depth - global_blocks,
                global_blocks,
                conv,
                biased if position else None,
                tuple(rates[sum(self.depths[:i]) : sum(self.depths[: i + 1])]),
                downsample=i > 0,
                downsample_block=self.downsample_block,
                dtype=self.dtype,
                mlp_ratio=self.mlp_ratio,
                layer_scale_init_value=self.layer_scale_init_value,
                norm_epsilon=self.norm_epsilon,
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


# timm's sizes (the paper's XXS, XS, S and its base), 4 heads in the two smallest, 8 otherwise;
# and Wightman's `small_rw`.
edgenext_xx_small = partial(
    EdgeNeXt, depths=(2, 2, 6, 2), widths=(24, 48, 88, 168), num_heads=(4, 4, 4, 4)
)
edgenext_x_small = partial(
    EdgeNeXt, depths=(3, 3, 9, 3), widths=(32, 64, 100, 192), num_heads=(4, 4, 4, 4)
)
edgenext_small = partial(EdgeNeXt, depths=(3, 3, 9, 3), widths=(48, 96, 160, 304))
edgenext_base = partial(EdgeNeXt, depths=(3, 3, 9, 3), widths=(80, 160, 288, 584))
edgenext_small_rw = partial(
    EdgeNeXt,
    depths=(3, 3, 9, 3),
    widths=(48, 96, 192, 384),
    overlapping_stem=True,
    downsample_block=True,
    conv_bias=False,
)

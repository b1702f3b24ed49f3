"""MobileViT (Mehta & Rastegari 2022, "MobileViT: Light-weight, General-purpose, and
Mobile-friendly Vision Transformer", arXiv:2110.02178) and MobileViT v2 (Mehta & Rastegari 2022,
"Separable Self-attention for Mobile Vision Transformers", arXiv:2206.02680), as timm's `ByobNet`
builds `mobilevit_xxs`, `mobilevit_xs`, `mobilevit_s` and `mobilevitv2_050` ... `_200`
(`timm/models/mobilevit.py`).

A 3x3/2 stem, five stages of MobileNetV2 inverted residuals (`nets.layers.InvertedResidual`:
1x1 expansion by `expansion`, 3x3 depthwise, linear 1x1 projection, the shortcut where the
stride is 1 and the widths agree), the last three stages each closed by a MobileViT block, a 1x1
convolution to `num_features` (v1 only), global average pooling and the classifier. SiLU
everywhere; PyTorch's BatchNorm (epsilon 1e-5) and symmetric padding.

The MobileViT block: a 3x3 convolution and a 1x1 one (no norm) to `transformer_dim`; the map
cut into 2x2 patches, and the pixels at one position of every patch form one sequence (`unfold`:
`[b, h, w, c] -> [b * 4, h/2 * w/2, c]`); pre-norm Transformer blocks over those sequences
(`nets.vit.Block`: 4 heads, an MLP twice as wide with SiLU, LayerNorm epsilon 1e-5), a
LayerNorm, the inverse `fold`, a 1x1 convolution back to the stage's width, then a 3x3
convolution of it concatenated after the block's input. A map whose sides are not multiples of
the patch is resized bilinearly (half-pixel centres, no antialiasing: PyTorch's
`interpolate(align_corners=False)`) to the next multiples before `unfold`, and back after `fold`.

MobileViT v2's block (`linear_attention=True`): a 3x3 depthwise convolution, a 1x1 one to half
the stage's width, blocks of separable linear self-attention (`LinearSelfAttention`: a score
per token whose softmax over the patches weighs the keys into one context vector, which scales
the ReLU'd values) and an MLP, each after a norm of one group over the whole unfolded map
(PyTorch's `GroupNorm(1, d)`), a last such norm, the fold and a 1x1 projection with BatchNorm and
no activation; no fusion with the input. Its odd maps are enlarged to whole patches with the
corners aligned (`interpolate(align_corners=True)`) before the block, and stay enlarged.

`output_stride` 8 or 16 (timm's `create_byob_stages`; `nets.layers.dilation`): the stages past
that stride keep their input's size and dilate their 3x3 convolutions by the stride given up, the
first inverted residual's by the stage before's dilation (without its shortcut where the two
differ, timm's rule), the MobileViT block's `conv_kxk` by the stage's; as in timm, v1's 3x3
`conv_fusion` is not dilated and the patches stay 2x2: the deeper maps unfold into more patches
(and are resized to whole ones as above).

Where this differs from timm's `ByobNet`: activations are NHWC; `dropout_rate` is timm's
`drop_rate` before the classifier; `drop_path_rate` follows timm's linear rule over all blocks
(the MobileViT block passes its rate to its Transformer blocks, as timm's does).

End points: `stem`, `stage1`..`stage5`, `final_conv` (v1), `pre_logits`, `logits`,
`predictions`.
"""

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from nets.layers import (
    TORCH,
    Conv,
    ConvNormAct,
    InvertedResidual,
    ModuleDef,
    batch_norm,
    checkpointed,
    classify,
    drop_path,
    global_avg_pool,
    make_divisible,
)
from nets.layers.attention import Implementation
from nets.layers.dilation import (
    STANDARD_OUTPUT_STRIDES,
    StageStride,
    capped_strides,
    stage_strides,
)
from nets.layers.drop_path import check_drop_path_rate, linear_drop_path_rates
from nets.layers.padding import PaddingLike, smallest_input
from nets.vit import Block, Mlp

LAYER_NORM_EPSILON = 1e-5  # torch.nn.LayerNorm's default, timm's transformer_norm_layer


class Stage(NamedTuple):
    """One of timm's stages: `depth` inverted residuals of width `channels` (the first strided by
    `strides`), then, with a `transformer_dim`, a MobileViT block of `transformer_depth`."""

    depth: int
    channels: int
    strides: int
    expansion: float
    transformer_dim: int | None = None
    transformer_depth: int = 0


def unfold(x: jax.Array, patch: int) -> jax.Array:
    """`[b, h, w, c] -> [b * patch**2, (h / patch) * (w / patch), c]`: sequence `(b, i, j)`
    holds pixel `(i, j)` of every patch, patches in row-major order (timm's unfolding)."""
    b, h, w, c = x.shape
    x = x.reshape(b, h // patch, patch, w // patch, patch, c).transpose(0, 2, 4, 1, 3, 5)
    return x.reshape(b * patch * patch, (h // patch) * (w // patch), c)


def fold(x: jax.Array, patch: int, size: tuple[int, int]) -> jax.Array:
    """`unfold`'s inverse: `[b * patch**2, tokens, c] -> [b, h, w, c]` with `size = (h, w)`."""
    (h, w), c = size, x.shape[-1]
    x = x.reshape(-1, patch, patch, h // patch, w // patch, c).transpose(0, 3, 1, 4, 2, 5)
    return x.reshape(-1, h, w, c)


def resize(x: jax.Array, size: tuple[int, int]) -> jax.Array:
    """Bilinear resizing of a NHWC map as PyTorch's `interpolate(mode='bilinear',
    align_corners=False)`: half-pixel centres, no antialiasing when it shrinks."""
    if x.shape[1:3] == tuple(size):
        return x
    shape = (x.shape[0], *size, x.shape[-1])
    return jax.image.resize(x, shape, "bilinear", antialias=False).astype(x.dtype)


class MobileViTBlock(nn.Module):
    """Local 3x3 + 1x1 convolutions, Transformer blocks over the unfolded patches, the fold, a
    1x1 projection and the 3x3 fusion with the input (timm's `MobileVitBlock`, its names)."""

    transformer_dim: int
    transformer_depth: int
    layer: ModuleDef  # ConvNormAct with the network's conv, norm, activation and padding
    conv: ModuleDef
    patch_size: int = 2
    num_heads: int = 4
    mlp_ratio: float = 2.0
    epsilon: float = LAYER_NORM_EPSILON
    drop_path_rate: float = 0.0
    dtype: Any = jnp.float32
    attention: Implementation = "auto"
    dilation: int = 1  # of `conv_kxk` only (timm's: not of `conv_fusion`)

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        """`[n, h, w, c] -> [n, h, w, c]`."""
        shortcut, channels = x, x.shape[-1]
        conv_kxk = self.layer(channels, 3, dilation=self.dilation, name="conv_kxk")
        x = conv_kxk(x)
        x = self.conv(self.transformer_dim, (1, 1), use_bias=False, name="conv_1x1")(x)
        p, size = self.patch_size, x.shape[1:3]
        padded = tuple(-(-n // p) * p for n in size)
        x = unfold(resize(x, padded), p)
        for i in range(self.transformer_depth):
            x = Block(
                self.num_heads,
                self.mlp_ratio,
                drop_path_rate=self.drop_path_rate,
                epsilon=self.epsilon,
                dtype=self.dtype,
                attention=self.attention,
                act_layer="silu",
                name=f"transformer_{i}",
            )(x, train)
        x = nn.LayerNorm(self.epsilon, dtype=self.dtype, name="norm")(x)
        x = resize(fold(x, p, padded), size)
        x = self.layer(channels, 1, name="conv_proj")(x)
        return self.layer(channels, 3, name="conv_fusion")(jnp.concatenate([shortcut, x], -1))


def resize_align_corners(x: jax.Array, size: tuple[int, int]) -> jax.Array:
    """Bilinear resizing of a NHWC map as PyTorch's `interpolate(mode='bilinear',
    align_corners=True)`, which MobileViT v2 enlarges its odd maps with: output pixel `i` samples
    the input at `i * (n_in - 1) / (n_out - 1)` (the corners' centres kept)."""
    if x.shape[1:3] == tuple(size):
        return x

    def weights(n_in: int, n_out: int) -> np.ndarray:
        position = np.arange(n_out) * ((n_in - 1) / max(n_out - 1, 1))
        low = np.minimum(np.floor(position).astype(int), n_in - 1)
        high, frac = np.minimum(low + 1, n_in - 1), position - low
        matrix = np.zeros((n_out, n_in), np.float32)
        np.add.at(matrix, (np.arange(n_out), low), 1 - frac)
        np.add.at(matrix, (np.arange(n_out), high), frac)
        return matrix

    rows, cols = weights(x.shape[1], size[0]), weights(x.shape[2], size[1])
    x = jnp.einsum("oh,bhwc->bowc", rows.astype(x.dtype), x)
    return jnp.einsum("pw,bowc->bopc", cols.astype(x.dtype), x)


class LinearSelfAttention(nn.Module):
    """MobileViT v2's separable self-attention (Mehta & Rastegari 2022, arXiv:2206.02680) over
    `[b, patch pixels, patches, d]`: one projection `qkv_proj` to a score, keys and values; the
    scores' softmax over the patches weighs the keys into one context vector per patch pixel,
    which scales `relu(values)`; then `out_proj` (timm's `LinearSelfAttention`, its names)."""

    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        width = x.shape[-1]
        qkv = nn.Dense(1 + 2 * width, dtype=self.dtype, name="qkv_proj")(x)
        query, key, value = qkv[..., :1], qkv[..., 1 : 1 + width], qkv[..., 1 + width :]
        scores = jax.nn.softmax(query, axis=2)
        context = jnp.sum(key * scores, axis=2, keepdims=True)
        return nn.Dense(width, dtype=self.dtype, name="out_proj")(nn.relu(value) * context)


class LinearTransformerBlock(nn.Module):
    """`x + attn(norm1(x))`, then `x + mlp(norm2(x))` on `[b, patch pixels, patches, d]`, the
    norms of one group over the whole tensor (timm's `GroupNorm1`), the MLP 1x1 convolutions as
    dense layers (timm's `LinearTransformerBlock` and `ConvMlp`)."""

    mlp_ratio: float = 2.0
    epsilon: float = LAYER_NORM_EPSILON  # PyTorch's GroupNorm default
    drop_path_rate: float = 0.0
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        norm = partial(nn.GroupNorm, num_groups=1, epsilon=self.epsilon, dtype=self.dtype)
        branch = LinearSelfAttention(self.dtype, name="attn")(norm(name="norm1")(x))
        x = x + drop_path(self, branch, self.drop_path_rate, train)
        mlp = Mlp(int(x.shape[-1] * self.mlp_ratio), dtype=self.dtype, act_layer="silu", name="mlp")
        return x + drop_path(self, mlp(norm(name="norm2")(x), train), self.drop_path_rate, train)


class MobileViTV2Block(nn.Module):
    """MobileViT v2's block (timm's `MobileVitV2Block`, its names): a 3x3 depthwise convolution,
    a 1x1 one to `transformer_dim`, linear-attention Transformer blocks over the unfolded
    patches, a norm of one group, the fold and a 1x1 projection with BatchNorm and no
    activation; no fusion with the input. A map of odd sides is enlarged to whole patches first
    (`resize_align_corners`) and stays enlarged, as timm's."""

    transformer_dim: int
    transformer_depth: int
    layer: ModuleDef
    conv: ModuleDef
    patch_size: int = 2
    mlp_ratio: float = 2.0
    epsilon: float = LAYER_NORM_EPSILON
    drop_path_rate: float = 0.0
    dtype: Any = jnp.float32
    dilation: int = 1  # of `conv_kxk`

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        """`[n, h, w, c] -> [n, h', w', c]`, `h'`, `w'` the next multiples of the patch."""
        b, channels, p = x.shape[0], x.shape[-1], self.patch_size
        size = tuple(-(-n // p) * p for n in x.shape[1:3])
        x = resize_align_corners(x, size)
        x = self.layer(channels, 3, groups=channels, dilation=self.dilation, name="conv_kxk")(x)
        x = self.conv(self.transformer_dim, (1, 1), use_bias=False, name="conv_1x1")(x)
        x = unfold(x, p).reshape(b, p * p, -1, self.transformer_dim)
        for i in range(self.transformer_depth):
            x = LinearTransformerBlock(
                self.mlp_ratio,
                self.epsilon,
                self.drop_path_rate,
                self.dtype,
                name=f"transformer_{i}",
            )(x, train)
        norm = nn.GroupNorm(num_groups=1, epsilon=self.epsilon, dtype=self.dtype, name="norm")
        x = fold(norm(x).reshape(b * p * p, -1, self.transformer_dim), p, size)
        return self.layer(channels, 1, act=None, name="conv_proj")(x)


class MobileViT(nn.Module):
    """timm's MobileViT v1 and v2: `[n, h, w, 3] -> (logits [n, num_classes], end_points)`."""

    stages: Sequence[Stage]
    num_features: int = 0  # of `final_conv`; 0: none (v2)
    stem_chs: int = 16
    # MobileViT v2's blocks (`MobileViTV2Block`: linear attention, norms of one group, no fusion).
    linear_attention: bool = False
    default_image_size: int = 256  # the evaluation size of timm's weights
    num_classes: int | None = 1000
    dropout_rate: float = 0.0  # timm's drop_rate, before the classifier
    drop_path_rate: float = 0.0
    patch_size: int = 2
    num_heads: int = 4
    mlp_ratio: float = 2.0
    act: Callable = nn.silu
    epsilon: float = LAYER_NORM_EPSILON  # of the Transformer blocks' norms (v2's GroupNorms)
    padding: PaddingLike = "SYMMETRIC"  # of the 3x3 convolutions: PyTorch's, the weights'
    # 8 or 16: the deeper stages dilate instead of striding (module docstring); None (or 32):
    # none do.
    output_stride: int | None = None
    dtype: Any = jnp.float32
    attention: Implementation = "auto"
    conv: ModuleDef = Conv
    remat: bool | str = False  # stem, blocks recomputed in backward (nets.layers.remat.POLICIES)

    @property
    def min_image_size(self) -> int:
        """The 3x3/2 convolutions (stem and strided stages) with a pixel of padding: one pixel
        stays one."""
        strided = [(3, 2, 2)] * (1 + sum(s.stride > 1 for s in self.stage_strides()))
        return smallest_input(strided)

    def stage_strides(self) -> list[StageStride]:
        """Each stage's stride and dilations at `output_stride` (timm's `create_byob_stages`:
        the stride-2 stem, then the stages' own strides)."""
        strides = [stage.strides for stage in self.stages]
        return stage_strides(strides, self.output_stride, 2, taken=STANDARD_OUTPUT_STRIDES)

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: the stages' outputs, the last one's after `final_conv` where
        there is one (capped at `output_stride`)."""
        strides, stride = {}, 2
        for i, stage in enumerate(self.stages):
            stride *= stage.strides
            strides[f"stage{i + 1}"] = stride
        if self.num_features:
            strides["final_conv"] = strides.pop(f"stage{len(self.stages)}")
        self.stage_strides()  # a bad output_stride's error here too
        return capped_strides(strides, self.output_stride)

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = True):
        check_drop_path_rate(self.drop_path_rate)
        conv = partial(self.conv, dtype=self.dtype)
        norm = batch_norm(TORCH, train, self.dtype)
        layer = partial(ConvNormAct, conv=conv, norm=norm, act=self.act, padding=self.padding)
        end_points = {}
        stem = checkpointed(layer, self.remat)  # the largest maps: one unit for remat
        x = end_points["stem"] = stem(self.stem_chs, 3, strides=2, name="stem")(
            jnp.asarray(x, self.dtype)
        )
        blocks = sum(stage.depth + bool(stage.transformer_dim) for stage in self.stages)
        rates = iter(linear_drop_path_rates(self.drop_path_rate, blocks))
        for i, (stage, (stride, dilation, first)) in enumerate(
            zip(self.stages, self.stage_strides(), strict=True)
        ):
            for j in range(stage.depth):
                x = checkpointed(InvertedResidual, self.remat)(
                    stage.channels,
                    stage.expansion,
                    conv,
                    norm,
                    self.act,
                    strides=stride if j == 0 else 1,
                    dilation=first if j == 0 else dilation,
                    # timm's: no shortcut where the block's two dilations differ
                    residual=j > 0 or first == dilation,
                    padding=self.padding,
                    drop_path_rate=next(rates),
                    deterministic=not train,
                    name=f"stages_{i}_{j}",
                )(x)
            if stage.transformer_dim and self.linear_attention:
                x = checkpointed(MobileViTV2Block, self.remat, takes_train=True)(
                    stage.transformer_dim,
                    stage.transformer_depth,
                    layer,
                    conv,
                    self.patch_size,
                    self.mlp_ratio,
                    self.epsilon,
                    drop_path_rate=next(rates),
                    dtype=self.dtype,
                    dilation=dilation,
                    name=f"stages_{i}_{stage.depth}",
                )(x, train)
            elif stage.transformer_dim:
                x = checkpointed(MobileViTBlock, self.remat, takes_train=True)(
                    stage.transformer_dim,
                    stage.transformer_depth,
                    layer,
                    conv,
                    self.patch_size,
                    self.num_heads,
                    self.mlp_ratio,
                    self.epsilon,
                    drop_path_rate=next(rates),
                    dtype=self.dtype,
                    attention=self.attention,
                    dilation=dilation,
                    name=f"stages_{i}_{stage.depth}",
                )(x, train)
            end_points[f"stage{i + 1}"] = x
        if self.num_features:
            x = end_points["final_conv"] = layer(self.num_features, 1, name="final_conv")(x)
        return classify(
            global_avg_pool(x),
            end_points,
            self.num_classes,
            train=train,
            dropout_rate=self.dropout_rate,
            dtype=self.dtype,
            name="head",
        )


# timm's `model_cfgs` (the paper's Table 4): the stem of 16, then (depth, width, stride,
# expansion, transformer width, transformer depth) per stage, and the width of `final_conv`.
_XXS = (
    Stage(1, 16, 1, 2.0),
    Stage(3, 24, 2, 2.0),
    Stage(1, 48, 2, 2.0, 64, 2),
    Stage(1, 64, 2, 2.0, 80, 4),
    Stage(1, 80, 2, 2.0, 96, 3),
)
_XS = (
    Stage(1, 32, 1, 4.0),
    Stage(3, 48, 2, 4.0),
    Stage(1, 64, 2, 4.0, 96, 2),
    Stage(1, 80, 2, 4.0, 120, 4),
    Stage(1, 96, 2, 4.0, 144, 3),
)
_S = (
    Stage(1, 32, 1, 4.0),
    Stage(3, 64, 2, 4.0),
    Stage(1, 96, 2, 4.0, 144, 2),
    Stage(1, 128, 2, 4.0, 192, 4),
    Stage(1, 160, 2, 4.0, 240, 3),
)
mobilevit_xxs = partial(MobileViT, stages=_XXS, num_features=320)
mobilevit_xs = partial(MobileViT, stages=_XS, num_features=384)
mobilevit_s = partial(MobileViT, stages=_S, num_features=640)


def _v2(multiplier: float) -> dict:
    """timm's `_mobilevitv2_cfg`: widths (64, 128, 256, 384, 512) and a stem of 32, each times
    `multiplier` (truncated); expansion 2; Transformers half as wide as their stage, 2, 4 and 3
    blocks deep; no `final_conv`."""
    c = [int(width * multiplier) for width in (64, 128, 256, 384, 512)]
    stages = (
        Stage(1, c[0], 1, 2.0),
        Stage(2, c[1], 2, 2.0),
        Stage(1, c[2], 2, 2.0, make_divisible(c[2] / 2), 2),
        Stage(1, c[3], 2, 2.0, make_divisible(c[3] / 2), 4),
        Stage(1, c[4], 2, 2.0, make_divisible(c[4] / 2), 3),
    )
    return {"stages": stages, "stem_chs": int(32 * multiplier), "linear_attention": True}


mobilevitv2_050 = partial(MobileViT, **_v2(0.5))
mobilevitv2_075 = partial(MobileViT, **_v2(0.75))
mobilevitv2_100 = partial(MobileViT, **_v2(1.0))
mobilevitv2_125 = partial(MobileViT, **_v2(1.25))
mobilevitv2_150 = partial(MobileViT, **_v2(1.5))
mobilevitv2_175 = partial(MobileViT, **_v2(1.75))
mobilevitv2_200 = partial(MobileViT, **_v2(2.0))

"""MobileViT (Mehta & Rastegari 2022, "MobileViT: Light-weight, General-purpose, and
Mobile-friendly Vision Transformer", arXiv:2110.02178), as timm's `ByobNet` builds
`mobilevit_xxs`, `mobilevit_xs` and `mobilevit_s` (`timm/models/mobilevit.py`).

A 3x3/2 stem, five stages of MobileNetV2 inverted residuals (`nets.layers.InvertedResidual`:
1x1 expansion by `expansion`, 3x3 depthwise, linear 1x1 projection, the shortcut where the
stride is 1 and the widths agree), the last three stages each closed by a MobileViT block, a 1x1
convolution to `num_features`, global average pooling and the classifier. SiLU everywhere;
PyTorch's BatchNorm (epsilon 1e-5) and symmetric padding.

The MobileViT block: a 3x3 convolution and a 1x1 one (no norm) to `transformer_dim`; the map
cut into 2x2 patches, and the pixels at one position of every patch form one sequence (`unfold`:
`[b, h, w, c] -> [b * 4, h/2 * w/2, c]`); pre-norm Transformer blocks over those sequences
(`nets.vit.Block`: 4 heads, an MLP twice as wide with SiLU, LayerNorm epsilon 1e-5), a
LayerNorm, the inverse `fold`, a 1x1 convolution back to the stage's width, then a 3x3
convolution of it concatenated after the block's input. A map whose sides are not multiples of
the patch is resized bilinearly (half-pixel centres, no antialiasing: PyTorch's
`interpolate(align_corners=False)`) to the next multiples before `unfold`, and back after `fold`.

Where this differs from timm's `ByobNet`: activations are NHWC; `dropout_rate` is timm's
`drop_rate` before the classifier; `drop_path_rate` follows timm's linear rule over all blocks
(the MobileViT block passes its rate to its Transformer blocks, as timm's does).

End points: `stem`, `stage1`..`stage5`, `final_conv`, `pre_logits`, `logits`, `predictions`.
"""

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from nets.layers import (
    TORCH,
    Conv,
    ConvNormAct,
    InvertedResidual,
    ModuleDef,
    batch_norm,
    classify,
    global_avg_pool,
)
from nets.layers.attention import Implementation
from nets.layers.drop_path import check_drop_path_rate, linear_drop_path_rates
from nets.layers.padding import PaddingLike, smallest_input
from nets.vit import Block

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

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        """`[n, h, w, c] -> [n, h, w, c]`."""
        shortcut, channels = x, x.shape[-1]
        x = self.layer(channels, 3, name="conv_kxk")(x)
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


class MobileViT(nn.Module):
    """timm's MobileViT v1: `[n, h, w, 3] -> (logits [n, num_classes], end_points)`."""

    stages: Sequence[Stage]
    num_features: int
    stem_chs: int = 16
    default_image_size: int = 256  # the evaluation size of timm's weights
    num_classes: int | None = 1000
    dropout_rate: float = 0.0  # timm's drop_rate, before the classifier
    drop_path_rate: float = 0.0
    patch_size: int = 2
    num_heads: int = 4
    mlp_ratio: float = 2.0
    act: Callable = nn.silu
    epsilon: float = LAYER_NORM_EPSILON  # of the Transformer blocks' LayerNorms
    padding: PaddingLike = "SYMMETRIC"  # of the 3x3 convolutions: PyTorch's, the weights'
    dtype: Any = jnp.float32
    attention: Implementation = "auto"
    conv: ModuleDef = Conv

    @property
    def min_image_size(self) -> int:
        """The 3x3/2 convolutions (stem and strided stages) with a pixel of padding: one pixel
        stays one."""
        strided = [(3, 2, 2)] * (1 + sum(stage.strides > 1 for stage in self.stages))
        return smallest_input(strided)

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: the first four stages' outputs, then `final_conv`'s."""
        strides, stride = {}, 2
        for i, stage in enumerate(self.stages[:-1]):
            stride *= stage.strides
            strides[f"stage{i + 1}"] = stride
        return {**strides, "final_conv": stride * self.stages[-1].strides}

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = True):
        check_drop_path_rate(self.drop_path_rate)
        conv = partial(self.conv, dtype=self.dtype)
        norm = batch_norm(TORCH, train, self.dtype)
        layer = partial(ConvNormAct, conv=conv, norm=norm, act=self.act, padding=self.padding)
        end_points = {}
        x = end_points["stem"] = layer(self.stem_chs, 3, strides=2, name="stem")(
            jnp.asarray(x, self.dtype)
        )
        blocks = sum(stage.depth + bool(stage.transformer_dim) for stage in self.stages)
        rates = iter(linear_drop_path_rates(self.drop_path_rate, blocks))
        for i, stage in enumerate(self.stages):
            for j in range(stage.depth):
                x = InvertedResidual(
                    stage.channels,
                    stage.expansion,
                    conv,
                    norm,
                    self.act,
                    strides=stage.strides if j == 0 else 1,
                    padding=self.padding,
                    drop_path_rate=next(rates),
                    deterministic=not train,
                    name=f"stages_{i}_{j}",
                )(x)
            if stage.transformer_dim:
                x = MobileViTBlock(
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
                    name=f"stages_{i}_{stage.depth}",
                )(x, train)
            end_points[f"stage{i + 1}"] = x
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

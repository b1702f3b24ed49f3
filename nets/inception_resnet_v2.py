"""Inception-ResNet-v2, as TF-Slim's `inception_resnet_v2` builds it.

Szegedy et al. 2016, "Inception-v4, Inception-ResNet and the Impact of Residual Connections on
Learning" (arXiv:1602.07261): Inception blocks whose concatenated branches are projected back to
the input width by a biased 1x1 convolution (no BatchNorm), scaled (0.17, 0.10, 0.20) and added
to the input. Slim's stem is Inception v3's, not the paper's figure 3.

Slim's `slim.repeat` scopes are kept: `Repeat/block35_1` .. `block35_10`,
`Repeat_1/block17_1` .. `block17_20`, `Repeat_2/block8_1` .. `block8_9`, and the last, unscaled,
unactivated `Block8`. Slim's `output_stride=8` and `align_feature_maps` options are not here.
"""

import functools
from typing import Any, ClassVar

import flax.linen as nn

from nets.inception_utils import (
    V3_STEM,
    V3_STEM_UNITS,
    AuxHeadInception,
    AuxLogits,
    AvgPool,
    Builder,
    Conv2d,
    MaxPool,
    Mixed,
    concat_branches,
    slim_head,
)
from nets.layers import ModuleDef, checkpointed


class ResidualBlock(nn.Module):
    """Slim's `block35` / `block17` / `block8`: `relu(x + scale * Conv2d_1x1(branches(x)))`."""

    branches: tuple[tuple[Any, ...], ...]
    builder: Builder
    scale: float = 1.0
    activate: bool = True

    @nn.compact
    def __call__(self, x):
        mixed = concat_branches(self.branches, x, self.builder)
        up = self.builder.conv(x.shape[-1], (1, 1), use_bias=True, name="Conv2d_1x1")(mixed)
        x = x + self.scale * up
        return nn.relu(x) if self.activate else x


class Repeat(nn.Module):
    """Slim's `slim.repeat` scope: `count` blocks named `{prefix}_1` .. `{prefix}_{count}`."""

    block: ModuleDef
    count: int
    prefix: str

    @nn.compact
    def __call__(self, x):
        for i in range(1, self.count + 1):
            x = self.block(name=f"{self.prefix}_{i}")(x)
        return x


_BLOCK35 = (  # 35x35, 320 channels
    (Conv2d("Conv2d_1x1", 32, 1),),
    (Conv2d("Conv2d_0a_1x1", 32, 1), Conv2d("Conv2d_0b_3x3", 32, 3)),
    (
        Conv2d("Conv2d_0a_1x1", 32, 1),
        Conv2d("Conv2d_0b_3x3", 48, 3),
        Conv2d("Conv2d_0c_3x3", 64, 3),
    ),
)

_BLOCK17 = (  # 17x17, 1088 channels
    (Conv2d("Conv2d_1x1", 192, 1),),
    (
        Conv2d("Conv2d_0a_1x1", 128, 1),
        Conv2d("Conv2d_0b_1x7", 160, (1, 7)),
        Conv2d("Conv2d_0c_7x1", 192, (7, 1)),
    ),
)

_BLOCK8 = (  # 8x8, 2080 channels
    (Conv2d("Conv2d_1x1", 192, 1),),
    (
        Conv2d("Conv2d_0a_1x1", 192, 1),
        Conv2d("Conv2d_0b_1x3", 224, (1, 3)),
        Conv2d("Conv2d_0c_3x1", 256, (3, 1)),
    ),
)

# Slim's inception_resnet_v2_base up to Mixed_5b: Inception v3's stem, then a 35x35 block.
_STEM = (
    *V3_STEM,
    Mixed(
        "Mixed_5b",
        (
            (Conv2d("Conv2d_1x1", 96, 1),),
            (Conv2d("Conv2d_0a_1x1", 48, 1), Conv2d("Conv2d_0b_5x5", 64, 5)),
            (
                Conv2d("Conv2d_0a_1x1", 64, 1),
                Conv2d("Conv2d_0b_3x3", 96, 3),
                Conv2d("Conv2d_0c_3x3", 96, 3),
            ),
            (AvgPool("AvgPool_0a_3x3", 3), Conv2d("Conv2d_0b_1x1", 64, 1)),
        ),
    ),
)

_MIXED_6A = Mixed(
    "Mixed_6a",
    (
        (Conv2d("Conv2d_1a_3x3", 384, 3, stride=2, padding="VALID"),),
        (
            Conv2d("Conv2d_0a_1x1", 256, 1),
            Conv2d("Conv2d_0b_3x3", 256, 3),
            Conv2d("Conv2d_1a_3x3", 384, 3, stride=2, padding="VALID"),
        ),
        (MaxPool("MaxPool_1a_3x3", 3, stride=2, padding="VALID"),),
    ),
)

_MIXED_7A = Mixed(
    "Mixed_7a",
    (
        (
            Conv2d("Conv2d_0a_1x1", 256, 1),
            Conv2d("Conv2d_1a_3x3", 384, 3, stride=2, padding="VALID"),
        ),
        (
            Conv2d("Conv2d_0a_1x1", 256, 1),
            Conv2d("Conv2d_1a_3x3", 288, 3, stride=2, padding="VALID"),
        ),
        (
            Conv2d("Conv2d_0a_1x1", 256, 1),
            Conv2d("Conv2d_0b_3x3", 288, 3),
            Conv2d("Conv2d_1a_3x3", 320, 3, stride=2, padding="VALID"),
        ),
        (MaxPool("MaxPool_1a_3x3", 3, stride=2, padding="VALID"),),
    ),
)

_AUX = functools.partial(
    AuxLogits, kernel_name="Conv2d_2a_5x5", logits_name="Logits", fully_connected=True
)


class InceptionResnetV2(AuxHeadInception):
    """Slim's Inception-ResNet-v2, default image size 299 (at least 75, 107 with aux logits).

    Returns `(logits, end_points)`; end points are Slim's (`Conv2d_1a_3x3` ... `Mixed_5b`,
    `Mixed_6a`, `PreAuxLogits`, `Mixed_7a`, `Conv2d_7b_1x1`) plus `stem` (`MaxPool_5a_3x3`),
    `Repeat` (the ten 35x35 residual blocks' output, the 35x35 grid's last map),
    `pre_logits`, `logits`, `predictions`, and in training `aux_logits`, Slim's `AuxLogits` head
    on `PreAuxLogits` (`create_aux_logits`; `init` creates its parameters whatever the mode, so
    train and eval variables match). Dropout (keep_prob 0.8) precedes the fully connected
    `Logits/Logits`. BatchNorm as `inception_resnet_v2_arg_scope`: decay 0.9997, epsilon 0.001,
    no scale.

    `depth_multiplier` and `min_depth` are not Slim's here: they thin every convolution as in
    Slim's inception_v2/v3 (`max(int(d * depth_multiplier), min_depth)`), for small test networks;
    each residual block's `Conv2d_1x1` projects back to whatever width it is given.
    """

    default_image_size: ClassVar[int] = 299
    # timm's `feature_info`: the deepest map at each stride.
    pyramid: ClassVar[dict[str, int]] = {
        "Conv2d_2b_3x3": 2,
        "Conv2d_4a_3x3": 4,
        "Repeat": 8,
        "PreAuxLogits": 16,
        "Conv2d_7b_1x1": 32,
    }

    @nn.compact
    def __call__(self, x, train: bool = True):
        b = self.builder(train)
        x, end_points = self.run(_STEM, x, b, V3_STEM_UNITS)

        def record(name, y):
            end_points[name] = y
            return y

        # Each residual block and Mixed block is checkpointed (`b.remat`), not the Repeat scopes.
        residual = checkpointed(ResidualBlock, self.remat)
        block35 = functools.partial(residual, _BLOCK35, b, scale=0.17)
        x = record("Repeat", Repeat(block35, 10, "block35", name="Repeat")(x))
        x = record("Mixed_6a", _MIXED_6A(x, b))
        block17 = functools.partial(residual, _BLOCK17, b, scale=0.10)
        x = record("PreAuxLogits", Repeat(block17, 20, "block17", name="Repeat_1")(x))
        x = record("Mixed_7a", _MIXED_7A(x, b))
        block8 = functools.partial(residual, _BLOCK8, b, scale=0.20)
        x = Repeat(block8, 9, "block8", name="Repeat_2")(x)
        x = residual(_BLOCK8, b, activate=False, name="Block8")(x)
        x = record("Conv2d_7b_1x1", Conv2d("Conv2d_7b_1x1", 1536, 1)(x, b))

        return slim_head(self, x, end_points, b, train, "Logits", True, _AUX, "PreAuxLogits")


inception_resnet_v2 = functools.partial(InceptionResnetV2)

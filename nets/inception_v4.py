"""Inception v4, as TF-Slim's `inception_v4` builds it.

Szegedy et al. 2016, "Inception-v4, Inception-ResNet and the Impact of Residual Connections on
Learning" (arXiv:1602.07261), figures 3-9: a stem of parallel convolutions and pools, then four
Inception-A, Reduction-A, seven Inception-B, Reduction-B and three Inception-C blocks.
"""

import functools
from typing import ClassVar

import flax.linen as nn

from nets.inception_utils import (
    AuxHeadInception,
    AuxLogits,
    AvgPool,
    Concat,
    Conv2d,
    MaxPool,
    Mixed,
    reduction_b,
)

_INCEPTION_A = (  # 35x35, 384 channels
    (Conv2d("Conv2d_0a_1x1", 96, 1),),
    (Conv2d("Conv2d_0a_1x1", 64, 1), Conv2d("Conv2d_0b_3x3", 96, 3)),
    (
        Conv2d("Conv2d_0a_1x1", 64, 1),
        Conv2d("Conv2d_0b_3x3", 96, 3),
        Conv2d("Conv2d_0c_3x3", 96, 3),
    ),
    (AvgPool("AvgPool_0a_3x3", 3), Conv2d("Conv2d_0b_1x1", 96, 1)),
)

_REDUCTION_A = (  # 35x35 -> 17x17, 1024 channels
    (Conv2d("Conv2d_1a_3x3", 384, 3, stride=2, padding="VALID"),),
    (
        Conv2d("Conv2d_0a_1x1", 192, 1),
        Conv2d("Conv2d_0b_3x3", 224, 3),
        Conv2d("Conv2d_1a_3x3", 256, 3, stride=2, padding="VALID"),
    ),
    (MaxPool("MaxPool_1a_3x3", 3, stride=2, padding="VALID"),),
)

_INCEPTION_B = (  # 17x17, 1024 channels
    (Conv2d("Conv2d_0a_1x1", 384, 1),),
    (
        Conv2d("Conv2d_0a_1x1", 192, 1),
        Conv2d("Conv2d_0b_1x7", 224, (1, 7)),
        Conv2d("Conv2d_0c_7x1", 256, (7, 1)),
    ),
    (
        Conv2d("Conv2d_0a_1x1", 192, 1),
        Conv2d("Conv2d_0b_7x1", 192, (7, 1)),
        Conv2d("Conv2d_0c_1x7", 224, (1, 7)),
        Conv2d("Conv2d_0d_7x1", 224, (7, 1)),
        Conv2d("Conv2d_0e_1x7", 256, (1, 7)),
    ),
    (AvgPool("AvgPool_0a_3x3", 3), Conv2d("Conv2d_0b_1x1", 128, 1)),
)

_REDUCTION_B = reduction_b((192, 192, 256, 256, 320, 320))  # 17x17 -> 8x8, 1536 channels

_INCEPTION_C = (  # 8x8, 1536 channels
    (Conv2d("Conv2d_0a_1x1", 256, 1),),
    (
        Conv2d("Conv2d_0a_1x1", 384, 1),
        Concat((Conv2d("Conv2d_0b_1x3", 256, (1, 3)), Conv2d("Conv2d_0c_3x1", 256, (3, 1)))),
    ),
    (
        Conv2d("Conv2d_0a_1x1", 384, 1),
        Conv2d("Conv2d_0b_3x1", 448, (3, 1)),
        Conv2d("Conv2d_0c_1x3", 512, (1, 3)),
        Concat((Conv2d("Conv2d_0d_1x3", 256, (1, 3)), Conv2d("Conv2d_0e_3x1", 256, (3, 1)))),
    ),
    (AvgPool("AvgPool_0a_3x3", 3), Conv2d("Conv2d_0b_1x1", 256, 1)),
)

# Slim's inception_v4_base: SAME padding unless marked.
_INCEPTION_V4 = (
    Conv2d("Conv2d_1a_3x3", 32, 3, stride=2, padding="VALID"),
    Conv2d("Conv2d_2a_3x3", 32, 3, padding="VALID"),
    Conv2d("Conv2d_2b_3x3", 64, 3),
    Mixed(
        "Mixed_3a",
        (
            (MaxPool("MaxPool_0a_3x3", 3, stride=2, padding="VALID"),),
            (Conv2d("Conv2d_0a_3x3", 96, 3, stride=2, padding="VALID"),),
        ),
    ),
    Mixed(
        "Mixed_4a",
        (
            (Conv2d("Conv2d_0a_1x1", 64, 1), Conv2d("Conv2d_1a_3x3", 96, 3, padding="VALID")),
            (
                Conv2d("Conv2d_0a_1x1", 64, 1),
                Conv2d("Conv2d_0b_1x7", 64, (1, 7)),
                Conv2d("Conv2d_0c_7x1", 64, (7, 1)),
                Conv2d("Conv2d_1a_3x3", 96, 3, padding="VALID"),
            ),
        ),
    ),
    Mixed(
        "Mixed_5a",
        (
            (Conv2d("Conv2d_1a_3x3", 192, 3, stride=2, padding="VALID"),),
            (MaxPool("MaxPool_1a_3x3", 3, stride=2, padding="VALID"),),
        ),
    ),
    *(Mixed(f"Mixed_5{c}", _INCEPTION_A) for c in "bcde"),
    Mixed("Mixed_6a", _REDUCTION_A),
    *(Mixed(f"Mixed_6{c}", _INCEPTION_B) for c in "bcdefgh"),
    Mixed("Mixed_7a", _REDUCTION_B),
    *(Mixed(f"Mixed_7{c}", _INCEPTION_C) for c in "bcd"),
)

# Slim's AuxLogits of v4: fully connected class layer.
_AUX = functools.partial(
    AuxLogits, kernel_name="Conv2d_2a", logits_name="Aux_logits", fully_connected=True
)


class InceptionV4(AuxHeadInception):
    """Slim's Inception v4, default image size 299 (at least 75, 107 with aux logits).

    Returns `(logits, end_points)`; end points are Slim's (`Conv2d_1a_3x3` ... `Mixed_7d`) plus
    `stem` (`Mixed_5a`, the paper's stem), `pre_logits`, `logits`, `predictions`, and in
    training `aux_logits`, Slim's `AuxLogits` head on `Mixed_6h` (`create_aux_logits`; `init`
    creates its parameters whatever the mode, so train and eval variables match). Dropout
    (keep_prob 0.8) precedes the fully connected `Logits/Logits`.

    `depth_multiplier` and `min_depth` are not Slim's for v4: they thin every convolution as in
    Slim's inception_v2/v3 (`max(int(d * depth_multiplier), min_depth)`), for small test networks.
    """

    default_image_size: ClassVar[int] = 299
    # timm's `feature_info` (at stride 4 `Mixed_3a`, before `Mixed_4a`'s 'VALID' convolutions).
    pyramid: ClassVar[dict[str, int]] = {
        "Conv2d_2b_3x3": 2,
        "Mixed_3a": 4,
        "Mixed_5e": 8,
        "Mixed_6h": 16,
        "Mixed_7d": 32,
    }

    @nn.compact
    def __call__(self, x, train: bool = True):
        stem = ("Mixed_3a", "Mixed_5a")  # units of recomputation: 299 -> 73 pixels, 73 -> 35
        head = ("Logits", True, _AUX, "Mixed_6h")
        return self.forward(_INCEPTION_V4, x, train, stem, *head)


inception_v4 = functools.partial(InceptionV4)

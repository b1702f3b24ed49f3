"""Inception v3, as TF-Slim's `inception_v3` builds it.

Szegedy et al. 2015, "Rethinking the Inception Architecture for Computer Vision"
(arXiv:1512.00567): factorised 7x7 convolutions (1x7 then 7x1), expanded 8x8 blocks with parallel
1x3 | 3x1 outputs, and an auxiliary classifier on the 17x17 map. Slim's scope names are kept,
typos included (`Mixed_5c/Branch_1/Conv_1_0c_5x5`, the 3x3 `Mixed_6a/Branch_0/Conv2d_1a_1x1`),
so its checkpoints map one-to-one.
"""

import functools
from typing import ClassVar

import flax.linen as nn

from nets.inception_utils import (
    V3_STEM,
    V3_STEM_UNITS,
    AuxHeadInception,
    AuxLogits,
    AvgPool,
    Concat,
    Conv2d,
    MaxPool,
    Mixed,
    reduction_b,
)


def _mixed_5(name: str, pool_width: int, branch1: tuple[str, str]) -> Mixed:
    """35x35 blocks: 1x1 | 1x1-5x5 | 1x1-3x3-3x3 | avg pool-1x1."""
    return Mixed(
        name,
        (
            (Conv2d("Conv2d_0a_1x1", 64, 1),),
            (Conv2d(branch1[0], 48, 1), Conv2d(branch1[1], 64, 5)),
            (
                Conv2d("Conv2d_0a_1x1", 64, 1),
                Conv2d("Conv2d_0b_3x3", 96, 3),
                Conv2d("Conv2d_0c_3x3", 96, 3),
            ),
            (AvgPool("AvgPool_0a_3x3", 3), Conv2d("Conv2d_0b_1x1", pool_width, 1)),
        ),
    )


def _mixed_6(name: str, width: int) -> Mixed:
    """17x17 blocks with 7x7 convolutions factorised into 1x7 and 7x1."""
    return Mixed(
        name,
        (
            (Conv2d("Conv2d_0a_1x1", 192, 1),),
            (
                Conv2d("Conv2d_0a_1x1", width, 1),
                Conv2d("Conv2d_0b_1x7", width, (1, 7)),
                Conv2d("Conv2d_0c_7x1", 192, (7, 1)),
            ),
            (
                Conv2d("Conv2d_0a_1x1", width, 1),
                Conv2d("Conv2d_0b_7x1", width, (7, 1)),
                Conv2d("Conv2d_0c_1x7", width, (1, 7)),
                Conv2d("Conv2d_0d_7x1", width, (7, 1)),
                Conv2d("Conv2d_0e_1x7", 192, (1, 7)),
            ),
            (AvgPool("AvgPool_0a_3x3", 3), Conv2d("Conv2d_0b_1x1", 192, 1)),
        ),
    )


def _mixed_7(name: str, branch1_3x1: str) -> Mixed:
    """8x8 blocks: the 3x3 outputs split into parallel 1x3 and 3x1 convolutions."""
    return Mixed(
        name,
        (
            (Conv2d("Conv2d_0a_1x1", 320, 1),),
            (
                Conv2d("Conv2d_0a_1x1", 384, 1),
                Concat((Conv2d("Conv2d_0b_1x3", 384, (1, 3)), Conv2d(branch1_3x1, 384, (3, 1)))),
            ),
            (
                Conv2d("Conv2d_0a_1x1", 448, 1),
                Conv2d("Conv2d_0b_3x3", 384, 3),
                Concat(
                    (Conv2d("Conv2d_0c_1x3", 384, (1, 3)), Conv2d("Conv2d_0d_3x1", 384, (3, 1)))
                ),
            ),
            (AvgPool("AvgPool_0a_3x3", 3), Conv2d("Conv2d_0b_1x1", 192, 1)),
        ),
    )


# Slim's inception_v3_base: SAME padding in the blocks except for their strided layers.
_INCEPTION_V3 = (
    *V3_STEM,
    _mixed_5("Mixed_5b", 32, ("Conv2d_0a_1x1", "Conv2d_0b_5x5")),
    _mixed_5("Mixed_5c", 64, ("Conv2d_0b_1x1", "Conv_1_0c_5x5")),  # Slim's names
    _mixed_5("Mixed_5d", 64, ("Conv2d_0a_1x1", "Conv2d_0b_5x5")),
    Mixed(
        "Mixed_6a",
        (
            (Conv2d("Conv2d_1a_1x1", 384, 3, stride=2, padding="VALID"),),  # a 3x3, Slim's name
            (
                Conv2d("Conv2d_0a_1x1", 64, 1),
                Conv2d("Conv2d_0b_3x3", 96, 3),
                Conv2d("Conv2d_1a_1x1", 96, 3, stride=2, padding="VALID"),
            ),
            (MaxPool("MaxPool_1a_3x3", 3, stride=2, padding="VALID"),),
        ),
    ),
    _mixed_6("Mixed_6b", 128),
    _mixed_6("Mixed_6c", 160),
    _mixed_6("Mixed_6d", 160),
    _mixed_6("Mixed_6e", 192),
    Mixed("Mixed_7a", reduction_b((192, 320, 192, 192, 192, 192))),
    _mixed_7("Mixed_7b", "Conv2d_0b_3x1"),  # Slim's name; Mixed_7c has Conv2d_0c_3x1
    _mixed_7("Mixed_7c", "Conv2d_0c_3x1"),
)

# Slim's AuxLogits of v3: a 1x1 convolution as the class layer; the 5x5 kernel shrinks to fit.
_AUX = functools.partial(
    AuxLogits,
    kernel_name="Conv2d_2a_{0}x{1}",
    logits_name="Conv2d_2b_1x1",
    fully_connected=False,
    max_kernel=5,
)


class InceptionV3(AuxHeadInception):
    """Slim's Inception v3, default image size 299 (at least 75, 107 with aux logits).

    Returns `(logits, end_points)`; end points are Slim's (`Conv2d_1a_3x3` ... `Mixed_7c`) plus
    `stem` (`MaxPool_5a_3x3`), `pre_logits`, `logits`, `predictions`, and in training
    `aux_logits`, Slim's `AuxLogits` head on `Mixed_6e` (`create_aux_logits`; `init` creates its
    parameters whatever the mode, so train and eval variables match). Dropout (keep_prob 0.8)
    precedes the 1x1 logits convolution `Logits/Conv2d_1c_1x1`. `depth_multiplier` and
    `min_depth` thin every convolution as Slim does.
    """

    default_image_size: ClassVar[int] = 299
    # timm's `feature_info`: the deepest map at each stride.
    pyramid: ClassVar[dict[str, int]] = {
        "Conv2d_2b_3x3": 2,
        "Conv2d_4a_3x3": 4,
        "Mixed_5d": 8,
        "Mixed_6e": 16,
        "Mixed_7c": 32,
    }

    @nn.compact
    def __call__(self, x, train: bool = True):
        head = ("Conv2d_1c_1x1", False, _AUX, "Mixed_6e")
        return self.forward(_INCEPTION_V3, x, train, V3_STEM_UNITS, *head)


inception_v3 = functools.partial(InceptionV3)

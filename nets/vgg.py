"""VGG: TF-Slim's `vgg_a`/`vgg_16`/`vgg_19` and torchvision's `vgg11`..`vgg19` (and `_bn`).

Simonyan & Zisserman 2014, "Very Deep Convolutional Networks for Large-Scale Image Recognition"
(arXiv:1409.1556), configurations A (11 layers), B (13), D (16) and E (19) of Table 1: five stages
of 3x3 convolutions (64, 128, 256, 512, 512 filters), each closed by a 2x2 max pool, then three
fully connected layers. The `_bn` variants (torchvision's) put a BatchNorm between each
convolution and its ReLU.

The head is one computation for both libraries. torchvision average-pools the last map to 7x7
(adaptively) and applies `Linear(512 * 7 * 7, 4096)`; Slim applies a 7x7 'VALID' convolution to
the 7x7 map a 224 image leaves. We do both: adaptive average pooling to 7x7 (the identity at 224),
then `fc6` as a 7x7 'VALID' convolution, `fc7` and `fc8` as 1x1 convolutions. At 224 this is
exactly Slim's and torchvision's network with Slim's parameter shapes (a Slim checkpoint maps
one-to-one; torchvision's fc6 weight `[4096, 512, 7, 7]` becomes our kernel by
`transpose(2, 3, 1, 0)`), and like torchvision it classifies any image of 32 pixels or more with
the same parameters. (Slim's own fully convolutional mode, `spatial_squeeze=False`, instead slides
fc6 over larger maps and yields a map of logits; timm's VGG slides it too and averages `fc7`'s
map, which `larger_maps='slide'` computes.)
"""

from collections.abc import Sequence
from functools import partial
from typing import Any, ClassVar

import flax.linen as nn
import jax.numpy as jnp

from nets.layers import (
    TORCH,
    Conv,
    ModuleDef,
    batch_norm,
    fully_connected_head,
    max_pool,
)
from nets.layers.padding import smallest_input


class VGG(nn.Module):
    """VGG with `stage_sizes[i]` 3x3 convolutions of `stage_widths[i]` filters in stage `i + 1`.

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the `fc7` features
    `[batch, fc_width]` (the input of the logits layer, before dropout) when `num_classes` is 0
    or None. End points, Slim's names: `conv1`..`conv5` (each stage's last convolution, after
    its ReLU), `pool1`..`pool5` (`pool1` is also `stem`), `fc6`, `fc7`
    (`[batch, 1, 1, fc_width]`; larger maps with `larger_maps='slide'` on images over 224, whose
    mean is `pre_logits`), `pre_logits`, and `logits`/`predictions` when there is a head.
    Parameters are named as Slim's variables: `conv3_2` is stage 3's second convolution (and
    `bn3_2` its BatchNorm), then `fc6`, `fc7`, `fc8`.
    """

    default_image_size: ClassVar[int] = 224

    stage_sizes: Sequence[int]
    batch_norm: bool = False
    num_classes: int | None = 1000
    stage_widths: Sequence[int] = (64, 128, 256, 512, 512)
    fc_width: int = 4096
    dropout_rate: float = 0.5  # Slim and torchvision: on the inputs of fc7 and fc8
    # Maps larger than fc6's 7x7 window (images over 224): 'pool' average-pools them to 7x7
    # (torchvision); 'slide' slides fc6 over them and averages fc7's map (timm's VGG).
    larger_maps: str = "pool"
    dtype: Any = jnp.float32
    conv: ModuleDef = Conv

    @property
    def min_image_size(self) -> int:
        """Each stage ends in a 2x2/2 'VALID' max pool: 32 for five stages."""
        return smallest_input([(2, 2, 0)] * len(self.stage_sizes))

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: each stage's last convolution, and the last pool."""
        n = len(self.stage_sizes)
        return {**{f"conv{i + 1}": 2**i for i in range(n)}, f"pool{n}": 2**n}

    @nn.compact
    def __call__(self, x, train: bool = True):
        conv = partial(self.conv, dtype=self.dtype)
        norm = batch_norm(TORCH, train, self.dtype)  # the _bn variants are torchvision's
        end_points = {}

        x = jnp.asarray(x, self.dtype)
        for i, (size, width) in enumerate(zip(self.stage_sizes, self.stage_widths, strict=True)):
            for j in range(size):
                x = conv(width, (3, 3), name=f"conv{i + 1}_{j + 1}")(x)
                if self.batch_norm:
                    x = norm(name=f"bn{i + 1}_{j + 1}")(x)
                x = nn.relu(x)
            end_points[f"conv{i + 1}"] = x
            x = end_points[f"pool{i + 1}"] = max_pool(x, (2, 2), strides=(2, 2))
            if i == 0:
                end_points["stem"] = x

        widths = (self.fc_width, self.fc_width)
        head = partial(
            fully_connected_head,
            train=train,
            dropout_rate=self.dropout_rate,
            larger_maps=self.larger_maps,
        )
        return head(x, end_points, self.num_classes, conv, 7, widths)


# Configurations A, B, D, E of the paper's Table 1 (torchvision's names). Slim's vgg_a, vgg_16
# and vgg_19 are vgg11, vgg16 and vgg19: the registry maps those names here.
vgg11 = partial(VGG, stage_sizes=(1, 1, 2, 2, 2))
vgg13 = partial(VGG, stage_sizes=(2, 2, 2, 2, 2))
vgg16 = partial(VGG, stage_sizes=(2, 2, 3, 3, 3))
vgg19 = partial(VGG, stage_sizes=(2, 2, 4, 4, 4))
vgg11_bn = partial(VGG, stage_sizes=(1, 1, 2, 2, 2), batch_norm=True)
vgg13_bn = partial(VGG, stage_sizes=(2, 2, 2, 2, 2), batch_norm=True)
vgg16_bn = partial(VGG, stage_sizes=(2, 2, 3, 3, 3), batch_norm=True)
vgg19_bn = partial(VGG, stage_sizes=(2, 2, 4, 4, 4), batch_norm=True)

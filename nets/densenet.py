"""DenseNet-BC: Huang et al. 2017, "Densely Connected Convolutional Networks" (arXiv:1608.06993).

Built as torchvision's `densenet.py` builds it (timm's `densenet121` .. `densenet201` are the same
modules and keys): a 7x7/2 stem convolution, BatchNorm, ReLU and a 3x3/2 max pool; dense blocks
whose layers are BN-ReLU-1x1 conv (`bn_size * growth_rate` wide) then BN-ReLU-3x3 conv
(`growth_rate` wide), each layer's output concatenated to its input; transitions BN-ReLU-1x1
conv halving the channels (the paper's compression 0.5) and a 2x2/2 average pool; a last
BatchNorm and ReLU, global average pooling and the classifier. Everything pads symmetrically and
BatchNorm has PyTorch's epsilon, as the paper's Torch code and both libraries' weights have it
(`bn_epsilon`: Keras's weights have 1.001e-5).

Submodules carry torchvision's names (`conv0`, `norm0`, `denseblock1/denselayer1/norm1`,
`transition1/conv`, `norm5`, `classifier`), so its weights map one-to-one. Differences from timm:
none in the function; timm's extra options (deep stems, anti-aliased pools, dropout after each
layer) are left out, and dropout before the classifier is `dropout_rate` (0, as both libraries'
weights were trained). End points: `norm0` (the stem convolution's activations), `stem` (after
the max pool), `denseblock1`..`denseblock4` (each block's output, before its transition;
`denseblock4` before `norm5`), `norm5` (after the last BatchNorm and ReLU), `pre_logits`.
"""

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from nets.layers import (
    TORCH,
    Conv,
    ModuleDef,
    avg_pool,
    batch_norm,
    checkpointed,
    classify,
    global_avg_pool,
    max_pool,
)
from nets.layers.padding import smallest_input


class DenseLayer(nn.Module):
    """BN-ReLU-1x1 conv, BN-ReLU-3x3 conv over the concatenation of `features` (the block's input
    and each earlier layer's output): `growth_rate` new channels.

    It takes the maps rather than their concatenation so that, recomputed (`remat`), it keeps
    only them: the concatenations, which grow with depth, are recomputed too (Pleiss et al.'s
    memory-efficient DenseNet, timm's `memory_efficient`)."""

    growth_rate: int
    bn_size: int
    conv: ModuleDef
    norm: ModuleDef
    act: Callable

    @nn.compact
    def __call__(self, features: Sequence[jax.Array]) -> jax.Array:
        y = self.act(self.norm(name="norm1")(jnp.concatenate(features, axis=-1)))
        y = self.conv(self.bn_size * self.growth_rate, (1, 1), name="conv1")(y)
        y = self.act(self.norm(name="norm2")(y))
        return self.conv(self.growth_rate, (3, 3), padding=1, name="conv2")(y)


class DenseBlock(nn.Module):
    """`num_layers` dense layers (`denselayer1`, ...): `num_layers * growth_rate` channels more."""

    num_layers: int
    growth_rate: int
    bn_size: int
    conv: ModuleDef
    norm: ModuleDef
    act: Callable
    remat: bool | str = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        # timm's unit, the dense layer: timm recomputes its first half (the concatenation,
        # BatchNorm and 1x1, the part that grows with depth), we the whole layer.
        layer = checkpointed(DenseLayer, self.remat)
        features = [x]
        for i in range(self.num_layers):
            features.append(
                layer(
                    self.growth_rate,
                    self.bn_size,
                    self.conv,
                    self.norm,
                    self.act,
                    name=f"denselayer{i + 1}",
                )(features)
            )
        return jnp.concatenate(features, axis=-1)


class Transition(nn.Module):
    """BN-ReLU-1x1 conv to `features` channels, then a 2x2/2 average pool."""

    features: int
    conv: ModuleDef
    norm: ModuleDef
    act: Callable

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = self.act(self.norm(name="norm")(x))
        x = self.conv(self.features, (1, 1), name="conv")(x)
        return avg_pool(x, (2, 2), strides=(2, 2))


class DenseNet(nn.Module):
    """DenseNet-BC for ImageNet-sized inputs.

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the pooled features
    `[batch, channels]` when `num_classes` is 0 or None.
    """

    default_image_size: ClassVar[int] = 224

    block_config: Sequence[int]
    growth_rate: int = 32
    num_init_features: int | None = None  # the stem's width; None: 2 * growth_rate (the paper's)
    bn_size: int = 4
    num_classes: int | None = 1000
    dropout_rate: float = 0.0
    dtype: Any = jnp.float32
    act: Callable = nn.relu
    conv: ModuleDef = Conv
    # PyTorch's BatchNorm epsilon, as torchvision's and timm's weights were trained; Keras's
    # DenseNet has 1.001e-5 (`nets_weights/densenet.py`).
    bn_epsilon: float = TORCH.epsilon
    remat: bool | str = False  # stem, blocks recomputed in backward (nets.layers.remat.POLICIES)

    @property
    def min_image_size(self) -> int:
        """The stem (7x7/2, 3x3/2 pool) and each transition's 2x2/2 'VALID' pool: 29 for four
        blocks."""
        transitions = [(2, 2, 0)] * (len(self.block_config) - 1)
        return smallest_input([(7, 2, 6), (3, 2, 2), *transitions])

    def feature_strides(self) -> dict[str, int]:
        """timm's: the stem's `norm0`, the dense blocks, the last one through `norm5`."""
        n = len(self.block_config)
        blocks = [(f"denseblock{i + 1}", 2 ** (i + 2)) for i in range(n - 1)]
        return {"norm0": 2, **dict(blocks), "norm5": 2 ** (n + 1)}

    @nn.compact
    def __call__(self, x, train: bool = True):
        conv = partial(self.conv, use_bias=False, dtype=self.dtype)
        norm = batch_norm(TORCH._replace(epsilon=self.bn_epsilon), train, self.dtype)
        layer_args = {"conv": conv, "norm": norm, "act": self.act}
        end_points = {}

        def stem(module: nn.Module, x: jax.Array) -> tuple[jax.Array, jax.Array]:
            # One unit for `remat`: the network's largest maps.
            features = self.num_init_features or 2 * self.growth_rate
            x = conv(features, (7, 7), (2, 2), padding=3, name="conv0")(x)
            x = self.act(norm(name="norm0")(x))
            return x, max_pool(x, (3, 3), strides=(2, 2), padding=1)

        x = jnp.asarray(x, self.dtype)
        end_points["norm0"], x = checkpointed(stem, self.remat)(self, x)
        end_points["stem"] = x

        for i, num_layers in enumerate(self.block_config):
            x = DenseBlock(
                num_layers,
                self.growth_rate,
                self.bn_size,
                **layer_args,
                remat=self.remat,
                name=f"denseblock{i + 1}",
            )(x)
            end_points[f"denseblock{i + 1}"] = x
            if i < len(self.block_config) - 1:
                transition = checkpointed(Transition, self.remat)
                x = transition(x.shape[-1] // 2, **layer_args, name=f"transition{i + 1}")(x)
        x = end_points["norm5"] = self.act(norm(name="norm5")(x))

        x = global_avg_pool(x)
        return classify(
            x,
            end_points,
            self.num_classes,
            train=train,
            dropout_rate=self.dropout_rate,
            dtype=self.dtype,
            name="classifier",
        )


# torchvision's four ImageNet DenseNet-BCs (the paper's Table 1; 161 has k=48 and a 96-wide stem).
densenet121 = partial(DenseNet, block_config=(6, 12, 24, 16))
densenet161 = partial(DenseNet, block_config=(6, 12, 36, 24), growth_rate=48)
densenet169 = partial(DenseNet, block_config=(6, 12, 32, 32))
densenet201 = partial(DenseNet, block_config=(6, 12, 48, 32))

"""Inception v1 (GoogLeNet): Slim's `inception_v1` and torchvision's `googlenet`.

Szegedy et al. 2014, "Going Deeper with Convolutions" (arXiv:1409.4842), with BatchNorm after
every convolution as both libraries build it.

Both networks live in this file because they are one network: the same stem and the same nine
inception modules of the same widths (`_MODULES` below). Both put a 3x3, not the paper's 5x5,
convolution in the third branch (torchvision calls this a known bug, pytorch/vision#906). They
differ in what a checkpoint sees and in details that follow from it:

- `InceptionV1` is Slim's: Slim's scope names (`Mixed_3b/Branch_1/Conv2d_0b_3x3`, with Slim's
  `Mixed_5b/Branch_2/Conv2d_0a_3x3` typo kept), BatchNorm without scale, TensorFlow SAME padding.
- `GoogLeNet` is torchvision's: its module names (`inception3a/branch2/1`), BatchNorm with scale
  (torchvision's `BasicConv2d`, eps 0.001), symmetric padding, ceil-mode max pooling, and the two
  optional auxiliary classifiers, off by default as in torchvision's published model.
"""

import dataclasses
import functools
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from nets import layers
from nets.inception_utils import (
    Branch,
    Builder,
    Conv2d,
    MaxPool,
    Mixed,
    ThinnableInception,
    depth_fn,
    run_unit,
    split_units,
)
from nets.layers import (
    TORCH_INCEPTION,
    Conv,
    ConvNormAct,
    ModuleDef,
    adaptive_avg_pool,
    batch_norm,
    max_pool,
)

# (Slim's name, torchvision's name, widths): the 1x1 branch; the 3x3 branch's reduction and
# output; the second "5x5" branch's reduction and output (a 3x3 convolution); the pool projection.
_MODULES = (
    ("Mixed_3b", "inception3a", (64, 96, 128, 16, 32, 32)),
    ("Mixed_3c", "inception3b", (128, 128, 192, 32, 96, 64)),
    ("Mixed_4b", "inception4a", (192, 96, 208, 16, 48, 64)),
    ("Mixed_4c", "inception4b", (160, 112, 224, 24, 64, 64)),
    ("Mixed_4d", "inception4c", (128, 128, 256, 24, 64, 64)),
    ("Mixed_4e", "inception4d", (112, 144, 288, 32, 64, 64)),
    ("Mixed_4f", "inception4e", (256, 160, 320, 32, 128, 128)),
    ("Mixed_5b", "inception5a", (256, 160, 320, 32, 128, 128)),
    ("Mixed_5c", "inception5b", (384, 192, 384, 48, 128, 128)),
)


def _slim_mixed(name: str, widths: tuple[int, ...]) -> Mixed:
    w0, w1a, w1b, w2a, w2b, w3 = widths
    # Slim names this layer Conv2d_0a_3x3 in Mixed_5b alone; its checkpoints carry the typo.
    branch2_name = "Conv2d_0a_3x3" if name == "Mixed_5b" else "Conv2d_0b_3x3"
    return Mixed(
        name,
        (
            (Conv2d("Conv2d_0a_1x1", w0, 1),),
            (Conv2d("Conv2d_0a_1x1", w1a, 1), Conv2d("Conv2d_0b_3x3", w1b, 3)),
            (Conv2d("Conv2d_0a_1x1", w2a, 1), Conv2d(branch2_name, w2b, 3)),
            (MaxPool("MaxPool_0a_3x3", 3), Conv2d("Conv2d_0b_1x1", w3, 1)),
        ),
    )


_SLIM_MODULES = {name: _slim_mixed(name, widths) for name, _, widths in _MODULES}

# Slim's inception_v1_base: SAME padding throughout.
_INCEPTION_V1 = (
    Conv2d("Conv2d_1a_7x7", 64, 7, stride=2),
    MaxPool("MaxPool_2a_3x3", 3, stride=2),
    Conv2d("Conv2d_2b_1x1", 64, 1),
    Conv2d("Conv2d_2c_3x3", 192, 3),
    MaxPool("MaxPool_3a_3x3", 3, stride=2),
    _SLIM_MODULES["Mixed_3b"],
    _SLIM_MODULES["Mixed_3c"],
    MaxPool("MaxPool_4a_3x3", 3, stride=2),
    *(_SLIM_MODULES[f"Mixed_4{c}"] for c in "bcdef"),
    MaxPool("MaxPool_5a_2x2", 2, stride=2),
    _SLIM_MODULES["Mixed_5b"],
    _SLIM_MODULES["Mixed_5c"],
)


class InceptionV1(ThinnableInception):
    """Slim's Inception v1 (BN-GoogLeNet), default image size 224.

    Returns `(logits, end_points)`; end points are Slim's (`Conv2d_1a_7x7` ... `Mixed_5c`) plus
    `stem` (`MaxPool_3a_3x3`), `pre_logits`, `logits`, `predictions`. Dropout (Slim's keep_prob
    0.8) precedes the 1x1 logits convolution `Logits/Conv2d_0c_1x1`.

    `depth_multiplier` and `min_depth` are not Slim's for v1: they thin every convolution as in
    Slim's inception_v2/v3 (`max(int(d * depth_multiplier), min_depth)`), for small test networks.
    """

    default_image_size: ClassVar[int] = 224

    # The deepest map at each stride (`nets.features`).
    pyramid: ClassVar[dict[str, int]] = {
        "Conv2d_1a_7x7": 2,
        "Conv2d_2c_3x3": 4,
        "Mixed_3c": 8,
        "Mixed_4f": 16,
        "Mixed_5c": 32,
    }

    @nn.compact
    def __call__(self, x, train: bool = True):
        stem = ("MaxPool_2a_3x3", "MaxPool_3a_3x3")  # units of recomputation: 224 -> 56, 56 -> 28
        return self.forward(_INCEPTION_V1, x, train, stem, "Conv2d_0c_1x1")


class TorchInception(nn.Module):
    """torchvision's `Inception` module: `branch1`, and `branch2`..`branch4` as sequences."""

    widths: tuple[int, ...]
    builder: Builder

    @nn.compact
    def __call__(self, x):
        w0, w1a, w1b, w2a, w2b, w3 = self.widths
        b = self.builder
        branches = (
            Conv2d("branch1", w0, 1)(x, b),
            Branch((Conv2d("0", w1a, 1), Conv2d("1", w1b, 3, padding=1)), b, name="branch2")(x),
            # The "5x5" branch: torchvision and Slim both use a 3x3 convolution here.
            Branch((Conv2d("0", w2a, 1), Conv2d("1", w2b, 3, padding=1)), b, name="branch3")(x),
            # MaxPool2d(3, stride=1, padding=1, ceil_mode=True) keeps the size, as SAME does.
            Branch((MaxPool("0", 3), Conv2d("1", w3, 1)), b, name="branch4")(x),
        )
        return jnp.concatenate(branches, axis=-1)


class TorchInceptionAux(nn.Module):
    """torchvision's `InceptionAux`: 4x4 adaptive pooling, 1x1 conv to 128, fc 1024, dropout 0.7."""

    num_classes: int
    builder: Builder
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, train: bool):
        x = adaptive_avg_pool(x, 4)
        x = Conv2d("conv", 128, 1)(x, self.builder)
        # Flatten channels first, as PyTorch's NCHW does, so `fc1` maps onto torchvision's weight.
        x = jnp.transpose(x, (0, 3, 1, 2)).reshape(x.shape[0], -1)
        x = nn.relu(nn.Dense(1024, dtype=self.dtype, name="fc1")(x))
        x = nn.Dropout(0.7, deterministic=not train)(x)
        return nn.Dense(self.num_classes, dtype=self.dtype, name="fc2")(x)


@dataclasses.dataclass(frozen=True)
class TorchMixed:
    """The table entry for torchvision's `Inception` module `name`."""

    name: str
    widths: tuple[int, ...]

    def __call__(self, x: jax.Array, builder: Builder) -> jax.Array:
        return TorchInception(self.widths, builder, name=self.name)(x)


class CeilMaxPool(MaxPool):
    """torchvision's `MaxPool2d(..., ceil_mode=True)`: a last, partial window where the map has
    pixels left over."""

    def __call__(self, x: jax.Array, builder: Builder) -> jax.Array:
        del builder
        return max_pool(x, self.window, self.stride, self.padding, ceil_mode=True)


_TORCH_MODULES = {name: TorchMixed(name, widths) for _, name, widths in _MODULES}

_GOOGLENET = (
    Conv2d("conv1", 64, 7, stride=2, padding=3),
    CeilMaxPool("maxpool1", 3, 2, "VALID"),
    Conv2d("conv2", 64, 1),
    Conv2d("conv3", 192, 3, padding=1),
    CeilMaxPool("maxpool2", 3, 2, "VALID"),
    _TORCH_MODULES["inception3a"],
    _TORCH_MODULES["inception3b"],
    CeilMaxPool("maxpool3", 3, 2, "VALID"),
    *(_TORCH_MODULES[f"inception4{c}"] for c in "abcde"),
    CeilMaxPool("maxpool4", 2, 2, "VALID"),
    _TORCH_MODULES["inception5a"],
    _TORCH_MODULES["inception5b"],
)
# The stem's units of recomputation (`split_units`): 224 -> 56 pixels, 56 -> 28.
_GOOGLENET_STEM = ("maxpool1", "maxpool2")
# Where torchvision's auxiliary heads branch off: module name, output name.
_TORCH_AUX = {"inception4a": ("aux1", "aux_logits1"), "inception4d": ("aux2", "aux_logits2")}


class GoogLeNet(nn.Module):
    """torchvision's `googlenet`, default image size 224 (6,624,904 parameters at 1000 classes).

    Module names follow torchvision's state dict (`conv1/conv`, `conv1/bn`, `inception3a/branch2/1`,
    `fc`), so its weights map one-to-one. End points: torchvision's module names (`conv1`,
    `maxpool1`, ..., `inception5b`) plus `stem` (`maxpool2`), `pre_logits`, `logits`,
    `predictions`. With `aux_logits=True`, training also gives `aux_logits1` (on `inception4a`)
    and `aux_logits2` (on `inception4d`), torchvision's `GoogLeNetOutputs` names; `init` always
    creates their parameters. torchvision's `transform_input` is preprocessing and is not here.

    `depth_multiplier` and `min_depth` are not torchvision's: they thin every convolution as
    `InceptionV1`'s do, for small test networks (the parity fixtures of pretrained loading).
    """

    default_image_size: ClassVar[int] = 224
    # Ceil-mode max pools of 3x3/2 need 3 pixels: 14 px leaves maxpool3 a 1 pixel map.
    min_image_size: ClassVar[int] = 15

    num_classes: int | None = 1000
    dropout_rate: float = 0.2
    aux_logits: bool = False
    dtype: Any = jnp.float32
    conv: ModuleDef = Conv
    depth_multiplier: float = 1.0
    min_depth: int = 16
    remat: bool | str = False  # stem, blocks recomputed in backward (nets.layers.remat.POLICIES)

    def feature_strides(self) -> dict[str, int]:
        """The deepest map at each stride (`nets.features`)."""
        return {"conv1": 2, "conv3": 4, "inception3b": 8, "inception4e": 16, "inception5b": 32}

    @nn.compact
    def __call__(self, x, train: bool = True):
        norm = batch_norm(TORCH_INCEPTION, train, self.dtype)
        conv = functools.partial(
            self.conv, dtype=self.dtype, kernel_init=nn.initializers.truncated_normal(0.01)
        )
        conv_bn = functools.partial(ConvNormAct, conv=conv, norm=norm, act=nn.relu)
        depth = depth_fn(self.depth_multiplier, self.min_depth)
        builder = Builder(conv_bn=conv_bn, conv=conv, depth=depth, remat=self.remat)
        with_aux = bool(self.num_classes) and self.aux_logits
        end_points = {}
        x = jnp.asarray(x, self.dtype)
        for unit in split_units(_GOOGLENET, _GOOGLENET_STEM):  # as `run_layers` does
            end_points.update(run_unit(self, unit, x, builder))
            name = unit[-1].name
            x = end_points[name]
            if name == _GOOGLENET_STEM[-1]:
                end_points["stem"] = x
            # The auxiliary heads run while initialising even in eval mode, so that train and
            # eval variables always match; their logits are end points in training only.
            if name in _TORCH_AUX and with_aux and (train or self.is_initializing()):
                head_name, end_point = _TORCH_AUX[name]
                head = TorchInceptionAux(self.num_classes, builder, self.dtype, name=head_name)
                aux = head(x, train)
                if train:
                    end_points[end_point] = aux

        head = functools.partial(
            layers.classify, train=train, dropout_rate=self.dropout_rate, dtype=self.dtype
        )
        return head(layers.global_avg_pool(x), end_points, self.num_classes, name="fc")


inception_v1 = functools.partial(InceptionV1)
googlenet = functools.partial(GoogLeNet)

"""Building blocks the Inception networks share (Slim's `inception_utils.py` and more).

Slim writes each mixed block as nested `variable_scope`s: `Mixed_5b/Branch_1/Conv2d_0b_5x5`. Here
a block is data -- a tuple of branches, each a tuple of layers named exactly as Slim names them --
and `Mixed`/`Branch` turn it into modules of the same names, so a Slim checkpoint's variables map
one-to-one onto ours:

    Slim variable                              here
    <scope>/weights                            params     <scope>/conv/kernel
    <scope>/BatchNorm/beta                     params     <scope>/BatchNorm/bias
    <scope>/BatchNorm/moving_mean, _variance   batch_stats <scope>/BatchNorm/mean, var
    <scope>/biases (layers without BatchNorm)  params     <scope>/bias, beside <scope>/kernel

(The network scope, e.g. `InceptionV3/`, is dropped; a 1x1 logits convolution keeps Slim's
`[1, 1, in, out]` kernel.) Pooling layers carry Slim's names in the tables for reading only: they
have no variables.
"""

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from nets import layers
from nets.layers import (
    SLIM_INCEPTION,
    Conv,
    ConvNormAct,
    ModuleDef,
    avg_pool,
    batch_norm,
    checkpointed,
    max_pool,
)
from nets.layers.padding import pair

# Slim's inception_arg_scope initialises convolutions with `variance_scaling_initializer()`: He
# et al.'s fan-in scaling from a truncated normal. (Slim overrides it layer by layer with
# truncated normals of hand-picked widths; every such layer feeds a BatchNorm, which undoes the
# kernel's scale, so one initialiser serves.)
he_fan_in = nn.initializers.variance_scaling(2.0, "fan_in", "truncated_normal")


def keep_depth(features: int) -> int:
    """The width function of networks without a depth multiplier."""
    return features


def depth_fn(depth_multiplier: float, min_depth: int) -> Callable[[int], int]:
    """Slim's `depth(d) = max(int(d * depth_multiplier), min_depth)` (inception_v2/v3)."""
    if depth_multiplier <= 0:
        raise ValueError(f"depth_multiplier must be greater than zero; got {depth_multiplier}")
    if depth_multiplier == 1.0:
        return keep_depth  # every Inception width is >= 16, so min_depth never binds at 1.0
    return functools.partial(_thinned, depth_multiplier=depth_multiplier, min_depth=min_depth)


def _thinned(features: int, depth_multiplier: float, min_depth: int) -> int:
    return max(int(features * depth_multiplier), min_depth)


@dataclasses.dataclass(frozen=True)
class Builder:
    """What turns the layer tables into modules, bound once per call by the network.

    conv_bn: `ConvNormAct` with the network's convolution and BatchNorm settings, and ReLU.
    conv: the plain convolution (dtype and initialiser bound) for layers without BatchNorm.
    depth: the width function (Slim's `depth()`), applied to every `Conv2d` of a table.
    count_include_pad: whether `AvgPool` layers divide by the whole window (PyTorch's
      `avg_pool2d`) rather than by the pixels inside the input (TensorFlow's, Slim's).
    remat: the network's `remat`, which the units of `run_layers` take, and `Mixed` blocks run
      outside them.
    """

    conv_bn: ModuleDef
    conv: ModuleDef
    depth: Callable[[int], int] = keep_depth
    count_include_pad: bool = False
    remat: bool | str = False


def slim_builder(
    conv: ModuleDef,
    dtype: Any,
    train: bool,
    depth: Callable[[int], int] = keep_depth,
    batch_norm_scale: bool = False,
    count_include_pad: bool = False,
    bn_momentum: float = SLIM_INCEPTION.momentum,
    remat: bool | str = False,
) -> Builder:
    """Slim's `inception_arg_scope` (and `inception_resnet_v2_arg_scope`, the same by default).

    Every `conv2d` is bias-free, followed by BatchNorm (decay 0.9997, epsilon 0.001, no scale:
    `beta` only) and ReLU. Batch statistics in training, running averages otherwise.
    `batch_norm_scale` and `count_include_pad` are conventions of weights trained elsewhere
    (torchvision's `BasicConv2d` has a BatchNorm scale; PyTorch's average pools count the padding).
    """
    convention = SLIM_INCEPTION._replace(use_scale=batch_norm_scale, momentum=bn_momentum)
    norm = batch_norm(convention, train, dtype)
    conv = functools.partial(conv, dtype=dtype, kernel_init=he_fan_in)
    conv_bn = functools.partial(
        ConvNormAct, conv=conv, norm=norm, act=nn.relu, norm_name="BatchNorm"
    )
    return Builder(
        conv_bn=conv_bn, conv=conv, depth=depth, count_include_pad=count_include_pad, remat=remat
    )


# Layers as data. Each is called as `layer(x, builder)` inside a module's compact method, so the
# modules it makes are that module's children.


@dataclasses.dataclass(frozen=True)
class Conv2d:
    """A `ConvNormAct` of `builder.depth(features)` channels named `name`; any padding form."""

    name: str
    features: int
    kernel: int | tuple[int, int]
    stride: int = 1
    padding: str | int = "SAME"

    def __call__(self, x: jax.Array, builder: Builder) -> jax.Array:
        return builder.conv_bn(
            builder.depth(self.features),
            pair(self.kernel),
            strides=self.stride,
            padding=self.padding,
            name=self.name,
        )(x)


@dataclasses.dataclass(frozen=True)
class MaxPool:
    name: str
    window: int
    stride: int = 1
    padding: str = "SAME"

    def __call__(self, x: jax.Array, builder: Builder) -> jax.Array:
        del builder
        return max_pool(x, self.window, self.stride, self.padding)


class AvgPool(MaxPool):
    """Average pooling; as TensorFlow computes it (SAME padding left out of each average) unless
    `builder.count_include_pad`."""

    def __call__(self, x: jax.Array, builder: Builder) -> jax.Array:
        return avg_pool(
            x, self.window, self.stride, self.padding, count_include_pad=builder.count_include_pad
        )


@dataclasses.dataclass(frozen=True)
class Concat:
    """Parallel layers on one input, concatenated on channels (Inception v3's 1x3 | 3x1 pairs)."""

    layers: tuple[Any, ...]

    def __call__(self, x: jax.Array, builder: Builder) -> jax.Array:
        return jnp.concatenate([layer(x, builder) for layer in self.layers], axis=-1)


class Branch(nn.Module):
    """A sequence of layers in its own scope (Slim's `Branch_N`, torchvision's `branchN`)."""

    layers: tuple[Any, ...]
    builder: Builder

    @nn.compact
    def __call__(self, x):
        for layer in self.layers:
            x = layer(x, self.builder)
        return x


def concat_branches(branches: tuple, x: jax.Array, builder: Builder) -> jax.Array:
    """`Branch_0`, `Branch_1`, ... of the calling module on `x`, concatenated on channels."""
    outputs = [Branch(layers, builder, name=f"Branch_{i}")(x) for i, layers in enumerate(branches)]
    return jnp.concatenate(outputs, axis=-1)


class MixedBlock(nn.Module):
    """Slim's mixed block: a scope (`Mixed_5b`) holding parallel branches, concatenated."""

    branches: tuple[tuple[Any, ...], ...]
    builder: Builder

    @nn.compact
    def __call__(self, x):
        return concat_branches(self.branches, x, self.builder)


@dataclasses.dataclass(frozen=True)
class Mixed:
    name: str
    branches: tuple[tuple[Any, ...], ...]

    def __call__(self, x: jax.Array, builder: Builder) -> jax.Array:
        block = checkpointed(MixedBlock, builder.remat)
        return block(self.branches, builder, name=self.name)(x)


class Unit(nn.Module):
    """Consecutive layers of a table, which `remat` recomputes as one (`run_unit`): the output
    of each, in order (a tuple: `jax.checkpoint` would return a dict's keys sorted)."""

    layers: tuple[Any, ...]
    builder: Builder

    @nn.compact
    def __call__(self, x) -> tuple[jax.Array, ...]:
        outputs = []
        for layer in self.layers:
            x = layer(x, self.builder)
            outputs.append(x)
        return tuple(outputs)


def run_unit(
    network: nn.Module, layers: tuple, x: jax.Array, builder: Builder
) -> dict[str, jax.Array]:
    """`layers` on `x` as one `Unit` checkpointed by `builder.remat` (the blocks inside it are
    not checkpointed again), which keeps only `x` for the backward pass. `network`, the calling
    module, shares its scope with it (`nn.share_scope`), so the layers' variables keep the paths
    they have without it."""
    inner = dataclasses.replace(builder, remat=False)
    unit = checkpointed(Unit, builder.remat)(layers, inner, name=f"{layers[0].name}_unit")
    nn.share_scope(network, unit)
    return {layer.name: y for layer, y in zip(layers, unit(x), strict=True)}


def split_units(layers: tuple, stem: tuple[str, ...]) -> list[tuple]:
    """`layers` as the runs that `remat` recomputes as one: the stem's, ending at the layers that
    `stem` names, then a run per block with the pools after it (so the pool's input, the block's
    output at the higher resolution, is recomputed, not kept)."""
    units, unit, in_stem = [], [], True
    for layer in layers:
        if unit and not in_stem and not isinstance(layer, MaxPool):
            units.append(tuple(unit))
            unit = []
        unit.append(layer)
        if layer.name in stem:
            units.append(tuple(unit))
            unit, in_stem = [], layer.name != stem[-1]
    if unit:
        units.append(tuple(unit))
    return units


def run_layers(
    network: nn.Module, layers: tuple, x: jax.Array, builder: Builder, stem: tuple[str, ...]
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Applies a network's table of named layers, recording each output under its Slim name.

    `builder.remat` recomputes them in units (`split_units`), each keeping only its input: the
    stem's ending at each layer `stem` names (one per resolution, so that recomputing one does
    not hold the whole stem's maps at once), then each block with the pools after it. The last
    layer `stem` names gives the `stem` end point too.
    """
    end_points = {}
    for unit in split_units(layers, stem):
        end_points.update(run_unit(network, unit, x, builder))
        x = end_points[unit[-1].name]
        if unit[-1].name == stem[-1]:
            end_points["stem"] = x
    return x, end_points


class AuxLogits(nn.Module):
    """Slim's auxiliary classifier on the 17x17 map (Inception v3, v4, Inception-ResNet-v2).

    5x5 average pooling with stride 3 (VALID), a 1x1 `Conv2d` to 128 channels, a VALID `Conv2d` to
    768 channels whose kernel covers the remaining map (capped at `max_kernel`, Slim's
    `_reduced_kernel_size_for_small_input` in v3), then the class layer. At the default image size
    the map is 5x5 and the result 1x1; any larger map left is averaged away.
    """

    num_classes: int
    builder: Builder
    kernel_name: str  # Slim's scope of the 768-channel layer; `{0}x{1}` takes its kernel size
    logits_name: str
    fully_connected: bool
    max_kernel: int | None = None
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x):
        x = avg_pool(x, 5, 3)
        x = Conv2d("Conv2d_1b_1x1", 128, 1)(x, self.builder)
        kernel = tuple(min(size, self.max_kernel or size) for size in x.shape[1:3])
        name = self.kernel_name.format(*kernel)
        x = Conv2d(name, 768, kernel, padding="VALID")(x, self.builder)
        if self.fully_connected:  # Slim flattens; the map is 1x1 unless max_kernel cut it short
            x = jnp.mean(x, axis=(1, 2))
            return nn.Dense(self.num_classes, dtype=self.dtype, name=self.logits_name)(x)
        x = self.builder.conv(self.num_classes, (1, 1), use_bias=True, name=self.logits_name)(x)
        return jnp.mean(x, axis=(1, 2))


class SlimInception(nn.Module):
    """The fields and arg scope Slim's Inception networks share; each adds its layer tables."""

    num_classes: int | None = 1000
    dropout_rate: float = 0.2  # Slim's dropout_keep_prob=0.8, before the logits
    dtype: Any = jnp.float32
    conv: ModuleDef = Conv
    # Conventions of weights trained outside Slim (nets_weights/inception.py): torchvision's
    # BatchNorm has a scale (`gamma`), PyTorch's average pools count the padding.
    batch_norm_scale: bool = False
    count_include_pad: bool = False
    # The decay of BatchNorm's running averages: Slim's 0.9997 suits ImageNet's long runs; short
    # ones (a few thousand steps) need less, or evaluation sees mostly their initial values.
    bn_momentum: float = SLIM_INCEPTION.momentum
    remat: bool | str = False  # stem, blocks recomputed in backward (nets.layers.remat.POLICIES)

    # The feature pyramid (`nets.features`): end_point -> stride, the deepest map at each stride.
    pyramid: ClassVar[dict[str, int]] = {}

    def feature_strides(self) -> dict[str, int]:
        """The network's `pyramid` table."""
        return dict(self.pyramid)

    def builder(self, train: bool) -> Builder:
        return self.slim_builder(train, keep_depth)

    def slim_builder(self, train: bool, depth: Callable[[int], int]) -> Builder:
        """`slim_builder` with this network's fields."""
        return slim_builder(
            self.conv,
            self.dtype,
            train,
            depth,
            batch_norm_scale=self.batch_norm_scale,
            count_include_pad=self.count_include_pad,
            bn_momentum=self.bn_momentum,
            remat=self.remat,
        )

    def run(
        self, table: tuple, x: jax.Array, builder: Builder, stem: tuple[str, ...]
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        """`run_layers` on the images, cast to the computation dtype."""
        return run_layers(self, table, jnp.asarray(x, self.dtype), builder, stem)

    def forward(
        self, table: tuple, x: jax.Array, train: bool, stem: tuple[str, ...], *head: Any
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        """The whole network when it is one table: `run`, then `slim_head(..., *head)`."""
        builder = self.builder(train)
        x, end_points = self.run(table, x, builder, stem)
        return slim_head(self, x, end_points, builder, train, *head)


class ThinnableInception(SlimInception):
    """Slim's Inception v2/v3 `depth_multiplier` and `min_depth`, thinning every convolution
    (v1, v4 and Inception-ResNet-v2 take them too, for small test networks)."""

    depth_multiplier: float = 1.0
    min_depth: int = 16

    def builder(self, train: bool) -> Builder:
        return self.slim_builder(train, depth_fn(self.depth_multiplier, self.min_depth))


class AuxHeadInception(ThinnableInception):
    """The 299-pixel Inceptions (v3, v4, Inception-ResNet-v2), whose stems' 'VALID' layers leave
    the 8x8 grid's last block a 1x1 map at 75 pixels, with Slim's auxiliary head on the 17x17
    grid (`create_aux_logits`; `init` creates its parameters whatever the mode)."""

    min_image_size: ClassVar[int] = 75

    create_aux_logits: bool = True

    @property
    def min_train_image_size(self) -> int:
        """`init` and training build the auxiliary head, whose 5x5/3 'VALID' pool needs a 5x5
        map on the 17x17 grid: 107 pixels (75 without it)."""
        return 107 if self.create_aux_logits and self.num_classes else self.min_image_size


def reduction_b(widths: tuple[int, int, int, int, int, int]) -> tuple[tuple[Any, ...], ...]:
    """The 17x17 -> 8x8 block (v3's `Mixed_7a`, v4's Reduction-B): 1x1-3x3/2 | 1x1-1x7-7x1-3x3/2
    | max pool 3x3/2, strided layers VALID; `widths` of the six convolutions in that order."""
    w0a, w0b, w1a, w1b, w1c, w1d = widths
    return (
        (
            Conv2d("Conv2d_0a_1x1", w0a, 1),
            Conv2d("Conv2d_1a_3x3", w0b, 3, stride=2, padding="VALID"),
        ),
        (
            Conv2d("Conv2d_0a_1x1", w1a, 1),
            Conv2d("Conv2d_0b_1x7", w1b, (1, 7)),
            Conv2d("Conv2d_0c_7x1", w1c, (7, 1)),
            Conv2d("Conv2d_1a_3x3", w1d, 3, stride=2, padding="VALID"),
        ),
        (MaxPool("MaxPool_1a_3x3", 3, stride=2, padding="VALID"),),
    )


# Slim's inception_v3_base up to MaxPool_5a_3x3, which inception_resnet_v2_base reuses.
V3_STEM = (
    Conv2d("Conv2d_1a_3x3", 32, 3, stride=2, padding="VALID"),
    Conv2d("Conv2d_2a_3x3", 32, 3, padding="VALID"),
    Conv2d("Conv2d_2b_3x3", 64, 3),
    MaxPool("MaxPool_3a_3x3", 3, stride=2, padding="VALID"),
    Conv2d("Conv2d_3b_1x1", 80, 1, padding="VALID"),
    Conv2d("Conv2d_4a_3x3", 192, 3, padding="VALID"),
    MaxPool("MaxPool_5a_3x3", 3, stride=2, padding="VALID"),
)
# Its units of recomputation (`run_layers`' `stem`): 299 -> 73 pixels, 73 -> 35.
V3_STEM_UNITS = ("MaxPool_3a_3x3", "MaxPool_5a_3x3")


def slim_head(
    network: SlimInception,
    x: jax.Array,
    end_points: dict[str, jax.Array],
    builder: Builder,
    train: bool,
    logits_name: str,
    fully_connected: bool = False,
    aux: Callable[..., AuxLogits] | None = None,
    aux_input: str | None = None,
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """Slim's auxiliary head on `end_points[aux_input]`, then global pooling and `Logits`.

    `network` is the calling `SlimInception` (its `num_classes`, `dropout_rate`, `dtype`, and
    `create_aux_logits` when it has an auxiliary head). `aux` is `AuxLogits` with its layer names
    bound; its logits are an end point in training, and `init` creates its parameters whatever
    the mode, so train and eval variables match. Slim pools with a fixed window
    (`AvgPool_0a_7x7`, `AvgPool_1a_8x8`) sized to reduce the default image's map to 1x1; the
    global mean is the same there and works at every input size. The class layer in the `Logits`
    scope is a 1x1 convolution (Inception v1-v3, kernel `[1, 1, channels, classes]` as in Slim)
    or, `fully_connected`, a dense layer.
    """
    num_classes = network.num_classes
    wants_aux = aux is not None and num_classes and network.create_aux_logits
    if wants_aux and (train or network.is_initializing()):
        head = aux(num_classes, builder, dtype=network.dtype, name="AuxLogits")
        aux_logits = head(end_points[aux_input])
        if train:
            end_points["aux_logits"] = aux_logits
    return layers.classify(
        layers.global_avg_pool(x),
        end_points,
        num_classes,
        train=train,
        dropout_rate=network.dropout_rate,
        dtype=network.dtype,
        name=logits_name,
        conv=None if fully_connected else builder.conv,
        scope="Logits",
    )

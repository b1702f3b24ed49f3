"""Xception: Chollet 2017, "Xception: Deep Learning with Depthwise Separable Convolutions"
(arXiv:1610.02357).

Built as timm's `legacy_xception` (Cadene's PyTorch port of Keras's Xception, whose weights it
holds): a stem of two unpadded 3x3 convolutions (32 wide at stride 2, then 64), each with
BatchNorm and ReLU; the entry flow's three blocks (128, 256, 728 wide), the middle flow's eight
728-wide blocks and the exit flow's block to 1024, then two separable convolutions (1536, 2048)
each with BatchNorm and ReLU, global average pooling and the classifier `fc`.

A block is `reps` x (ReLU, separable convolution, BatchNorm), the first ReLU left out in the
first block (it follows the stem's own), then a 3x3/2 max pool where it downsamples; its shortcut
is a strided 1x1 convolution with BatchNorm where width or stride change, the identity otherwise.
A separable convolution is a 3x3 depthwise convolution (`conv1`, padding 1) then a 1x1 one
(`pointwise`), without BatchNorm or activation between them (Keras's `SeparableConv2D`), neither
with a bias. Blocks grow to their width in their first convolution, but for the exit flow's,
which grows in its last (`grow_first=False`). The ReLU that starts a block reads a copy: the
shortcut adds the block's input before the ReLU (timm's `inplace=False` first ReLU).

Padding is PyTorch's symmetric ints throughout (Keras's 'SAME' is the same at stride 1; its
stride-2 layers here are the unpadded stem convolution, 1x1 shortcuts and the pools, whose
asymmetric 'SAME' timm's port replaced by one pixel each side: the function of timm's weights).
BatchNorm has PyTorch's epsilon and momentum.

End points: `stem` (the second stem convolution's activation), `block1`..`block12` (each block's
output, before any activation), `block2_relu`..`block12_relu` (the ReLU a block starts with,
where timm's `features_only` taps), `conv3`, `conv4` (the exit's activations), `pre_logits`.

`XceptionAligned` is timm's DeepLab Xception (Chen et al. 2018, "Encoder-Decoder with Atrous
Separable Convolution", arXiv:1802.02611): `xception41`/`65`/`71` and timm's pre-activated
`xception41p`/`65p`. Its strided layers are the blocks' third depthwise convolutions (no pools),
each separable convolution has BatchNorm after both halves, and its names are timm's
(`stem_0`, `blocks_{i}/conv{j}/conv_dw`, `head/fc`). Its end points: `stem`, `block{i}`, each
strided block's `block{i}_tap` (the third convolution's input, timm's feature tap), `act` (the
pre-activated ones' last ReLU), `pre_logits`. `output_stride` (8 or 16) dilates it as timm's: a
block that would stride past it strides by 1, its three depthwise convolutions at the dilation
it starts with, the blocks after it at that times its stride; such a block keeps its shortcut
only where its width changes (timm's rule: xception71's fifth loses its own at 8, so the
published weights load at 8 in neither). timm's legacy Xception has no `output_stride`, nor has
`Xception`.
"""

from collections.abc import Callable
from functools import partial
from typing import Any, ClassVar, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from nets.layers import (
    TORCH,
    Conv,
    ConvNormAct,
    ModuleDef,
    batch_norm,
    checkpointed,
    classify,
    global_avg_pool,
    max_pool,
)
from nets.layers.dilation import STANDARD_OUTPUT_STRIDES, StageStride, capped_strides, stage_strides
from nets.layers.padding import smallest_input


def _classify(network: nn.Module, x: jax.Array, end_points: dict, train: bool, **names: str):
    """Average pooling, then `network`'s classifier (`names`: its module names)."""
    return classify(
        global_avg_pool(x),
        end_points,
        network.num_classes,
        train=train,
        dropout_rate=network.dropout_rate,
        dtype=network.dtype,
        **names,
    )


class SeparableConv(nn.Module):
    """A 3x3 depthwise convolution (`conv1`) then a 1x1 one (`pointwise`) to `features`."""

    features: int
    conv: ModuleDef

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        channels = x.shape[-1]
        x = self.conv(channels, (3, 3), padding=1, feature_group_count=channels, name="conv1")(x)
        return self.conv(self.features, (1, 1), name="pointwise")(x)


class Block(nn.Module):
    """`reps` x (ReLU, separable convolution `sep{j}`, BatchNorm `bn{j}`), a 3x3 max pool where
    `stride` is 2, plus the input through a 1x1 convolution `skip` and `skipbn` where the width or
    the stride change.

    `__call__(x, activated)`: `activated` is `relu(x)`, which the first convolution reads (None:
    it reads `x`, the first block's, whose input the stem already activated)."""

    features: int
    reps: int
    stride: int
    grow_first: bool
    conv: ModuleDef
    norm: ModuleDef

    @nn.compact
    def __call__(self, x: jax.Array, activated: jax.Array | None) -> jax.Array:
        in_features = x.shape[-1]
        y = x if activated is None else activated
        for j in range(1, self.reps + 1):
            if j > 1:
                y = nn.relu(y)
            width = self.features if self.grow_first or j == self.reps else in_features
            y = SeparableConv(width, self.conv, name=f"sep{j}")(y)
            y = self.norm(name=f"bn{j}")(y)
        if self.stride != 1:
            y = max_pool(y, (3, 3), strides=(self.stride, self.stride), padding=1)
        if self.features != in_features or self.stride != 1:
            x = self.conv(self.features, (1, 1), (self.stride, self.stride), name="skip")(x)
            x = self.norm(name="skipbn")(x)
        return y + x


class Xception(nn.Module):
    """timm's `legacy_xception` (Chollet's original) for 299-pixel inputs.

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the pooled features
    `[batch, widths[-1]]` when `num_classes` is 0 or None.
    """

    default_image_size: ClassVar[int] = 299

    # The stem's two convolutions, the entry flow's three blocks, the middle flow's, the exit
    # block's and its two separable convolutions (the paper's Figure 5).
    widths: tuple[int, ...] = (32, 64, 128, 256, 728, 728, 1024, 1536, 2048)
    middle_blocks: int = 8
    num_classes: int | None = 1000
    dropout_rate: float = 0.0
    dtype: Any = jnp.float32
    conv: ModuleDef = Conv
    remat: bool | str = False  # stem, blocks recomputed in backward (nets.layers.remat.POLICIES)

    @property
    def min_image_size(self) -> int:
        """The unpadded stem (3x3/2, 3x3), then four 3x3/2 pools padded by one: 7."""
        return smallest_input([(3, 2, 0), (3, 1, 0), *[(3, 2, 2)] * 4])

    def _blocks(self) -> list[tuple[int, int, int, bool]]:
        """(width, reps, stride, grow_first) of each block, in order."""
        entry = [(w, 2, 2, True) for w in self.widths[2:5]]
        middle = [(self.widths[5], 3, 1, True)] * self.middle_blocks
        return [*entry, *middle, (self.widths[6], 2, 2, False)]

    def feature_strides(self) -> dict[str, int]:
        """timm's taps: the stem, the ReLUs starting blocks 2 and 3 and the exit block, the last
        activation."""
        exit_block = len(self._blocks())
        taps = ("stem", "block2_relu", "block3_relu", f"block{exit_block}_relu", "conv4")
        return {tap: 2 ** (k + 1) for k, tap in enumerate(taps)}

    @nn.compact
    def __call__(self, x, train: bool = True):
        conv = partial(self.conv, use_bias=False, dtype=self.dtype)
        norm = batch_norm(TORCH, train, self.dtype)
        end_points = {}

        def stem(module: nn.Module, x: jax.Array) -> jax.Array:
            # The largest maps: one unit for `remat`, its layers at timm's flat paths.
            x = conv(self.widths[0], (3, 3), (2, 2), padding=0, name="conv1")(x)
            x = nn.relu(norm(name="bn1")(x))
            x = conv(self.widths[1], (3, 3), padding=0, name="conv2")(x)
            return nn.relu(norm(name="bn2")(x))

        x = end_points["stem"] = checkpointed(stem, self.remat)(self, jnp.asarray(x, self.dtype))

        for i, (width, reps, stride, grow_first) in enumerate(self._blocks(), 1):
            activated = None
            if i > 1:
                activated = end_points[f"block{i}_relu"] = nn.relu(x)
            block = checkpointed(Block, self.remat)(
                width, reps, stride, grow_first, conv, norm, name=f"block{i}"
            )
            x = end_points[f"block{i}"] = block(x, activated)

        for name, bn, width in (("conv3", "bn3", self.widths[7]), ("conv4", "bn4", self.widths[8])):
            x = SeparableConv(width, conv, name=name)(x)
            x = end_points[name] = nn.relu(norm(name=bn)(x))

        return _classify(self, x, end_points, train, name="fc")


class AlignedBlock(NamedTuple):
    """One block of an aligned Xception: its three separable convolutions' widths, the third's
    stride, whether its input is added back and whether ReLUs precede its convolutions (else
    each convolution's BatchNorms are followed by ReLUs: the last block's)."""

    widths: tuple[int, int, int]
    stride: int = 1
    skip: bool = True
    start_with_relu: bool = True


class AlignedSeparableConv(nn.Module):
    """Depthwise 3x3 (`conv_dw`, stride `stride`, dilation `dilation` and as much padding), then
    1x1 (`conv_pw`); each with BatchNorm (`bn_dw`, `bn_pw`) and `act` after it; or, `preact`,
    BatchNorm and ReLU before (`norm`, where `first_act`) and neither between (timm's
    `PreSeparableConv2d`)."""

    features: int
    stride: int
    conv: ModuleDef
    norm: ModuleDef
    preact: bool = False
    first_act: bool = True
    act: Callable | None = None
    dilation: int = 1

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = self.act or (lambda y: y)
        if self.preact and self.first_act:
            x = nn.relu(self.norm(name="norm")(x))
        channels, strides, d = x.shape[-1], (self.stride, self.stride), self.dilation
        x = self.conv(
            channels,
            (3, 3),
            strides,
            d,
            kernel_dilation=d,
            feature_group_count=channels,
            name="conv_dw",
        )(x)
        if not self.preact:
            x = act(self.norm(name="bn_dw")(x))
        x = self.conv(self.features, (1, 1), name="conv_pw")(x)
        return x if self.preact else act(self.norm(name="bn_pw")(x))


class AlignedModule(nn.Module):
    """timm's `XceptionModule` (`preact`: `PreXceptionModule`): three separable convolutions
    `conv1`..`conv3`, the last strided, each after a ReLU (`start_with_relu`) or with its own;
    plus the input, through a strided 1x1 `shortcut` (with BatchNorm but for `preact`) where the
    width or stride change. Pre-activated blocks start with BatchNorm and ReLU (`norm`), whose
    output both the convolutions and the shortcut read. All three depthwise convolutions are
    dilated by `dilation` (timm's: the block's own, whatever its stride).

    Returns the block's output and `tap`, the third convolution's input (timm's feature tap)."""

    spec: AlignedBlock  # its stride the one it takes (1 once the network is at `output_stride`)
    conv: ModuleDef
    norm: ModuleDef
    preact: bool
    dilation: int = 1

    @nn.compact
    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        spec = self.spec
        if self.preact:
            x = nn.relu(self.norm(name="norm")(x))
        act = None if spec.start_with_relu else nn.relu
        y = tap = x
        for j, width in enumerate(spec.widths, 1):
            if spec.start_with_relu and not self.preact:
                y = nn.relu(y)
            tap = y
            stride = spec.stride if j == 3 else 1
            y = AlignedSeparableConv(
                width,
                stride,
                self.conv,
                self.norm,
                self.preact,
                j > 1,
                act,
                self.dilation,
                name=f"conv{j}",
            )(y)
        if not spec.skip:
            return y, tap
        if spec.widths[-1] != x.shape[-1] or spec.stride != 1:
            strides = (spec.stride, spec.stride)
            if self.preact:
                x = self.conv(spec.widths[-1], (1, 1), strides, name="shortcut")(x)
            else:
                x = ConvNormAct(
                    spec.widths[-1],
                    1,
                    self.conv,
                    self.norm,
                    strides=spec.stride,
                    padding=0,
                    name="shortcut",
                )(x)
        return y + x, tap


class XceptionAligned(nn.Module):
    """timm's aligned Xceptions (DeepLab's): a 3x3/2 and a 3x3 stem convolution (padded by one,
    each with BatchNorm and ReLU; the second bare for `preact`), `blocks` (`AlignedModule`s), a
    last ReLU for `preact`, average pooling and the classifier `head/fc`.

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the pooled features when
    `num_classes` is 0 or None.
    """

    default_image_size: ClassVar[int] = 299

    blocks: tuple[AlignedBlock, ...]
    preact: bool = False
    bn_epsilon: float = 1e-3  # TensorFlow's, as DeepLab's weights (timm's ra3 41p: PyTorch's)
    stem_widths: tuple[int, int] = (32, 64)
    num_classes: int | None = 1000
    dropout_rate: float = 0.0
    dtype: Any = jnp.float32
    conv: ModuleDef = Conv
    remat: bool | str = False  # stem, blocks recomputed in backward (nets.layers.remat.POLICIES)
    # timm's dilation for dense prediction: 8 or 16 keeps the deepest maps at that stride (the
    # module docstring); None (or 32): the network as published.
    output_stride: int | None = None

    @property
    def min_image_size(self) -> int:
        """Every strided layer is a 3x3 padded by one: 1 pixel is enough."""
        return 1

    def block_strides(self) -> list[StageStride]:
        """Each block's stride and dilation at `output_stride` (timm's rule: a block that would
        stride past it strides by 1, all its convolutions at the dilation it starts with, and
        multiplies the dilation of the blocks after it)."""
        strides = [spec.stride for spec in self.blocks]
        return stage_strides(strides, self.output_stride, 2, taken=STANDARD_OUTPUT_STRIDES)

    def feature_strides(self) -> dict[str, int]:
        """timm's taps: each strided block's third convolution's input, the last block (at
        `output_stride`, the deeper ones at that stride)."""
        taps, stride = {}, 2
        for i, spec in enumerate(self.blocks):
            if spec.stride > 1:
                taps[f"block{i}_tap"] = stride
                stride *= spec.stride
        taps |= {f"block{len(self.blocks) - 1}": stride}
        self.block_strides()  # a bad `output_stride`'s error, here too
        return capped_strides(taps, self.output_stride)

    @nn.compact
    def __call__(self, x, train: bool = True):
        conv = partial(self.conv, use_bias=False, dtype=self.dtype)
        norm = batch_norm(TORCH._replace(epsilon=self.bn_epsilon), train, self.dtype)
        end_points = {}

        def stem(module: nn.Module, x: jax.Array) -> jax.Array:
            # The largest maps: one unit for `remat`, its layers at timm's paths.
            x = ConvNormAct(self.stem_widths[0], 3, conv, norm, nn.relu, 2, 1, name="stem_0")(x)
            if self.preact:  # the first block's BatchNorm and ReLU follow
                return conv(self.stem_widths[1], (3, 3), padding=1, name="stem_1")(x)
            return ConvNormAct(self.stem_widths[1], 3, conv, norm, nn.relu, 1, 1, name="stem_1")(x)

        x = end_points["stem"] = checkpointed(stem, self.remat)(self, jnp.asarray(x, self.dtype))
        block = checkpointed(AlignedModule, self.remat)  # timm's `checkpoint_seq(self.blocks)`
        for i, (spec, s) in enumerate(zip(self.blocks, self.block_strides(), strict=True)):
            # timm's first dilation: the stage before's, for all the block's convolutions
            taken = spec._replace(stride=s.stride)
            x, tap = block(taken, conv, norm, self.preact, s.first_dilation, name=f"blocks_{i}")(x)
            end_points[f"block{i}"] = x
            if spec.stride > 1:
                end_points[f"block{i}_tap"] = tap
        if self.preact:
            x = end_points["act"] = nn.relu(x)
        return _classify(self, x, end_points, train, name="fc", scope="head")


def aligned_blocks(entry: tuple[tuple[int, int], ...], middle: int) -> tuple[AlignedBlock, ...]:
    """`entry`'s (width, stride) blocks, `middle` 728-wide ones, the exit flow's two."""
    return (
        *(AlignedBlock((w, w, w), s) for w, s in entry),
        *[AlignedBlock((728, 728, 728))] * middle,
        AlignedBlock((728, 1024, 1024), 2),
        AlignedBlock((1536, 1536, 2048), skip=False, start_with_relu=False),
    )


_ENTRY = ((128, 2), (256, 2), (728, 2))
# Xception-71 doubles the entry flow's blocks, downsampling in every other one.
_ENTRY_71 = ((128, 2), (256, 1), (256, 2), (728, 1), (728, 2))

# timm's only legacy variant: Keras's Xception, at its widths.
legacy_xception = partial(Xception)
xception41 = partial(XceptionAligned, blocks=aligned_blocks(_ENTRY, 8))
xception65 = partial(XceptionAligned, blocks=aligned_blocks(_ENTRY, 16))
xception71 = partial(XceptionAligned, blocks=aligned_blocks(_ENTRY_71, 16))
# Pre-activated (timm's own, trained with PyTorch's BatchNorm epsilon for 41p).
xception41p = partial(
    XceptionAligned, blocks=aligned_blocks(_ENTRY, 8), preact=True, bn_epsilon=1e-5
)
xception65p = partial(XceptionAligned, blocks=aligned_blocks(_ENTRY, 16), preact=True)

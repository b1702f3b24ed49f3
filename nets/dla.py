"""Deep Layer Aggregation: Yu et al. 2018, "Deep Layer Aggregation" (arXiv:1707.06484), as timm
builds it (`timm/models/dla.py`, the authors' ImageNet weights).

A 7x7 stride-1 stem (`base_layer`), two plain 3x3 levels (`level0` at stride 1, `level1` at 2),
then four hierarchical trees (`level2`..`level5`, each halving the map). A tree of one level
runs two residual blocks and a root: a 1x1 convolution, BatchNorm (and, in DLA-102/169, the
first child added back) and ReLU over the concatenation of the second block's output, the first
block's and the tree's earlier children. A deeper tree is two trees, the first one's output a
child of the second's root. `level_root` trees (level3..level5) also hand the root their input,
max-pooled 2x2 to the tree's stride. The first block's shortcut is that pooled input, projected
by a 1x1 convolution and BatchNorm where the width changes (timm moved the projection there; the
official code's unused projections of deeper trees are not in timm's files). Blocks: DLA-34's
basic pair of 3x3s, or a bottleneck of half the output width (`floor(out * base_width / 64) *
cardinality / 2`), grouped in the DLA-X networks. The classifier is timm's 1x1 convolution after
global average pooling, here a dense layer of the same weights.

Everything pads symmetrically (`padding`, timm's) and BatchNorm has PyTorch's epsilon. The 2x2
pools floor odd maps where the strided 3x3 convolutions round them up, so each tree's input must
be even, as in timm: image sizes of `32k` or `32k - 1` pixels. Submodules have timm's names, its
`nn.Sequential` indices as flax's `layers_{i}`. End points: `stem` (`base_layer`'s output),
`level0` .. `level5`, `pre_logits`; the feature maps are timm's `feature_info`, `level1` ..
`level5`.
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
    batch_norm,
    checkpointed,
    classify,
    global_avg_pool,
    max_pool,
)
from nets.layers.conv_norm_act import ConvNormAct


class DlaBasic(nn.Module):
    """Two 3x3 convolutions (the first strided), each with BatchNorm; the shortcut added before
    the last ReLU. timm's names: `conv1`, `bn1`, `conv2`, `bn2`."""

    features: int
    strides: int
    conv: ModuleDef
    norm: ModuleDef
    act: Callable
    cardinality: int = 1  # the bottleneck's fields, which the basic block has no use for
    base_width: int = 64

    @nn.compact
    def __call__(self, x: jax.Array, shortcut: jax.Array | None = None) -> jax.Array:
        y = self.conv(self.features, (3, 3), self.strides, name="conv1")(x)
        y = self.act(self.norm(name="bn1")(y))
        y = self.norm(name="bn2")(self.conv(self.features, (3, 3), name="conv2")(y))
        return self.act(y + (x if shortcut is None else shortcut))


class DlaBottleneck(DlaBasic):
    """1x1 -> strided 3x3 in `cardinality` groups -> 1x1, the inner width half of
    `floor(features * base_width / 64) * cardinality`. timm's names: `conv1`..`conv3`,
    `bn1`..`bn3`."""

    @nn.compact
    def __call__(self, x: jax.Array, shortcut: jax.Array | None = None) -> jax.Array:
        width = (self.features * self.base_width // 64) * self.cardinality // 2
        y = self.act(self.norm(name="bn1")(self.conv(width, (1, 1), name="conv1")(x)))
        y = self.conv(
            width, (3, 3), self.strides, feature_group_count=self.cardinality, name="conv2"
        )(y)
        y = self.act(self.norm(name="bn2")(y))
        y = self.norm(name="bn3")(self.conv(self.features, (1, 1), name="conv3")(y))
        return self.act(y + (x if shortcut is None else shortcut))


class DlaRoot(nn.Module):
    """The aggregation node: 1x1 convolution over the concatenated children, BatchNorm, the
    first child added back when `shortcut`, ReLU. timm's names: `conv`, `bn`."""

    features: int
    shortcut: bool
    conv: ModuleDef
    norm: ModuleDef
    act: Callable

    @nn.compact
    def __call__(self, children: Sequence[jax.Array]) -> jax.Array:
        x = self.conv(self.features, (1, 1), name="conv")(jnp.concatenate(children, axis=-1))
        x = self.norm(name="bn")(x)
        return self.act(x + children[0] if self.shortcut else x)


class DlaTree(nn.Module):
    """A tree of `levels` levels of `block`s (`features` wide; module docstring). timm's names:
    `tree1`, `tree2`, `root`, `project.{0,1}`."""

    levels: int
    block: ModuleDef  # `DlaBasic` or `DlaBottleneck` with all but `features` and `strides`
    features: int
    strides: int
    level_root: bool
    root: ModuleDef  # `DlaRoot` with all but `features`
    project: ModuleDef  # `ConvNormAct` with all but `features`

    @nn.compact
    def __call__(self, x: jax.Array, children: Sequence[jax.Array] = ()) -> jax.Array:
        s = self.strides
        bottom = max_pool(x, (s, s), (s, s)) if s > 1 else x
        children = [*children, bottom] if self.level_root else list(children)
        if self.levels == 1:
            shortcut = bottom
            if x.shape[-1] != self.features:
                shortcut = self.project(self.features, name="project")(bottom)
            x1 = self.block(self.features, s, name="tree1")(x, shortcut)
            x2 = self.block(self.features, 1, name="tree2")(x1)
            return self.root(self.features, name="root")([x2, x1, *children])
        subtree = partial(
            DlaTree,
            self.levels - 1,
            self.block,
            self.features,
            level_root=False,
            root=self.root,
            project=self.project,
        )
        x1 = subtree(s, name="tree1")(x)
        return subtree(1, name="tree2")(x1, [*children, x1])


class ConvLevel(nn.Module):
    """`convs` convolutions (the first strided), each with BatchNorm and ReLU: timm's
    `nn.Sequential` of `[conv, bn, relu] * convs` (`layers_0`, `layers_1`, `layers_3`, ...)."""

    features: int
    convs: int
    conv: ModuleDef
    norm: ModuleDef
    act: Callable
    kernel_size: int = 3
    strides: int = 1

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for i in range(self.convs):
            k, s = self.kernel_size, self.strides if i == 0 else 1
            x = self.conv(self.features, (k, k), s, name=f"layers_{3 * i}")(x)
            x = self.act(self.norm(name=f"layers_{3 * i + 1}")(x))
        return x


class DlaStem(nn.Module):
    """`base_layer` (one 7x7 `ConvLevel`), `level0` and `level1` (module docstring), which work
    at the highest resolutions. Returns their three maps (end points `stem`, `level0`,
    `level1`). The network shares its scope with it (`nn.share_scope`), so they keep timm's
    paths while `remat` recomputes them as one unit from the image."""

    channels: tuple[int, int]  # base_layer's and level0's, level1's
    convs: tuple[int, int]  # level0's and level1's
    conv: ModuleDef
    norm: ModuleDef
    act: Callable

    @nn.compact
    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        (c0, c1), (n0, n1) = self.channels, self.convs
        level = partial(ConvLevel, conv=self.conv, norm=self.norm, act=self.act)
        stem = level(c0, 1, kernel_size=7, name="base_layer")(x)
        level0 = level(c0, n0, name="level0")(stem)
        return stem, level0, level(c1, n1, strides=2, name="level1")(level0)


class DLA(nn.Module):
    """Deep Layer Aggregation for ImageNet-sized inputs (sizes that halve evenly five times).

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the pooled features
    `[batch, channels[-1]]` when `num_classes` is 0 or None.
    """

    default_image_size: ClassVar[int] = 224
    min_image_size: ClassVar[int] = 31  # 31 -> 16 -> 8 -> 4 -> 2 -> 1; 1 to 30 leave an odd map

    levels: Sequence[int]  # convolutions of level0 and level1, then the trees' levels
    channels: Sequence[int]  # the six levels' widths
    block: ModuleDef = DlaBottleneck
    cardinality: int = 1
    base_width: int = 64
    shortcut_root: bool = False  # DLA-102/169: the roots add their first child back
    num_classes: int | None = 1000
    dropout_rate: float = 0.0
    padding: Any = "SYMMETRIC"  # timm's; 'SAME' computes another function with its weights
    dtype: Any = jnp.float32
    act: Callable = nn.relu
    conv: ModuleDef = Conv
    remat: bool | str = False  # stem, blocks recomputed in backward (nets.layers.remat.POLICIES)

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: `level1` (stride 2) .. `level5` (32)."""
        return {f"level{i}": 2**i for i in range(1, 6)}

    @nn.compact
    def __call__(self, x, train: bool = True):
        conv = partial(self.conv, use_bias=False, padding=self.padding, dtype=self.dtype)
        norm = batch_norm(TORCH, train, self.dtype)
        layer = {"conv": conv, "norm": norm, "act": self.act}
        # timm checkpoints nothing here; the units are each residual block, each root (whose
        # input, the tree's children concatenated, is the widest map a tree makes), each
        # shortcut's projection and the stem (base_layer to level1, at the highest resolutions).
        block = checkpointed(self.block, self.remat)
        tree = partial(
            DlaTree,
            block=partial(block, cardinality=self.cardinality, base_width=self.base_width, **layer),
            root=partial(checkpointed(DlaRoot, self.remat), shortcut=self.shortcut_root, **layer),
            project=partial(
                checkpointed(ConvNormAct, self.remat),
                kernel_size=1,
                conv=conv,
                norm=norm,
                conv_name="layers_0",
                norm_name="layers_1",
            ),
        )
        c = self.channels
        end_points = {}
        x = jnp.asarray(x, self.dtype)
        stem = checkpointed(DlaStem, self.remat)(c[:2], self.levels[:2], **layer, name="stem")
        nn.share_scope(self, stem)  # its layers at timm's paths (its docstring)
        end_points["stem"], end_points["level0"], x = stem(x)
        end_points["level1"] = x
        for i in range(2, 6):
            level = tree(
                levels=self.levels[i], features=c[i], strides=2, level_root=i > 2, name=f"level{i}"
            )
            x = end_points[f"level{i}"] = level(x)
        return classify(
            global_avg_pool(x),
            end_points,
            self.num_classes,
            train=train,
            dropout_rate=self.dropout_rate,
            dtype=self.dtype,
            name="fc",
        )


_narrow = (16, 32, 64, 64, 128, 256)  # the -C (compact) networks'
_wide = (16, 32, 128, 256, 512, 1024)
_x = {"cardinality": 32, "base_width": 4}  # DLA-X: ResNeXt's 32 groups of 4 per 64 channels
dla34 = partial(
    DLA, levels=(1, 1, 1, 2, 2, 1), channels=(16, 32, 64, 128, 256, 512), block=DlaBasic
)
dla46_c = partial(DLA, levels=(1, 1, 1, 2, 2, 1), channels=_narrow)
dla46x_c = partial(DLA, levels=(1, 1, 1, 2, 2, 1), channels=_narrow, **_x)
dla60x_c = partial(DLA, levels=(1, 1, 1, 2, 3, 1), channels=_narrow, **_x)
dla60 = partial(DLA, levels=(1, 1, 1, 2, 3, 1), channels=_wide)
dla60x = partial(DLA, levels=(1, 1, 1, 2, 3, 1), channels=_wide, **_x)
dla102 = partial(DLA, levels=(1, 1, 1, 3, 4, 1), channels=_wide, shortcut_root=True)
dla102x = partial(DLA, levels=(1, 1, 1, 3, 4, 1), channels=_wide, shortcut_root=True, **_x)
dla102x2 = partial(
    DLA, levels=(1, 1, 1, 3, 4, 1), channels=_wide, shortcut_root=True, cardinality=64, base_width=4
)
dla169 = partial(DLA, levels=(1, 1, 2, 3, 5, 1), channels=_wide, shortcut_root=True)

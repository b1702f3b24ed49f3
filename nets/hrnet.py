"""HRNet: Wang et al. 2019, "Deep High-Resolution Representation Learning for Visual Recognition"
(arXiv:1908.07919), as timm builds its classification networks (`timm/models/hrnet.py`, the
authors' ImageNet weights, Gluon's, and PaddleClas's SSLD-distilled ones).

Two strided 3x3 convolutions (`conv1`/`bn1`, `conv2`/`bn2`) and a stage of ResNet bottlenecks
(`layer1`) at stride 4; then stages 2 to 4 keep every resolution while adding one at half the
last: a transition makes the new branch by strided 3x3 convolutions of the lowest-resolution one
(and convolves a branch whose width changes), then each of a stage's modules runs its branches'
ResNet basic blocks and fuses them: every output is the ReLU of the sum of all branches brought
to its resolution and width (higher ones by strided 3x3 convolutions, the last without ReLU;
lower ones by a 1x1 convolution and nearest upsampling). The classification head widens each
branch by one bottleneck (`incre_modules`: 128, 256, 512, 1024 channels), adds them from the
highest resolution down through strided 3x3 convolutions (`downsamp_modules`), widens to 2048
(`final_layer`), pools and classifies. The SSLD weights' head convolutions have no biases
(`head_conv_bias`); timm registers them under their own names with w18's and w48's stages.

The blocks are `nets.resnet`'s `ResNetBlock` and `BottleneckResNetBlock` (timm's are ResNet's
too). Convolutions pad symmetrically (`padding`, timm's); BatchNorm has PyTorch's epsilon.
Submodules have timm's names, its indices joined by `_` (`stage3_1/branches_2_0`: timm's
`stage3.1.branches.2.0`; `nn.Sequential` positions as `layers_{i}`). End points: `stem`
(stride 2), `layer1`, each stage's branches `stage{s}_{i}`, the widened branches `incre{i}`,
`final_layer`, `pre_logits`; the feature maps are timm's `feature_info` (its `features_only`
default, the 'incre' location): `stem`, `incre0` .. `incre3`.
"""

from collections.abc import Sequence
from functools import partial
from typing import Any, ClassVar, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from nets.ghostnet import upsample_nearest
from nets.layers import TORCH, Conv, ModuleDef, batch_norm, checkpointed, classify, global_avg_pool
from nets.layers.conv_norm_act import ConvNormAct
from nets.resnet import BottleneckResNetBlock, ResNetBlock

# timm's block types: the block and its output channels per unit of width.
BLOCKS = {"BASIC": (ResNetBlock, 1), "BOTTLENECK": (BottleneckResNetBlock, 4)}


class StageDef(NamedTuple):
    """One row of timm's `cfg_cls`: `modules` high-resolution modules, each of `blocks[i]`
    blocks `widths[i]` wide on branch `i` (a stage has `len(widths)` branches)."""

    modules: int
    blocks: tuple[int, ...]
    widths: tuple[int, ...]
    block: str = "BASIC"


class Fusion(nn.Module):
    """A module's fusion (module docstring): every output the ReLU of the sum of all branches
    brought to its resolution and width. `xs`: the branches' maps, highest resolution first;
    returns as many. timm's names: `fuse_layers_{i}_{j}` (a lower branch `j`),
    `fuse_layers_{i}_{j}_{k}` (a higher one's k-th strided convolution). The module shares its
    scope with it (`nn.share_scope`), so they keep timm's paths under the module's while
    `remat` recomputes the fusion as one unit."""

    cna: ModuleDef  # `ConvNormAct` with the network's conv, norm, ReLU and padding

    @nn.compact
    def __call__(self, xs: Sequence[jax.Array]) -> list[jax.Array]:
        fused = []
        for i, target in enumerate(xs):
            total = None
            for j, x in enumerate(xs):
                if j > i:
                    x = self.cna(target.shape[-1], 1, act=None, name=f"fuse_layers_{i}_{j}")(x)
                    x = upsample_nearest(x, target.shape[1:3])
                for k in range(i - j):
                    last = k == i - j - 1
                    x = self.cna(
                        target.shape[-1] if last else x.shape[-1],
                        3,
                        strides=2,
                        act=None if last else nn.relu,
                        name=f"fuse_layers_{i}_{j}_{k}",
                    )(x)
                total = x if total is None else total + x
            fused.append(nn.relu(total))
        return fused


class HighResolutionModule(nn.Module):
    """Parallel branches of blocks, then their `Fusion`. `xs`: the branches' maps, highest
    resolution first; returns as many. timm's names: `branches_{i}_{b}`, the fusion's."""

    stage: StageDef
    block: ModuleDef  # the stage's block with all but its width
    fusion: ModuleDef  # `Fusion` with its `cna` (checkpointed where the network recomputes it)

    @nn.compact
    def __call__(self, xs: Sequence[jax.Array]) -> list[jax.Array]:
        xs = list(xs)
        for i, (n, width) in enumerate(zip(self.stage.blocks, self.stage.widths, strict=True)):
            for b in range(n):
                xs[i] = self.block(width, name=f"branches_{i}_{b}")(xs[i])
        if len(xs) == 1:
            return xs
        fusion = self.fusion(name="fuse_layers")
        nn.share_scope(self, fusion)  # its layers at timm's paths (its docstring)
        return fusion(xs)


class Stem(nn.Module):
    """The two strided 3x3 convolutions with BatchNorm and ReLU (timm's `conv1`/`bn1`,
    `conv2`/`bn2`, 64 wide). Returns the stride-2 map (end point `stem`) and the stride-4 one.
    The network shares its scope with it (`nn.share_scope`), so they keep timm's paths while
    `remat` recomputes them as one unit from the image."""

    width: int  # conv1's
    conv: ModuleDef
    norm: ModuleDef

    @nn.compact
    def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        stem = nn.relu(self.norm(name="bn1")(self.conv(self.width, (3, 3), 2, name="conv1")(x)))
        return stem, nn.relu(self.norm(name="bn2")(self.conv(64, (3, 3), 2, name="conv2")(stem)))


class Transition(nn.Module):
    """timm's transition layer `prefix`: a branch whose width changes through a 3x3 convolution
    (`{prefix}_{i}`), each new branch by strided 3x3 convolutions of the last
    (`{prefix}_{i}_{k}`), the last of them to its width. The network shares its scope with it
    (`nn.share_scope`), so they keep timm's paths while `remat` recomputes them as one unit."""

    stage: StageDef  # the stage it feeds
    cna: ModuleDef
    prefix: str

    @nn.compact
    def __call__(self, xs: Sequence[jax.Array]) -> list[jax.Array]:
        _, expansion = BLOCKS[self.stage.block]
        out = []
        for i, width in enumerate(w * expansion for w in self.stage.widths):
            if i < len(xs):
                # timm convolves the last branch here, which is branch i wherever widths change
                # (transition1, from layer1's one map); a later change would break its shapes.
                same = xs[i].shape[-1] == width
                out.append(xs[i] if same else self.cna(width, 3, name=f"{self.prefix}_{i}")(xs[i]))
                continue
            y = xs[-1]
            for k in range(i + 1 - len(xs)):
                last = k == i - len(xs)
                y = self.cna(
                    width if last else y.shape[-1], 3, strides=2, name=f"{self.prefix}_{i}_{k}"
                )(y)
            out.append(y)
        return out


class HRNet(nn.Module):
    """HRNet for ImageNet-sized inputs.

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the pooled features
    `[batch, num_features]` when `num_classes` is 0 or None.
    """

    default_image_size: ClassVar[int] = 224

    layer1: StageDef  # stride 4, one branch (timm's `stage1`)
    stages: Sequence[StageDef]  # timm's stage2..stage4, one branch more each
    stem_width: int = 64  # conv1's (conv2 is 64 wide in all)
    head_widths: Sequence[int] = (32, 64, 128, 256)  # the incre bottlenecks' (x4 out)
    num_features: int = 2048
    head_conv_bias: bool = True  # False: the SSLD weights' downsamp and final convolutions
    num_classes: int | None = 1000
    dropout_rate: float = 0.0
    padding: Any = "SYMMETRIC"  # timm's; 'SAME' computes another function with its weights
    dtype: Any = jnp.float32
    conv: ModuleDef = Conv
    remat: bool | str = False  # stem, blocks recomputed in backward (nets.layers.remat.POLICIES)

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: the stem (stride 2), then the widened branches (4 .. 32)."""
        return {"stem": 2, **{f"incre{i}": 4 * 2**i for i in range(len(self.head_widths))}}

    @nn.compact
    def __call__(self, x, train: bool = True):
        conv = partial(self.conv, use_bias=False, padding=self.padding, dtype=self.dtype)
        norm = batch_norm(TORCH, train, self.dtype)
        cna = partial(
            ConvNormAct,
            conv=conv,
            norm=norm,
            act=nn.relu,
            padding=self.padding,
            conv_name="layers_0",
            norm_name="layers_1",
        )
        end_points = {}
        x = jnp.asarray(x, self.dtype)
        # timm checkpoints only the residual blocks; here the layers between them are recomputed
        # from their inputs too, each a unit: the stem, the transitions, the fusions, and the
        # head's bottlenecks, downsamplings and final layer.
        stem = checkpointed(Stem, self.remat)(self.stem_width, conv, norm, name="stem")
        nn.share_scope(self, stem)  # its layers at timm's paths (its docstring)
        end_points["stem"], x = stem(x)
        blocks = {
            kind: checkpointed(partial(block, conv=conv, norm=norm, act=nn.relu), self.remat)
            for kind, (block, _) in BLOCKS.items()
        }
        for b in range(self.layer1.blocks[0]):
            x = blocks[self.layer1.block](self.layer1.widths[0], name=f"layer1_{b}")(x)
        xs = [x]
        end_points["layer1"] = x
        fusion = partial(checkpointed(Fusion, self.remat), cna)
        for s, stage in enumerate(self.stages, 2):
            name = f"transition{s - 1}"
            transition = checkpointed(Transition, self.remat)(stage, cna, name, name=name)
            nn.share_scope(self, transition)  # its layers at timm's paths (its docstring)
            xs = transition(xs)
            for m in range(stage.modules):
                module = HighResolutionModule(
                    stage, blocks[stage.block], fusion, name=f"stage{s}_{m}"
                )
                xs = module(xs)
            end_points |= {f"stage{s}_{i}": y for i, y in enumerate(xs)}
        head_cna = checkpointed(cna, self.remat)
        y = None
        for i, (branch, width) in enumerate(zip(xs, self.head_widths, strict=True)):
            incre = blocks["BOTTLENECK"](width, name=f"incre_modules_{i}_0")
            branch = end_points[f"incre{i}"] = incre(branch)
            if y is None:
                y = branch
                continue
            down = head_cna(
                branch.shape[-1],
                3,
                strides=2,
                conv_bias=self.head_conv_bias,
                name=f"downsamp_modules_{i - 1}",
            )
            y = branch + down(y)
        final = head_cna(self.num_features, 1, conv_bias=self.head_conv_bias, name="final_layer")
        x = end_points["final_layer"] = final(y)
        return classify(
            global_avg_pool(x),
            end_points,
            self.num_classes,
            train=train,
            dropout_rate=self.dropout_rate,
            dtype=self.dtype,
            name="classifier",
        )


def _stages(widths: tuple[int, ...], modules: tuple[int, int, int], blocks: int) -> tuple:
    """Stages 2..4 of `blocks` basic blocks a branch: the first 2, 3, 4 of `widths`."""
    return tuple(
        StageDef(m, (blocks,) * n, widths[:n]) for m, n in zip(modules, (2, 3, 4), strict=True)
    )


def _wide(width: int) -> dict:
    """timm's hrnet_w{width}: four bottlenecks of 64, stages of 1, 4, 3 modules of 4 blocks."""
    return {
        "layer1": StageDef(1, (4,), (64,), "BOTTLENECK"),
        "stages": _stages(tuple(width * 2**i for i in range(4)), (1, 4, 3), 4),
    }


# timm's cfg_cls (its stem widths are all 64, its fuse methods all SUM).
CONFIGS = {
    "hrnet_w18_small": {
        "layer1": StageDef(1, (1,), (32,), "BOTTLENECK"),
        "stages": _stages((16, 32, 64, 128), (1, 1, 1), 2),
    },
    "hrnet_w18_small_v2": {
        "layer1": StageDef(1, (2,), (64,), "BOTTLENECK"),
        "stages": _stages((18, 36, 72, 144), (1, 3, 2), 2),
    },
    **{f"hrnet_w{w}": _wide(w) for w in (18, 30, 32, 40, 44, 48, 64)},
}

hrnet_w18_small = partial(HRNet, **CONFIGS["hrnet_w18_small"])
hrnet_w18_small_v2 = partial(HRNet, **CONFIGS["hrnet_w18_small_v2"])
hrnet_w18 = partial(HRNet, **CONFIGS["hrnet_w18"])
hrnet_w30 = partial(HRNet, **CONFIGS["hrnet_w30"])
hrnet_w32 = partial(HRNet, **CONFIGS["hrnet_w32"])
hrnet_w40 = partial(HRNet, **CONFIGS["hrnet_w40"])
hrnet_w44 = partial(HRNet, **CONFIGS["hrnet_w44"])
hrnet_w48 = partial(HRNet, **CONFIGS["hrnet_w48"])
hrnet_w64 = partial(HRNet, **CONFIGS["hrnet_w64"])
# PaddleClas's SSLD-distilled weights: w18's and w48's stages, head convolutions without biases.
hrnet_w18_ssld = partial(hrnet_w18, head_conv_bias=False)
hrnet_w48_ssld = partial(hrnet_w48, head_conv_bias=False)

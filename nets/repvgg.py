"""RepVGG: Ding et al. 2021, "RepVGG: Making VGG-style ConvNets Great Again" (arXiv:2101.03697).

A plain stack of 3x3 convolutions with ReLU, trained with two extra branches per block: the
block is `relu(bn(conv3x3(x)) + bn(conv1x1(x)) + bn(x))`, the last (identity) branch only where
the block keeps its input's shape. All three are linear at inference, so `reparameterize` folds
each block into one biased 3x3 convolution (the paper's section 3.3): the 1x1 kernel padded to
3x3, the identity as a 3x3 kernel with a one at the centre of each channel's own input (within
its group), each scaled by its BatchNorm's `gamma / sqrt(var + eps)`, their biases
`beta - mean * gamma / sqrt(var + eps)` summed. `deploy=True` builds that plain network, which
takes the fused variables.

As timm's byobnet builds it (whose files we load): the stem is such a block (3 -> 48 or 64,
stride 2); four stages of widths `(64, 128, 256, 512) * width_factors`, each opened by a stride-2
block; the `g4` variants group every second block of each stage (timm's rule: blocks 1, 3, 5, ...
counted from 0) in 4 groups; `repvgg_d2se` adds a squeeze-excite gate (a sixteenth of the width,
ReLU, sigmoid) after each block's sum, the stem's too. Global average pooling, the classifier.
Every convolution pads PyTorch's symmetric way; BatchNorm has PyTorch's epsilon.

`output_stride` 8 or 16 (timm's `create_byob_stages`; `nets.layers.dilation`): the stages past
that stride keep their input's size, their 3x3 convolutions dilated by the stride given up (the
last stage's by 2 at 16; the last two's by 2 and 4 at 8), the first block's by the stage
before's dilation; the 1x1 branch is unchanged and, as in timm, a block whose two dilations
differ has no identity branch (never one in the published widths, where such a block widens).
The fused network dilates its `reparam_conv` as the 3x3 it folds, so `reparameterize` holds.

Submodules carry timm's names (`stem/conv_kxk/conv`, `stem/conv_1x1/bn`,
`stages_0/blocks_1/identity`, `.../attn/fc1`, `head/fc`; fused: `.../reparam_conv`). Left out:
timm's drop-block and stochastic depth (not in the paper, no published weights use them).
End points: `stem`, `stages_0`..`stages_3`, `pre_logits`.
"""

from functools import partial
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp

from nets.layers import (
    TORCH,
    Conv,
    ModuleDef,
    SqueezeExcite,
    batch_norm,
    checkpointed,
    classify,
    global_avg_pool,
    make_divisible,
)
from nets.layers.dilation import (
    STANDARD_OUTPUT_STRIDES,
    StageStride,
    capped_strides,
    dilated,
    stage_strides,
)
from nets.layers.reparam import branches, fuse_branches

BASE_WIDTHS = (64, 128, 256, 512)


class RepVggBlock(nn.Module):
    """The three-branch block (or, `deploy`, its fused 3x3 convolution), ReLU after the sum."""

    features: int
    conv: ModuleDef
    norm: ModuleDef
    strides: int = 1
    # timm's pair: the 3x3's (and the fused convolution's) dilation, and the stage's; where they
    # differ (a dilated stage's first block) timm's block has no identity branch.
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    se: bool = False  # d2se's squeeze-excite gate after the sum
    deploy: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        first, stage = self.dilation
        # The 1x1 branch dilated too: a 1x1 kernel's dilation changes nothing.
        y = branches(
            x,
            self.features,
            (("conv_kxk", 3), ("conv_1x1", 1)),
            conv=dilated(self.conv, first),
            norm=self.norm,
            strides=self.strides,
            groups=self.groups,
            identity=first == stage,
            deploy=self.deploy,
        )
        if self.se:
            y = SqueezeExcite(
                self.conv,
                squeeze_channels=make_divisible(self.features / 16, 1, round_limit=0.0),
                gate=nn.sigmoid,
                layer_names=("fc1", "fc2"),
                name="attn",
            )(y)
        return nn.relu(y)


class Stage(nn.Module):
    """`depth` blocks `blocks_0`, ...: the first strided (or dilated, `stride`), the odd ones in
    `groups` groups."""

    features: int
    depth: int
    block: ModuleDef
    groups: int = 1
    stride: StageStride = StageStride(2, 1, 1)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        stride, dilation, first = self.stride
        for j in range(self.depth):
            x = self.block(
                self.features,
                strides=stride if j == 0 else 1,
                dilation=(first if j == 0 else dilation, dilation),
                groups=self.groups if j % 2 else 1,
                name=f"blocks_{j}",
            )(x)
        return x


class RepVGG(nn.Module):
    """RepVGG in its training form (or `deploy`: the fused one, from `reparameterize`).

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the pooled features
    `[batch, channels]` when `num_classes` is 0 or None.
    """

    default_image_size: ClassVar[int] = 224

    depths: tuple[int, ...] = (4, 6, 16, 1)
    width_factors: tuple[float, ...] = (1.0, 1.0, 1.0, 2.5)
    stem_width: int = 64
    groups: int = 1  # of every second block of each stage (the `g4` variants: 4)
    se: bool = False
    deploy: bool = False
    num_classes: int | None = 1000
    dropout_rate: float = 0.0
    # 8 or 16: the deeper stages dilate instead of striding (module docstring); None (or 32):
    # none do.
    output_stride: int | None = None
    dtype: Any = jnp.float32
    conv: ModuleDef = Conv
    remat: bool | str = False  # stem, blocks recomputed in backward (nets.layers.remat.POLICIES)

    @property
    def widths(self) -> tuple[int, ...]:
        return tuple(
            make_divisible(c * f) for c, f in zip(BASE_WIDTHS, self.width_factors, strict=True)
        )

    def stage_strides(self) -> list[StageStride]:
        """Each stage's stride and dilations at `output_stride` (timm's `create_byob_stages`:
        the stride-2 stem, every stage opened by a stride-2 block)."""
        strides = (2,) * len(self.depths)
        return stage_strides(strides, self.output_stride, 2, taken=STANDARD_OUTPUT_STRIDES)

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: the stride-2 stem and each stage's output (capped at
        `output_stride`)."""
        strides = {"stem": 2, **{f"stages_{i}": 2 ** (i + 2) for i in range(len(self.depths))}}
        self.stage_strides()  # a bad output_stride's error here too
        return capped_strides(strides, self.output_stride)

    @nn.compact
    def __call__(self, x, train: bool = True):
        conv = partial(self.conv, use_bias=False, dtype=self.dtype)
        norm = batch_norm(TORCH, train, self.dtype)
        # Every block, the stem's too, is recomputed in the backward pass: timm checkpoints whole
        # stages (one block at a time keeps less, as MobileViT's here) and never the stem, whose
        # branches at half the input's resolution then keep a third of the activations.
        block = checkpointed(
            partial(RepVggBlock, conv=conv, norm=norm, se=self.se, deploy=self.deploy), self.remat
        )
        end_points = {}
        x = end_points["stem"] = block(self.stem_width, strides=2, name="stem")(
            jnp.asarray(x, self.dtype)
        )
        stages = zip(self.depths, self.widths, self.stage_strides(), strict=True)
        for i, (depth, width, stride) in enumerate(stages):
            x = Stage(width, depth, block, self.groups, stride, name=f"stages_{i}")(x)
            end_points[f"stages_{i}"] = x
        return classify(
            global_avg_pool(x),
            end_points,
            self.num_classes,
            train=train,
            dropout_rate=self.dropout_rate,
            dtype=self.dtype,
            name="fc",
            scope="head",
        )


def _fuse_block(params: dict, stats: dict, eps: float) -> dict:
    """One block's training variables -> its `reparam_conv` (and `attn`, kept)."""
    kernel, bias = fuse_branches(params, stats, eps, ("conv_kxk", "conv_1x1"))
    fused = {"reparam_conv": {"kernel": kernel, "bias": bias}}
    if "attn" in params:
        fused["attn"] = params["attn"]
    return fused


def reparameterize(variables: dict, eps: float = TORCH.epsilon) -> dict:
    """The training form's variables -> those of the same network with `deploy=True`: each
    block's branches and BatchNorms folded into one biased 3x3 convolution (module docstring;
    timm's `RepVggBlock.reparameterize`). Pure: `variables` are left as they are."""
    params, stats = variables["params"], variables["batch_stats"]
    out = {k: v for k, v in params.items() if k != "stem" and not k.startswith("stages_")}
    out["stem"] = _fuse_block(params["stem"], stats["stem"], eps)
    for name in params:
        if name.startswith("stages_"):
            out[name] = {
                block: _fuse_block(p, stats[name][block], eps) for block, p in params[name].items()
            }
    return {"params": out}


_a = partial(RepVGG, depths=(2, 4, 14, 1))
repvgg_a0 = partial(_a, width_factors=(0.75, 0.75, 0.75, 2.5), stem_width=48)
repvgg_a1 = partial(_a, width_factors=(1.0, 1.0, 1.0, 2.5))
repvgg_a2 = partial(_a, width_factors=(1.5, 1.5, 1.5, 2.75))
repvgg_b0 = partial(RepVGG, width_factors=(1.0, 1.0, 1.0, 2.5))
repvgg_b1 = partial(RepVGG, width_factors=(2.0, 2.0, 2.0, 4.0))
repvgg_b1g4 = partial(repvgg_b1, groups=4)
repvgg_b2 = partial(RepVGG, width_factors=(2.5, 2.5, 2.5, 5.0))
repvgg_b2g4 = partial(repvgg_b2, groups=4)
repvgg_b3 = partial(RepVGG, width_factors=(3.0, 3.0, 3.0, 5.0))
repvgg_b3g4 = partial(repvgg_b3, groups=4)
# 320-px weights (timm's crop 1.0: `nets_weights/repvgg.py`).
repvgg_d2se = partial(RepVGG, depths=(8, 14, 24, 1), width_factors=(2.5, 2.5, 2.5, 5.0), se=True)

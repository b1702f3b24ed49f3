"""MambaOut: Yu & Wang 2024, "MambaOut: Do We Really Need Mamba for Vision?" (arXiv:2405.07992),
as timm's `MambaOut` (`timm/models/mambaout.py`) builds it.

Mamba's block without its state-space model: Gated CNN blocks (Dauphin et al. 2017) in
MetaFormer's four stages. A block is `x + ls(fc2(act(g) * [i, dwconv(c)]))`, where `g, i, c`
split `fc1(norm(x))`: `g` and `[i, c]` are `expansion_ratio` (8/3) times the width, and only the
last `conv_ratio` times the width of them (`c`) go through a 7x7 depthwise convolution with a
bias. The stem is two 3x3/2 convolutions (half the width, then the width; InternImage's), a
LayerNorm and GELU between them (the `_rw` variants: no norm there) and a LayerNorm after; each
later stage opens with a 3x3/2 convolution (padding 1) followed by a LayerNorm (the `_rw`
variants: preceded, MetaFormer's `MetaFormerStage`). Every LayerNorm has a bias and epsilon
1e-6 (timm's `LayerNorm`).

The head pools, normalises (LayerNorm), then a dense layer to 4x the width with exact GELU;
timm's own `MlpHead` (the paper's sizes) adds a LayerNorm after it (`head_hidden_norm`), its
`ClNormMlpClassifierHead` (the `_rw` variants) does not. The `_rw` variants (timm's experiments)
also take a layer scale on every block (1e-6), other expansion and convolution ratios, and
(base_wide, base_plus) SiLU instead of GELU in the stem and the blocks, not the head.

Where this differs from timm's `MambaOut`:
- Activations are NHWC, as timm's own are between its layers (it permutes around each
  convolution).
- `pre_logits` is what timm's `forward_head(pre_logits=True)` gives, the head's hidden layer
  (`[batch, 4 * dims[-1]]`, after its norm where there is one), and `num_classes` 0 returns it
  (timm's `num_classes=0` replaces only `head.fc`); `dropout_rate` (timm's `drop_rate`) is before
  `head_fc`.
- Weight decay (`NetworkFn.regularization_loss`) covers the convolution and dense kernels only.

End points: `stem`, `stage1`..`stage4`, `pre_logits`, `logits`, `predictions`.
"""

from collections.abc import Sequence
from functools import partial
from typing import Any, ClassVar, Literal

import flax.linen as nn
import jax
import jax.numpy as jnp

from nets.layers import (
    Conv,
    LayerScale,
    ModuleDef,
    checkpointed,
    classify,
    drop_path,
    gelu,
    global_avg_pool,
)
from nets.layers.drop_path import check_drop_path_rate
from nets.layers.layer_depth import stem_stages_head_layer_id
from nets.layers.padding import smallest_input
from nets.metaformer import EPSILON, stages

Activation = Literal["gelu", "silu"]

_INIT = nn.initializers.truncated_normal(0.02)  # timm's init of every Conv2d and Linear
_ACTIVATIONS = {"gelu": gelu, "silu": nn.silu}


class GatedConvBlock(nn.Module):
    """timm's `GatedConvBlock`: `x + drop_path(ls(fc2(act(g) * concat(i, conv(c)))))`, `(g, i,
    c)` the split of `fc1(norm(x))` into `hidden`, `hidden - conv_channels` and `conv_channels`
    (`hidden = int(expansion_ratio * width)`, `conv_channels = int(conv_ratio * width)`)."""

    conv: ModuleDef
    activation: Activation = "gelu"
    expansion_ratio: float = 8 / 3
    kernel_size: int = 7
    conv_ratio: float = 1.0
    layer_scale_init_value: float | None = None
    drop_path_rate: float = 0.0
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        width = x.shape[-1]
        hidden = int(self.expansion_ratio * width)
        channels = int(self.conv_ratio * width)
        dense = partial(nn.Dense, dtype=self.dtype, kernel_init=_INIT)
        y = nn.LayerNorm(EPSILON, dtype=self.dtype, name="norm")(x)
        y = dense(2 * hidden, name="fc1")(y)
        gate, kept, c = jnp.split(y, (hidden, 2 * hidden - channels), axis=-1)
        size, pad = (self.kernel_size,) * 2, self.kernel_size // 2
        c = self.conv(channels, size, padding=pad, feature_group_count=channels, name="conv")(c)
        y = _ACTIVATIONS[self.activation](gate) * jnp.concatenate((kept, c), axis=-1)
        y = dense(width, name="fc2")(y)
        if self.layer_scale_init_value is not None:
            y = LayerScale(self.layer_scale_init_value, name="ls")(y)
        return x + drop_path(self, y, self.drop_path_rate, train)


class MambaOut(nn.Module):
    """MambaOut for ImageNet-sized inputs (any size of at least `min_image_size`).

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the head's hidden features
    `[batch, 4 * dims[-1]]` when `num_classes` is 0 or None. Parameter names are timm's:
    `stem_conv1`, `stem_norm1`, `stem_conv2`, `stem_norm2`, `stages_{i}/downsample_conv` /
    `downsample_norm`, `stages_{i}/blocks_{j}/norm` / `fc1` / `conv` / `fc2` / `ls`,
    `head_norm`, `head_pre_logits_fc`, `head_pre_logits_norm`, `head_fc`.
    """

    default_image_size: ClassVar[int] = 224  # the paper's ImageNet-1k resolution

    depths: Sequence[int] = (3, 3, 9, 3)
    dims: Sequence[int] = (96, 192, 384, 576)
    expansion_ratio: float = 8 / 3  # the blocks' gate and value widths, times theirs
    conv_ratio: float = 1.0  # the channels of the depthwise convolution, times the width
    kernel_size: int = 7
    activation: Activation = "gelu"  # the stem's and the blocks' (timm's `act_layer`)
    stem_mid_norm: bool = True  # a LayerNorm between the stem's convolutions
    # Each downsampling's LayerNorm before its convolution (timm's 'conv_nf'); False: after.
    downsample_norm_first: bool = False
    layer_scale_init_value: float | None = None  # every block's `ls`; None: none
    head_hidden_norm: bool = True  # timm's MlpHead; False: its ClNormMlpClassifierHead
    head_mlp_ratio: float = 4.0
    num_classes: int | None = 1000
    dropout_rate: float = 0.0  # before the classifier (timm's `drop_rate`)
    # Stochastic depth of the residual branches, rising linearly from 0 at the first block to
    # this rate at the last (timm's rule); training only, with the 'dropout' rng.
    drop_path_rate: float = 0.0
    dtype: Any = jnp.float32
    conv: ModuleDef = Conv
    remat: bool | str = False  # stem, blocks recomputed in backward (nets.layers.remat.POLICIES)

    @property
    def min_image_size(self) -> int:
        """Two 3x3/2 stem convolutions and one per later stage, each padded by 1: 17 for four
        stages (a pixel of one in the last)."""
        return smallest_input([(3, 2, 2)] * (len(self.depths) + 1))

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: each stage's output, from the stride-4 stem."""
        return {f"stage{i + 1}": 4 * 2**i for i in range(len(self.depths))}

    def layer_id(self, path: tuple[str, ...]) -> int:
        """The depth of the parameter under module `path`, for layer-wise learning-rate decay
        (timm's `group_matcher`, ConvNeXt's): 0 for the stem, `1 + n` for the network's block
        `n` (a stage's downsampling with its first block), the head last."""
        return stem_stages_head_layer_id(self.depths, path)

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = True):
        if not self.depths or len(self.depths) != len(self.dims):
            raise ValueError(
                f"MambaOut needs one width per stage: depths {tuple(self.depths)}, dims "
                f"{tuple(self.dims)}"
            )
        check_drop_path_rate(self.drop_path_rate)
        conv = partial(self.conv, dtype=self.dtype, kernel_init=_INIT)
        norm = partial(nn.LayerNorm, EPSILON, dtype=self.dtype)
        end_points = {}

        def stem(module: nn.Module, x: jax.Array) -> jax.Array:
            # The largest maps: one unit for `remat`, its layers at timm's flat paths.
            x = conv(self.dims[0] // 2, (3, 3), (2, 2), padding=1, name="stem_conv1")(x)
            if self.stem_mid_norm:
                x = norm(name="stem_norm1")(x)
            x = _ACTIVATIONS[self.activation](x)
            x = conv(self.dims[0], (3, 3), (2, 2), padding=1, name="stem_conv2")(x)
            return norm(name="stem_norm2")(x)

        x = end_points["stem"] = checkpointed(stem, self.remat)(self, jnp.asarray(x, self.dtype))

        block = partial(
            checkpointed(GatedConvBlock, self.remat, takes_train=True),
            conv,
            self.activation,
            self.expansion_ratio,
            self.kernel_size,
            self.conv_ratio,
            self.layer_scale_init_value,
            dtype=self.dtype,
        )
        x = stages(
            x,
            train,
            end_points,
            self.depths,
            self.dims,
            [block] * len(self.depths),
            conv,
            norm,
            self.drop_path_rate,
            downsample_norm_first=self.downsample_norm_first,
        )

        x = norm(name="head_norm")(global_avg_pool(x))
        dense = partial(nn.Dense, dtype=self.dtype, kernel_init=_INIT)
        x = dense(int(self.head_mlp_ratio * self.dims[-1]), name="head_pre_logits_fc")(x)
        x = gelu(x)
        if self.head_hidden_norm:
            x = norm(name="head_pre_logits_norm")(x)
        return classify(
            x,
            end_points,
            self.num_classes,
            train=train,
            dropout_rate=self.dropout_rate,
            dtype=self.dtype,
            name="head_fc",
            kernel_init=_INIT,
        )


# timm's sizes (the paper's), then its `_rw` experiments' conventions, ratios and sizes.
_FEMTO = {"depths": (3, 3, 9, 3), "dims": (48, 96, 192, 288)}
_SMALL = {"depths": (3, 4, 27, 3), "dims": (96, 192, 384, 576)}
_BASE = {"depths": (3, 4, 27, 3), "dims": (128, 256, 512, 768)}
_TALL = {"depths": (3, 4, 30, 3), "dims": (128, 256, 512, 768)}
_RW = {
    "stem_mid_norm": False,
    "downsample_norm_first": True,
    "layer_scale_init_value": 1e-6,
    "head_hidden_norm": False,
}
_WIDE = {"expansion_ratio": 3.0, "conv_ratio": 1.5, "activation": "silu"}
mambaout_femto = partial(MambaOut, **_FEMTO)
mambaout_kobe = partial(MambaOut, **{**_FEMTO, "depths": (3, 3, 15, 3)})  # 24 blocks
mambaout_tiny = partial(MambaOut, depths=(3, 3, 9, 3), dims=(96, 192, 384, 576))
mambaout_small = partial(MambaOut, **_SMALL)
mambaout_base = partial(MambaOut, **_BASE)
mambaout_small_rw = partial(MambaOut, **_SMALL, **_RW)
mambaout_base_short_rw = partial(
    MambaOut, **{**_BASE, "depths": (3, 3, 25, 3)}, expansion_ratio=3.0, conv_ratio=1.25, **_RW
)
mambaout_base_tall_rw = partial(MambaOut, **_TALL, expansion_ratio=2.5, conv_ratio=1.25, **_RW)
mambaout_base_wide_rw = partial(MambaOut, **_BASE, **_WIDE, **_RW)
mambaout_base_plus_rw = partial(MambaOut, **_TALL, **_WIDE, **_RW)

"""MIT's EfficientViT: Cai et al. 2023, "EfficientViT: Multi-Scale Linear Attention for
High-Resolution Dense Prediction" (arXiv:2205.14756), as timm 1.0 builds it
(`timm.models.efficientvit_mit`: `EfficientVit`, the B series, and `EfficientVitLarge`, L).

A 3x3/2 stem convolution and `depths[0]` residual blocks at its width, four stages (strides 4, 8,
16, 32), each opened by a strided block without residual, then a head: a 1x1 convolution with
BatchNorm and the activation, global average pooling, a dense layer without bias, LayerNorm, the
activation, dropout and the logits (timm's `ClassifierHead`: `pre_logits` is the LayerNorm's
activated output, `head_widths[1]` wide). Every convolution is followed by BatchNorm and no bias,
except where timm's `fewer_norm` puts a bias in place of BatchNorm (the attention stages'
blocks: only their last 1x1 projection is normalised). The blocks (`LocalBlock`):

- 'ds' (timm's `DSConv`): a 3x3 depthwise convolution with the activation, a linear 1x1
  projection: the B series' stem blocks;
- 'conv' (`ConvBlock`): two 3x3 convolutions, the first activated: the L series' stem blocks;
- 'mb' (`MBConv`): 1x1 expansion, 3x3 depthwise, linear 1x1 projection, the first two activated;
- 'fused' (`FusedMBConv`): a 3x3 expansion and a linear 1x1 projection (the L series' first two
  stages).

The attention stages (the B series' last two, the L series' last) repeat `EfficientViTBlock`:
`x + LiteMLA(x)`, then `x + MBConv(x)`. `LiteMLA`, the multi-scale linear attention: a 1x1
convolution to queries, keys and values of `head_dim` for `channels // head_dim` heads, and the
same again aggregated by a 5x5 depthwise and a grouped 1x1 convolution (heads twice over); per
head `relu(q) (relu(k)^T [v, 1])`, the last column normalising the others (`+ 1e-5`), in float32;
a 1x1 projection with BatchNorm.

Activations: Hardswish in the B series, GELU's tanh approximation in the L series (timm's
`GELUTanh`); the attention's kernel is ReLU in both. The widths of expansions are
`round(channels * expansion)` (timm's): B's 4 everywhere; L's 16 in the strided blocks of the
first three stages (24 in the last), 4 in their other blocks, 6 in the attention blocks'.
Conventions: PyTorch's symmetric padding; BatchNorm (and the head's LayerNorm) epsilon 1e-5 in
the B series, 1e-7 in the L series (timm's `norm_eps`), with which its weights were trained.

Parameters are named after timm's modules (`nets_weights/efficientvit_mit.py` maps them): `stem`
(`in_conv`, `res{j}`), `stages_{i}` / `blocks_{j}` (a block's layers: `inverted_conv`,
`depth_conv`, `point_conv`, `spatial_conv`, `conv1`, `conv2`, each `conv` and `norm`; the
attention blocks' `context_module` (`qkv`, `aggreg_0_0`, `aggreg_0_1`, `proj`) and
`local_module`), `head` (`in_conv`, `classifier_0`, `classifier_1` the LayerNorm, `classifier_4`
the logits). End points: `stem`, `stages_{i}`, `head` (the 1x1 convolution's map), `global_pool`,
`pre_logits`, `logits`, `predictions`; features at `stages_0..3` (timm's `feature_info`).

Left out: timm has no stochastic depth here, nor do we; dropout before the logits (timm's
`drop_rate`) is 0 by default, as timm's. timm's segmentation-only options (other scales than 5,
`heads_ratio`) are not fields. MACs count the attention's two products, as torch's
`FlopCounterMode` counts timm's.
"""

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

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
)
from nets.layers.padding import PaddingLike

BLOCK_KINDS = ("ds", "conv", "mb", "fused")


class LocalBlock(nn.Module):
    """One of timm's convolution blocks (`kind`: 'ds', 'conv', 'mb', 'fused'; see the module doc):
    `[n, h, w, c] -> [n, h / strides, w / strides, filters]`, plus the input if `residual`.

    `fewer_norm` (timm's): the layers before the last have a bias instead of BatchNorm. Inner
    widths are `round(c * expansion)`."""

    filters: int
    kind: str
    conv: ModuleDef
    norm: ModuleDef
    act: Callable
    expansion: float = 1.0
    strides: int = 1
    fewer_norm: bool = False
    residual: bool = True
    padding: PaddingLike = "SYMMETRIC"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        inputs, c = x, x.shape[-1]
        f, s, inner = self.filters, self.strides, round(c * self.expansion)
        layers = {  # name, width, kernel, stride, groups
            "ds": (("depth_conv", c, 3, s, c), ("point_conv", f, 1, 1, 1)),
            "conv": (("conv1", inner, 3, s, 1), ("conv2", f, 3, 1, 1)),
            "mb": (
                ("inverted_conv", inner, 1, 1, 1),
                ("depth_conv", inner, 3, s, inner),
                ("point_conv", f, 1, 1, 1),
            ),
            "fused": (("spatial_conv", inner, 3, s, 1), ("point_conv", f, 1, 1, 1)),
        }
        if self.kind not in layers:
            raise ValueError(f"block kinds are {BLOCK_KINDS}, got {self.kind!r}")
        for i, (name, width, k, stride, groups) in enumerate(layers[self.kind]):
            last = i == len(layers[self.kind]) - 1
            norm = self.norm if last or not self.fewer_norm else None
            x = ConvNormAct(
                width, k, self.conv, norm, None if last else self.act, stride, self.padding,
                groups, norm_name="norm", name=name,
            )(x)  # fmt: skip
        return x + inputs if self.residual else x


class LinearAttentionProduct(nn.Module):
    """ReLU linear attention's products: `q (k^T [v, 1])`, its last column dividing the others
    (`+ epsilon`), in float32 (timm's `LiteMLA._attn`, autocast off). `q`, `k`: `[batch, tokens,
    heads, d]` (the kernel applied), `v`: `[batch, tokens, heads, dv]` -> `[batch, tokens, heads,
    dv]`. It owns no kernel, so it declares its multiply-accumulates."""

    epsilon: float = 1e-5

    @nn.compact
    def __call__(self, q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
        dtype = v.dtype
        q, k, v = (t.astype(jnp.float32) for t in (q, k, v))
        v = jnp.pad(v, ((0, 0), (0, 0), (0, 0), (0, 1)), constant_values=1.0)
        out = jnp.einsum("bthd,bhde->bthe", q, jnp.einsum("bthd,bthe->bhde", k, v))
        return (out[..., :-1] / (out[..., -1:] + self.epsilon)).astype(dtype)

    @staticmethod
    def macs(q: jax.Array, k: jax.Array, v: jax.Array) -> int:
        """`k^T [v, 1]` and `q` times it: `2 * batch * tokens * heads * d * (dv + 1)`."""
        batch, tokens, heads, d = q.shape
        return 2 * batch * tokens * heads * d * (v.shape[-1] + 1)


class LiteMLA(nn.Module):
    """Multi-scale linear attention (the paper's Figure 3; timm's `LiteMLA`): `[n, h, w, c] ->
    [n, h, w, filters]`.

    `qkv`: a 1x1 convolution to `3 * heads * head_dim` (no bias, no BatchNorm), `heads = c //
    head_dim`; each of `scales` aggregates it again (`aggreg_{i}_0`, a depthwise `scale x scale`
    convolution; `aggreg_{i}_1`, a 1x1 convolution grouped by query, key and value of each head);
    every group of `3 * head_dim` channels is a head's query, key and value (timm's reshape), the
    attention is `LinearAttentionProduct` with ReLU on queries and keys; `proj`: a 1x1
    convolution with BatchNorm."""

    filters: int
    head_dim: int
    conv: ModuleDef
    norm: ModuleDef
    scales: Sequence[int] = (5,)
    padding: PaddingLike = "SYMMETRIC"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        n, h, w, c = x.shape
        d = self.head_dim
        width = 3 * (c // d) * d
        qkv = ConvNormAct(width, 1, self.conv, None, conv_bias=False, name="qkv")(x)
        multi_scale = [qkv]
        for i, scale in enumerate(self.scales):
            y = self.conv(width, (scale, scale), padding=self.padding, feature_group_count=width,
                          use_bias=False, name=f"aggreg_{i}_0")(qkv)  # fmt: skip
            y = self.conv(width, (1, 1), feature_group_count=width // d, use_bias=False,
                          name=f"aggreg_{i}_1")(y)  # fmt: skip
            multi_scale.append(y)
        heads = jnp.concatenate(multi_scale, axis=-1).reshape(n, h * w, -1, 3 * d)
        q, k, v = jnp.split(heads, 3, axis=-1)
        out = LinearAttentionProduct()(nn.relu(q), nn.relu(k), v)
        proj = ConvNormAct(self.filters, 1, self.conv, self.norm, norm_name="norm", name="proj")
        return proj(out.reshape(n, h, w, -1))


class EfficientViTBlock(nn.Module):
    """timm's `EfficientVitBlock`: `x + LiteMLA(x)` (`context_module`), then `x + MBConv(x)`
    (`local_module`: biased expansion and depthwise convolutions, BatchNorm on the projection)."""

    head_dim: int
    expansion: float
    conv: ModuleDef
    norm: ModuleDef
    act: Callable
    padding: PaddingLike = "SYMMETRIC"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        c = x.shape[-1]
        common = {"conv": self.conv, "norm": self.norm, "padding": self.padding}
        x = x + LiteMLA(c, self.head_dim, **common, name="context_module")(x)
        return LocalBlock(
            c, "mb", act=self.act, expansion=self.expansion, fewer_norm=True, **common,
            name="local_module",
        )(x)  # fmt: skip


class EfficientViT(nn.Module):
    """EfficientViT's B series (`large=False`) or L series (`large=True`): `widths` and `depths`
    of the stem and four stages, `head_widths` of the head's convolution and dense layer.

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the head's features
    `[batch, head_widths[1]]` when `num_classes` is 0 or None (timm's `pre_logits`)."""

    widths: Sequence[int]
    depths: Sequence[int]
    head_dim: int
    head_widths: Sequence[int]
    large: bool = False
    default_image_size: int = 224  # timm's r224 weights' size
    num_classes: int | None = 1000
    dropout_rate: float = 0.0  # timm's `drop_rate`
    act: Callable = nn.hard_swish
    dtype: Any = jnp.float32
    conv: ModuleDef = Conv
    # timm's: PyTorch's symmetric padding; BatchNorm's and LayerNorm's epsilon (L: 1e-7).
    padding: str = "SYMMETRIC"
    bn_epsilon: float = TORCH.epsilon
    remat: bool | str = False  # stem, blocks recomputed in backward (nets.layers.remat.POLICIES)

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: the four stages."""
        return {f"stages_{i}": 4 * 2**i for i in range(4)}

    def stage_blocks(self, i: int, depth: int) -> list[tuple[str, float, bool] | float]:
        """Stage `i`'s blocks after its strided one: `(kind, expansion, fewer_norm)` of a
        residual `LocalBlock`, or the expansion of an `EfficientViTBlock`; and first the strided
        block's `(kind, expansion, fewer_norm)` (timm's `EfficientVitStage` and
        `EfficientVitLargeStage`)."""
        if not self.large:  # B: attention in the last two stages
            attention = i >= 2
            rest = [4.0] * depth if attention else [("mb", 4.0, False)] * (depth - 1)
            return [("mb", 4.0, attention), *rest]
        attention, fewer = i >= 3, i >= 2
        kind = "mb" if fewer else "fused"
        rest = [6.0] * depth if attention else [(kind, 4.0, fewer)] * depth
        return [(kind, 24.0 if attention else 16.0, fewer), *rest]

    @nn.compact
    def __call__(self, x, train: bool = True):
        if len(self.widths) != 5 or len(self.depths) != 5:
            raise ValueError(f"widths and depths are the stem's and four stages', got {self}")
        conv = partial(self.conv, dtype=self.dtype)
        norm = batch_norm(TORCH._replace(epsilon=self.bn_epsilon), train, self.dtype)
        common = {"conv": conv, "norm": norm, "act": self.act, "padding": self.padding}
        layer = partial(ConvNormAct, conv=conv, norm=norm, act=self.act, padding=self.padding,
                        norm_name="norm")  # fmt: skip

        def stem(module: nn.Module, x: jax.Array) -> jax.Array:
            # The largest maps: one unit for `remat`, its layers at timm's flat paths.
            x = layer(self.widths[0], 3, strides=2, name="stem_in_conv")(x)
            for j in range(self.depths[0]):
                kind = "conv" if self.large else "ds"
                x = LocalBlock(self.widths[0], kind, **common, name=f"stem_res{j}")(x)
            return x

        x = checkpointed(stem, self.remat)(self, jnp.asarray(x, self.dtype))
        end_points = {"stem": x}
        # timm checkpoints whole stages, which here are no modules (their blocks' names are flat
        # at the top): each stage block is one checkpoint, the strided first too; the stem one.
        local = checkpointed(LocalBlock, self.remat)
        attention = checkpointed(EfficientViTBlock, self.remat)
        for i, (width, depth) in enumerate(zip(self.widths[1:], self.depths[1:], strict=True)):
            for j, block in enumerate(self.stage_blocks(i, depth)):
                name = f"stages_{i}_blocks_{j}"
                if isinstance(block, tuple):
                    kind, expansion, fewer = block
                    x = local(
                        width, kind, **common, expansion=expansion, strides=2 if j == 0 else 1,
                        fewer_norm=fewer, residual=j > 0, name=name,
                    )(x)  # fmt: skip
                else:
                    x = attention(self.head_dim, block, **common, name=name)(x)
            end_points[f"stages_{i}"] = x
        x = end_points["head"] = layer(self.head_widths[0], 1, name="head_in_conv")(x)
        x = end_points["global_pool"] = global_avg_pool(x)
        x = nn.Dense(self.head_widths[1], use_bias=False, dtype=self.dtype,
                     name="head_classifier_0")(x)  # fmt: skip
        x = nn.LayerNorm(self.bn_epsilon, dtype=self.dtype, name="head_classifier_1")(x)
        head = partial(classify, train=train, dropout_rate=self.dropout_rate, dtype=self.dtype)
        return head(self.act(x), end_points, self.num_classes, name="head_classifier_4")


efficientvit_b0 = partial(
    EfficientViT, widths=(8, 16, 32, 64, 128), depths=(1, 2, 2, 2, 2), head_dim=16,
    head_widths=(1024, 1280),
)  # fmt: skip
efficientvit_b1 = partial(
    EfficientViT, widths=(16, 32, 64, 128, 256), depths=(1, 2, 3, 3, 4), head_dim=16,
    head_widths=(1536, 1600),
)  # fmt: skip
efficientvit_b2 = partial(
    EfficientViT, widths=(24, 48, 96, 192, 384), depths=(1, 3, 4, 4, 6), head_dim=32,
    head_widths=(2304, 2560),
)  # fmt: skip
efficientvit_b3 = partial(
    EfficientViT, widths=(32, 64, 128, 256, 512), depths=(1, 4, 6, 6, 9), head_dim=32,
    head_widths=(2304, 2560),
)  # fmt: skip

# The L series: GELU's tanh approximation, epsilon 1e-7 (timm's `EfficientVitLarge`).
_large = partial(
    EfficientViT, large=True, head_dim=32, act=partial(nn.gelu, approximate=True), bn_epsilon=1e-7
)
efficientvit_l1 = partial(
    _large, widths=(32, 64, 128, 256, 512), depths=(1, 1, 1, 6, 6), head_widths=(3072, 3200)
)
efficientvit_l2 = partial(
    _large, widths=(32, 64, 128, 256, 512), depths=(1, 2, 2, 8, 8), head_widths=(3072, 3200)
)
efficientvit_l3 = partial(
    _large, widths=(64, 128, 256, 512, 1024), depths=(1, 2, 2, 8, 8), head_widths=(6144, 6400)
)

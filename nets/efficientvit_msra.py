"""MSRA's EfficientViT: Liu et al. 2023, "EfficientViT: Memory Efficient Vision Transformer with
Cascaded Group Attention" (arXiv:2305.07027), as timm 1.0 builds it
(`timm.models.efficientvit_msra`: `EfficientVitMsra`, `efficientvit_m0` ... `m5`). Not MIT's
EfficientViT of the same name (`nets.efficientvit_mit`).

Every layer is a convolution without bias followed by BatchNorm (timm's `ConvNorm`; LeViT's
`Conv2d_BN`), ReLU where there is one. A patch embedding of four 3x3/2 convolutions (widths C/8,
C/4, C/2, C; ReLU between), then three stages at strides 16, 32, 64 of `depths` blocks, each
the sandwich `x + dw0(x)`, `x + ffn0(x)`, `x + mixer(x)`, `x + dw1(x)`, `x + ffn1(x)`: 3x3
depthwise convolutions, feed-forward 1x1 convolutions (twice the width, ReLU), and the cascaded
group attention in windows of `window_size` (shrunk to a map smaller than it; maps that are not
a window multiple are padded with zeros at the bottom and right, as timm's). Stages 2 and 3
open with a subsampling: `res1` (a depthwise and a feed-forward residual), `patchmerge` (a 1x1
expansion by 4, a 3x3/2 depthwise convolution, squeeze-excite to a quarter, a 1x1 projection;
ReLU after the first two), `res2`. The head averages the map (`pre_logits`) and classifies it
through BatchNorm and a dense layer (timm's `NormLinear`, as LeViT's).

The cascaded group attention (`CascadedGroupAttention`): the input's channels split into one
chunk per head; head `h` reads its chunk plus head `h - 1`'s output (`qkvs_{h}`: a 1x1
convolution to a query and key of `key_dim` and a value of `C / heads`), its query passes a
depthwise `kernels[h]` convolution (`dws_{h}`), and it attends with a learnt bias per absolute
offset of query and key in the window (`attention_biases`, `[heads, window**2]`, LeViT's scheme:
`nets.tiny_vit.attention_bias_index`) through `nets.layers.attention.BiasedProduct`; the heads'
outputs, concatenated, pass ReLU and a 1x1 projection (`proj_1`).

Conventions: PyTorch's symmetric padding and BatchNorm epsilon 1e-5 (timm's). Parameters are
named after timm's modules (`nets_weights/efficientvit_msra.py` maps them). timm has no
stochastic depth in use here (its `ResidualDrop` is built at 0), nor do we; dropout before the
classifier (timm's `drop_rate`) is 0 by default. MACs count the attention's products, as torch's
`FlopCounterMode` counts timm's.
"""

from collections.abc import Sequence
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
    SqueezeExcite,
    batch_norm,
    checkpointed,
    global_avg_pool,
    make_divisible,
)
from nets.layers.attention import BiasedProduct
from nets.levit import NormLinear
from nets.swin import merge, partition
from nets.tiny_vit import attention_bias_index


def feed_forward(layer: ModuleDef, x: jax.Array, name: str) -> jax.Array:
    """`x + pw2(relu(pw1(x)))`, twice the width inside (timm's `ConvMlp` in a `ResidualDrop`).
    Call it inside a compact module: `layer` is its `ConvNormAct`."""
    width = x.shape[-1]
    y = layer(2 * width, 1, act=nn.relu, name=f"{name}_pw1")(x)
    return x + layer(width, 1, name=f"{name}_pw2")(y)


def depthwise(layer: ModuleDef, x: jax.Array, name: str) -> jax.Array:
    """`x + dw(x)`: a 3x3 depthwise convolution with BatchNorm, residual."""
    return x + layer(x.shape[-1], 3, groups=x.shape[-1], name=name)(x)


class CascadedGroupAttention(nn.Module):
    """The cascaded group attention over windows: `[windows, ws, ws, C] -> [windows, ws, ws, C]`
    (the module doc)."""

    num_heads: int
    key_dim: int
    kernels: Sequence[int]
    layer: ModuleDef

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        windows, ws, _, width = x.shape
        heads, kd = self.num_heads, self.key_dim
        vd = width // heads
        biases = self.param("attention_biases", nn.initializers.zeros, (heads, ws * ws))
        bias = biases[:, attention_bias_index(ws)]
        chunks, outs = jnp.split(x, heads, axis=-1), []
        product = BiasedProduct()
        for h in range(heads):
            feat = chunks[h] if h == 0 else outs[-1] + chunks[h]
            q, k, v = jnp.split(
                self.layer(2 * kd + vd, 1, name=f"qkvs_{h}")(feat), [kd, 2 * kd], -1
            )
            q = self.layer(kd, self.kernels[h], groups=kd, name=f"dws_{h}")(q)
            tokens = lambda t: t.reshape(windows, ws * ws, 1, -1)  # noqa: E731
            out = product(tokens(q), tokens(k), tokens(v), bias[h][None, None])
            outs.append(out.reshape(windows, ws, ws, vd))
        return self.layer(width, 1, name="proj_1")(nn.relu(jnp.concatenate(outs, axis=-1)))


class LocalWindowAttention(nn.Module):
    """`CascadedGroupAttention` in windows of `window` (timm's `LocalWindowAttention`): the map
    padded with zeros at the bottom and right to a window multiple, the windows attended alone,
    the padding cropped. A map smaller than the window shrinks it to its side."""

    window: int
    num_heads: int
    key_dim: int
    kernels: Sequence[int]
    layer: ModuleDef

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        _, h, w, _ = x.shape
        ws = min(self.window, h, w)
        pad_h, pad_w = -h % ws, -w % ws
        padded = jnp.pad(x, ((0, 0), (0, pad_h), (0, pad_w), (0, 0)))
        size = (h + pad_h, w + pad_w)
        windows = partition(padded, (ws, ws)).reshape(-1, ws, ws, x.shape[-1])
        attention = CascadedGroupAttention(
            self.num_heads, self.key_dim, self.kernels, self.layer, name="attn"
        )
        out = attention(windows).reshape(-1, ws * ws, x.shape[-1])
        return merge(out, (ws, ws), size)[:, :h, :w]


class PatchMerging(nn.Module):
    """timm's `PatchMerging`: 1x1 to 4x the width (ReLU), 3x3/2 depthwise (ReLU), squeeze-excite
    to a quarter (`se/fc1`, `se/fc2`, biased), 1x1 to `features`."""

    features: int
    layer: ModuleDef
    conv: ModuleDef

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        hidden = 4 * x.shape[-1]
        x = self.layer(hidden, 1, act=nn.relu, name="conv1")(x)
        x = self.layer(hidden, 3, strides=2, groups=hidden, act=nn.relu, name="conv2")(x)
        squeeze = make_divisible(hidden * 0.25, 8, round_limit=0.0)
        se = {"squeeze_channels": squeeze, "gate": nn.sigmoid, "layer_names": ("fc1", "fc2")}
        x = SqueezeExcite(self.conv, **se, name="se")(x)
        return self.layer(self.features, 1, name="conv3")(x)


class EfficientViTBlock(nn.Module):
    """timm's `EfficientVitBlock` `name`: a depthwise residual and a feed-forward, the local
    window attention, then the two again. The network shares its scope with it
    (`nn.share_scope`), so its layers keep timm's flat paths (`{name}_dw0`, `{name}_mixer`, ...)
    while `remat` recomputes them as one block."""

    prefix: str
    window_size: int
    heads: int
    key_dim: int
    kernels: Sequence[int]
    layer: ModuleDef

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        block, layer = self.prefix, self.layer
        x = feed_forward(layer, depthwise(layer, x, f"{block}_dw0"), f"{block}_ffn0")
        mixer = LocalWindowAttention(
            self.window_size, self.heads, self.key_dim, self.kernels, layer, name=f"{block}_mixer"
        )
        x = x + mixer(x)
        return feed_forward(layer, depthwise(layer, x, f"{block}_dw1"), f"{block}_ffn1")


class EfficientViTMsra(nn.Module):
    """MSRA's EfficientViT: three stages `embed_dims` wide of `depths` blocks with `num_heads`
    heads, keys of `key_dim`, the heads' query kernels `kernels`, windows of `window_size`.

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the pooled features
    `[batch, embed_dims[-1]]` when `num_classes` is 0 or None. End points: `stem`, `stages_0` ..
    `stages_2` (strides 16, 32, 64: timm's `feature_info`), `pre_logits`, `logits`,
    `predictions`."""

    embed_dims: Sequence[int]
    depths: Sequence[int]
    num_heads: Sequence[int]
    kernels: Sequence[int]
    key_dim: int = 16
    window_size: int = 7
    default_image_size: int = 224  # timm's (its `fixed_input_size` weights)
    num_classes: int | None = 1000
    dropout_rate: float = 0.0  # before the classifier's dense layer (timm's `drop_rate`)
    dtype: Any = jnp.float32
    conv: ModuleDef = Conv
    padding: str = "SYMMETRIC"  # PyTorch's, the weights'
    bn_epsilon: float = TORCH.epsilon
    remat: bool | str = False  # stem, blocks recomputed in backward (nets.layers.remat.POLICIES)

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: the three stages."""
        return {f"stages_{i}": 16 * 2**i for i in range(len(self.depths))}

    @nn.compact
    def __call__(self, x, train: bool = True):
        if not len(self.embed_dims) == len(self.depths) == len(self.num_heads):
            raise ValueError(f"one width, depth and head count per stage, got {self}")
        conv = partial(self.conv, dtype=self.dtype)
        norm = batch_norm(TORCH._replace(epsilon=self.bn_epsilon), train, self.dtype)
        layer = partial(ConvNormAct, conv=conv, norm=norm, padding=self.padding)

        def stem(module: nn.Module, x: jax.Array) -> jax.Array:
            # The largest maps: one unit for `remat`, its layers at timm's flat paths.
            for i, divisor in enumerate((8, 4, 2, 1)):
                act = nn.relu if divisor > 1 else None
                x = layer(self.embed_dims[0] // divisor, 3, strides=2, act=act,
                          name=f"patch_embed_conv{i + 1}")(x)  # fmt: skip
            return x

        x = checkpointed(stem, self.remat)(self, jnp.asarray(x, self.dtype))
        end_points = {"stem": x}
        for i, (width, depth, heads) in enumerate(
            zip(self.embed_dims, self.depths, self.num_heads, strict=True)
        ):
            prefix = f"stages_{i}"
            if i:
                down = f"{prefix}_downsample"
                x = feed_forward(layer, depthwise(layer, x, f"{down}_res1_0"), f"{down}_res1_1")
                x = PatchMerging(width, layer, conv, name=f"{down}_patchmerge")(x)
                x = feed_forward(layer, depthwise(layer, x, f"{down}_res2_0"), f"{down}_res2_1")
            for j in range(depth):
                block = f"{prefix}_blocks_{j}"
                module = checkpointed(EfficientViTBlock, self.remat)(
                    block, self.window_size, heads, self.key_dim, self.kernels, layer, name=block
                )
                nn.share_scope(self, module)  # its layers at timm's flat paths (its docstring)
                x = module(x)
            end_points[prefix] = x
        x = end_points["pre_logits"] = global_avg_pool(x)
        if not self.num_classes:
            return x, end_points
        logits = NormLinear(self.num_classes, norm, self.dropout_rate, name="head")(x, train)
        end_points["logits"] = logits
        end_points["predictions"] = nn.softmax(logits)
        return logits, end_points


# timm's configurations (Liu et al. Table 7: EfficientViT-M0 ... M5).
efficientvit_m0 = partial(
    EfficientViTMsra, embed_dims=(64, 128, 192), depths=(1, 2, 3), num_heads=(4, 4, 4),
    kernels=(5, 5, 5, 5),
)  # fmt: skip
efficientvit_m1 = partial(
    EfficientViTMsra, embed_dims=(128, 144, 192), depths=(1, 2, 3), num_heads=(2, 3, 3),
    kernels=(7, 5, 3, 3),
)  # fmt: skip
efficientvit_m2 = partial(
    EfficientViTMsra, embed_dims=(128, 192, 224), depths=(1, 2, 3), num_heads=(4, 3, 2),
    kernels=(7, 5, 3, 3),
)  # fmt: skip
efficientvit_m3 = partial(
    EfficientViTMsra, embed_dims=(128, 240, 320), depths=(1, 2, 3), num_heads=(4, 3, 4),
    kernels=(5, 5, 5, 5),
)  # fmt: skip
efficientvit_m4 = partial(
    EfficientViTMsra, embed_dims=(128, 256, 384), depths=(1, 2, 3), num_heads=(4, 4, 4),
    kernels=(7, 5, 3, 3),
)  # fmt: skip
efficientvit_m5 = partial(
    EfficientViTMsra, embed_dims=(192, 288, 384), depths=(1, 3, 4), num_heads=(3, 3, 4),
    kernels=(7, 5, 3, 3),
)  # fmt: skip

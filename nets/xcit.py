"""XCiT: Cross-Covariance Image Transformers.

El-Nouby et al. 2021, "XCiT: Cross-Covariance Image Transformers" (arXiv:2106.09681), as timm's
`Xcit` (`timm/models/xcit.py`) builds its `xcit_*` networks. The patches are embedded by a stem
of 3x3/2 convolutions with BatchNorm and GELU between (four for 16-pixel patches, three for 8:
`nets.levit.Stem`), a sinusoidal position encoding of the patch grid projected by a 1x1
convolution is added (`fourier_encoding`, `pos_embed`), then `depth` blocks of three pre-norm
residual branches, each scaled by a `LayerScale` started at `init_values` (1 for the 12-block
networks, 1e-5 for the 24-block ones):
- cross-covariance attention (`XCA`): attention between the channels rather than the tokens,
  the `head_dim x head_dim` map `softmax(temperature * q^T k)` of each head, `q` and `k`
  L2-normalised over the tokens, applied to `v`: linear in the number of tokens;
- local patch interaction (`LPI`): a depthwise 3x3 convolution, GELU, BatchNorm, another
  depthwise 3x3, on the patch grid;
- an MLP (`nets.vit.Mlp`).
A class token is then appended and 2 class-attention blocks update it (`ClassAttentionBlock`:
CaiT's attention of the class token to all tokens, `nets.cait.ClassAttention`), a final
LayerNorm, and the class token is classified.

timm's class-attention block differs from CaiT's in what it does to the patches, and the
published weights were trained so: the patches' residual adds their own normalised value
(`x + gamma1 * norm1(x)`), then the patches (with `tokens_norm`, all but the nano networks) are
normalised by `norm2` and doubled, the class token takes `norm2(cls) + gamma2 * mlp(norm2(cls))`.
The second block's keys and values see those patches, so the logits depend on all of it.

Where this differs from timm's `Xcit`:
- Under bfloat16 the cross-covariance logits (normalisation, products, softmax) are computed in
  float32, the weights cast back only for their product with the values.
- `drop_path_rate` is timm's: the same rate in every XCA block, none in the class-attention
  blocks. `dropout_rate` is timm's `drop_rate` (before the head) only; its `pos_drop_rate`,
  `proj_drop_rate`, `attn_drop_rate` (0 in its recipes) are not fields, nor `use_pos_embed`,
  `global_pool='avg'` or `eta=None` (no published weights use them).
- `regularization_loss` covers the convolution and dense kernels only: not the norms, biases,
  layer scales, temperatures or `cls_token`; timm's `no_weight_decay()` (and its optimizer
  factory, no decay for 1-D parameters) spares `pos_embed.*` as well, whose 1x1 kernel decays
  here.
- Nothing is made for an image size (timm's `img_size` is no field): any size runs, as in
  timm's forward, the stem's grid being `ceil(side / patch_size)`; `network_fn.features` needs
  multiples of `patch_size`.
"""

from functools import partial
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from nets.cait import ClassAttention
from nets.layers import (
    TORCH,
    Conv,
    ConvNormAct,
    LayerScale,
    ModuleDef,
    batch_norm,
    checkpointed,
    classify,
    drop_path,
)
from nets.layers.attention import Implementation
from nets.layers.drop_path import check_drop_path_rate
from nets.layers.padding import smallest_input
from nets.levit import Stem
from nets.vit import ACTIVATIONS, LAYER_NORM_EPSILON, Mlp, head_shape

_init = nn.initializers.truncated_normal(0.02)  # timm's init of every Linear and the class token
_dense = partial(nn.Dense, kernel_init=_init)
_gelu = ACTIVATIONS["gelu"]  # exact, erf GELU: timm's nn.GELU
# The stem's widths, embed_dim divided by these, for each patch size timm builds.
_STEM_DIVISORS = {16: (8, 4, 2, 1), 8: (4, 2, 1)}
FOURIER_CHANNELS = 32  # timm's `hidden_dim`: sinusoids per axis


def fourier_encoding(height: int, width: int, channels: int = FOURIER_CHANNELS) -> np.ndarray:
    """The sinusoidal encoding of a `height x width` grid, `[height, width, 2 * channels]` (the
    y axis's `channels`, then x's), in float32 as timm's `PositionalEncodingFourier`: the
    coordinates 1..n scaled to (0, 2 pi], divided by `10000**(2 * (c // 2) / channels)`, the sine
    of even channels and cosine of odd ones."""
    eps, scale = np.float32(1e-6), np.float32(2 * np.pi)
    dim_t = np.arange(channels, dtype=np.float32)
    dim_t = np.float32(10000) ** (2 * (dim_t // 2) / np.float32(channels))

    def axis(n: int) -> np.ndarray:  # [n, channels]
        positions = np.arange(1, n + 1, dtype=np.float32)
        angles = (positions / (positions[-1] + eps) * scale)[:, None] / dim_t
        angles[:, 0::2], angles[:, 1::2] = np.sin(angles[:, 0::2]), np.cos(angles[:, 1::2])
        return angles

    y = np.broadcast_to(axis(height)[:, None], (height, width, channels))
    x = np.broadcast_to(axis(width)[None], (height, width, channels))
    return np.concatenate([y, x], axis=-1)


class PositionEncoding(nn.Module):
    """`fourier_encoding` of an `(h, w)` grid projected to `features` by a biased 1x1
    convolution, `token_projection`: `[batch, h, w, features]` (timm's
    `PositionalEncodingFourier`). Projected for every image, as the MACs are counted per image
    (timm projects one and repeats it): 64 MACs a channel of each patch, under 0.5% of any
    network's."""

    features: int
    conv: ModuleDef = Conv
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, batch: int, height: int, width: int) -> jax.Array:
        encoding = jnp.asarray(fourier_encoding(height, width), self.dtype)
        encoding = jnp.broadcast_to(encoding, (batch, *encoding.shape))
        projection = self.conv(self.features, (1, 1), dtype=self.dtype, name="token_projection")
        return projection(encoding)


class CrossCovarianceProduct(nn.Module):
    """`softmax(temperature * q^T k) v` of each head, over channels: `q`, `k`, `v` `[batch,
    tokens, heads, head_dim]`, `q` and `k` L2-normalised over the tokens, `temperature`
    `[heads]`; the same shape out. The normalisation, logits and softmax in float32."""

    @nn.compact
    def __call__(self, q: jax.Array, k: jax.Array, v: jax.Array, temperature: jax.Array):
        def normalized(t: jax.Array) -> jax.Array:  # torch's F.normalize over the tokens
            t = t.astype(jnp.float32)
            return t / jnp.maximum(jnp.linalg.norm(t, axis=1, keepdims=True), 1e-12)

        logits = jnp.einsum("bnhd,bnhe->bhde", normalized(q), normalized(k))
        weights = nn.softmax(logits * temperature[:, None, None], axis=-1)
        return jnp.einsum("bhde,bnhe->bnhd", weights.astype(v.dtype), v)

    @staticmethod
    def macs(q: jax.Array, k: jax.Array, v: jax.Array, temperature: jax.Array) -> int:
        """The two products, `q^T k` and `weights v`, `tokens * head_dim**2` a head each, as
        PyTorch's `FlopCounterMode` counts timm's."""
        batch, tokens, heads, head_dim = q.shape
        return 2 * batch * tokens * heads * head_dim * head_dim


class XCA(nn.Module):
    """Cross-covariance attention, built and called as `nets.vit.Attention` (`(x, train)`):
    `qkv`, `CrossCovarianceProduct` with a learnt `temperature` per head, `proj` (timm's
    `XCA`)."""

    num_heads: int
    dropout_rate: float = 0.0  # timm's proj_drop_rate, after `proj`
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        batch, tokens, width = x.shape
        heads, head_dim = head_shape(width, self.num_heads)
        qkv = _dense(3 * width, dtype=self.dtype, name="qkv")(x)
        # timm's order of the 3 * width outputs: (q, k, v), then heads, then head_dim.
        q, k, v = jnp.moveaxis(qkv.reshape(batch, tokens, 3, heads, head_dim), 2, 0)
        temperature = self.param("temperature", nn.initializers.ones, (heads,))
        x = CrossCovarianceProduct(name="product")(q, k, v, temperature)
        x = _dense(width, dtype=self.dtype, name="proj")(x.reshape(batch, tokens, width))
        return nn.Dropout(self.dropout_rate, deterministic=not train)(x)


class LPI(nn.Module):
    """Local patch interaction on the tokens of an `(h, w)` grid: depthwise 3x3 `conv1`, GELU,
    BatchNorm `bn`, depthwise 3x3 `conv2` (timm's `LPI`); `[batch, h * w, c]` in and out."""

    norm: ModuleDef  # BatchNorm
    conv: ModuleDef = Conv
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array, grid: tuple[int, int]) -> jax.Array:
        batch, tokens, width = x.shape
        depthwise = partial(
            self.conv, width, (3, 3), padding="SAME", feature_group_count=width, dtype=self.dtype
        )
        y = depthwise(name="conv1")(x.reshape(batch, *grid, width))
        y = depthwise(name="conv2")(self.norm(name="bn")(_gelu(y)))
        return y.reshape(batch, tokens, width)


class XCABlock(nn.Module):
    """`x + ls1(attn(norm1(x)))`, `x + ls3(local_mp(norm3(x)))`, `x + ls2(mlp(norm2(x)))`, the
    branches in timm's order (its `gamma1`, `gamma3`, `gamma2`)."""

    num_heads: int
    mlp_ratio: float
    init_values: float
    norm: ModuleDef  # the LPI's BatchNorm
    grid: tuple[int, int]  # the patches' (h, w)
    drop_path_rate: float = 0.0
    epsilon: float = LAYER_NORM_EPSILON
    dtype: Any = jnp.float32
    conv: ModuleDef = Conv

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        norm = partial(nn.LayerNorm, epsilon=self.epsilon, dtype=self.dtype)

        def residual(x: jax.Array, branch: jax.Array, scale: str) -> jax.Array:
            branch = LayerScale(self.init_values, name=scale)(branch)
            return x + drop_path(self, branch, self.drop_path_rate, train)

        attn = XCA(self.num_heads, dtype=self.dtype, name="attn")
        x = residual(x, attn(norm(name="norm1")(x), train), "ls1")
        lpi = LPI(self.norm, self.conv, self.dtype, name="local_mp")
        x = residual(x, lpi(norm(name="norm3")(x), self.grid), "ls3")
        mlp = Mlp(int(x.shape[-1] * self.mlp_ratio), dtype=self.dtype, name="mlp")
        return residual(x, mlp(norm(name="norm2")(x), train), "ls2")


class ClassAttentionBlock(nn.Module):
    """XCiT's class-attention block on `[batch, 1 + patches, width]` (timm's
    `xcit.ClassAttentionBlock`): the class token attends to all tokens (`attn`, CaiT's), and
    the patches change too, as the module doc says: `tokens_norm` normalises them by `norm2`."""

    num_heads: int
    mlp_ratio: float
    init_values: float
    tokens_norm: bool
    epsilon: float = LAYER_NORM_EPSILON
    dtype: Any = jnp.float32
    attention: Implementation = "auto"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        norm = partial(nn.LayerNorm, epsilon=self.epsilon, dtype=self.dtype)
        normed = norm(name="norm1")(x)
        cls = ClassAttention(self.num_heads, self.dtype, self.attention, name="attn")(normed)
        attended = jnp.concatenate([cls, normed[:, 1:]], axis=1)
        x = x + LayerScale(self.init_values, name="ls1")(attended)
        norm2 = norm(name="norm2")
        x = norm2(x) if self.tokens_norm else jnp.concatenate([norm2(x[:, :1]), x[:, 1:]], 1)
        mlp = Mlp(int(x.shape[-1] * self.mlp_ratio), dtype=self.dtype, name="mlp")
        cls = LayerScale(self.init_values, name="ls2")(mlp(x[:, :1], False))
        return x + jnp.concatenate([cls, x[:, 1:]], axis=1)


class Xcit(nn.Module):
    """XCiT with `depth` XCA blocks and `cls_attn_layers` class-attention blocks of width
    `embed_dim`.

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the class token's
    normalised features `[batch, embed_dim]` when `num_classes` is 0 or None. End points: `stem`
    (the patches' tokens, position encoding added: `[batch, patches, embed_dim]`),
    `block1`..`block{depth}` (the patches' tokens), `class_block1`, `class_block2` (the class
    token and the patches, `[batch, 1 + patches, embed_dim]`), `norm`, `pre_logits`, `logits`,
    `predictions`. Parameter names are timm's but for the stem and the layer scales:
    `patch_embed/conv{n}/{conv,bn}` (timm's `patch_embed.proj.{2n - 2}.{0,1}`),
    `pos_embed/token_projection`, `blocks_{i}/{norm1,attn/{qkv,temperature,proj},ls1,norm3,
    local_mp/{conv1,bn,conv2},ls3,norm2,mlp/{fc1,fc2},ls2}` (timm's `gamma1`, `gamma3`, `gamma2`
    are `ls1/gamma`, ...), `cls_token`, `cls_attn_blocks_{j}/{norm1,attn/{q,k,v,proj},ls1,norm2,
    mlp,ls2}`, `norm`, `head`.
    """

    default_image_size: int = 224  # the evaluation size of the weights' recipe

    patch_size: int = 16  # 16 or 8: the stem's 3x3/2 convolutions, four or three
    embed_dim: int = 768
    depth: int = 12
    num_heads: int = 12
    mlp_ratio: float = 4.0
    cls_attn_layers: int = 2
    init_values: float = 1.0  # LayerScale's start, every block (timm's eta)
    tokens_norm: bool = False  # the class-attention blocks' norm2 on all tokens, not the class's
    num_classes: int | None = 1000
    dropout_rate: float = 0.0  # timm's drop_rate, before the head
    # Stochastic depth of the XCA blocks' branches, the same rate in each (timm's rule for
    # XCiT); training only, with the 'dropout' rng.
    drop_path_rate: float = 0.0
    epsilon: float = LAYER_NORM_EPSILON  # timm's XCiT, 1e-6
    dtype: Any = jnp.float32
    # The class attention's: 'auto': cuDNN's fused kernel on GPUs in half precision, else XLA's;
    # 'xla' or 'cudnn' force. The cross-covariance attention is always computed explicitly.
    attention: Implementation = "auto"
    conv: ModuleDef = Conv
    remat: bool | str = False  # stem, blocks recomputed in backward (nets.layers.remat.POLICIES)

    @property
    def min_image_size(self) -> int:
        """The stem's 3x3/2 convolutions with a pixel of padding: one pixel stays one."""
        return smallest_input([(3, 2, 2)] * len(self._divisors()))

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: every XCA block's tokens, on the patch grid
        (`nets.features`)."""
        return {f"block{i + 1}": self.patch_size for i in range(self.depth)}

    def layer_id(self, path: tuple[str, ...]) -> int:
        """The depth of the parameter under module `path`, for layer-wise learning-rate decay
        (timm's `group_matcher`): 0 for the stem, position encoding and class token, `i + 1` for
        `blocks_i`, `depth + 1 + j` for `cls_attn_blocks_j`, `norm` with the last of those, one
        more for the head."""
        top = path[0] if path else ""  # the class token has no module
        if top in ("", "patch_embed", "pos_embed"):
            return 0
        if top.startswith("cls_attn_blocks_"):
            return int(top.removeprefix("cls_attn_blocks_")) + self.depth + 1
        if top.startswith("blocks_"):
            return int(top.removeprefix("blocks_")) + 1
        return self.depth + self.cls_attn_layers + (top != "norm")

    def _divisors(self) -> tuple[int, ...]:
        if self.patch_size not in _STEM_DIVISORS:
            raise ValueError(
                f"patch_size={self.patch_size}: XCiT's convolutional stem makes "
                f"{' or '.join(map(str, _STEM_DIVISORS))}-pixel patches"
            )
        return _STEM_DIVISORS[self.patch_size]

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = True):
        check_drop_path_rate(self.drop_path_rate)
        end_points = {}
        norm = batch_norm(TORCH, train, self.dtype)
        layer = partial(
            ConvNormAct,
            conv=partial(self.conv, dtype=self.dtype),
            norm=norm,
            padding="SYMMETRIC",
            strides=2,
        )
        x = jnp.asarray(x, self.dtype)
        stem = checkpointed(Stem, self.remat)  # the largest maps: one unit for remat
        x = stem(self.embed_dim, layer, _gelu, self._divisors(), name="patch_embed")(x)
        batch, height, width, dim = x.shape
        x = x + PositionEncoding(dim, self.conv, self.dtype, name="pos_embed")(batch, height, width)
        x = end_points["stem"] = x.reshape(batch, height * width, dim)

        block = partial(
            checkpointed(XCABlock, self.remat, takes_train=True),
            self.num_heads,
            self.mlp_ratio,
            self.init_values,
            norm,
            (height, width),
            self.drop_path_rate,
            self.epsilon,
            self.dtype,
            self.conv,
        )
        for i in range(self.depth):
            x = block(name=f"blocks_{i}")(x, train)
            end_points[f"block{i + 1}"] = x

        cls = self.param("cls_token", _init, (1, 1, dim))
        x = jnp.concatenate([jnp.broadcast_to(cls.astype(self.dtype), (batch, 1, dim)), x], 1)
        class_block = partial(
            checkpointed(ClassAttentionBlock, self.remat),
            self.num_heads,
            self.mlp_ratio,
            self.init_values,
            self.tokens_norm,
            self.epsilon,
            self.dtype,
            self.attention,
        )
        for j in range(self.cls_attn_layers):
            x = end_points[f"class_block{j + 1}"] = class_block(name=f"cls_attn_blocks_{j}")(x)
        x = end_points["norm"] = nn.LayerNorm(self.epsilon, dtype=self.dtype, name="norm")(x)
        return classify(
            x[:, 0],
            end_points,
            self.num_classes,
            train=train,
            dropout_rate=self.dropout_rate,
            dtype=self.dtype,
            name="head",
            kernel_init=_init,
        )


# timm's configurations (El-Nouby et al. Table 1: nano, tiny, small, medium, large by width; 12
# or 24 blocks; 16- or 8-pixel patches), each at 224 px and 384 px (the sizes of the weights:
# nothing in the network depends on it). LayerScale starts at 1 for 12 blocks, 1e-5 for 24.
_NANO = {"embed_dim": 128, "depth": 12, "num_heads": 4, "tokens_norm": False}
_TINY12 = {"embed_dim": 192, "depth": 12, "num_heads": 4, "tokens_norm": True}
_SMALL12 = {"embed_dim": 384, "depth": 12, "num_heads": 8, "tokens_norm": True}
_DEEP = {"depth": 24, "init_values": 1e-5, "tokens_norm": True}
_TINY24 = {"embed_dim": 192, "num_heads": 4, **_DEEP}
_SMALL24 = {"embed_dim": 384, "num_heads": 8, **_DEEP}
_MEDIUM24 = {"embed_dim": 512, "num_heads": 8, **_DEEP}
_LARGE24 = {"embed_dim": 768, "num_heads": 16, **_DEEP}
_384 = {"default_image_size": 384}

xcit_nano_12_p16_224 = partial(Xcit, patch_size=16, **_NANO)
xcit_nano_12_p16_384 = partial(xcit_nano_12_p16_224, **_384)
xcit_tiny_12_p16_224 = partial(Xcit, patch_size=16, **_TINY12)
xcit_tiny_12_p16_384 = partial(xcit_tiny_12_p16_224, **_384)
xcit_small_12_p16_224 = partial(Xcit, patch_size=16, **_SMALL12)
xcit_small_12_p16_384 = partial(xcit_small_12_p16_224, **_384)
xcit_tiny_24_p16_224 = partial(Xcit, patch_size=16, **_TINY24)
xcit_tiny_24_p16_384 = partial(xcit_tiny_24_p16_224, **_384)
xcit_small_24_p16_224 = partial(Xcit, patch_size=16, **_SMALL24)
xcit_small_24_p16_384 = partial(xcit_small_24_p16_224, **_384)
xcit_medium_24_p16_224 = partial(Xcit, patch_size=16, **_MEDIUM24)
xcit_medium_24_p16_384 = partial(xcit_medium_24_p16_224, **_384)
xcit_large_24_p16_224 = partial(Xcit, patch_size=16, **_LARGE24)
xcit_large_24_p16_384 = partial(xcit_large_24_p16_224, **_384)
xcit_nano_12_p8_224 = partial(Xcit, patch_size=8, **_NANO)
xcit_nano_12_p8_384 = partial(xcit_nano_12_p8_224, **_384)
xcit_tiny_12_p8_224 = partial(Xcit, patch_size=8, **_TINY12)
xcit_tiny_12_p8_384 = partial(xcit_tiny_12_p8_224, **_384)
xcit_small_12_p8_224 = partial(Xcit, patch_size=8, **_SMALL12)
xcit_small_12_p8_384 = partial(xcit_small_12_p8_224, **_384)
xcit_tiny_24_p8_224 = partial(Xcit, patch_size=8, **_TINY24)
xcit_tiny_24_p8_384 = partial(xcit_tiny_24_p8_224, **_384)
xcit_small_24_p8_224 = partial(Xcit, patch_size=8, **_SMALL24)
xcit_small_24_p8_384 = partial(xcit_small_24_p8_224, **_384)
xcit_medium_24_p8_224 = partial(Xcit, patch_size=8, **_MEDIUM24)
xcit_medium_24_p8_384 = partial(xcit_medium_24_p8_224, **_384)
xcit_large_24_p8_224 = partial(Xcit, patch_size=8, **_LARGE24)
xcit_large_24_p8_384 = partial(xcit_large_24_p8_224, **_384)

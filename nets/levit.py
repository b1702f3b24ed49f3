"""LeViT: Graham et al. 2021, "LeViT: a Vision Transformer in ConvNet's Clothing for Faster
Inference" (arXiv:2104.01136), as timm 1.0 builds it (`timm.models.levit`, its linear mode).

A stem of four 3x3/2 convolutions with BatchNorm (`conv1`..`conv4`, widths C/8, C/4, C/2, C,
Hardswish between), then three stages on the 1/16 map's tokens. Every projection is a dense layer
without bias followed by BatchNorm over the tokens (`LinearNorm`: timm's `.linear` and `.bn`).
A block is `x + attn(x)`, `x + mlp(x)`: the attention's `qkv` gives each head a query and key of
`key_dim` and a value of `attn_ratio * key_dim`, each head adds a learnt bias per absolute offset
`(|dh|, |dw|)` of its query and key tokens (`attention_biases`, `[heads, h * w]`: TinyViT's
scheme, `nets.tiny_vit.attention_bias_index`), and Hardswish precedes `proj`; the MLP is
`ln1` (width x2), Hardswish, `ln2`. Stages 2 and 3 open with a subsampling attention
(`attn_downsample`, no residual: keys and values of every token, queries of every other row and
column, `in_dim // key_dim` heads, values 4 * `key_dim` wide, to the stage's width), then a
residual MLP. The head averages the tokens and classifies them twice (`head` and `head_dist`,
each BatchNorm then a dense layer: timm's `NormLinear`); the logits are the mean of the two, as
timm's `LevitDistilled` (the registered networks, whose counts include `head_dist`: 7,777,058
for levit_128s at 1000 classes). BatchNorm epsilon 1e-5 throughout.

Where this differs from timm's `LevitDistilled`:
- The logits are the mean of the two heads in training too, timm's behaviour unless
  `set_distilled_training(True)`, when its training forward returns the pair. Here the pair is
  always in `end_points` (`cls_logits`, `dist_logits`: DeiT's names, `nets.vit`), so distillation
  losses read them without another mode.
- The attention biases' table is the map's: timm fixes it by `img_size` (224 px: 14x14, 7x7,
  4x4 tokens) and refuses other sizes; here the table follows the input, so the published
  weights load at 224 px only (a file's tables of another size are refused by their shapes).
- Initialisation: dense kernels of the head from a normal of standard deviation 0.02 cut at two
  (timm's `NormLinear`), the other layers as flax's defaults (timm: PyTorch's), the biases'
  tables zero (timm's), every BatchNorm scale one, where timm starts those after `proj` and
  the MLPs' `ln2` at zero.
- `drop_path_rate` is the same for every residual branch (timm's: no linear schedule), training
  only; `dropout_rate` (timm's `drop_rate`) before each head's dense layer.
- timm's conv mode (`levit_conv_*`: 1x1 convolutions on NCHW maps, the same function) is no
  network of its own: its files load into these (`nets_weights.levit`). Its undistilled, wider,
  deeper and stride-8 experiments (`levit_512`, `levit_256d`, `levit_384_s8`, ...), without
  published weights, are not built.

MACs count the attention products (queries x keys x (key_dim + value width) per head), as
torch's `FlopCounterMode` on timm's networks; BatchNorm, as everywhere, is not counted.

End points: `stem` (`[batch, h/16, w/16, C0]`), `stage1`..`stage3` (NHWC maps at strides 16,
32, 64: timm's `stages.{i}`), `pre_logits` (the mean token), `cls_logits`, `dist_logits`,
`logits`, `predictions`.
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
    drop_path,
    global_avg_pool,
)
from nets.layers.attention import BiasedProduct
from nets.layers.drop_path import check_drop_path_rate
from nets.layers.layer_depth import stage_block_index
from nets.layers.padding import PaddingLike, smallest_input
from nets.tiny_vit import attention_bias_index

hard_swish = jax.nn.hard_swish  # torch's Hardswish: x * relu6(x + 3) / 6


class LinearNorm(nn.Module):
    """A dense layer without bias (`linear`), then BatchNorm (`bn`) over every other axis."""

    features: int
    norm: ModuleDef

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        dtype = self.norm.keywords["dtype"]
        x = nn.Dense(self.features, use_bias=False, dtype=dtype, name="linear")(x)
        return self.norm(name="bn")(x)


class Attention(nn.Module):
    """Multi-head attention over an NHWC map's tokens with per-offset biases, Hardswish, `proj`.

    `stride` 1: `qkv` from every token (timm's `Attention`); `stride` 2: `kv` from every token,
    `q` from every other row and column (timm's `AttentionDownsample`), the output map halved
    (rounded up)."""

    features: int
    key_dim: int
    num_heads: int
    attn_ratio: float
    norm: ModuleDef
    stride: int = 1

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        batch, height, width, _ = x.shape
        heads, key_dim = self.num_heads, self.key_dim
        value_dim = int(self.attn_ratio * key_dim)
        biases = self.param("attention_biases", nn.initializers.zeros, (heads, height * width))
        bias = biases[:, attention_bias_index((height, width), self.stride)][None]
        tokens = x.reshape(batch, height * width, -1)
        if self.stride == 1:
            qkv = LinearNorm(heads * (2 * key_dim + value_dim), self.norm, name="qkv")(tokens)
            # timm's order of the outputs: heads, then (q, k, v) within each.
            q, k, v = jnp.split(
                qkv.reshape(*tokens.shape[:2], heads, -1), [key_dim, 2 * key_dim], -1
            )
        else:
            kv = LinearNorm(heads * (key_dim + value_dim), self.norm, name="kv")(tokens)
            k, v = jnp.split(kv.reshape(*tokens.shape[:2], heads, -1), [key_dim], -1)
            x = x[:, :: self.stride, :: self.stride]
            q = LinearNorm(heads * key_dim, self.norm, name="q")(x)
            q = q.reshape(batch, -1, heads, key_dim)
        out = BiasedProduct(name="product")(q, k, v, bias)
        out = hard_swish(out.reshape(batch, *x.shape[1:3], heads * value_dim))
        return LinearNorm(self.features, self.norm, name="proj")(out)


class Mlp(nn.Module):
    """`ln1` (to `ratio` times the width), Hardswish, `ln2` (back): timm's `LevitMlp`."""

    ratio: float
    norm: ModuleDef

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        width = x.shape[-1]
        x = hard_swish(LinearNorm(int(width * self.ratio), self.norm, name="ln1")(x))
        return LinearNorm(width, self.norm, name="ln2")(x)


class Block(nn.Module):
    """`x + attn(x)`, `x + mlp(x)` (timm's `LevitBlock`); with `stride` 2, timm's
    `LevitDownsample`: the subsampling attention to `features` (`attn_downsample`, no residual),
    then `x + mlp(x)`."""

    features: int
    key_dim: int
    num_heads: int
    attn_ratio: float
    mlp_ratio: float
    norm: ModuleDef
    stride: int = 1
    drop_path_rate: float = 0.0

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        attention = partial(
            Attention, self.features, self.key_dim, self.num_heads, self.attn_ratio, self.norm
        )
        if self.stride == 1:
            x = x + drop_path(self, attention(name="attn")(x), self.drop_path_rate, train)
        else:
            x = attention(stride=self.stride, name="attn_downsample")(x)
        mlp = Mlp(self.mlp_ratio, self.norm, name="mlp")(x)
        return x + drop_path(self, mlp, self.drop_path_rate, train)


class NormLinear(nn.Module):
    """BatchNorm (`bn`), dropout, a dense layer (`linear`): timm's `NormLinear`."""

    num_classes: int
    norm: ModuleDef
    dropout_rate: float = 0.0

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        x = nn.Dropout(self.dropout_rate, deterministic=not train)(self.norm(name="bn")(x))
        dense = nn.Dense(
            self.num_classes,
            dtype=self.norm.keywords["dtype"],
            kernel_init=nn.initializers.truncated_normal(0.02),
            name="linear",
        )
        return dense(x)


def distilled_heads(
    x: jax.Array,
    end_points: dict,
    num_classes: int | None,
    norm: ModuleDef,
    dropout_rate: float,
    train: bool,
) -> tuple[jax.Array, dict]:
    """timm's distilled `NormLinear` pair on the pooled `x` (`pre_logits`), called inside a
    network's `__call__`: `head` and `head_dist`, `logits` their mean (timm's output unless
    `set_distilled_training`), each in `end_points` (`cls_logits`, `dist_logits`) for a
    distillation loss; LeViT's and RepViT's (`nets.repvit`). Without classes, `x` itself."""
    end_points["pre_logits"] = x
    if not num_classes:
        return x, end_points
    head = partial(NormLinear, num_classes, norm, dropout_rate)
    cls_logits = head(name="head")(x, train)
    dist_logits = head(name="head_dist")(x, train)
    logits = (cls_logits + dist_logits) / 2
    end_points |= {"cls_logits": cls_logits, "dist_logits": dist_logits, "logits": logits}
    end_points["predictions"] = nn.softmax(logits)
    return logits, end_points


class Levit(nn.Module):
    """LeViT with stages of `depths` blocks, `embed_dims[i]` wide with `num_heads[i]` heads.

    Returns `(logits, end_points)`: logits `[batch, num_classes]` (the mean of the two heads'),
    or the mean token `[batch, embed_dims[-1]]` when `num_classes` is 0 or None. Parameter names
    are timm's (`proj` and `q` for its `proj.ln` and `q.ln`): `stem/conv{1..4}/{linear,bn}`,
    `stages_{i}/downsample/{attn_downsample/{kv,q,proj,attention_biases},mlp/{ln1,ln2}}`,
    `stages_{i}/blocks_{j}/{attn/{qkv,proj,attention_biases},mlp/{ln1,ln2}}` (each `LinearNorm`
    a `linear` and a `bn`), `head`, `head_dist` (`bn`, `linear`).
    """

    default_image_size: int = 224  # the weights' (the biases' tables are the 14x14 map's)
    embed_dims: Sequence[int] = (128, 256, 384)
    depths: Sequence[int] = (2, 3, 4)
    num_heads: Sequence[int] = (4, 6, 8)
    key_dim: int = 16
    attn_ratio: float = 2.0  # the blocks' value width per head, in key_dim
    mlp_ratio: float = 2.0
    num_classes: int | None = 1000
    dropout_rate: float = 0.0  # before each head's dense layer (timm's `drop_rate`)
    # Stochastic depth of every residual branch at this one rate (timm's); training only, with
    # the 'dropout' rng.
    drop_path_rate: float = 0.0
    padding: PaddingLike = "SYMMETRIC"  # of the stem's convolutions: PyTorch's, the weights'
    dtype: Any = jnp.float32
    conv: ModuleDef = Conv
    remat: bool | str = False  # stem, blocks recomputed in backward (nets.layers.remat.POLICIES)

    @property
    def min_image_size(self) -> int:
        """Four 3x3/2 convolutions with a pixel of padding: one pixel stays one."""
        return smallest_input([(3, 2, 2)] * 4)

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: each stage's map (`nets.features`)."""
        return {f"stage{i + 1}": 16 * 2**i for i in range(len(self.depths))}

    def layer_id(self, path: tuple[str, ...]) -> int:
        """The depth of the parameter under module `path`, for layer-wise learning-rate decay
        (timm's `group_matcher`): 0 for the stem, `1 + n` for the network's block `n` (a stage's
        subsampling attention and its MLP with its first block), both heads last."""
        if path[0] == "stem":
            return 0
        if path[0].startswith("stages_"):
            return 1 + stage_block_index(self.depths, path)
        return sum(self.depths) + 1

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = True):
        self._check()
        norm = batch_norm(TORCH, train, self.dtype)
        layer = partial(
            ConvNormAct,
            conv=partial(self.conv, dtype=self.dtype),
            norm=norm,
            padding=self.padding,
            strides=2,
            conv_name="linear",
        )
        end_points = {}
        x = jnp.asarray(x, self.dtype)
        x = checkpointed(Stem, self.remat)(self.embed_dims[0], layer, name="stem")(x)  # one unit
        end_points["stem"] = x
        for i, depth in enumerate(self.depths):
            x = end_points[f"stage{i + 1}"] = Stage(
                self.embed_dims[i],
                depth,
                self.num_heads[i],
                self.key_dim,
                self.attn_ratio,
                self.mlp_ratio,
                norm,
                downsample_heads=self.embed_dims[i - 1] // self.key_dim if i else 0,
                drop_path_rate=self.drop_path_rate,
                remat=self.remat,
                name=f"stages_{i}",
            )(x, train)
        x = global_avg_pool(x)
        return distilled_heads(x, end_points, self.num_classes, norm, self.dropout_rate, train)

    def _check(self) -> None:
        if not self.depths or any(
            len(v) != len(self.depths) for v in (self.embed_dims, self.num_heads)
        ):
            raise ValueError(
                "LeViT needs one width and head count per stage: depths "
                f"{tuple(self.depths)}, embed_dims {tuple(self.embed_dims)}, num_heads "
                f"{tuple(self.num_heads)}"
            )
        if any(d % self.key_dim for d in self.embed_dims[:-1]):
            raise ValueError(
                f"embed_dims {tuple(self.embed_dims)} must be multiples of key_dim "
                f"{self.key_dim} (the subsampling attentions have width // key_dim heads)"
            )
        check_drop_path_rate(self.drop_path_rate)


class Stage(nn.Module):
    """`downsample` (with `downsample_heads`; none for 0) to `features`, then `depth` blocks."""

    features: int
    depth: int
    num_heads: int
    key_dim: int
    attn_ratio: float
    mlp_ratio: float
    norm: ModuleDef
    downsample_heads: int = 0
    drop_path_rate: float = 0.0
    remat: bool | str = False

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        block = partial(
            checkpointed(Block, self.remat, takes_train=True),
            self.features,
            self.key_dim,
            mlp_ratio=self.mlp_ratio,
            norm=self.norm,
            drop_path_rate=self.drop_path_rate,
        )
        if self.downsample_heads:
            # timm's LevitDownsample: values 4 * key_dim wide, queries every other token.
            down = block(self.downsample_heads, 4.0, stride=2, name="downsample")
            x = down(x, train)
        for j in range(self.depth):
            x = block(self.num_heads, self.attn_ratio, name=f"blocks_{j}")(x, train)
        return x


class Stem(nn.Module):
    """3x3/2 convolutions (`layer`) to `features` / 8, / 4, / 2 and `features` (`divisors`), `act`
    between: timm's LeViT `Stem16` (Hardswish); XCiT's `ConvPatchEmbed` too (`nets.xcit`: GELU,
    three of them for 8-pixel patches)."""

    features: int
    layer: ModuleDef
    act: Callable[[jax.Array], jax.Array] = hard_swish
    divisors: tuple[int, ...] = (8, 4, 2, 1)  # the last must be 1: no activation after it

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        for i, divisor in enumerate(self.divisors):
            act = self.act if divisor > 1 else None
            x = self.layer(self.features // divisor, 3, act=act, name=f"conv{i + 1}")(x)
        return x


# timm's configurations (Graham et al. Table 2: LeViT-128S, 128, 192, 256, 384).
levit_128s = partial(Levit, embed_dims=(128, 256, 384), num_heads=(4, 6, 8), depths=(2, 3, 4))
levit_128 = partial(Levit, embed_dims=(128, 256, 384), num_heads=(4, 8, 12), depths=(4, 4, 4))
levit_192 = partial(
    Levit, embed_dims=(192, 288, 384), num_heads=(3, 5, 6), depths=(4, 4, 4), key_dim=32
)
levit_256 = partial(
    Levit, embed_dims=(256, 384, 512), num_heads=(4, 6, 8), depths=(4, 4, 4), key_dim=32
)
levit_384 = partial(
    Levit, embed_dims=(384, 512, 768), num_heads=(6, 9, 12), depths=(4, 4, 4), key_dim=32
)

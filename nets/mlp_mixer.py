"""MLP-Mixer, gMixer, ResMLP and gMLP: networks that mix the patches' tokens with dense layers
over the token axis instead of attention, as timm's `MlpMixer` (`timm/models/mlp_mixer.py`)
builds them.

Tolstikhin et al. 2021, "MLP-Mixer: An all-MLP Architecture for Vision" (arXiv:2105.01601): ViT's
patch embedding (`nets.vit.patchify`, no class token, no position embeddings), then `depth`
blocks of a token-mixing MLP (each channel's column of tokens, `mlp_tokens`) and a
channel-mixing MLP (`mlp_channels`), each pre-norm and residual; a final norm, the tokens
averaged, the classifier. The block kinds, as timm's registry sets them (`block`):
- `'mixer'`: MLP-Mixer's block, LayerNorm (epsilon 1e-6), MLPs of exact GELU with hidden widths
  `mlp_ratio` = (0.5, 4) times the width; gMixer (timm's own experiment) is the same block with
  SwiGLU MLPs (`glu`: one `fc1` whose second half is the gate, `x * silu(gate)`) of ratios (1, 4).
- `'res'`: ResMLP's (Touvron et al. 2021, arXiv:2105.03404): an `Affine` "norm" (a learnt
  per-channel scale and shift, no statistics) for both branches and the final norm, one dense
  layer over the tokens (`linear_tokens`), a GELU MLP of 4x over the channels, and a LayerScale
  on each branch (`ls1`, `ls2`; started at 1e-4, 1e-5 for 24 blocks, 1e-6 for 36 and B-24).
- `'gated'`: gMLP's (Liu et al. 2021, "Pay Attention to MLPs", arXiv:2105.08050): one residual
  branch, LayerNorm, `fc1` to 6x the width, GELU, the spatial gating unit (the second half
  normalised by a LayerNorm of PyTorch's default epsilon 1e-5, mixed over the tokens by `proj`,
  gating the first half), `fc2` back.

Where this differs from timm's `MlpMixer`:
- The token-mixing layers are made for `default_image_size` (timm's `img_size`, 224 for every
  published network) and take exactly its patch grid: another grid is refused with one line
  (timm's patch embedding asserts the image size).
- `drop_path_rate` is the same in every block (timm's, which does not rise linearly here).
- `dropout_rate` is timm's `drop_rate` (before the head) only; its `proj_drop_rate` (0 in its
  recipes) is not a field.
- Initialisation: timm's ones where they shape training (the spatial gating's `proj` near zero
  with biases of 1, so each block starts near its identity; a zero classifier); the MLPs' dense
  layers are ViT's and EVA-02's (`nets.vit.Mlp`, `nets.eva.SwiGLU`: truncated normal, std 0.02)
  where timm draws Xavier-uniform ones.
- `regularization_loss` covers the convolution and dense kernels only: not the norms, `Affine`,
  LayerScale or biases (timm's optimizer factory leaves out one-dimensional parameters; it
  decays `Affine`'s `[1, 1, dim]` alpha and beta, which are shaped as timm's so its files load).
"""

from collections.abc import Callable
from functools import partial
from typing import Any, ClassVar, Literal, get_args

import flax.linen as nn
import jax
import jax.numpy as jnp

from nets.eva import SwiGLU
from nets.layers import Conv, LayerScale, ModuleDef, checkpointed, classify, drop_path, gelu
from nets.layers.drop_path import check_drop_path_rate
from nets.vit import LAYER_NORM_EPSILON, Mlp, VisionTransformer, grid_size, patchify

BlockKind = Literal["mixer", "res", "gated"]
SGU_EPSILON = 1e-5  # the spatial gating unit's LayerNorm: PyTorch's default, as timm builds it


def mix_tokens(layer: nn.Module, x: jax.Array) -> jax.Array:
    """`layer` applied along the token axis of `x` `[batch, tokens, width]`: to each channel's
    column of tokens."""
    return jnp.swapaxes(layer(jnp.swapaxes(x, 1, 2)), 1, 2)


def channel_mlp(hidden: int, glu: bool, dtype: Any, name: str) -> Callable:
    """An MLP of `hidden` units, output as wide as its input: GELU (`nets.vit.Mlp`), or with
    `glu` SwiGLU whose packed `fc1` holds the gate second (`nets.eva.SwiGLU`; `hidden` counts
    both halves, as timm's `GluMlp`). Called as `mlp(x)`."""
    if glu:
        return SwiGLU(hidden // 2, dtype=dtype, gate_last=True, name=name)
    # Its dropout off: timm's `proj_drop_rate` is not a field.
    return partial(Mlp(hidden, dtype=dtype, name=name), train=False)


class Affine(nn.Module):
    """ResMLP's "norm": `alpha * x + beta`, per channel, started at the identity; `alpha` and
    `beta` `[1, 1, width]` as timm's."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        alpha = self.param("alpha", nn.initializers.ones, (1, 1, x.shape[-1]))
        beta = self.param("beta", nn.initializers.zeros, (1, 1, x.shape[-1]))
        return beta.astype(x.dtype) + alpha.astype(x.dtype) * x


class MixerBlock(nn.Module):
    """`x + mlp_tokens(norm1(x))` over the tokens, then `x + mlp_channels(norm2(x))`."""

    mlp_ratio: tuple[float, float]
    glu: bool = False
    drop_path_rate: float = 0.0
    epsilon: float = LAYER_NORM_EPSILON
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        norm = partial(nn.LayerNorm, epsilon=self.epsilon, dtype=self.dtype)
        width = x.shape[-1]
        tokens_hidden, channels_hidden = (int(ratio * width) for ratio in self.mlp_ratio)
        mlp_tokens = channel_mlp(tokens_hidden, self.glu, self.dtype, "mlp_tokens")
        x = x + drop_path(
            self, mix_tokens(mlp_tokens, norm(name="norm1")(x)), self.drop_path_rate, train
        )
        mlp = channel_mlp(channels_hidden, self.glu, self.dtype, "mlp_channels")
        return x + drop_path(self, mlp(norm(name="norm2")(x)), self.drop_path_rate, train)


class ResBlock(nn.Module):
    """ResMLP's block: `x + ls1 * linear_tokens(norm1(x))` over the tokens, then `x + ls2 *
    mlp_channels(norm2(x))`, the norms `Affine`."""

    mlp_ratio: tuple[float, float]
    init_values: float = 1e-4
    drop_path_rate: float = 0.0
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        tokens = x.shape[1]
        linear_tokens = nn.Dense(tokens, dtype=self.dtype, name="linear_tokens")
        branch = mix_tokens(linear_tokens, Affine(name="norm1")(x))
        branch = LayerScale(self.init_values, name="ls1")(branch)
        x = x + drop_path(self, branch, self.drop_path_rate, train)
        mlp = channel_mlp(int(self.mlp_ratio[1] * x.shape[-1]), False, self.dtype, "mlp_channels")
        branch = LayerScale(self.init_values, name="ls2")(mlp(Affine(name="norm2")(x)))
        return x + drop_path(self, branch, self.drop_path_rate, train)


class SpatialGatingUnit(nn.Module):
    """`u * proj(norm(v))`, `u` and `v` the halves of the channels and `proj` mixing the tokens:
    started at `proj` ~ N(0, 1e-6) with biases of 1, `u` itself (timm's `init_weights`)."""

    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        u, v = jnp.split(x, 2, axis=-1)
        v = nn.LayerNorm(SGU_EPSILON, dtype=self.dtype, name="norm")(v)
        proj = nn.Dense(
            x.shape[1],
            dtype=self.dtype,
            kernel_init=nn.initializers.normal(1e-6),
            bias_init=nn.initializers.ones,
            name="proj",
        )
        return u * mix_tokens(proj, v)


class GatedMlp(nn.Module):
    """gMLP's channel MLP: `fc2(gate(gelu(fc1(x))))`, the gate halving the `hidden` units."""

    hidden: int
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        width = x.shape[-1]
        x = gelu(nn.Dense(self.hidden, dtype=self.dtype, name="fc1")(x))
        x = SpatialGatingUnit(self.dtype, name="gate")(x)
        return nn.Dense(width, dtype=self.dtype, name="fc2")(x)


class SpatialGatingBlock(nn.Module):
    """gMLP's block: `x + mlp_channels(norm(x))`, the MLP's gate mixing the tokens."""

    mlp_ratio: tuple[float, float]
    drop_path_rate: float = 0.0
    epsilon: float = LAYER_NORM_EPSILON
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        hidden = int(self.mlp_ratio[1] * x.shape[-1])
        mlp = GatedMlp(hidden, self.dtype, name="mlp_channels")
        branch = mlp(nn.LayerNorm(self.epsilon, dtype=self.dtype, name="norm")(x))
        return x + drop_path(self, branch, self.drop_path_rate, train)


class MlpMixer(nn.Module):
    """An all-MLP network of `depth` blocks of kind `block` and width `embed_dim`.

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the pooled features
    `[batch, embed_dim]` (the normalised tokens averaged) when `num_classes` is 0 or None. End
    points: `stem` (the patches' tokens `[batch, patches, embed_dim]`), `block1`..`block{depth}`,
    `norm`, `pre_logits`, `logits`, `predictions`. Parameter names are timm's but for the patch
    embedding: `patch_embed` (timm's `stem.proj`), `blocks_{i}/{norm1, mlp_tokens, norm2,
    mlp_channels}` ('mixer'), `/{norm1, linear_tokens, ls1, norm2, mlp_channels, ls2}` ('res'),
    `/{norm, mlp_channels/{fc1, gate/{norm, proj}, fc2}}` ('gated'), `norm`, `head`.
    """

    # The image size the token mixing is made for (timm's `img_size`): 224 for every published
    # weight.
    default_image_size: int = 224

    patch_size: int = 16
    embed_dim: int = 512
    depth: int = 8  # timm's num_blocks
    block: BlockKind = "mixer"
    # The hidden widths of the token-mixing and channel-mixing MLPs, times `embed_dim` (the
    # 'res' and 'gated' blocks read the second only).
    mlp_ratio: tuple[float, float] = (0.5, 4.0)
    glu: bool = False  # SwiGLU MLPs in the 'mixer' block (gMixer)
    init_values: float = 1e-4  # the 'res' block's LayerScales start
    num_classes: int | None = 1000
    dropout_rate: float = 0.0  # timm's drop_rate, before the head
    # Stochastic depth of every residual branch, the same rate in each block (timm's); training
    # only, with the 'dropout' rng.
    drop_path_rate: float = 0.0
    epsilon: float = LAYER_NORM_EPSILON  # the blocks' and final LayerNorms ('mixer', 'gated')
    dtype: Any = jnp.float32
    conv: ModuleDef = Conv
    remat: bool | str = False  # blocks recomputed in backward (str: nets.layers.remat.POLICIES)

    # ViT's: every block's tokens on the patch grid are timm's `feature_info`
    # (`nets.features`); timm's `group_matcher` gives the patch embedding depth 0, `blocks_i`
    # `i + 1`, the final norm the last block's, the head `depth + 1` (layer-wise decay).
    feature_strides = VisionTransformer.feature_strides
    layer_id = VisionTransformer.layer_id

    # What builds the network for images of other sizes (`NetworkFn` says so when it refuses).
    resize_with: ClassVar[str] = "default_image_size"

    @property
    def min_image_size(self) -> int:
        """The smallest image whose patch grid is the one the token mixing is made for."""
        return grid_size(self.default_image_size, self.patch_size) * self.patch_size

    @property
    def max_image_size(self) -> int:
        """The largest such image (the patch embedding leaves a remainder out)."""
        return self.min_image_size + self.patch_size - 1

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = True):
        if self.block not in get_args(BlockKind):
            raise ValueError(f"block={self.block!r} is not one of {get_args(BlockKind)}")
        check_drop_path_rate(self.drop_path_rate)
        img_size = self.default_image_size
        grid = grid_size(img_size, self.patch_size)
        x = patchify(self, x)
        batch, height, width, dim = x.shape
        if (height, width) != (grid, grid):
            raise ValueError(
                f"images of {height}x{width} patches: the token mixing is made for {grid}x{grid} "
                f"(img_size {img_size}); give {img_size}-pixel images or set default_image_size"
            )
        end_points = {}
        x = end_points["stem"] = x.reshape(batch, height * width, dim)

        kind, fields = {
            "mixer": (MixerBlock, {"glu": self.glu, "epsilon": self.epsilon}),
            "res": (ResBlock, {"init_values": self.init_values}),
            "gated": (SpatialGatingBlock, {"epsilon": self.epsilon}),
        }[self.block]
        block = partial(
            checkpointed(kind, self.remat, takes_train=True),
            self.mlp_ratio,
            drop_path_rate=self.drop_path_rate,
            dtype=self.dtype,
            **fields,
        )
        for i in range(self.depth):
            x = end_points[f"block{i + 1}"] = block(name=f"blocks_{i}")(x, train)

        if self.block == "res":
            norm = Affine(name="norm")
        else:
            norm = nn.LayerNorm(self.epsilon, dtype=self.dtype, name="norm")
        x = end_points["norm"] = norm(x)
        head = partial(classify, train=train, dropout_rate=self.dropout_rate, dtype=self.dtype)
        # timm's classifier starts at zero.
        zeros = nn.initializers.zeros
        return head(
            jnp.mean(x, axis=1), end_points, self.num_classes, name="head", kernel_init=zeros
        )


# timm's configurations: MLP-Mixer's S, B, L at patches of 32 and 16 (Tolstikhin et al.
# Table 1), gMixer's 12 and 24 blocks, ResMLP's 12, 24, 36 and B-24 (Touvron et al. Table 1),
# gMLP's Ti, S, B (Liu et al. Table 1), all at 224 px.
_GMIXER = {"embed_dim": 384, "mlp_ratio": (1.0, 4.0), "glu": True}
_RESMLP = {"block": "res", "embed_dim": 384, "mlp_ratio": (4.0, 4.0)}
_GMLP = {"block": "gated", "depth": 30, "mlp_ratio": (6.0, 6.0)}
mixer_s32_224 = partial(MlpMixer, patch_size=32, depth=8, embed_dim=512)
mixer_s16_224 = partial(MlpMixer, patch_size=16, depth=8, embed_dim=512)
mixer_b32_224 = partial(MlpMixer, patch_size=32, depth=12, embed_dim=768)
mixer_b16_224 = partial(MlpMixer, patch_size=16, depth=12, embed_dim=768)
mixer_l32_224 = partial(MlpMixer, patch_size=32, depth=24, embed_dim=1024)
mixer_l16_224 = partial(MlpMixer, patch_size=16, depth=24, embed_dim=1024)
gmixer_12_224 = partial(MlpMixer, depth=12, **_GMIXER)
gmixer_24_224 = partial(MlpMixer, depth=24, **_GMIXER)
resmlp_12_224 = partial(MlpMixer, depth=12, init_values=1e-4, **_RESMLP)
resmlp_24_224 = partial(MlpMixer, depth=24, init_values=1e-5, **_RESMLP)
resmlp_36_224 = partial(MlpMixer, depth=36, init_values=1e-6, **_RESMLP)
resmlp_big_24_224 = partial(
    MlpMixer, patch_size=8, depth=24, init_values=1e-6, **{**_RESMLP, "embed_dim": 768}
)
gmlp_ti16_224 = partial(MlpMixer, embed_dim=128, **_GMLP)
gmlp_s16_224 = partial(MlpMixer, embed_dim=256, **_GMLP)
gmlp_b16_224 = partial(MlpMixer, embed_dim=512, **_GMLP)

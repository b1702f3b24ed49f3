"""CaiT: a deep ViT with LayerScale and talking-heads attention, classified by class attention.

Touvron et al. 2021, "Going deeper with Image Transformers" (arXiv:2103.17239), as timm's `Cait`
(`timm/models/cait.py`) builds its `cait_*` networks: ViT's patch embedding and learnt position
embeddings (`nets.vit`; for the patches only: there is no class token yet), `depth` pre-norm
blocks of self-attention among the patches (`nets.vit.Block`, each branch scaled by a
`LayerScale` started at `init_values`: 1e-5 for the XXS, XS and S24 networks, 1e-6 for the deeper
ones), then 2 class-attention blocks where a class token alone is updated, attending to itself
and the patches (`ClassAttentionBlock`), a final LayerNorm and the class token classified.

The self-attention is talking-heads attention (Shazeer et al. 2020, arXiv:2003.02436): the
logits `q k^T / sqrt(head_dim)` of the heads are mixed by a learnt `heads x heads` linear map
(`proj_l`) before the softmax, and the attention weights mixed again by another (`proj_w`) after
it. A fused attention kernel takes its softmax per head, so none can compute it: the product is
explicit here, `[batch, queries, keys, heads]`, and under bfloat16 the logits are accumulated,
mixed, normalised and mixed again in float32, the weights cast to bfloat16 only for their
product with the values (PyTorch's autocast takes the softmax in float32 too, the mixing in
bfloat16). The class attention, of a single query, is `nets.layers.DotProductAttention`.

Where this differs from timm's `Cait`:
- At another image size than `img_size` the position embeddings are resampled (bicubic with
  antialiasing, `nets.vit.resample_position_embeddings`) every call, as timm's ViT does with
  `dynamic_img_size=True`; timm's CaiT refuses other sizes.
- `drop_path_rate` is timm's: the same rate in every self-attention block (not rising linearly
  as ViT's), none in the class-attention blocks. `dropout_rate` is timm's `drop_rate` (before
  the head) only; its `pos_drop_rate`, `proj_drop_rate` and `attn_drop_rate`, 0 in its recipes,
  are not fields, nor its `global_pool='avg'` (the token is pooled).
- `regularization_loss` covers the convolution and dense kernels only (the heads' mixing
  included): not LayerNorm, biases, LayerScale, `pos_embed` or `cls_token`, as timm's
  `no_weight_decay()` and its optimizer factory (no decay for 1-D parameters).
"""

from functools import partial
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from nets.layers import Conv, DotProductAttention, LayerScale, ModuleDef, checkpointed, classify
from nets.layers.attention import Implementation
from nets.layers.drop_path import check_drop_path_rate
from nets.vit import LAYER_NORM_EPSILON, Block, Mlp, embed_patches, grid_size, head_shape

_dense = partial(nn.Dense, kernel_init=nn.initializers.truncated_normal(0.02))  # timm's init


class TalkingHeadsAttention(nn.Module):
    """Self-attention whose heads' logits and weights are mixed across heads (`proj_l`,
    `proj_w`), as the module doc says; `qkv` and `proj` as ViT's (timm's `TalkingHeadAttn`).
    Built and called as `nets.vit.Attention`, so `nets.vit.Block` holds it."""

    num_heads: int
    dropout_rate: float = 0.0  # timm's proj_drop_rate, after `proj`
    dtype: Any = jnp.float32
    attention: Implementation = "auto"  # unused: no fused kernel computes talking heads

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        batch, tokens, width = x.shape
        heads, head_dim = head_shape(width, self.num_heads)
        qkv = _dense(3 * width, dtype=self.dtype, name="qkv")(x)
        # timm's order of the 3 * width outputs: (q, k, v), then heads, then head_dim.
        q, k, v = jnp.moveaxis(qkv.reshape(batch, tokens, 3, heads, head_dim), 2, 0)
        # timm scales the queries, not the logits.
        logits = jnp.einsum(
            "bqhd,bkhd->bqkh", q * head_dim**-0.5, k, preferred_element_type=jnp.float32
        )
        mix = partial(_dense, heads, dtype=jnp.float32)  # over the last axis, the heads
        weights = mix(name="proj_w")(nn.softmax(mix(name="proj_l")(logits), axis=2))
        x = jnp.einsum("bqkh,bkhd->bqhd", weights.astype(self.dtype), v)
        x = _dense(width, dtype=self.dtype, name="proj")(x.reshape(batch, tokens, width))
        return nn.Dropout(self.dropout_rate, deterministic=not train)(x)

    @staticmethod
    def macs(x: jax.Array, *args: Any, **kwargs: Any) -> int:
        """The two products, `q k^T` and `weights v` (`tokens**2 * head_dim` a head each); the
        projections and the heads' mixing are dense layers, counted as such."""
        batch, tokens, width = x.shape
        return 2 * batch * tokens * tokens * width


class ClassAttention(nn.Module):
    """The class token's attention to itself and the patches: `x[:, :1]` queries (`q`), all of
    `x` keys (`k`) and values (`v`), then `proj`; `[batch, 1, width]` (timm's `ClassAttn`)."""

    num_heads: int
    dtype: Any = jnp.float32
    attention: Implementation = "auto"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        batch, tokens, width = x.shape
        heads = head_shape(width, self.num_heads)
        dense = partial(_dense, width, dtype=self.dtype)
        q = dense(name="q")(x[:, :1]).reshape(batch, 1, *heads)
        k = dense(name="k")(x).reshape(batch, tokens, *heads)
        v = dense(name="v")(x).reshape(batch, tokens, *heads)
        x = DotProductAttention(self.attention, name="product")(q, k, v)
        return dense(name="proj")(x.reshape(batch, 1, width))


class ClassAttentionBlock(nn.Module):
    """`cls + ls1(attn(norm1([cls, x])))`, then `cls + ls2(mlp(norm2(cls)))`: the class token
    `[batch, 1, width]` updated, the patches `x` left as they are (timm's
    `LayerScaleBlockClassAttn`; no stochastic depth, as timm's)."""

    num_heads: int
    mlp_ratio: float
    init_values: float
    epsilon: float = LAYER_NORM_EPSILON
    dtype: Any = jnp.float32
    attention: Implementation = "auto"

    @nn.compact
    def __call__(self, x: jax.Array, cls: jax.Array) -> jax.Array:
        norm = partial(nn.LayerNorm, epsilon=self.epsilon, dtype=self.dtype)
        attn = ClassAttention(self.num_heads, self.dtype, self.attention, name="attn")
        tokens = norm(name="norm1")(jnp.concatenate([cls, x], axis=1))
        cls = cls + LayerScale(self.init_values, name="ls1")(attn(tokens))
        mlp = Mlp(int(cls.shape[-1] * self.mlp_ratio), dtype=self.dtype, name="mlp")
        return cls + LayerScale(self.init_values, name="ls2")(mlp(norm(name="norm2")(cls), False))


class Cait(nn.Module):
    """CaiT with `depth` self-attention blocks and `depth_token_only` class-attention blocks of
    width `embed_dim`.

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the class token's
    normalised features `[batch, embed_dim]` when `num_classes` is 0 or None. End points: `stem`
    (the patches' tokens, position embeddings added: `[batch, patches, embed_dim]`),
    `block1`..`block{depth}` (the patches' tokens), `class_block1`, `class_block2` (the class
    token `[batch, 1, embed_dim]`), `norm` (the class token and the patches, normalised),
    `pre_logits`, `logits`, `predictions`. Parameter names are timm's but for the layer scales:
    `patch_embed`, `pos_embed` (`[1, (img_size / patch_size)**2, embed_dim]`), `cls_token`,
    `blocks_{i}/{norm1,attn/{qkv,proj_l,proj_w,proj},ls1,norm2,mlp/{fc1,fc2},ls2}`,
    `blocks_token_only_{j}/{norm1,attn/{q,k,v,proj},ls1,norm2,mlp,ls2}` (timm's `gamma_1`,
    `gamma_2` are `ls1/gamma`, `ls2/gamma`), `norm`, `head`.
    """

    default_image_size: int = 224  # the evaluation size of the weights' recipe

    patch_size: int = 16
    embed_dim: int = 192
    depth: int = 24
    num_heads: int = 4
    mlp_ratio: float = 4.0
    depth_token_only: int = 2  # class-attention blocks
    mlp_ratio_token_only: float = 4.0  # their MLPs'
    init_values: float = 1e-5  # LayerScale's start, every block
    # The image size the position embeddings are made for (timm's field); None:
    # `default_image_size`.
    img_size: int | None = None
    num_classes: int | None = 1000
    dropout_rate: float = 0.0  # timm's drop_rate, before the head
    # Stochastic depth of the self-attention blocks' branches, the same rate in each (timm's
    # rule for CaiT); training only, with the 'dropout' rng.
    drop_path_rate: float = 0.0
    epsilon: float = LAYER_NORM_EPSILON  # timm's CaiT, 1e-6
    dtype: Any = jnp.float32
    # The class attention's: 'auto': cuDNN's fused kernel on GPUs in half precision, else XLA's;
    # 'xla' or 'cudnn' force. The talking heads are always computed explicitly.
    attention: Implementation = "auto"
    conv: ModuleDef = Conv
    remat: bool | str = False  # blocks recomputed in backward (str: nets.layers.remat.POLICIES)

    @property
    def min_image_size(self) -> int:
        """One patch."""
        return self.patch_size

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: every self-attention block's tokens, on the patch grid
        (`nets.features`)."""
        return {f"block{i + 1}": self.patch_size for i in range(self.depth)}

    def layer_id(self, path: tuple[str, ...]) -> int:
        """The depth of the parameter under module `path`, for layer-wise learning-rate decay
        (timm's `group_matcher`): 0 for the patch embedding, position embeddings and class
        token, `i + 1` for `blocks_i`, the class-attention blocks level with the last ones
        (`blocks_token_only_j`: `depth - depth_token_only + 1 + j`), `norm` with the last block,
        `depth + 1` for the head."""
        top = path[0] if path else ""  # the class token and position embeddings have no module
        if top in ("", "patch_embed"):
            return 0
        if top.startswith("blocks_token_only_"):
            offset = self.depth - self.depth_token_only + 1
            return int(top.removeprefix("blocks_token_only_")) + offset
        if top.startswith("blocks_"):
            return int(top.removeprefix("blocks_")) + 1
        return self.depth if top == "norm" else self.depth + 1

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = True):
        grid = grid_size(self.img_size or self.default_image_size, self.patch_size)
        check_drop_path_rate(self.drop_path_rate)
        end_points = {}
        init = nn.initializers.truncated_normal(0.02)
        x, _, _ = embed_patches(self, x, grid, 0, init)
        end_points["stem"] = x
        block = partial(
            checkpointed(Block, self.remat, takes_train=True),
            self.num_heads,
            self.mlp_ratio,
            drop_path_rate=self.drop_path_rate,
            epsilon=self.epsilon,
            dtype=self.dtype,
            init_values=self.init_values,
            attn_layer=TalkingHeadsAttention,
        )
        for i in range(self.depth):
            x = end_points[f"block{i + 1}"] = block(name=f"blocks_{i}")(x, train)

        batch, _, dim = x.shape
        cls = self.param("cls_token", init, (1, 1, dim))
        cls = jnp.broadcast_to(cls.astype(self.dtype), (batch, 1, dim))
        class_block = partial(
            checkpointed(ClassAttentionBlock, self.remat),
            self.num_heads,
            self.mlp_ratio_token_only,
            self.init_values,
            self.epsilon,
            self.dtype,
            self.attention,
        )
        for j in range(self.depth_token_only):
            cls = end_points[f"class_block{j + 1}"] = class_block(name=f"blocks_token_only_{j}")(
                x, cls
            )
        x = jnp.concatenate([cls, x], axis=1)
        x = end_points["norm"] = nn.LayerNorm(self.epsilon, dtype=self.dtype, name="norm")(x)
        return classify(
            x[:, 0],
            end_points,
            self.num_classes,
            train=train,
            dropout_rate=self.dropout_rate,
            dtype=self.dtype,
            name="head",
            kernel_init=nn.initializers.truncated_normal(0.02),
        )


# timm's configurations (Touvron et al. 2021, Table 1: XXS, XS, S, M by width; 24, 36 or 48
# self-attention blocks; 16-pixel patches), at the sizes of their distilled ImageNet weights.
cait_xxs24_224 = partial(Cait, embed_dim=192, depth=24, num_heads=4)
cait_xxs24_384 = partial(cait_xxs24_224, default_image_size=384)
cait_xxs36_224 = partial(Cait, embed_dim=192, depth=36, num_heads=4)
cait_xxs36_384 = partial(cait_xxs36_224, default_image_size=384)
cait_xs24_384 = partial(Cait, embed_dim=288, depth=24, num_heads=6, default_image_size=384)
cait_s24_224 = partial(Cait, embed_dim=384, depth=24, num_heads=8)
cait_s24_384 = partial(cait_s24_224, default_image_size=384)
cait_s36_384 = partial(
    Cait, embed_dim=384, depth=36, num_heads=8, init_values=1e-6, default_image_size=384
)
cait_m36_384 = partial(
    Cait, embed_dim=768, depth=36, num_heads=16, init_values=1e-6, default_image_size=384
)
cait_m48_448 = partial(
    Cait, embed_dim=768, depth=48, num_heads=16, init_values=1e-6, default_image_size=448
)

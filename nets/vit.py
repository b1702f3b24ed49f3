"""Vision Transformer (ViT) and DeiT, with DeiT's distillation token, and the later recipes'
ViTs: DeiT III, CLIP's and SigLIP's image towers, DINOv2.

Dosovitskiy et al. 2020, "An Image is Worth 16x16 Words: Transformers for Image Recognition at
Scale" (arXiv:2010.11929): the image cut into `patch_size` patches, each embedded linearly (a
`patch_size`-strided convolution), a class token prepended, learned position embeddings added,
`depth` pre-norm Transformer blocks (LayerNorm, multi-head self-attention, residual; LayerNorm,
MLP with exact GELU, residual), a final LayerNorm, and the class token's features classified.
Touvron et al. 2021, "Training data-efficient image transformers & distillation through
attention" (arXiv:2012.12877): DeiT is the same network trained otherwise; its distilled variants
add a distillation token beside the class token, with a head of its own. The later recipes
change timm's fields of the same network: LayerScale (`init_values`), register tokens,
position embeddings for the patches only (`no_embed_class`), CLIP's `norm_pre` and QuickGELU,
SigLIP's towers without a class token, pooled by attention (`global_pool='map'`) or averaged.

Where this differs from timm's `VisionTransformer` / `VisionTransformerDistilled`:
- Position embeddings are made for `img_size` (timm's field; None: `default_image_size`, the
  registry's 224, 384 or DINOv2's 518, which timm takes from the weights' config). At another
  image size they are resampled to the token grid every call, bicubically with antialiasing
  (`jax.image.resize`, Keys' cubic with a = -0.5, weights renormalised at the borders), as
  timm's `dynamic_img_size=True` does with `resample_abs_pos_embed` (PyTorch's antialiased
  bicubic, PIL's filter: the same cubic and the same border renormalisation: logits agree to
  ~1e-6 relative, full size). The class, distillation and register tokens' embeddings are never
  resampled. timm without `dynamic_img_size` refuses other sizes.
- The distilled networks always return the mean of the two heads as `logits`, in training too:
  timm does so unless `set_distilled_training(True)`, when its training forward returns the
  pair. Here the pair is always in `end_points` (`cls_logits`, `dist_logits`), so distillation
  losses read them without another mode; `pre_logits` is the mean of the two tokens' features,
  timm's `forward_head(pre_logits=True)`.
- `regularization_loss` covers the convolution and dense kernels only: not LayerNorm, biases,
  LayerScale, `pos_embed`, `cls_token`, `dist_token` or `reg_token`, which timm's
  `no_weight_decay()` and its optimizer factory (no decay for 1-D parameters) leave out too;
  nor SigLIP's pooling query `attn_pool/latent`, which timm's factory decays.
- `drop_path_rate` is stochastic depth rising linearly from 0 at the first block to this rate at
  the last, as timm's (DeiT-S trains with 0.1). `dropout_rate` is timm's `drop_rate` (after the
  position embeddings, the attention projection, each MLP layer and before the head).
"""

from functools import partial
from typing import Any, Literal, get_args

import flax.linen as nn
import jax
import jax.numpy as jnp

from nets.layers import (
    Conv,
    DotProductAttention,
    LayerScale,
    ModuleDef,
    checkpointed,
    classify,
    classify_distilled,
    drop_path,
    gelu,
)
from nets.layers.attention import Implementation
from nets.layers.drop_path import check_drop_path_rate, linear_drop_path_rates

LAYER_NORM_EPSILON = 1e-6  # timm's ViT and DeiT, and the original JAX ViT
_dense_init = nn.initializers.truncated_normal(0.02)  # timm's init of every Linear


def head_shape(
    width: int,
    num_heads: int,
    field: str = "embed_dim",
    rule: str = "embed_dim must be a multiple of num_heads",
) -> tuple[int, int]:
    """`(num_heads, head_dim)` of a `width`-wide multi-head attention (ViT's, EVA-02's, BEiT's;
    Swin's stages name their `field` and `rule`); one line when `width` does not split."""
    if width % num_heads:
        raise ValueError(f"{field} {width} does not split into {num_heads} heads: {rule}")
    return num_heads, width // num_heads


class Attention(nn.Module):
    """Multi-head self-attention: one `qkv` projection, the product, the `proj` projection."""

    num_heads: int
    dropout_rate: float = 0.0
    dtype: Any = jnp.float32
    attention: Implementation = "auto"  # DotProductAttention's implementation
    use_bias: bool = True  # of both projections (MetaFormer's have none)
    qkv_bias: bool | None = None  # of `qkv` alone where it differs (FastViT's has none)

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        batch, tokens, width = x.shape
        heads = head_shape(width, self.num_heads)
        dense = partial(nn.Dense, use_bias=self.use_bias, dtype=self.dtype, kernel_init=_dense_init)
        qkv_bias = self.use_bias if self.qkv_bias is None else self.qkv_bias
        qkv = dense(3 * width, use_bias=qkv_bias, name="qkv")(x)
        # timm's order of the 3 * width outputs: (q, k, v), then heads, then head_dim.
        qkv = qkv.reshape(batch, tokens, 3, *heads)
        product = DotProductAttention(self.attention, name="product")
        x = product(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2])
        x = dense(width, name="proj")(x.reshape(batch, tokens, width))
        return nn.Dropout(self.dropout_rate, deterministic=not train)(x)


def quick_gelu(x: jax.Array) -> jax.Array:
    """OpenAI CLIP's approximation of GELU, `x * sigmoid(1.702 x)`: its weights were trained
    with it (timm's `act_layer='quick_gelu'`)."""
    return x * nn.sigmoid(1.702 * x)


# 'gelu_tanh': GELU's tanh approximation (timm's `GELUTanh`), which TensorFlow's MaxViT was
# trained with (`nets.maxvit`); 'silu' MobileViT's Transformer blocks (`nets.mobilevit`).
Activation = Literal["gelu", "quick_gelu", "gelu_tanh", "silu"]
ACTIVATIONS = {
    "gelu": gelu,
    "quick_gelu": quick_gelu,
    "gelu_tanh": partial(nn.gelu, approximate=True),
    "silu": nn.silu,
}


class Mlp(nn.Module):
    """`fc1`, the activation (exact, erf GELU by default), `fc2`, each followed by dropout as
    timm's `Mlp`."""

    hidden: int
    dropout_rate: float = 0.0
    dtype: Any = jnp.float32
    act_layer: Activation = "gelu"
    fc2_scale: float = 1.0  # of `fc2`'s initial kernel (BEiT's `fix_init_weight`)

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        if self.act_layer not in ACTIVATIONS:
            raise ValueError(f"act_layer={self.act_layer!r} is not one of {sorted(ACTIVATIONS)}")
        dense = partial(nn.Dense, dtype=self.dtype, kernel_init=_dense_init)
        dropout = nn.Dropout(self.dropout_rate, deterministic=not train)
        width = x.shape[-1]
        x = dropout(ACTIVATIONS[self.act_layer](dense(self.hidden, name="fc1")(x)))
        fc2_init = nn.initializers.truncated_normal(0.02 * self.fc2_scale)
        return dropout(dense(width, kernel_init=fc2_init, name="fc2")(x))


class Block(nn.Module):
    """Pre-norm Transformer block: `x + attn(norm1(x))`, then `x + mlp(norm2(x))`; with
    `init_values`, each branch is scaled by a `LayerScale` (`ls1`, `ls2`) before it is added."""

    num_heads: int
    mlp_ratio: float = 4.0
    dropout_rate: float = 0.0
    drop_path_rate: float = 0.0
    epsilon: float = LAYER_NORM_EPSILON
    dtype: Any = jnp.float32
    attention: Implementation = "auto"
    init_values: float | None = None
    act_layer: Activation = "gelu"
    # The attention, built as `Attention` is (`num_heads`, `dropout_rate`, `dtype`, `attention`,
    # `name`; called `(x, train)`): CaiT's talking heads (`nets.cait`).
    attn_layer: ModuleDef = Attention

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        norm = partial(nn.LayerNorm, epsilon=self.epsilon, dtype=self.dtype)
        width = x.shape[-1]

        def residual(x: jax.Array, branch: jax.Array, scale: str) -> jax.Array:
            if self.init_values is not None:
                branch = LayerScale(self.init_values, name=scale)(branch)
            return x + drop_path(self, branch, self.drop_path_rate, train)

        attn_layer = partial(self.attn_layer, self.num_heads, self.dropout_rate, self.dtype)
        attn = attn_layer(self.attention, name="attn")
        x = residual(x, attn(norm(name="norm1")(x), train), "ls1")
        hidden = int(width * self.mlp_ratio)
        mlp = Mlp(hidden, self.dropout_rate, self.dtype, self.act_layer, name="mlp")
        return residual(x, mlp(norm(name="norm2")(x), train), "ls2")


class AttentionPool(nn.Module):
    """Multi-head attention pooling ("MAP", SigLIP's; timm's `AttentionPoolLatent`): a learned
    `latent` query attends over the tokens (`q`, `kv`, `proj`), then a residual MLP on its
    LayerNorm (`norm`, `mlp`); returns `[batch, width]`."""

    num_heads: int
    mlp_ratio: float = 4.0
    epsilon: float = LAYER_NORM_EPSILON
    dtype: Any = jnp.float32
    act_layer: Activation = "gelu"
    attention: Implementation = "auto"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        batch, tokens, width = x.shape
        heads = (self.num_heads, width // self.num_heads)
        dense = partial(nn.Dense, dtype=self.dtype, kernel_init=_dense_init)
        init = nn.initializers.truncated_normal(width**-0.5)  # timm's trunc_normal_tf_
        latent = self.param("latent", init, (1, 1, width))
        q = dense(width, name="q")(jnp.broadcast_to(latent.astype(self.dtype), (batch, 1, width)))
        kv = dense(2 * width, name="kv")(x).reshape(batch, tokens, 2, *heads)
        product = DotProductAttention(self.attention, name="product")
        x = product(q.reshape(batch, 1, *heads), kv[:, :, 0], kv[:, :, 1])
        x = dense(width, name="proj")(x.reshape(batch, 1, width))
        norm = nn.LayerNorm(self.epsilon, dtype=self.dtype, name="norm")
        mlp = Mlp(int(width * self.mlp_ratio), 0.0, self.dtype, self.act_layer, name="mlp")
        return (x + mlp(norm(x), train=False))[:, 0]


Pool = Literal["token", "avg", "map"]


def resample_position_embeddings(grid: jax.Array, size: tuple[int, int]) -> jax.Array:
    """Position embeddings `[1, h, w, dim]` resampled to `[1, *size, dim]`: bicubic (Keys,
    a = -0.5) with antialiasing, computed in float32, as timm's `resample_abs_pos_embed`."""
    if grid.shape[1:3] == tuple(size):
        return grid
    shape = (grid.shape[0], *size, grid.shape[-1])
    resized = jax.image.resize(grid.astype(jnp.float32), shape, "bicubic", antialias=True)
    return resized.astype(grid.dtype)


def grid_size(img_size: int, patch_size: int, stride: int | None = None) -> int:
    """The side of the patch grid the position embeddings are made for, of patches every
    `stride` pixels (None: `patch_size`, side by side; PiT's overlap); one line when `img_size`
    holds no patch."""
    if img_size < patch_size:
        raise ValueError(
            f"img_size {img_size} is smaller than one patch of {patch_size} "
            "pixels: img_size must be at least patch_size"
        )
    return (img_size - patch_size) // (stride or patch_size) + 1


def patchify(module: nn.Module, images: jax.Array, use_bias: bool = True) -> jax.Array:
    """The patch embedding of a ViT-like `module` (its `patch_size`, `embed_dim`, `conv` and
    `dtype`), inside its compact call: `patch_embed`, a `patch_size` convolution, `[batch, h, w,
    embed_dim]` (BEiT's networks, which have no position embeddings, stop here)."""
    patch = (module.patch_size, module.patch_size)
    return module.conv(
        module.embed_dim,
        patch,
        strides=patch,
        padding="VALID",
        use_bias=use_bias,
        dtype=module.dtype,
        name="patch_embed",
    )(jnp.asarray(images, module.dtype))


def embed_patches(
    module: nn.Module,
    images: jax.Array,
    grid: int,
    embedded: int,
    init: nn.initializers.Initializer,
    use_bias: bool = True,
) -> tuple[jax.Array, jax.Array, tuple[int, int]]:
    """The patch embedding (`patchify`) and learnt position embeddings of a ViT-like `module`:
    `pos_embed` `[1, embedded + grid**2, embed_dim]` (the first `embedded` tokens', then the
    grid's, resampled to the images' own grid). Returns the patches' tokens with their position
    embeddings added `[batch, h * w, embed_dim]`, `pos_embed`, and `(h, w)`."""
    x = patchify(module, images, use_bias)
    batch, height, width, dim = x.shape
    pos_embed = module.param("pos_embed", init, (1, embedded + grid * grid, dim))
    grid_embed = pos_embed[:, embedded:].reshape(1, grid, grid, dim)
    grid_embed = resample_position_embeddings(grid_embed, (height, width)).reshape(1, -1, dim)
    x = x.reshape(batch, height * width, dim) + grid_embed.astype(module.dtype)
    return x, pos_embed, (height, width)


class VisionTransformer(nn.Module):
    """ViT / DeiT with `depth` blocks of width `embed_dim`; `distilled` adds DeiT's second token.

    Returns `(logits, end_points)`: logits `[batch, num_classes]` (distilled: the mean of the
    class and distillation heads), or the pooled features `[batch, embed_dim]` (the class
    token's by default; distilled: the mean of the two tokens') when `num_classes` is 0 or None.
    End points: `stem` (the tokens entering the first block, position embeddings added:
    `[batch, prefix + patches, embed_dim]`, the prefix being the class, distillation and register
    tokens), `block1`..`block{depth}` (the tokens after each block), `norm` (after the final
    LayerNorm, unless it follows the pooling: `fc_norm`), `pre_logits`, `logits`, `predictions`,
    and for distilled networks with a head `cls_logits` and `dist_logits` (each head's logits).
    Parameter names are timm's: `patch_embed`, `cls_token`, `dist_token`, `pos_embed` (`[1,
    prefix + (img_size / patch_size)**2, embed_dim]`, without the prefix for `no_embed_class`),
    `blocks_{i}/{norm1,attn/qkv,attn/proj,norm2,mlp/fc1,mlp/fc2}`, `norm`, `head`, `head_dist`,
    and `reg_token`, `norm_pre`, `blocks_{i}/ls1`, `ls2`, `attn_pool`, `fc_norm` where the fields
    make them.
    """

    default_image_size: int = 224  # the evaluation size of the weights' recipe

    patch_size: int = 16
    embed_dim: int = 768
    depth: int = 12
    num_heads: int = 12
    mlp_ratio: float = 4.0
    distilled: bool = False
    # The image size the position embeddings are made for (timm's field); None:
    # `default_image_size`.
    img_size: int | None = None
    num_classes: int | None = 1000
    dropout_rate: float = 0.0  # timm's drop_rate
    # Stochastic depth of the residual branches, rising linearly from 0 at the first block to
    # this rate at the last (timm's rule); training only, with the 'dropout' rng.
    drop_path_rate: float = 0.0
    epsilon: float = LAYER_NORM_EPSILON
    dtype: Any = jnp.float32
    # 'auto': cuDNN's fused kernel on GPUs in half precision, else XLA's; 'xla' or 'cudnn' force.
    attention: Implementation = "auto"
    conv: ModuleDef = Conv
    # timm's fields of the later recipes:
    reg_tokens: int = 0  # register tokens after the class token (Darcet et al. 2023)
    no_embed_class: bool = False  # position embeddings for the patches only, not the tokens
    init_values: float | None = None  # LayerScale on every residual branch, started here
    pre_norm: bool = False  # CLIP's: a LayerNorm `norm_pre` before the blocks, no patch bias
    act_layer: Activation = "gelu"  # the MLP's; OpenAI CLIP's weights need 'quick_gelu'
    class_token: bool = True  # SigLIP's towers have none
    # The features the head classifies: 'token' (the class token's), 'avg' (the mean of the
    # patches' tokens), 'map' (SigLIP's attention pooling, `AttentionPool` named `attn_pool`).
    global_pool: Pool = "token"
    # The final LayerNorm after the pooling (`fc_norm`) instead of before it (`norm`); None:
    # timm's rule, after it for 'avg' pooling only.
    fc_norm: bool | None = None
    remat: bool | str = False  # blocks recomputed in backward (str: nets.layers.remat.POLICIES)

    @property
    def min_image_size(self) -> int:
        """One patch."""
        return self.patch_size

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: every block's tokens, on the patch grid (`nets.features`)."""
        return {f"block{i + 1}": self.patch_size for i in range(self.depth)}

    def layer_id(self, path: tuple[str, ...]) -> int:
        """The depth of the parameter under module `path`, for layer-wise learning-rate decay
        (timm's `group_matcher`): 0 for the patch embedding, tokens, position embeddings and
        `norm_pre`, `i + 1` for `blocks_i`, the final norm with the last block, `depth + 1` for
        the heads (and the pooling's `attn_pool`, `fc_norm`)."""
        top = path[0] if path else ""  # the tokens and position embeddings have no module
        if top in ("", "patch_embed", "norm_pre"):
            return 0
        if top.startswith("blocks_"):
            return int(top.removeprefix("blocks_")) + 1
        return self.depth if top == "norm" else self.depth + 1

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = True):
        grid = grid_size(self.img_size or self.default_image_size, self.patch_size)
        if self.distilled and self.reg_tokens:
            raise ValueError(
                f"distilled=True with reg_tokens={self.reg_tokens}: timm has no such network, "
                "so the tokens' order is not defined; use one of them"
            )
        if self.global_pool not in get_args(Pool):
            raise ValueError(
                f"global_pool={self.global_pool!r} is not one of "
                + ", ".join(map(repr, get_args(Pool)))
            )
        if (self.global_pool == "token" or self.distilled) and not self.class_token:
            raise ValueError(
                "class_token=False leaves no class token to pool: set global_pool='avg' or "
                "'map' (and distilled=False)"
            )
        if self.distilled and (self.global_pool != "token" or self.fc_norm):
            raise ValueError(
                f"distilled=True with global_pool={self.global_pool!r}, fc_norm={self.fc_norm}: "
                "DeiT's two heads classify the normalised class and distillation tokens; use "
                "global_pool='token' and fc_norm None or False"
            )
        check_drop_path_rate(self.drop_path_rate)
        end_points = {}
        prefix = self.class_token + self.distilled + self.reg_tokens  # before the patches
        embedded = 0 if self.no_embed_class else prefix  # those with a position embedding
        init = nn.initializers.normal(0.02)
        x, pos_embed, _ = embed_patches(self, x, grid, embedded, init, use_bias=not self.pre_norm)
        batch, _, dim = x.shape
        tokens = []
        if self.class_token:
            tokens.append(self.param("cls_token", nn.initializers.normal(1e-6), (1, 1, dim)))
        if self.distilled:
            tokens.append(self.param("dist_token", nn.initializers.normal(0.02), (1, 1, dim)))
        if self.reg_tokens:
            init = nn.initializers.normal(1e-6)
            tokens.append(self.param("reg_token", init, (1, self.reg_tokens, dim)))
        if tokens:
            tokens = jnp.concatenate(tokens, axis=1)
            if embedded:
                tokens = tokens + pos_embed[:, :embedded]
            tokens = jnp.broadcast_to(tokens.astype(self.dtype), (batch, prefix, dim))
            x = jnp.concatenate([tokens, x], axis=1)
        x = nn.Dropout(self.dropout_rate, deterministic=not train)(x)
        if self.pre_norm:
            x = nn.LayerNorm(self.epsilon, dtype=self.dtype, name="norm_pre")(x)
        end_points["stem"] = x

        block = partial(
            checkpointed(Block, self.remat, takes_train=True),
            self.num_heads,
            self.mlp_ratio,
            self.dropout_rate,
            epsilon=self.epsilon,
            dtype=self.dtype,
            attention=self.attention,
            init_values=self.init_values,
            act_layer=self.act_layer,
        )
        rates = linear_drop_path_rates(self.drop_path_rate, self.depth)
        for i in range(self.depth):
            x = end_points[f"block{i + 1}"] = block(drop_path_rate=rates[i], name=f"blocks_{i}")(
                x, train
            )
        norm = partial(nn.LayerNorm, self.epsilon, dtype=self.dtype)
        fc_norm = self.global_pool == "avg" if self.fc_norm is None else self.fc_norm
        if not fc_norm:
            x = end_points["norm"] = norm(name="norm")(x)

        head = partial(classify, train=train, dropout_rate=self.dropout_rate, dtype=self.dtype)
        if not self.distilled:
            if self.global_pool == "token":
                features = x[:, 0]
            elif self.global_pool == "avg":
                features = jnp.mean(x[:, prefix:], axis=1)
            else:
                features = AttentionPool(
                    self.num_heads,
                    self.mlp_ratio,
                    self.epsilon,
                    self.dtype,
                    self.act_layer,
                    self.attention,
                    name="attn_pool",
                )(x[:, prefix:])
            if fc_norm:
                features = norm(name="fc_norm")(features)
            return head(features, end_points, self.num_classes, name="head")
        mean = (x[:, 0] + x[:, 1]) / 2
        return classify_distilled(
            mean, x[:, 0], x[:, 1], end_points, self.num_classes, **head.keywords
        )


# timm's configurations (Dosovitskiy et al. Table 1: Base, Large; Touvron et al. Table 1: Ti, S).
vit_tiny_patch16_224 = partial(VisionTransformer, embed_dim=192, depth=12, num_heads=3)
vit_small_patch16_224 = partial(VisionTransformer, embed_dim=384, depth=12, num_heads=6)
vit_base_patch16_224 = partial(VisionTransformer, embed_dim=768, depth=12, num_heads=12)
vit_base_patch32_224 = partial(
    VisionTransformer, patch_size=32, embed_dim=768, depth=12, num_heads=12
)
vit_large_patch16_224 = partial(VisionTransformer, embed_dim=1024, depth=24, num_heads=16)
# DeiT's networks are ViT's (the registry maps deit_{tiny,small,base}_patch16_224 to the three
# above); the distilled ones add the distillation token and head.
deit_tiny_distilled_patch16_224 = partial(vit_tiny_patch16_224, distilled=True)
deit_small_distilled_patch16_224 = partial(vit_small_patch16_224, distilled=True)
deit_base_distilled_patch16_224 = partial(vit_base_patch16_224, distilled=True)

# The same networks at 384 px (timm's `augreg_in21k_ft_in1k` fine-tunes): position embeddings for
# a 24x24 grid (12x12 for /32).
vit_tiny_patch16_384 = partial(vit_tiny_patch16_224, default_image_size=384)
vit_small_patch16_384 = partial(vit_small_patch16_224, default_image_size=384)
vit_base_patch16_384 = partial(vit_base_patch16_224, default_image_size=384)
vit_base_patch32_384 = partial(vit_base_patch32_224, default_image_size=384)
vit_large_patch16_384 = partial(vit_large_patch16_224, default_image_size=384)

# DeiT III (Touvron et al. 2022, "DeiT III: Revenge of the ViT"): ViT with LayerScale (1e-6) and
# position embeddings for the patches only.
_DEIT3 = {"no_embed_class": True, "init_values": 1e-6}
deit3_small_patch16_224 = partial(vit_small_patch16_224, **_DEIT3)
deit3_base_patch16_224 = partial(vit_base_patch16_224, **_DEIT3)
deit3_large_patch16_224 = partial(vit_large_patch16_224, **_DEIT3)
deit3_small_patch16_384 = partial(vit_small_patch16_384, **_DEIT3)
deit3_base_patch16_384 = partial(vit_base_patch16_384, **_DEIT3)
deit3_large_patch16_384 = partial(vit_large_patch16_384, **_DEIT3)

# CLIP's image towers (Radford et al. 2021; OpenCLIP's, and their ImageNet fine-tunes): a
# LayerNorm before the blocks, a patch embedding without bias, LayerNorm epsilon 1e-5. OpenAI's
# own weights were trained with QuickGELU (the `_quickgelu_` networks).
_CLIP = {"pre_norm": True, "epsilon": 1e-5}
vit_base_patch32_clip_224 = partial(vit_base_patch32_224, **_CLIP)
vit_base_patch16_clip_224 = partial(vit_base_patch16_224, **_CLIP)
vit_large_patch14_clip_224 = partial(
    VisionTransformer, patch_size=14, embed_dim=1024, depth=24, num_heads=16, **_CLIP
)
vit_base_patch32_clip_quickgelu_224 = partial(vit_base_patch32_clip_224, act_layer="quick_gelu")
vit_base_patch16_clip_quickgelu_224 = partial(vit_base_patch16_clip_224, act_layer="quick_gelu")
vit_large_patch14_clip_quickgelu_224 = partial(vit_large_patch14_clip_224, act_layer="quick_gelu")

# DINOv2 (Oquab et al. 2023), self-supervised at 518 px (a 37x37 grid of 14-pixel patches), with
# LayerScale (1e-5); the `reg4` networks add 4 register tokens (Darcet et al. 2023, "Vision
# Transformers Need Registers"), without position embeddings for the tokens.
_DINOV2 = {"patch_size": 14, "init_values": 1e-5, "default_image_size": 518}
_REG4 = {"reg_tokens": 4, "no_embed_class": True}
vit_small_patch14_dinov2 = partial(vit_small_patch16_224, **_DINOV2)
vit_base_patch14_dinov2 = partial(vit_base_patch16_224, **_DINOV2)
vit_large_patch14_dinov2 = partial(vit_large_patch16_224, **_DINOV2)
vit_small_patch14_reg4_dinov2 = partial(vit_small_patch14_dinov2, **_REG4)
vit_base_patch14_reg4_dinov2 = partial(vit_base_patch14_dinov2, **_REG4)
vit_large_patch14_reg4_dinov2 = partial(vit_large_patch14_dinov2, **_REG4)

# SigLIP's image towers (Zhai et al. 2023; SigLIP 2, Tschannen et al. 2025): no class token, the
# tokens pooled by attention (`global_pool='map'`); the `_gap_` networks, timm's for the same
# weights without the pooling head (PaliGemma's tower), average the tokens, `norm` before.
_SIGLIP = {"class_token": False, "global_pool": "map"}
_SIGLIP_GAP = {"class_token": False, "global_pool": "avg", "fc_norm": False}
_SO400M = {"patch_size": 14, "embed_dim": 1152, "depth": 27, "num_heads": 16, "mlp_ratio": 3.7362}
vit_base_patch16_siglip_224 = partial(vit_base_patch16_224, **_SIGLIP)
vit_base_patch16_siglip_256 = partial(vit_base_patch16_siglip_224, default_image_size=256)
vit_base_patch16_siglip_384 = partial(vit_base_patch16_siglip_224, default_image_size=384)
vit_base_patch16_siglip_512 = partial(vit_base_patch16_siglip_224, default_image_size=512)
vit_large_patch16_siglip_256 = partial(vit_large_patch16_224, default_image_size=256, **_SIGLIP)
vit_large_patch16_siglip_384 = partial(vit_large_patch16_224, default_image_size=384, **_SIGLIP)
vit_so400m_patch14_siglip_224 = partial(VisionTransformer, **_SO400M, **_SIGLIP)
vit_so400m_patch14_siglip_384 = partial(vit_so400m_patch14_siglip_224, default_image_size=384)
vit_base_patch16_siglip_gap_224 = partial(vit_base_patch16_224, **_SIGLIP_GAP)
vit_so400m_patch14_siglip_gap_224 = partial(VisionTransformer, **_SO400M, **_SIGLIP_GAP)
vit_so400m_patch14_siglip_gap_384 = partial(
    vit_so400m_patch14_siglip_gap_224, default_image_size=384
)

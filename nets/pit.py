"""PiT: Pooling-based Vision Transformer, a ViT whose token grid shrinks stage by stage.

Heo et al. 2021, "Rethinking Spatial Dimensions of Vision Transformers" (arXiv:2103.16302), as
timm's `PoolingVisionTransformer` (`timm/models/pit.py`) builds its `pit_*` networks: an
overlapping patch embedding (a `patch_size` convolution of stride `stride`, no padding: 16/8 px,
B's 14/7, a 27x27 or 31x31 grid at 224 px), learnt position embeddings on that map, a class
token (two with `distilled`: class and distillation), then three stages of ViT's pre-norm blocks
(`nets.vit.Block`, LayerNorm epsilon 1e-6) over the class tokens and the map's tokens. Stages 2
and 3 open with a pooling layer: a 3x3/2 depthwise convolution (padding 1) doubling the map's
channels (each input channel gives two outputs), and a dense layer taking the class tokens to
the same width. A width is `base_dims[i] * heads[i]`: the heads double each stage, 64 or 48
or 32 channels each. The class tokens alone are normalised (`norm`) and classified.

Where this differs from timm's `PoolingVisionTransformer`:
- At another image size than `img_size` the position embeddings are resampled to the
  embedding's map every call (bicubic with antialiasing, `nets.vit.resample_position_embeddings`,
  as ViT's); timm adds them as they are and refuses other sizes (`fixed_input_size`).
- The distilled networks return the mean of the two heads as `logits`, in training too: timm's
  behaviour unless `set_distilled_training(True)`, when its training forward returns the pair.
  Here the pair is always in `end_points` (`cls_logits`, `dist_logits`: DeiT's convention,
  `nets.vit`), so distillation losses read them without another mode; `pre_logits` is the mean
  of the two tokens' features, timm's `forward_head(pre_logits=True)`.
- `dropout_rate` is timm's `drop_rate` (before the heads) only; its `pos_drop_rate`,
  `proj_drop_rate` and `attn_drop_rate`, 0 in its networks, are not fields. `drop_path_rate`
  is timm's rule: rising linearly from 0 at the first block to this rate at the last, over all
  stages.
- Initialisation: dense kernels, position embeddings and class tokens from a normal of standard
  deviation 0.02 cut at two deviations (ViT's; timm draws the last two so, cut at +-2, and
  leaves its Linear and convolution layers at PyTorch's defaults).
- `regularization_loss` covers the convolution and dense kernels only: not LayerNorm, biases,
  `pos_embed` or `cls_token` (timm's `no_weight_decay()` and its optimizer factory agree).
- timm has no `group_matcher` for PiT, so the networks have no `layer_id` (layer-wise decay).

End points: `stem` (the embedded map with its position embeddings, `[batch, h, w, C0]`),
`stage1`..`stage3` (the stages' maps, NHWC, at strides `stride`, 2 `stride`, 4 `stride`: timm's
`feature_info`, `transformers.{i}`), `norm` (the normalised class tokens `[batch, tokens, C]`),
`pre_logits`, `logits`, `predictions`, and for the distilled networks `cls_logits` and
`dist_logits`. Parameter names are timm's: `patch_embed` (its `patch_embed.conv`), `pos_embed`
(`[1, h, w, C0]`, timm's `[1, C0, h, w]` transposed), `cls_token` (`[1, tokens, C0]`),
`transformers_{i}/pool/{conv,fc}`, `transformers_{i}/blocks_{j}/...` (ViT's), `norm`, `head`,
`head_dist`.
"""

from collections.abc import Sequence
from functools import partial
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from nets.layers import Conv, ModuleDef, checkpointed, classify, classify_distilled
from nets.layers.attention import Implementation
from nets.layers.drop_path import check_drop_path_rate, linear_drop_path_rates
from nets.vit import LAYER_NORM_EPSILON, Block, grid_size, resample_position_embeddings

_dense_init = nn.initializers.truncated_normal(0.02)


class Pooling(nn.Module):
    """timm's `Pooling`: the map `[batch, h, w, c]` through a 3x3/2 depthwise convolution with
    `features / c` outputs a channel (`conv`), the class tokens `[batch, tokens, c]` through a
    dense layer (`fc`), both to `features` channels."""

    features: int
    conv: ModuleDef = Conv
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array, tokens: jax.Array) -> tuple[jax.Array, jax.Array]:
        x = self.conv(
            self.features,
            (3, 3),
            strides=2,
            padding="SYMMETRIC",
            feature_group_count=x.shape[-1],
            dtype=self.dtype,
            name="conv",
        )(x)
        fc = nn.Dense(self.features, dtype=self.dtype, kernel_init=_dense_init, name="fc")
        return x, fc(tokens)


class Stage(nn.Module):
    """timm's `Transformer`: the pooling (`pool`, with `features`), then ViT's blocks over the
    class tokens and the map's tokens, the map returned as a map `[batch, h, w, c]`."""

    num_heads: int
    drop_path_rates: Sequence[float]  # one a block
    mlp_ratio: float = 4.0
    features: int | None = None  # the pooling's width; None: no pooling (the first stage)
    dtype: Any = jnp.float32
    attention: Implementation = "auto"
    conv: ModuleDef = Conv
    remat: bool | str = False

    @nn.compact
    def __call__(self, x: jax.Array, tokens: jax.Array, train: bool) -> tuple[jax.Array, jax.Array]:
        if self.features is not None:
            x, tokens = Pooling(self.features, self.conv, self.dtype, name="pool")(x, tokens)
        batch, height, width, dim = x.shape
        prefix = tokens.shape[1]
        x = jnp.concatenate([tokens, x.reshape(batch, height * width, dim)], axis=1)
        block = partial(
            checkpointed(Block, self.remat, takes_train=True),
            self.num_heads,
            self.mlp_ratio,
            epsilon=LAYER_NORM_EPSILON,
            dtype=self.dtype,
            attention=self.attention,
        )
        for j, rate in enumerate(self.drop_path_rates):
            x = block(drop_path_rate=rate, name=f"blocks_{j}")(x, train)
        return x[:, prefix:].reshape(batch, height, width, dim), x[:, :prefix]


class PoolingVisionTransformer(nn.Module):
    """PiT with stages of `depths` blocks, `heads[i]` heads of `base_dims[i]` channels each.

    Returns `(logits, end_points)`: logits `[batch, num_classes]` (distilled: the mean of the
    class and distillation heads), or the pooled features (the class token's normalised
    features; distilled: the mean of the two tokens') when `num_classes` is 0 or None. The end
    points and parameter names are the module doc's.
    """

    default_image_size: int = 224  # the evaluation size of the weights' recipe

    patch_size: int = 16
    stride: int = 8  # of the patch embedding
    base_dims: Sequence[int] = (48, 48, 48)  # channels a head, each stage
    depths: Sequence[int] = (2, 6, 4)
    heads: Sequence[int] = (2, 4, 8)
    mlp_ratio: float = 4.0
    distilled: bool = False
    # The image size the position embeddings are made for (timm's field); None:
    # `default_image_size`.
    img_size: int | None = None
    num_classes: int | None = 1000
    dropout_rate: float = 0.0  # timm's drop_rate, before the heads
    # Stochastic depth of the residual branches, rising linearly from 0 at the first block to
    # this rate at the last (timm's rule); training only, with the 'dropout' rng.
    drop_path_rate: float = 0.0
    dtype: Any = jnp.float32
    # 'auto': cuDNN's fused kernel on GPUs in half precision, else XLA's; 'xla' or 'cudnn' force.
    attention: Implementation = "auto"
    conv: ModuleDef = Conv
    remat: bool | str = False  # blocks recomputed in backward (str: nets.layers.remat.POLICIES)

    @property
    def min_image_size(self) -> int:
        """One patch: the poolings (3x3/2, a pixel of padding) keep a 1x1 map."""
        return self.patch_size

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: each stage's map (`nets.features`)."""
        return {f"stage{i + 1}": self.stride * 2**i for i in range(len(self.depths))}

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = True):
        if not len(self.depths) == len(self.heads) == len(self.base_dims):
            raise ValueError(
                f"depths {self.depths}, heads {self.heads} and base_dims {self.base_dims} "
                "must have an entry for each stage"
            )
        check_drop_path_rate(self.drop_path_rate)
        img_size = self.img_size or self.default_image_size
        grid = grid_size(img_size, self.patch_size, self.stride)
        end_points = {}
        widths = [dim * heads for dim, heads in zip(self.base_dims, self.heads, strict=True)]
        x = self.conv(
            widths[0],
            (self.patch_size, self.patch_size),
            strides=self.stride,
            padding="VALID",
            dtype=self.dtype,
            name="patch_embed",
        )(jnp.asarray(x, self.dtype))
        batch = x.shape[0]
        pos_embed = self.param("pos_embed", _dense_init, (1, grid, grid, widths[0]))
        pos_embed = resample_position_embeddings(pos_embed, x.shape[1:3])
        x = end_points["stem"] = x + pos_embed.astype(self.dtype)
        tokens = self.param("cls_token", _dense_init, (1, 1 + self.distilled, widths[0]))
        tokens = jnp.broadcast_to(tokens.astype(self.dtype), (batch, *tokens.shape[1:]))

        rates = linear_drop_path_rates(self.drop_path_rate, sum(self.depths))
        for i, depth in enumerate(self.depths):
            x, tokens = Stage(
                self.heads[i],
                tuple(rates[sum(self.depths[:i]) :][:depth]),
                self.mlp_ratio,
                widths[i] if i else None,
                self.dtype,
                self.attention,
                self.conv,
                self.remat,
                name=f"transformers_{i}",
            )(x, tokens, train)
            end_points[f"stage{i + 1}"] = x
        norm = nn.LayerNorm(LAYER_NORM_EPSILON, dtype=self.dtype, name="norm")
        tokens = end_points["norm"] = norm(tokens)

        head = partial(classify, train=train, dropout_rate=self.dropout_rate, dtype=self.dtype)
        if not self.distilled:
            return head(tokens[:, 0], end_points, self.num_classes, name="head")
        mean = (tokens[:, 0] + tokens[:, 1]) / 2
        return classify_distilled(
            mean, tokens[:, 0], tokens[:, 1], end_points, self.num_classes, **head.keywords
        )


# timm's configurations (Heo et al. Table 1: Ti, XS, S, B), at 224 px.
pit_ti_224 = partial(PoolingVisionTransformer, base_dims=(32, 32, 32), heads=(2, 4, 8))
pit_xs_224 = partial(PoolingVisionTransformer, base_dims=(48, 48, 48), heads=(2, 4, 8))
pit_s_224 = partial(PoolingVisionTransformer, base_dims=(48, 48, 48), heads=(3, 6, 12))
pit_b_224 = partial(
    PoolingVisionTransformer,
    patch_size=14,
    stride=7,
    base_dims=(64, 64, 64),
    depths=(3, 6, 4),
    heads=(4, 8, 16),
)
# The distilled ones (DeiT's recipe, a RegNetY-16GF teacher): a distillation token and head.
pit_ti_distilled_224 = partial(pit_ti_224, distilled=True)
pit_xs_distilled_224 = partial(pit_xs_224, distilled=True)
pit_s_distilled_224 = partial(pit_s_224, distilled=True)
pit_b_distilled_224 = partial(pit_b_224, distilled=True)

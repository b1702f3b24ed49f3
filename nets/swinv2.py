"""Swin Transformer V2: Liu et al. 2022, "Swin Transformer V2: Scaling Up Capacity and Resolution"
(arXiv:2111.09883), as timm 1.0 builds it (`timm.models.swin_transformer_v2`, not `swinv2_cr`).

Swin (nets/swin.py: the patch embedding, windows, shifts, masks, padding and stages are its) with
the paper's three changes for training large networks stably and across window sizes:
- residual post-normalisation: `x + norm1(attn(x))`, `x + norm2(mlp(x))`, the block's LayerNorms
  on the branches' outputs (initialised to zero, as timm's `_init_respostnorm`);
- scaled cosine attention: the cosine similarity of queries and keys times a learnt per-head
  `logit_scale`, exponentiated after clamping at log(100) (timm's and the paper's);
- a continuous position bias: `cpb_mlp` (2 -> 512, ReLU, 512 -> heads without bias) over the
  log-spaced relative coordinates of a window, `sign(d) log2(1 + 8|d| / (w' - 1)) / log2(8)`
  with `w'` the window (or `pretrained_window_sizes[i]`, the window the weights were trained
  with, for the fine-tunes to larger windows), squashed by `16 sigmoid`.
The query and value projections have a learnt bias, the key's none (`q_bias`, `v_bias`, EVA's and
BEiT's `nets.eva.biased_qkv`); patch merging reduces 4C -> 2C before its LayerNorm (V1 the other
way round). No block-level pre-norm; the final LayerNorm, average pooling and the classifier are
V1's. Parameter counts are timm's: 28,347,154 for swinv2_tiny_window8_256 at 1000 classes.

Where this differs from timm's `SwinTransformerV2` (besides what nets/swin.py says of V1: windows
set for `img_size`, timm's `dynamic_img_size=True` padding at other sizes):
- Weight decay (`NetworkFn.regularization_loss`) covers every dense kernel, `cpb_mlp`'s too, which
  timm's `no_weight_decay()` leaves out with `logit_scale`.
- `relative_coords_table` and `relative_position_index` are numpy constants of the window, never
  read from files.
- MACs (`nets_summary`) leave out the position bias MLP, which runs on constants once per call
  whatever the batch (`ImageFreeDense`): torch's `FlopCounterMode` less 18,662,400 for T window 8.

End points as Swin's: `stem`, `stage1`..`stage4` (NHWC), `pre_logits`, `logits`, `predictions`.
"""

import math
from collections.abc import Sequence
from functools import partial
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from nets.eva import biased_qkv
from nets.layers import DotProductAttention, ModuleDef, drop_path
from nets.layers.attention import Implementation
from nets.swin import (
    _INIT,
    LAYER_NORM_EPSILON,
    SwinBlock,
    SwinTransformer,
    Window,
    masked,
    neighbours,
    relative_position_index,
    shifted_windows,
    stage_heads,
)
from nets.vit import Mlp

MAX_LOGIT_SCALE = math.log(100.0)  # timm's clamp, log(1 / 0.01)
CPB_HIDDEN = 512  # the continuous position bias MLP's width
CPB_RANGE = 8.0  # relative coordinates normalised to [-8, 8] before the log


def log_spaced_coordinates(window: Window, pretrained: Window = (0, 0)) -> np.ndarray:
    """`[2 wh - 1, 2 ww - 1, 2]` float32: the relative offsets `(dh, dw)` a window holds, divided
    by `pretrained - 1` (or `window - 1` where `pretrained` is 0; at least 1), times 8, then
    `sign(x) log2(1 + |x|) / log2(8)`: timm's `relative_coords_table`."""
    axes = [np.arange(1 - w, w, dtype=np.float32) for w in window]
    coords = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1)
    scale = pretrained if pretrained[0] > 0 else window
    coords = coords / np.array([max(s - 1, 1) for s in scale], np.float32) * CPB_RANGE
    return (np.sign(coords) * np.log2(np.abs(coords) + 1.0) / math.log2(CPB_RANGE)).astype(
        np.float32
    )


class ImageFreeDense(nn.Dense):
    """A dense layer over constants (the window's coordinates): its work is the weights' alone,
    once per network call whatever the batch, so it is no per-image MAC (`nets_summary`)."""

    @staticmethod
    def macs(*args, **kwargs) -> int:
        del args, kwargs
        return 0


def unit(t: jax.Array) -> jax.Array:
    """`t / max(|t|, 1e-12)` over the last axis, in float32: torch's `F.normalize`."""
    t = t.astype(jnp.float32)
    return t / jnp.maximum(jnp.linalg.norm(t, axis=-1, keepdims=True), 1e-12)


class WindowAttentionV2(nn.Module):
    """Scaled cosine attention within each window, with the continuous position bias: `qkv` with
    `q_bias` and `v_bias`, `logit_scale`, `cpb_mlp_0` / `cpb_mlp_2`, the product
    (`DotProductAttention`, bias and mask added to its float32 logits), `proj`."""

    num_heads: int
    window: Window
    pretrained_window: Window = (0, 0)
    dtype: Any = jnp.float32
    attention: Implementation = "auto"

    @nn.compact
    def __call__(self, x: jax.Array, mask: np.ndarray | None) -> jax.Array:
        """`x`: `[b * windows, N, C]`; `mask`: `[windows, N, N]` or None."""
        batch, tokens, width = x.shape
        heads, head_dim = stage_heads(width, self.num_heads)
        dense = partial(nn.Dense, dtype=self.dtype, kernel_init=_INIT)
        q, k, v = biased_qkv(self, x, (heads, head_dim), dense)

        logit_scale = self.param(
            "logit_scale", nn.initializers.constant(math.log(10.0)), (heads, 1, 1)
        )
        # Cosine similarity times exp(min(logit_scale, log 100)), the scale carried by the
        # normalised queries (times sqrt(head_dim), which the product divides by again).
        scale = jnp.exp(jnp.minimum(logit_scale[:, 0, 0], MAX_LOGIT_SCALE)) * math.sqrt(q.shape[-1])
        q = (unit(q) * scale[:, None]).astype(self.dtype)

        coords = jnp.asarray(log_spaced_coordinates(self.window, self.pretrained_window))
        table = nn.relu(ImageFreeDense(CPB_HIDDEN, kernel_init=_INIT, name="cpb_mlp_0")(coords))
        table = ImageFreeDense(heads, use_bias=False, kernel_init=_INIT, name="cpb_mlp_2")(table)
        bias = table.reshape(-1, heads)[relative_position_index(self.window)]  # [N, N, heads]
        bias = masked(16.0 * jax.nn.sigmoid(bias.transpose(2, 0, 1)), mask, batch)
        product = DotProductAttention(self.attention, name="product")
        x = product(q, unit(k).astype(self.dtype), v, bias).reshape(batch, tokens, width)
        return dense(width, name="proj")(x)


class SwinV2Block(SwinBlock):
    """`x + drop_path(norm1(attn(x)))` over (shifted) windows, then `x + drop_path(norm2(mlp(x)))`:
    timm's `SwinTransformerV2Block` on NHWC maps (the norms' scales start at zero)."""

    pretrained_window: Window = (0, 0)

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        norm = partial(
            nn.LayerNorm,
            epsilon=self.epsilon,
            dtype=self.dtype,
            scale_init=nn.initializers.zeros,
        )
        attn = WindowAttentionV2(
            self.num_heads,
            self.window,
            self.pretrained_window,
            self.dtype,
            self.attention,
            name="attn",
        )
        y = norm(name="norm1")(shifted_windows(x, self.window, self.shift, attn))
        x = x + drop_path(self, y, self.drop_path_rate, train)
        mlp = Mlp(int(x.shape[-1] * self.mlp_ratio), dtype=self.dtype, name="mlp")
        return x + drop_path(self, norm(name="norm2")(mlp(x, train)), self.drop_path_rate, train)


class PatchMergingV2(nn.Module):
    """Each 2x2 neighbourhood concatenated (V1's order and padding), a linear 4C -> `features`
    without bias (`reduction`), then LayerNorm (`norm`)."""

    features: int
    epsilon: float = LAYER_NORM_EPSILON
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = nn.Dense(
            self.features, use_bias=False, dtype=self.dtype, kernel_init=_INIT, name="reduction"
        )(neighbours(x))
        return nn.LayerNorm(epsilon=self.epsilon, dtype=self.dtype, name="norm")(x)


class SwinTransformerV2(SwinTransformer):
    """Swin V2 with stages of `depths` blocks, `embed_dim * 2**i` wide with `num_heads[i]` heads;
    `pretrained_window_sizes[i]` (0: the window itself) scales stage `i`'s position coordinates.

    Returns `(logits, end_points)` as `SwinTransformer`. Parameter names are timm's:
    `patch_embed/{proj,norm}`, `layers_{i}/downsample/{reduction,norm}` (stages 1-3),
    `layers_{i}/blocks_{j}/{attn/{qkv,q_bias,v_bias,logit_scale,cpb_mlp_0,cpb_mlp_2,proj},norm1,
    mlp/fc1,mlp/fc2,norm2}`, `norm`, `head`.
    """

    # The weights' evaluation size (192, 256 or 384), the registry's `img_size` as well.
    default_image_size: int = 256
    img_size: int = 256  # the windows and shifts are set for it (timm's ImageNet-1k configurations)

    window_size: int = 8
    pretrained_window_sizes: Sequence[int] = (0, 0, 0, 0)

    def stage_parts(self, stage: int) -> dict[str, ModuleDef]:
        pretrained = self.pretrained_window_sizes[stage]
        return {
            "block": partial(SwinV2Block, pretrained_window=(pretrained, pretrained)),
            "merging": PatchMergingV2,
        }

    def _check(self) -> None:
        super()._check()
        if len(self.pretrained_window_sizes) != len(self.depths):
            raise ValueError(
                f"Swin V2 needs one pretrained window size per stage (0: the window): depths "
                f"{tuple(self.depths)}, pretrained_window_sizes "
                f"{tuple(self.pretrained_window_sizes)}"
            )


def _config(embed_dim: int, depths, num_heads, window: int, img_size: int, pretrained=None):
    kwargs = {"pretrained_window_sizes": pretrained} if pretrained else {}
    return partial(
        SwinTransformerV2,
        embed_dim=embed_dim,
        depths=depths,
        num_heads=num_heads,
        window_size=window,
        img_size=img_size,
        default_image_size=img_size,
        **kwargs,
    )


_T = (96, (2, 2, 6, 2), (3, 6, 12, 24))
_S = (96, (2, 2, 18, 2), (3, 6, 12, 24))
_B = (128, (2, 2, 18, 2), (4, 8, 16, 32))
_L = (192, (2, 2, 18, 2), (6, 12, 24, 48))
_FROM_12 = (12, 12, 12, 6)  # the 192-px ImageNet-22k networks' windows (the last stage's map)

# timm's configurations (Liu et al. 2022, Table 1 and Section 4.3).
swinv2_tiny_window8_256 = _config(*_T, 8, 256)
swinv2_tiny_window16_256 = _config(*_T, 16, 256)
swinv2_small_window8_256 = _config(*_S, 8, 256)
swinv2_small_window16_256 = _config(*_S, 16, 256)
swinv2_base_window8_256 = _config(*_B, 8, 256)
swinv2_base_window16_256 = _config(*_B, 16, 256)
swinv2_base_window12_192 = _config(*_B, 12, 192)
swinv2_large_window12_192 = _config(*_L, 12, 192)
swinv2_base_window12to16_192to256 = _config(*_B, 16, 256, _FROM_12)
swinv2_base_window12to24_192to384 = _config(*_B, 24, 384, _FROM_12)
swinv2_large_window12to16_192to256 = _config(*_L, 16, 256, _FROM_12)
swinv2_large_window12to24_192to384 = _config(*_L, 24, 384, _FROM_12)

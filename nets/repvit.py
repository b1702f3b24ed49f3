"""RepViT: Wang et al. 2024, "RepViT: Revisiting Mobile CNN From ViT Perspective"
(arXiv:2307.09283), as timm 1.0 builds it (`timm.models.repvit`).

A MobileNetV3-like network rebuilt with a ViT's macro design: a stem of two 3x3/2 convolutions
(GELU between) to the first stage's width, four stages at strides 4, 8, 16, 32, each block a
token mixer then a channel mixer. The token mixer is RepVGG's idea on a depthwise convolution:
`bn(dw3x3(x) + dw1x1(x) + x)` (timm's `RepVggDw`; the `legacy` networks M1, M2, M3, the paper's
first release: `dw3x3(x) + dw1x1(x) + x` with a BatchNorm inside each branch instead), which
`reparameterize` folds into one biased depthwise 3x3 convolution (`deploy=True`), RepVGG's
fusion (`nets.repvgg`). Every other block (the first of each stage, counting from 0) has a
squeeze-excite gate after it (a quarter of the width rounded to 8, ReLU, sigmoid); the channel
mixer is `x + conv2(gelu(conv1(x)))`, 1x1 convolutions to twice the width and back. Stages 1 to
3 open with a downsampling block: a block without gate (`pre_block`), a depthwise 3x3/2
convolution, a 1x1 to the new width, then `x + ffn(x)`. Every convolution is followed by
BatchNorm (PyTorch's epsilon) and pads PyTorch's symmetric way.

The head is LeViT's (`nets.levit.distilled_heads`): the mean of the last map, then two
classifiers (`head`, `head_dist`, each BatchNorm and a dense layer: timm's `NormLinear`) whose
mean is the logits, timm's output in eval and (unless `set_distilled_training`) in training; the
published weights have both, and timm's parameter counts include `head_dist`. `dropout_rate`
(timm's `drop_rate`) drops the pooled features before both heads.

Submodules carry timm's names, with `_` for the dots of `stages_{i}` and `blocks_{j}`:
`stem/conv1/{c,bn}`, `stages_{i}/blocks_{j}/{token_mixer/{conv/{c,bn},conv1,bn},se/{fc1,fc2},
channel_mixer/{conv1,conv2}}` (legacy: `token_mixer/conv1/{c,bn}`, no `token_mixer/bn`),
`stages_{i}/downsample/{pre_block,spatial_downsample,channel_downsample,ffn}`; fused:
`token_mixer/reparam_conv`. Left out: timm's other `fuse()`s (each convolution with its
BatchNorm, the heads into one dense layer), plain algebra that changes no function.

End points: `stem` (stride 4), `stages_0`..`stages_3` (strides 4 to 32: timm's `feature_info`),
`pre_logits`, `cls_logits`, `dist_logits`, `logits`, `predictions`.
"""

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
    gelu,
    global_avg_pool,
    make_divisible,
)
from nets.layers.padding import pair
from nets.layers.reparam import add_centred, fuse_conv_bn, identity_kernel
from nets.levit import Stem, distilled_heads


class TokenMixer(nn.Module):
    """`bn(dw(x) + dw1x1(x) + x)` (`legacy`: `dw(x) + dw1x1(x) + x`, each branch normalised),
    or, `deploy`, the one biased depthwise convolution `reparameterize` folds it into."""

    conv: ModuleDef  # bias-free
    norm: ModuleDef
    kernel_size: int = 3
    legacy: bool = False
    deploy: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        width = x.shape[-1]
        depthwise = partial(
            self.conv, width, padding="SYMMETRIC", feature_group_count=width, use_bias=True
        )
        if self.deploy:
            return depthwise(pair(self.kernel_size), name="reparam_conv")(x)
        branch = partial(
            ConvNormAct, width, conv=self.conv, norm=self.norm, padding="SYMMETRIC", groups=width
        )
        y = branch(self.kernel_size, conv_name="c", name="conv")(x)
        if self.legacy:
            return y + branch(1, conv_name="c", name="conv1")(x) + x
        return self.norm(name="bn")(y + depthwise((1, 1), name="conv1")(x) + x)


class Mlp(nn.Module):
    """`conv2(gelu(conv1(x)))`: 1x1 convolutions to `ratio` times the width and back."""

    layer: ModuleDef
    ratio: float = 2.0

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        width = x.shape[-1]
        x = self.layer(int(width * self.ratio), 1, act=gelu, name="conv1")(x)
        return self.layer(width, 1, name="conv2")(x)


class Block(nn.Module):
    """The token mixer, squeeze-excite (`se`), then `x + channel_mixer(x)`: timm's RepViTBlock."""

    layer: ModuleDef
    mixer: ModuleDef  # TokenMixer, its fields set
    conv: ModuleDef  # the gate's biased 1x1 convolutions
    mlp_ratio: float = 2.0
    se: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = self.mixer(name="token_mixer")(x)
        if self.se:
            width = x.shape[-1]
            x = SqueezeExcite(
                self.conv,
                squeeze_channels=make_divisible(width / 4, 8, round_limit=0.0),
                gate=nn.sigmoid,
                layer_names=("fc1", "fc2"),
                name="se",
            )(x)
        return x + Mlp(self.layer, self.mlp_ratio, name="channel_mixer")(x)


class Downsample(nn.Module):
    """A block without gate (`pre_block`), a depthwise kxk/2 convolution, a 1x1 to `features`,
    then `x + ffn(x)`: timm's RepVitDownsample."""

    features: int
    layer: ModuleDef
    mixer: ModuleDef
    conv: ModuleDef
    kernel_size: int = 3
    mlp_ratio: float = 2.0

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        width = x.shape[-1]
        x = Block(self.layer, self.mixer, self.conv, self.mlp_ratio, name="pre_block")(x)
        x = self.layer(width, self.kernel_size, strides=2, groups=width, name="spatial_downsample")(
            x
        )
        x = self.layer(self.features, 1, name="channel_downsample")(x)
        return x + Mlp(self.layer, self.mlp_ratio, name="ffn")(x)


class Stage(nn.Module):
    """`downsample` to `features` (not in the first stage), then `depth` blocks `blocks_{j}`,
    the even ones gated (timm's RepVitStage)."""

    features: int
    depth: int
    layer: ModuleDef
    mixer: ModuleDef
    conv: ModuleDef
    kernel_size: int = 3
    mlp_ratio: float = 2.0
    downsample: bool = True

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        if self.downsample:
            x = Downsample(
                self.features,
                self.layer,
                self.mixer,
                self.conv,
                self.kernel_size,
                self.mlp_ratio,
                name="downsample",
            )(x)
        block = partial(Block, self.layer, self.mixer, self.conv, self.mlp_ratio)
        for j in range(self.depth):
            x = block(se=j % 2 == 0, name=f"blocks_{j}")(x)
        return x


class RepVit(nn.Module):
    """RepViT in its training form (or `deploy`: the token mixers fused, from `reparameterize`).

    Returns `(logits, end_points)`: logits `[batch, num_classes]` (the mean of the two heads'),
    or the pooled features `[batch, embed_dims[-1]]` when `num_classes` is 0 or None.
    """

    default_image_size: int = 224
    embed_dims: tuple[int, ...] = (48, 96, 192, 384)
    depths: tuple[int, ...] = (2, 2, 14, 2)
    mlp_ratio: float = 2.0
    kernel_size: int = 3
    legacy: bool = False  # M1, M2, M3's token mixers: a BatchNorm in each branch, none after
    deploy: bool = False
    num_classes: int | None = 1000
    dropout_rate: float = 0.0  # of the pooled features, before both heads (timm's drop_rate)
    dtype: Any = jnp.float32
    conv: ModuleDef = Conv
    remat: bool | str = False  # stem, blocks recomputed in backward (nets.layers.remat.POLICIES)

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: each stage's output."""
        return {f"stages_{i}": 4 * 2**i for i in range(len(self.depths))}

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = True):
        if len(self.embed_dims) != len(self.depths):
            raise ValueError(
                f"RepViT needs one width per stage: depths {tuple(self.depths)}, embed_dims "
                f"{tuple(self.embed_dims)}"
            )
        norm = batch_norm(TORCH, train, self.dtype)
        conv = partial(self.conv, dtype=self.dtype)
        layer = partial(
            ConvNormAct,
            conv=partial(conv, use_bias=False),
            norm=norm,
            padding="SYMMETRIC",
            conv_name="c",
        )
        mixer = partial(
            TokenMixer,
            partial(conv, use_bias=False),
            norm,
            self.kernel_size,
            legacy=self.legacy,
            deploy=self.deploy,
        )
        end_points = {}
        x = jnp.asarray(x, self.dtype)
        x = end_points["stem"] = checkpointed(Stem, self.remat)(  # the largest maps: one unit
            self.embed_dims[0], partial(layer, strides=2), gelu, divisors=(2, 1), name="stem"
        )(x)
        # timm's checkpoints: each stage, its downsampling with it (`checkpoint_seq(stages)`).
        stage = checkpointed(Stage, self.remat)
        for i, (width, depth) in enumerate(zip(self.embed_dims, self.depths, strict=True)):
            x = end_points[f"stages_{i}"] = stage(
                width,
                depth,
                layer,
                mixer,
                conv,
                self.kernel_size,
                self.mlp_ratio,
                downsample=i > 0,
                name=f"stages_{i}",
            )(x)
        x = nn.Dropout(self.dropout_rate, deterministic=not train)(global_avg_pool(x))
        return distilled_heads(x, end_points, self.num_classes, norm, 0.0, train)


def _fuse_mixer(params: dict, stats: dict, eps: float) -> dict:
    """One token mixer's training variables -> its `reparam_conv` (timm's `RepVggDw.fuse`)."""
    kxk = params["conv"]["c"]["kernel"]  # [k, k, 1, channels]: depthwise
    kernel, bias = fuse_conv_bn(kxk, params["conv"]["bn"], stats["conv"]["bn"], eps)
    if "bn" in params["conv1"]:  # legacy: the 1x1 branch normalised, nothing after the sum
        k1, b1 = fuse_conv_bn(
            params["conv1"]["c"]["kernel"], params["conv1"]["bn"], stats["conv1"]["bn"], eps
        )
    else:
        k1, b1 = params["conv1"]["kernel"], params["conv1"]["bias"]
    eye = identity_kernel((1, 1, *kxk.shape[2:]), kxk.dtype)
    kernel, bias = add_centred(add_centred(kernel, k1), eye), bias + b1
    if "bn" in params:  # the BatchNorm after the sum: its scale on both, its shift on the bias
        kernel, shift = fuse_conv_bn(kernel, params["bn"], stats["bn"], eps)
        scaled, _ = fuse_conv_bn(bias, params["bn"], stats["bn"], eps)
        bias = shift + scaled
    return {"reparam_conv": {"kernel": kernel, "bias": bias}}


def _fuse_tree(params: dict, stats: dict, eps: float) -> tuple[dict, dict]:
    """Every `token_mixer` under `params` fused; the BatchNorm statistics left to the others."""
    params, stats = dict(params), dict(stats)
    for name in list(params):
        if name == "token_mixer":
            params[name] = _fuse_mixer(params[name], stats.pop(name), eps)
        elif isinstance(params[name], dict) and name in stats:
            params[name], stats[name] = _fuse_tree(params[name], stats[name], eps)
    return params, stats


def reparameterize(variables: dict, eps: float = TORCH.epsilon) -> dict:
    """The training form's variables -> those of the same network with `deploy=True`: each token
    mixer's three branches (and BatchNorms) folded into one biased depthwise convolution, as
    RepVGG's blocks (`nets.repvgg.reparameterize`, by `nets.layers.reparam`'s fusion). Pure:
    `variables` are left as they are."""
    params, stats = _fuse_tree(variables["params"], variables["batch_stats"], eps)
    return {"params": params, "batch_stats": stats}


# timm's configurations (M1, M2, M3: the paper's first release, with the legacy mixers).
repvit_m0_9 = partial(RepVit, embed_dims=(48, 96, 192, 384), depths=(2, 2, 14, 2))
repvit_m1_0 = partial(RepVit, embed_dims=(56, 112, 224, 448), depths=(2, 2, 14, 2))
repvit_m1_1 = partial(RepVit, embed_dims=(64, 128, 256, 512), depths=(2, 2, 12, 2))
repvit_m1_5 = partial(RepVit, embed_dims=(64, 128, 256, 512), depths=(4, 4, 24, 4))
repvit_m2_3 = partial(RepVit, embed_dims=(80, 160, 320, 640), depths=(6, 6, 34, 2))
repvit_m1 = partial(repvit_m0_9, legacy=True)
repvit_m2 = partial(repvit_m1_1, legacy=True)
repvit_m3 = partial(RepVit, embed_dims=(64, 128, 256, 512), depths=(4, 4, 18, 2), legacy=True)

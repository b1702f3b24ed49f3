"""FastViT: Vasu et al. 2023, "FastViT: A Fast Hybrid Vision Transformer using Structural
Reparameterization" (arXiv:2303.14189); with MobileCLIP's image towers MCi0..MCi2 (Vasu et al.
2024, arXiv:2311.17049) and MobileCLIP2's MCi3, MCi4 (Faghri et al. 2025, arXiv:2508.20691), as
timm's `FastVit` builds them (`timm/models/fastvit.py`).

A stem of three MobileOne blocks (3x3/2, 3x3/2 depthwise, 1x1), four stages (MCi3/4: five), each
but the first opened by a patch embedding (a 7x7/2 depthwise "large kernel" convolution to twice
the width with a 3x3 branch beside it, then a 1x1 MobileOne block), then RepMixer blocks or, in the
last stage(s) of the SA, MA and MCi variants, a conditional position encoding (a 7x7 depthwise
convolution added to its input, RepCPE) and attention blocks; a 3x3 depthwise MobileOne block
with a squeeze-excite gate to twice the last width (`final_conv`), global average pooling and the
classifier (MCi's: the CLIP projection, 512 or 768 "classes").

The blocks are trained with branches that fold into one convolution for inference (structural
reparameterization, `nets.layers.reparam`, as `nets.repvgg`):
- MobileOne's block: `act(se(sum of conv-BatchNorm branches + BatchNorm(x)))`, kxk branches
  `conv_kxk_{i}`, a 1x1 one `conv_scale`, the identity where the shapes allow;
- the patch embedding's large-kernel convolution: `large_conv` + `small_conv` (3x3), no identity,
  MCi0..2's squeeze-excite gate (a quarter of the width) in the last two, MCi's GELU after it;
- RepMixer: `x + layer_scale(mixer(x) - norm(x))`, `mixer` a depthwise 3x3 MobileOne block
  without activation, `norm` the identity's BatchNorm alone: one depthwise 3x3 convolution fused;
- RepCPE: `pos_enc(x) + x`: one depthwise 7x7 convolution fused.
Both blocks then add `layer_scale(mlp(x))`: a 7x7 depthwise convolution and BatchNorm, 1x1 to
`mlp_ratio` times the width, exact GELU, 1x1 back (`ConvMlp`); the attention block first adds
`layer_scale_1(attention(norm(x)))`: BatchNorm (MCi3/4: LayerNorm over the channels, epsilon
1e-5), multi-head self-attention over the pixels in heads of 32 channels, `qkv` without a bias.
Every layer scale starts at 1e-5. PyTorch's symmetric padding and BatchNorm epsilon.

timm publishes the training form, which this module is by default; `reparameterize` folds its
variables into those of `deploy=True`, the network timm's `reparameterize_model` leaves (its
ConvMlp's and attention blocks' norms stay). Where this differs from timm's `FastVit`:
activations are NHWC and the MLP's 1x1 convolutions dense layers; `dropout_rate` is timm's
`drop_rate` before the classifier (its `proj_drop_rate`, 0 in its recipes, is not a field);
`drop_path_rate` rises linearly from 0 at the first block to the rate at the last, as timm's.
Left out: timm's `fork_feat` norms for detection (use `network_fn.features`).

End points: `stem`, `stages_0`..`stages_3` (MCi3/4: `stages_4`), `final_conv`, `pre_logits`,
`logits`, `predictions`.
"""

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, ClassVar, Literal

import flax.linen as nn
import jax
import jax.numpy as jnp

from nets.layers import (
    TORCH,
    Conv,
    ConvNormAct,
    LayerScale,
    ModuleDef,
    SqueezeExcite,
    batch_norm,
    checkpointed,
    classify,
    drop_path,
    gelu,
    global_avg_pool,
    make_divisible,
)
from nets.layers.attention import Implementation
from nets.layers.drop_path import check_drop_path_rate, linear_drop_path_rates
from nets.layers.reparam import FUSED, IDENTITY, branches, fuse_branches, identity_kernel
from nets.vit import Attention

Mixer = Literal["repmixer", "attention"]
AttentionNorm = Literal["batch_norm", "layer_norm"]

_INIT = nn.initializers.truncated_normal(0.02)  # timm's init of the Linears and the MLP's convs
HEAD_DIM = 32  # the attention's channels per head
LAYER_NORM_EPSILON = 1e-5  # MCi3/4's LayerNorm2d


def mobile_one(kernel_size: int, conv_branches: int = 1, scale_branch: bool = True) -> tuple:
    """The conv-BatchNorm branches of a MobileOne block: `conv_kxk_{i}`, and `conv_scale`
    (1x1) where the kernel is larger than one."""
    kernels = tuple((f"conv_kxk_{i}", kernel_size) for i in range(conv_branches))
    return kernels + ((("conv_scale", 1),) if scale_branch and kernel_size > 1 else ())


class RepBlock(nn.Module):
    """`act(se(branches))`: timm's `MobileOneBlock` (`kernels` from `mobile_one`) and
    `ReparamLargeKernelConv` (`large_conv`, `small_conv`, no identity); `deploy`: the fused
    `reparam_conv` in their place. The gate `se` squeezes to `se_ratio` of the width, rounded
    to `se_divisor`."""

    features: int
    kernels: tuple[tuple[str, int], ...]
    conv: ModuleDef
    norm: ModuleDef
    strides: int = 1
    groups: int = 1
    identity: bool = True
    se_ratio: float = 0.0  # 0: no gate
    se_divisor: int = 1
    act: Callable | None = gelu
    deploy: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        y = branches(
            x,
            self.features,
            self.kernels,
            conv=self.conv,
            norm=self.norm,
            strides=self.strides,
            groups=self.groups,
            identity=self.identity,
            deploy=self.deploy,
        )
        if self.se_ratio:
            squeeze = make_divisible(self.features * self.se_ratio, self.se_divisor, round_limit=0)
            gate = SqueezeExcite(
                self.conv,
                squeeze_channels=squeeze,
                gate=nn.sigmoid,
                layer_names=("fc1", "fc2"),
                name="se",
            )
            y = gate(y)
        return y if self.act is None else self.act(y)


class Stem(nn.Module):
    """`stem_0`..`stem_2`: MobileOne blocks 3x3/2, 3x3/2 depthwise, 1x1 (`scale_branch`: the
    first two's 1x1 branches). The network shares its scope with it (`nn.share_scope`), so they
    keep timm's paths while `remat` recomputes them as one unit (at strides 2 and 4, they kept
    half of the backward pass's residuals when only the blocks were recomputed)."""

    width: int
    block: ModuleDef  # RepBlock with conv, norm and deploy
    scale_branch: bool = True

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        kernels, width = mobile_one(3, scale_branch=self.scale_branch), self.width
        x = self.block(width, kernels, strides=2, name="stem_0")(x)
        x = self.block(width, kernels, strides=2, groups=width, name="stem_1")(x)
        return self.block(width, mobile_one(1), name="stem_2")(x)


class PatchEmbed(nn.Module):
    """`proj_0`, the 7x7/2 depthwise large-kernel convolution to `features` (a 3x3 beside it),
    then `proj_1`, a 1x1 MobileOne block."""

    features: int
    block: ModuleDef  # RepBlock with conv, norm and deploy
    patch_size: int = 7
    se: bool = False
    act: bool = False  # MCi's GELU after the large kernel (timm's `lkc_use_act`)

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        large = (("large_conv", self.patch_size), ("small_conv", 3))
        x = self.block(
            self.features,
            large,
            strides=2,
            groups=x.shape[-1],
            identity=False,
            se_ratio=0.25 if self.se else 0.0,
            se_divisor=8,
            act=gelu if self.act else None,
            name="proj_0",
        )(x)
        return self.block(self.features, mobile_one(1), name="proj_1")(x)


class RepMixer(nn.Module):
    """`x + layer_scale(mixer(x) - norm(x))`, both depthwise; `deploy`: one depthwise
    `reparam_conv` (`fuse_repmixer`)."""

    block: ModuleDef
    conv: ModuleDef
    kernel_size: int = 3
    layer_scale_init_value: float | None = 1e-5
    deploy: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        dim, size = x.shape[-1], (self.kernel_size, self.kernel_size)
        if self.deploy:
            return self.conv(
                dim,
                size,
                padding="SYMMETRIC",
                feature_group_count=dim,
                use_bias=True,
                name=FUSED,
            )(x)
        block = partial(self.block, dim, groups=dim, act=None)
        y = block(mobile_one(self.kernel_size), name="mixer")(x) - block((), name="norm")(x)
        if self.layer_scale_init_value is not None:
            y = LayerScale(self.layer_scale_init_value, name="layer_scale")(y)
        return x + y


class RepCPE(nn.Module):
    """Conditional position encoding, `pos_enc(x) + x` (a biased depthwise convolution);
    `deploy`: the one `reparam_conv`."""

    conv: ModuleDef
    kernel_size: int = 7
    deploy: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        dim = x.shape[-1]
        conv = partial(
            self.conv,
            dim,
            (self.kernel_size, self.kernel_size),
            padding="SYMMETRIC",
            feature_group_count=dim,
            use_bias=True,
        )
        return conv(name=FUSED)(x) if self.deploy else conv(name="pos_enc")(x) + x


class ConvMlp(nn.Module):
    """`fc2(gelu(fc1(bn(conv7x7(x)))))`: a depthwise 7x7 convolution and BatchNorm (`conv`), then
    1x1 layers to `hidden` and back, each followed by dropout."""

    hidden: int
    conv: ModuleDef
    norm: ModuleDef
    dropout_rate: float = 0.0
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        width = x.shape[-1]
        conv = ConvNormAct(
            width, 7, self.conv, self.norm, padding="SYMMETRIC", groups=width, name="conv"
        )
        x = conv(x)
        dense = partial(nn.Dense, dtype=self.dtype, kernel_init=_INIT)
        dropout = nn.Dropout(self.dropout_rate, deterministic=not train)
        x = dropout(gelu(dense(self.hidden, name="fc1")(x)))
        return dropout(dense(width, name="fc2")(x))


class FastVitBlock(nn.Module):
    """A RepMixer block (`token_mixer` a `RepMixer`, then `x + layer_scale(mlp(x))`) or an
    attention block (`x + layer_scale_1(token_mixer(norm(x)))`, then `layer_scale_2`)."""

    mixer: Mixer
    mlp_ratio: float
    block: ModuleDef
    conv: ModuleDef
    norm: ModuleDef  # BatchNorm (the MLP's, the RepMixer's)
    attention_norm: ModuleDef
    kernel_size: int = 3
    layer_scale_init_value: float | None = 1e-5
    drop_path_rate: float = 0.0
    deploy: bool = False
    dtype: Any = jnp.float32
    attention: Implementation = "auto"

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        def residual(x: jax.Array, branch: jax.Array, name: str) -> jax.Array:
            if self.layer_scale_init_value is not None:
                branch = LayerScale(self.layer_scale_init_value, name=name)(branch)
            return x + drop_path(self, branch, self.drop_path_rate, train)

        batch, height, width, dim = x.shape
        if self.mixer == "repmixer":
            mixer = RepMixer(
                self.block,
                self.conv,
                self.kernel_size,
                self.layer_scale_init_value,
                self.deploy,
                name="token_mixer",
            )
            x, scale = mixer(x), "layer_scale"
        elif self.mixer == "attention":
            if dim % HEAD_DIM:
                raise ValueError(f"attention over {dim} channels needs a multiple of {HEAD_DIM}")
            tokens = self.attention_norm(name="norm")(x).reshape(batch, height * width, dim)
            attention = Attention(
                dim // HEAD_DIM,
                dtype=self.dtype,
                attention=self.attention,
                qkv_bias=False,
                name="token_mixer",
            )
            x = residual(x, attention(tokens, train).reshape(x.shape), "layer_scale_1")
            scale = "layer_scale_2"
        else:
            raise ValueError(f"token mixer must be 'repmixer' or 'attention', got {self.mixer!r}")
        mlp = ConvMlp(int(dim * self.mlp_ratio), self.conv, self.norm, dtype=self.dtype, name="mlp")
        return residual(x, mlp(x, train), scale)


class FastVitStage(nn.Module):
    """`downsample` (a `PatchEmbed`, all stages but the first), `pos_emb` (a `RepCPE`, if any),
    then `blocks_{j}`; when `remat`, the downsampling and each block are recomputed in the
    backward pass (timm checkpoints the blocks only)."""

    features: int
    depth: int
    block: ModuleDef  # FastVitBlock with all but the drop-path rate
    patch_embed: ModuleDef | None
    pos_emb: ModuleDef | None
    drop_path_rates: tuple[float, ...]
    remat: bool | str = False

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        if self.patch_embed is not None:
            patch_embed = checkpointed(self.patch_embed, self.remat)
            x = patch_embed(self.features, name="downsample")(x)
        if self.pos_emb is not None:
            x = self.pos_emb(name="pos_emb")(x)
        block = checkpointed(self.block, self.remat, takes_train=True)
        for j in range(self.depth):
            x = block(drop_path_rate=self.drop_path_rates[j], name=f"blocks_{j}")(x, train)
        return x


class FastVit(nn.Module):
    """FastViT in its training form (or `deploy`: the reparameterized one, `reparameterize`).

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the pooled features
    `[batch, cls_ratio * dims[-1]]` when `num_classes` is 0 or None.
    """

    default_image_size: ClassVar[int] = 256  # timm's configs of every published weight

    depths: Sequence[int] = (2, 2, 6, 2)
    dims: Sequence[int] = (64, 128, 256, 512)
    mlp_ratios: Sequence[float] = (4.0,) * 4
    token_mixers: Sequence[Mixer] = ("repmixer",) * 4
    pos_embs: Sequence[bool] = (False,) * 4  # a RepCPE opening the stage
    se_downsamples: Sequence[bool] = (False,) * 4  # the patch embedding's gate (MCi0..2)
    lkc_use_act: bool = False  # GELU after the patch embedding's large kernel (MCi)
    stem_scale_branch: bool = True  # the stem's 1x1 branches (MCi3/4 have none)
    attention_norm: AttentionNorm = "batch_norm"  # MCi3/4: LayerNorm over the channels
    repmixer_kernel_size: int = 3
    down_patch_size: int = 7
    layer_scale_init_value: float | None = 1e-5
    cls_ratio: float = 2.0  # final_conv's width, of the last stage's
    deploy: bool = False
    num_classes: int | None = 1000
    dropout_rate: float = 0.0  # before the classifier (timm's `drop_rate`)
    drop_path_rate: float = 0.0
    dtype: Any = jnp.float32
    attention: Implementation = "auto"
    conv: ModuleDef = Conv
    remat: bool | str = False  # stem, blocks, downsamplings recomputed (remat.POLICIES)

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: each stage's output, from the stride-4 stem."""
        return {f"stages_{i}": 4 * 2**i for i in range(len(self.depths))}

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = True):
        check_drop_path_rate(self.drop_path_rate)
        per_stage = (self.dims, self.mlp_ratios, self.token_mixers, self.pos_embs)
        if any(len(field) != len(self.depths) for field in (*per_stage, self.se_downsamples)):
            raise ValueError(
                "FastVit needs one entry per stage in dims, mlp_ratios, token_mixers, pos_embs "
                f"and se_downsamples: depths {tuple(self.depths)}, dims {tuple(self.dims)}"
            )
        conv = partial(self.conv, use_bias=False, dtype=self.dtype)
        norm = batch_norm(TORCH, train, self.dtype)
        block = partial(RepBlock, conv=conv, norm=norm, deploy=self.deploy)
        end_points = {}

        # The stem, each stage's downsampling and blocks, and `final_conv` are recomputed in the
        # backward pass when `remat` (timm: the blocks).
        stem = checkpointed(Stem, self.remat)(
            self.dims[0], block, self.stem_scale_branch, name="stem"
        )
        nn.share_scope(self, stem)  # its blocks at timm's paths (its docstring)
        x = end_points["stem"] = stem(jnp.asarray(x, self.dtype))

        if self.attention_norm not in ("batch_norm", "layer_norm"):
            raise ValueError(
                f"attention_norm must be 'batch_norm' or 'layer_norm', got {self.attention_norm!r}"
            )
        attention_norm = norm
        if self.attention_norm == "layer_norm":
            attention_norm = partial(nn.LayerNorm, LAYER_NORM_EPSILON, dtype=self.dtype)
        rates = linear_drop_path_rates(self.drop_path_rate, sum(self.depths))
        for i, depth in enumerate(self.depths):
            stage_block = partial(
                FastVitBlock,
                self.token_mixers[i],
                self.mlp_ratios[i],
                block,
                conv,
                norm,
                attention_norm,
                self.repmixer_kernel_size,
                self.layer_scale_init_value,
                deploy=self.deploy,
                dtype=self.dtype,
                attention=self.attention,
            )
            patch_embed = partial(
                PatchEmbed,
                block=block,
                patch_size=self.down_patch_size,
                se=self.se_downsamples[i],
                act=self.lkc_use_act,
            )
            start = sum(self.depths[:i])
            x = FastVitStage(
                self.dims[i],
                depth,
                stage_block,
                patch_embed if i > 0 else None,
                partial(RepCPE, conv, deploy=self.deploy) if self.pos_embs[i] else None,
                tuple(rates[start : start + depth]),
                self.remat,
                name=f"stages_{i}",
            )(x, train)
            end_points[f"stages_{i}"] = x

        final = checkpointed(block, self.remat)(
            int(self.dims[-1] * self.cls_ratio),
            mobile_one(3),
            groups=self.dims[-1],
            se_ratio=1 / 16,
            name="final_conv",
        )
        x = end_points["final_conv"] = final(x)
        return classify(
            global_avg_pool(x),
            end_points,
            self.num_classes,
            train=train,
            dropout_rate=self.dropout_rate,
            dtype=self.dtype,
            name="fc",
            scope="head",
            kernel_init=_INIT,
        )


def _branch_names(params: dict) -> tuple[str, ...]:
    """A `RepBlock`'s conv-BatchNorm branches, in the order they are summed: MobileOne's
    `conv_kxk_{i}` then `conv_scale`; the large-kernel convolution's `large_conv`, `small_conv`."""
    kxk = sorted((n for n in params if n.startswith("conv_kxk_")), key=lambda n: int(n[9:]))
    return (*kxk, "conv_scale", "large_conv", "small_conv")


def _fuse_rep_block(params: dict, stats: dict, eps: float) -> dict:
    """A `RepBlock`'s variables -> its `reparam_conv` (and `se`, kept)."""
    kernel, bias = fuse_branches(params, stats, eps, _branch_names(params))
    fused = {FUSED: {"kernel": kernel, "bias": bias}}
    return fused | ({"se": params["se"]} if "se" in params else {})


def _fuse_repmixer(params: dict, stats: dict, eps: float) -> dict:
    """RepMixer's variables -> its `reparam_conv`: `identity + gamma * (mixer - norm)`, each of
    the two fused to a kernel and bias (timm's `RepMixer.reparameterize`)."""
    names = _branch_names(params["mixer"])
    mixer, mixer_bias = fuse_branches(params["mixer"], stats["mixer"], eps, names)
    norm, norm_bias = fuse_branches(params["norm"], stats["norm"], eps, (), mixer.shape)
    gamma = params["layer_scale"]["gamma"] if "layer_scale" in params else 1.0
    kernel = identity_kernel(mixer.shape, mixer.dtype) + gamma * (mixer - norm)
    return {FUSED: {"kernel": kernel, "bias": gamma * (mixer_bias - norm_bias)}}


def _fuse_tree(params: dict, stats: dict, eps: float) -> tuple[dict, dict]:
    """Every reparameterizable module under `params` fused; the rest, and the BatchNorm
    statistics it still reads, kept."""
    out_params, out_stats = {}, {}
    for name, p in params.items():
        s = stats.get(name)
        if isinstance(p, dict) and "mixer" in p:
            out_params[name] = _fuse_repmixer(p, s, eps)
        elif isinstance(p, dict) and "pos_enc" in p:
            kernel = p["pos_enc"]["kernel"]
            fused = identity_kernel(kernel.shape, kernel.dtype) + kernel
            out_params[name] = {FUSED: {"kernel": fused, "bias": p["pos_enc"]["bias"]}}
        elif isinstance(p, dict) and {"conv_kxk_0", "large_conv", IDENTITY} & set(p):
            out_params[name] = _fuse_rep_block(p, s, eps)
        elif isinstance(p, dict) and any(isinstance(v, dict) for v in p.values()):
            out_params[name], kept = _fuse_tree(p, s or {}, eps)
            if kept:
                out_stats[name] = kept
        else:  # a layer of its own (a dense layer, a norm, a layer scale)
            out_params[name] = p
            if s is not None:
                out_stats[name] = s
    return out_params, out_stats


def reparameterize(variables: dict, eps: float = TORCH.epsilon) -> dict:
    """The training form's variables -> those of the same network with `deploy=True`: each
    MobileOne block, patch embedding convolution, RepMixer and RepCPE folded into its one
    `reparam_conv` (module docstring; timm's `reparameterize_model`). The MLPs' and attention
    blocks' norms stay, with their statistics. Pure: `variables` are left as they are."""
    params, stats = _fuse_tree(variables["params"], variables.get("batch_stats", {}), eps)
    return {"params": params, "batch_stats": stats} if stats else {"params": params}


_T = {"depths": (2, 2, 6, 2), "dims": (64, 128, 256, 512), "mlp_ratios": (3.0,) * 4}
_SA = {"token_mixers": ("repmixer",) * 3 + ("attention",), "pos_embs": (False,) * 3 + (True,)}
_MCI = {**_SA, "mlp_ratios": (3.0,) * 4, "se_downsamples": (False, False, True, True)}
_MCI_L = {
    "mlp_ratios": (4.0,) * 5,
    "token_mixers": ("repmixer",) * 3 + ("attention",) * 2,
    "pos_embs": (False,) * 3 + (True,) * 2,
    "se_downsamples": (False,) * 5,
    "attention_norm": "layer_norm",
    "stem_scale_branch": False,
}

fastvit_t8 = partial(FastVit, **{**_T, "depths": (2, 2, 4, 2), "dims": (48, 96, 192, 384)})
fastvit_t12 = partial(FastVit, **_T)
fastvit_s12 = partial(FastVit, depths=(2, 2, 6, 2))
fastvit_sa12 = partial(FastVit, depths=(2, 2, 6, 2), **_SA)
fastvit_sa24 = partial(FastVit, depths=(4, 4, 12, 4), **_SA)
fastvit_sa36 = partial(FastVit, depths=(6, 6, 18, 6), **_SA)
fastvit_ma36 = partial(FastVit, depths=(6, 6, 18, 6), dims=(76, 152, 304, 608), **_SA)
# MobileCLIP's image towers (their CLIP projection is the classifier: 512 classes, published).
fastvit_mci0 = partial(FastVit, depths=(2, 6, 10, 2), lkc_use_act=True, **_MCI)
fastvit_mci1 = partial(FastVit, depths=(4, 12, 20, 4), lkc_use_act=True, **_MCI)
fastvit_mci2 = partial(
    FastVit, depths=(4, 12, 24, 4), dims=(80, 160, 320, 640), lkc_use_act=True, **_MCI
)
fastvit_mci3 = partial(
    FastVit, depths=(2, 12, 24, 4, 2), dims=(96, 192, 384, 768, 1536), lkc_use_act=True, **_MCI_L
)
fastvit_mci4 = partial(
    FastVit,
    depths=(2, 12, 24, 4, 4),
    dims=(128, 256, 512, 1024, 2048),
    lkc_use_act=True,
    **_MCI_L,
)

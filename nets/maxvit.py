"""MaxViT, as timm 1.0 ports Google's TensorFlow weights (`timm.models.maxxvit`, its
`maxvit_*_tf_*` networks).

Tu et al. 2022, "MaxViT: Multi-Axis Vision Transformer" (arXiv:2204.01697). A stem (a 3x3/2
convolution, BatchNorm, GELU, a 3x3 convolution, both biased), four stages of MaxViT blocks, a
head. Each block (timm's `MaxxVitBlock`) is three residual blocks in turn:

- MBConv (timm's `MbConvBlock`): a pre-norm BatchNorm without activation, a 1x1 expansion to
  `expand_ratio` times the block's output width (BatchNorm, GELU), a 3x3 depthwise convolution
  (BatchNorm, GELU) that takes the stage's stride, squeeze-excite (to a quarter of the output
  width, SiLU, sigmoid gate), a biased 1x1 projection; the shortcut of a strided block is a 2x2/2
  average pool, then a biased 1x1 convolution where the width changes (timm's `Downsample2d`);
- block attention: LayerNorm, multi-head self-attention within non-overlapping `p x p` windows
  (`nets.swin.partition`), residual; LayerNorm, an MLP, residual;
- grid attention: the same over a `p x p` grid laid over the whole map (`grid_partition`: the
  tokens of a partition are `h / p` rows and `w / p` columns apart), dilated global mixing.

Both attentions add a learnt relative position bias to the logits: a table `[heads, 2p - 1,
2p - 1]` read at the offset of each key from each query, `key - query` (timm's `RelPosBiasTf`,
the reference's `reindex_2d_einsum_lookup`; Swin's index is `query - key`:
`relative_position_bias`). Heads are `width / dim_head` (32 channels each); the fused `qkv`
projection's outputs are ordered (q, k, v), then heads, then channels (timm's `head_first=False`
for the TF weights). `p` is `default_image_size // 32` (timm's `img_size // partition_ratio`)
in every stage: 7 at 224 px, 12 at 384, 16 at 512, so the stage maps are 8, 4, 2 and 1 windows
across. The head (timm's `NormMlpClassifierHead`): average pooling, LayerNorm, a dense layer to
`head_hidden_size` with tanh (the pre-logits), dropout, the classifier.

The TF weights' conventions are fields, set by the registry: TensorFlow's 'SAME' padding (timm's
`padding='same'`: the 3x3/2 convolutions pad one pixel at the bottom and right of even maps;
the 2x2/2 average pool pads odd maps there and counts the padding, as timm's `AvgPool2dSame`),
BatchNorm epsilon 1e-3, GELU's tanh approximation everywhere (timm's `gelu_tanh`; SiLU in
squeeze-excite), LayerNorm epsilon 1e-5.

Where this differs from timm's `MaxxVit`:
- The image sizes. The windows and grids are made for `default_image_size` (timm's `img_size`),
  as timm makes them at construction; an image whose stage maps are not multiples of them is
  refused in one line (timm asserts; its `fixed_input_size`). Sizes a little short of it run
  ('SAME' layers leave `ceil(n / 2)` pixels: 221 to 224 px at 224).
  `set_input_size`, which resizes the tables to other windows, is not here.
- Regularisation: `drop_path_rate` rises linearly over all blocks from 0 (timm's schedule); a
  block's rate applies to its MBConv and both attentions' two branches. `dropout_rate` is timm's
  `drop_rate`, before the classifier. timm's `attn_drop` and `proj_drop` (0 in every
  configuration) are not fields.
- Weight decay (`NetworkFn.regularization_loss`) covers the convolution and dense kernels only:
  not the normalisations, biases or the relative position tables (timm's `no_weight_decay()`).
- Initialisation: dense kernels truncated normal 0.02, convolutions flax's default, the tables
  normal 0.02 (timm's `vit_eff`: Xavier uniform for the transformers' layers, normal of
  `sqrt(2 / fan_out)` for the convolutions).

End points: `stem` (`[batch, h/2, w/2, stem_width]`), `stage1`..`stage4` (NHWC, timm's
`stages.{i}`), `pre_logits` (after the tanh, timm's `forward_head(pre_logits=True)`), `logits`,
`predictions`. Parameters carry timm's names: `stem/{conv1,norm1,conv2}`,
`stages_{i}/blocks_{j}/conv/{shortcut/expand,pre_norm,conv1_1x1,norm1,conv2_kxk,norm2,se/fc1,
se/fc2,conv3_1x1}`, `.../attn_block/{norm1,attn/qkv,attn/rel_pos,attn/proj,norm2,mlp/fc1,
mlp/fc2}` and `attn_grid/...`, then `head_norm`, `head_pre_logits`, `head` (timm's `head.norm`,
`head.pre_logits.fc`, `head.fc`).

Parameters at 1000 classes are timm's: 30,916,528 (T at 224), 68,927,956 (S), 119,467,708 (B),
211,785,560 (L), 474,951,952 (XL; its 224-px weights have ImageNet-21k's 21,843 classes); the
384- and 512-px networks differ by their larger tables only.

Left out: timm's own MaxViTs and CoAtNets (`maxvit_*_rw_*`, `maxvit_rmlp_*`, `maxvit_tiny_pm_*`,
`maxxvit*`, `coatnet_*`), which its own weights trained under other conventions (an MBConv
whose pre-norm activates and expands from its input, symmetric padding, MLP relative positions,
parallel partitions, transformer blocks over whole maps).
"""

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from nets.errors import ImageSizeError
from nets.layers import (
    TORCH,
    Conv,
    DotProductAttention,
    ModuleDef,
    SqueezeExcite,
    avg_pool,
    batch_norm,
    checkpointed,
    classify,
    drop_path,
    global_avg_pool,
    make_divisible,
)
from nets.layers.attention import Implementation
from nets.layers.drop_path import check_drop_path_rate, linear_drop_path_rates
from nets.layers.padding import PaddingLike
from nets.swin import Window, merge, partition, relative_position_index
from nets.vit import ACTIVATIONS, Activation, Mlp

LAYER_NORM_EPSILON = 1e-5  # timm's `_tf_cfg` transformer norm_eps (the head's LayerNorm too)
BN_EPSILON = 1e-3  # TensorFlow's BatchNorm epsilon, timm's `_tf_cfg` conv norm_eps
_INIT = nn.initializers.truncated_normal(0.02)


def grid_partition(x: jax.Array, grid: Window) -> jax.Array:
    """`[b, h, w, c]` -> `[b * h/gh * w/gw, gh * gw, c]`: partition `(a, b)` holds the pixels
    `(i * h/gh + a, j * w/gw + b)` in row-major `(i, j)` order (timm's `grid_partition`)."""
    b, h, w, c = x.shape
    gh, gw = grid
    x = x.reshape(b, gh, h // gh, gw, w // gw, c).transpose(0, 2, 4, 1, 3, 5)
    return x.reshape(-1, gh * gw, c)


def grid_merge(parts: jax.Array, grid: Window, size: Window) -> jax.Array:
    """`grid_partition`'s inverse: `[b * partitions, gh * gw, c]` -> `[b, h, w, c]`."""
    (h, w), (gh, gw), c = size, grid, parts.shape[-1]
    x = parts.reshape(-1, h // gh, w // gw, gh, gw, c).transpose(0, 3, 1, 4, 2, 5)
    return x.reshape(-1, h, w, c)


def relative_position_bias(table: jax.Array, window: Window) -> jax.Array:
    """`[heads, 2 wh - 1, 2 ww - 1]` -> `[heads, N, N]` (N = wh * ww): the bias between query
    `(i, j)` and key `(x, y)` is `table[:, x - i + wh - 1, y - j + ww - 1]`, the key's offset
    from the query (timm's `RelPosBiasTf`), the transpose of Swin's `query - key` index."""
    heads = table.shape[0]
    return table.reshape(heads, -1)[:, relative_position_index(window).T]


class RelativePositionBias(nn.Module):
    """The bias table of one attention (timm's `rel_pos`), as `[heads, N, N]` for its window."""

    num_heads: int
    window: Window

    @nn.compact
    def __call__(self) -> jax.Array:
        wh, ww = self.window
        shape = (self.num_heads, 2 * wh - 1, 2 * ww - 1)
        table = self.param("relative_position_bias_table", nn.initializers.normal(0.02), shape)
        return relative_position_bias(table, self.window)


class PartitionAttention(nn.Module):
    """`x + attn(norm1(x))` within each window (`grid=False`, timm's block attention) or grid
    partition (`grid=True`), then `x + mlp(norm2(x))`: timm's `PartitionAttentionCl`, NHWC."""

    size: Window  # the windows' or the grid's
    grid: bool
    dim_head: int = 32
    mlp_ratio: float = 4.0
    drop_path_rate: float = 0.0
    epsilon: float = LAYER_NORM_EPSILON
    act_layer: Activation = "gelu_tanh"
    dtype: Any = jnp.float32
    attention: Implementation = "auto"

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        _, height, width, channels = x.shape
        (ph, pw), kind = self.size, "grid" if self.grid else "windows"
        if height % ph or width % pw:
            raise ValueError(
                f"MaxViT's {height}x{width} map does not split into its {ph}x{pw} {kind} "
                "(default_image_size // partition_ratio a side): every stage's map must be a "
                "multiple of them; build the network with the images' size as its "
                "default_image_size"
            )
        if channels % self.dim_head:
            raise ValueError(f"width {channels} does not split into heads of {self.dim_head}")
        heads, norm = channels // self.dim_head, partial(nn.LayerNorm, self.epsilon, self.dtype)
        split, join = (grid_partition, grid_merge) if self.grid else (partition, merge)
        attn = Attention(heads, self.size, self.dtype, self.attention, name="attn")
        y = join(attn(split(norm(name="norm1")(x), self.size)), self.size, (height, width))
        x = x + drop_path(self, y, self.drop_path_rate, train)
        mlp = Mlp(
            int(channels * self.mlp_ratio), dtype=self.dtype, act_layer=self.act_layer, name="mlp"
        )
        return x + drop_path(self, mlp(norm(name="norm2")(x), train), self.drop_path_rate, train)


class Attention(nn.Module):
    """Multi-head self-attention over each partition's tokens with the relative position bias:
    `qkv`, the product (`DotProductAttention`, the bias added to its float32 logits), `proj`."""

    num_heads: int
    window: Window
    dtype: Any = jnp.float32
    attention: Implementation = "auto"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """`x`: `[partitions, N, C]`."""
        batch, tokens, width = x.shape
        heads = (self.num_heads, width // self.num_heads)
        dense = partial(nn.Dense, dtype=self.dtype, kernel_init=_INIT)
        qkv = dense(3 * width, name="qkv")(x).reshape(batch, tokens, 3, *heads)
        bias = RelativePositionBias(self.num_heads, self.window, name="rel_pos")()[None]
        product = DotProductAttention(self.attention, name="product")
        x = product(qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2], bias)
        return dense(width, name="proj")(x.reshape(batch, tokens, width))


class Downsample(nn.Module):
    """A strided MBConv's shortcut (timm's `Downsample2d`, 'avg2'): a 2x2/2 average pool (under
    'SAME', odd maps padded at the end with zeros that count, as timm's `AvgPool2dSame`), then a
    biased 1x1 convolution `expand` where the width changes."""

    features: int
    conv: ModuleDef
    padding: PaddingLike = "SAME"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = avg_pool(x, 2, 2, padding=self.padding)
        if x.shape[-1] == self.features:
            return x
        return self.conv(self.features, (1, 1), use_bias=True, name="expand")(x)


class MBConv(nn.Module):
    """timm's `MbConvBlock` as MaxViT's TF configuration builds it (the module docstring):
    `[n, h, w, c] -> [n, h / strides, w / strides, features]`."""

    features: int
    strides: int
    conv: ModuleDef
    norm: ModuleDef
    act: Callable
    expand_ratio: float = 4.0
    se_ratio: float = 0.25  # of the output width
    padding: PaddingLike = "SAME"
    drop_path_rate: float = 0.0

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        shortcut = x
        if self.strides > 1:
            shortcut = Downsample(self.features, self.conv, self.padding, name="shortcut")(x)
        inner = make_divisible(self.features * self.expand_ratio)  # timm's, of the output width
        x = self.norm(name="pre_norm")(x)
        x = self.conv(inner, (1, 1), use_bias=False, name="conv1_1x1")(x)
        x = self.act(self.norm(name="norm1")(x))
        x = self.conv(
            inner, (3, 3), self.strides, padding=self.padding, feature_group_count=inner,
            use_bias=False, name="conv2_kxk",
        )(x)  # fmt: skip
        x = self.act(self.norm(name="norm2")(x))
        se = {"act": nn.silu, "gate": nn.sigmoid, "layer_names": ("fc1", "fc2")}
        squeeze = int(self.se_ratio * self.features)
        x = SqueezeExcite(self.conv, squeeze_channels=squeeze, **se, name="se")(x)
        x = self.conv(self.features, (1, 1), use_bias=True, name="conv3_1x1")(x)
        return shortcut + drop_path(self, x, self.drop_path_rate, train)


class MaxViTBlock(nn.Module):
    """MBConv (`conv`), block attention (`attn_block`), grid attention (`attn_grid`), all with
    the block's stochastic depth rate; `mbconv` and `attention` are `MBConv` and
    `PartitionAttention` with the network's fields bound."""

    features: int
    strides: int
    drop_path_rate: float
    mbconv: ModuleDef
    attention: ModuleDef

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        rate = {"drop_path_rate": self.drop_path_rate}
        x = self.mbconv(self.features, self.strides, **rate, name="conv")(x, train)
        x = self.attention(grid=False, **rate, name="attn_block")(x, train)
        return self.attention(grid=True, **rate, name="attn_grid")(x, train)


class Stem(nn.Module):
    """A 3x3/2 convolution, BatchNorm and the activation (`norm1`), a 3x3 convolution; both
    convolutions biased (timm's `Stem` with `stem_bias=True`)."""

    features: int
    conv: ModuleDef
    norm: ModuleDef
    act: Callable
    padding: PaddingLike = "SAME"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        conv = partial(self.conv, self.features, (3, 3), padding=self.padding, use_bias=True)
        x = self.act(self.norm(name="norm1")(conv(strides=2, name="conv1")(x)))
        return conv(name="conv2")(x)


class MaxViTStage(nn.Module):
    """`depth` MaxViT blocks of `features` channels, the first strided."""

    depth: int
    features: int
    drop_path_rates: tuple[float, ...]
    mbconv: ModuleDef
    attention: ModuleDef
    remat: bool | str = False

    @nn.compact
    def __call__(self, x: jax.Array, train: bool) -> jax.Array:
        block = checkpointed(MaxViTBlock, self.remat, takes_train=True)
        for j in range(self.depth):
            x = block(
                self.features,
                2 if j == 0 else 1,
                self.drop_path_rates[j],
                self.mbconv,
                self.attention,
                name=f"blocks_{j}",
            )(x, train)
        return x


class MaxViT(nn.Module):
    """MaxViT with stages of `depths` blocks, `embed_dim` wide.

    Returns `(logits, end_points)`: logits `[batch, num_classes]`, or the pre-logits features
    `[batch, head_hidden_size]` (pooled, normalised, dense with tanh) when `num_classes` is 0 or
    None.
    """

    # The image size the network is made for (timm's `img_size`): the weights' evaluation size,
    # 224, 384 or 512, which sets the windows and grids, `default_image_size // partition_ratio`
    # a side.
    default_image_size: int = 224

    embed_dim: Sequence[int] = (64, 128, 256, 512)
    depths: Sequence[int] = (2, 2, 5, 2)
    stem_width: int = 64
    head_hidden_size: int | None = None  # the pre-logits' width; None: embed_dim[-1], as timm's
    dim_head: int = 32  # channels of each attention head
    mlp_ratio: float = 4.0  # the attention blocks' MLP width over the block's
    expand_ratio: float = 4.0  # MBConv's inner width over its output width
    se_ratio: float = 0.25  # squeeze-excite's width over MBConv's output width
    partition_ratio: int = 32
    num_classes: int | None = 1000
    dropout_rate: float = 0.0  # before the classifier (timm's `drop_rate`)
    # Stochastic depth of the residual branches, rising linearly from 0 at the first block to
    # this rate at the last (timm's schedule); training only, with the 'dropout' rng.
    drop_path_rate: float = 0.0
    # The TF weights' conventions (the module docstring): TensorFlow's padding, BatchNorm
    # epsilon 1e-3 (decay 0.9, timm's PyTorch momentum 0.1), GELU's tanh approximation,
    # LayerNorm epsilon 1e-5.
    padding: str = "SAME"
    bn_epsilon: float = BN_EPSILON
    bn_momentum: float = TORCH.momentum
    act_layer: Activation = "gelu_tanh"
    epsilon: float = LAYER_NORM_EPSILON
    dtype: Any = jnp.float32
    # 'auto': cuDNN's fused kernel on GPUs in half precision, else XLA's; 'xla' or 'cudnn' force.
    attention: Implementation = "auto"
    conv: ModuleDef = Conv
    remat: bool | str = False  # stem, blocks recomputed in backward (nets.layers.remat.POLICIES)

    def partition(self) -> Window:
        """The windows' and the grid's size, the same in every stage (timm's `window_size` and
        `grid_size` from its `img_size // partition_ratio`)."""
        side = self.default_image_size // self.partition_ratio
        return side, side

    @property
    def min_image_size(self) -> int:
        """The smallest image whose every stage map is a multiple of the partition (every layer
        halves a map to `ceil(n / 2)`): 221 px at 224's 7x7 windows."""
        p = self.partition()[0]
        return next(n for n in range(1, 2 ** len(self.depths) * 2 * p + 1) if self._fits(n, p))

    def _fits(self, side: int, partition: int) -> bool:
        """Whether every stage's map of an image `side` px a side splits into `partition`s."""
        return all(-(-side // 2 ** (i + 2)) % partition == 0 for i in range(len(self.depths)))

    def _check_size(self, height: int, width: int) -> None:
        """Refuses, before any layer, images whose maps do not split into the windows and grid
        (which `default_image_size` sets), naming the sizes near them that do, and the
        `default_image_size` that would make theirs split where one does."""
        p = self.partition()[0]
        if self._fits(height, p) and self._fits(width, p):
            return
        side, period = max(height, width), 2 ** (len(self.depths) + 1) * p  # 224 at 7x7
        spans = []  # runs of consecutive sizes that fit, within a period or two of `side`
        for n in range(max(1, side - 2 * period), side + 2 * period):
            if not self._fits(n, p):
                continue
            if spans and n == spans[-1][1] + 1:
                spans[-1][1] = n
            else:
                spans.append([n, n])
        closest = sorted(spans, key=lambda s: min(abs(s[0] - side), abs(s[1] - side)))[:2]
        said = " and ".join(f"{a}-{b}" if a < b else f"{a}" for a, b in sorted(closest))
        own = height // self.partition_ratio
        rebuilt = height == width and own >= 1 and self._fits(height, own)
        other = f", or build it with default_image_size={height}" if rebuilt else ""
        raise ImageSizeError(
            f"MaxViT (default_image_size={self.default_image_size}) splits every stage's map into "
            f"{p}x{p} windows, which {height}x{width} images' maps do not fit; sizes near it that "
            f"do: {said} px{other}"
        )

    def feature_strides(self) -> dict[str, int]:
        """timm's `feature_info`: the stem, then each stage's map."""
        return {"stem": 2, **{f"stage{i + 1}": 4 * 2**i for i in range(len(self.depths))}}

    def layer_id(self, path: tuple[str, ...]) -> int:
        """The depth of the parameter under module `path`, for layer-wise learning-rate decay
        (timm's `group_matcher`: one group a stage): 0 for the stem, `1 + i` for stage `i`, the
        head last."""
        if path[0] == "stem":
            return 0
        if path[0].startswith("stages_"):
            return 1 + int(path[0].removeprefix("stages_"))
        return 1 + len(self.depths)

    @nn.compact
    def __call__(self, x: jax.Array, train: bool = True):
        self._check()
        self._check_size(*x.shape[1:3])
        norm = batch_norm(
            TORCH._replace(epsilon=self.bn_epsilon, momentum=self.bn_momentum), train, self.dtype
        )
        conv = partial(self.conv, dtype=self.dtype)
        act = ACTIVATIONS[self.act_layer]
        end_points = {}
        stem = checkpointed(Stem, self.remat)  # the largest maps: one unit for remat
        stem = stem(self.stem_width, conv, norm, act, self.padding, name="stem")
        x = end_points["stem"] = stem(jnp.asarray(x, self.dtype))

        mbconv = partial(
            MBConv,
            conv=conv,
            norm=norm,
            act=act,
            expand_ratio=self.expand_ratio,
            se_ratio=self.se_ratio,
            padding=self.padding,
        )
        attention = partial(
            PartitionAttention,
            self.partition(),
            dim_head=self.dim_head,
            mlp_ratio=self.mlp_ratio,
            epsilon=self.epsilon,
            act_layer=self.act_layer,
            dtype=self.dtype,
            attention=self.attention,
        )
        rates = linear_drop_path_rates(self.drop_path_rate, sum(self.depths))
        for i, (depth, width) in enumerate(zip(self.depths, self.embed_dim, strict=True)):
            first = sum(self.depths[:i])
            stage = MaxViTStage(
                depth,
                width,
                tuple(rates[first : first + depth]),
                mbconv,
                attention,
                self.remat,
                name=f"stages_{i}",
            )
            x = end_points[f"stage{i + 1}"] = stage(x, train)

        x = nn.LayerNorm(self.epsilon, dtype=self.dtype, name="head_norm")(global_avg_pool(x))
        hidden = self.head_hidden_size or self.embed_dim[-1]
        dense = partial(nn.Dense, dtype=self.dtype, kernel_init=_INIT)
        x = jnp.tanh(dense(hidden, name="head_pre_logits")(x))
        return classify(
            x,
            end_points,
            self.num_classes,
            train=train,
            dropout_rate=self.dropout_rate,
            dtype=self.dtype,
            name="head",
            kernel_init=_INIT,
        )

    def _check(self) -> None:
        if len(self.depths) != len(self.embed_dim) or not self.depths:
            raise ValueError(
                f"MaxViT needs one width per stage: depths {tuple(self.depths)}, "
                f"embed_dim {tuple(self.embed_dim)}"
            )
        if self.partition()[0] < 1:
            raise ValueError(
                f"default_image_size {self.default_image_size} gives no window: it must be at "
                f"least partition_ratio ({self.partition_ratio})"
            )
        if self.act_layer not in ACTIVATIONS:
            raise ValueError(f"act_layer={self.act_layer!r} is not one of {sorted(ACTIVATIONS)}")
        check_drop_path_rate(self.drop_path_rate)


# timm's configurations (`model_cfgs['maxvit_*_tf']`: the paper's Table 1, MaxViT-T/S/B/L and
# the ImageNet-21k XL), at the sizes of the published weights.
_TINY = {"embed_dim": (64, 128, 256, 512), "depths": (2, 2, 5, 2), "stem_width": 64}
_SMALL = {"embed_dim": (96, 192, 384, 768), "depths": (2, 2, 5, 2), "stem_width": 64}
_BASE = {"embed_dim": (96, 192, 384, 768), "depths": (2, 6, 14, 2), "stem_width": 64}
_LARGE = {"embed_dim": (128, 256, 512, 1024), "depths": (2, 6, 14, 2), "stem_width": 128}
_XLARGE = {"embed_dim": (192, 384, 768, 1536), "depths": (2, 6, 14, 2), "stem_width": 192}
maxvit_tiny_tf_224 = partial(MaxViT, **_TINY)
maxvit_tiny_tf_384 = partial(MaxViT, **_TINY, default_image_size=384)
maxvit_tiny_tf_512 = partial(MaxViT, **_TINY, default_image_size=512)
maxvit_small_tf_224 = partial(MaxViT, **_SMALL)
maxvit_small_tf_384 = partial(MaxViT, **_SMALL, default_image_size=384)
maxvit_small_tf_512 = partial(MaxViT, **_SMALL, default_image_size=512)
maxvit_base_tf_224 = partial(MaxViT, **_BASE)
maxvit_base_tf_384 = partial(MaxViT, **_BASE, default_image_size=384)
maxvit_base_tf_512 = partial(MaxViT, **_BASE, default_image_size=512)
maxvit_large_tf_224 = partial(MaxViT, **_LARGE)
maxvit_large_tf_384 = partial(MaxViT, **_LARGE, default_image_size=384)
maxvit_large_tf_512 = partial(MaxViT, **_LARGE, default_image_size=512)
maxvit_xlarge_tf_224 = partial(MaxViT, **_XLARGE)
maxvit_xlarge_tf_384 = partial(MaxViT, **_XLARGE, default_image_size=384)
maxvit_xlarge_tf_512 = partial(MaxViT, **_XLARGE, default_image_size=512)

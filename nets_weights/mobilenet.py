"""timm's and torchvision's MobileNet V2 / V3 state dicts, as our `nets.mobilenet` (Slim's scopes).

timm builds both from its EfficientNet blocks: `conv_stem`, `bn1`, then `blocks.{stage}.{block}`,
where a block without expansion is a `DepthwiseSeparableConv` (`conv_dw`, `bn1`, `se`, `conv_pw`,
`bn2`) and one with expansion an `InvertedResidual` (`conv_pw`, `bn1`, `conv_dw`, `bn2`, `se`,
`conv_pwl`, `bn3`); squeeze-excite is `se.conv_reduce` / `se.conv_expand`. V3's 1x1 conv to 960
/ 576 is a last stage of one `ConvBnAct` (`blocks.{last}.0.conv` / `bn1`), its biased conv after
the pool `conv_head`; V2's 1x1 conv to 1280 is `conv_head` / `bn2`. The classifier is
`classifier`. Ours are flat: `Conv`, `expanded_conv`, `expanded_conv_1`, ..., `Conv_1`, `Conv_2`,
`Logits`. timm's stages are the runs of blocks of the same width in our tables.

torchvision numbers layers: `features.0` the stem, `features.{i + 1}` block `i` (V3:
`.block.{k}`, V2: `.conv.{k}`, `k` counting the block's expansion, depthwise, squeeze-excite
and projection layers that exist), `features.{n + 1}` the last conv before the pool; V3's
`classifier.0` is the Linear that is our `Conv_2`, `classifier.3` (V2: `classifier.1`) the logits.

Keras Applications' MobileNetV2 files (`mobilenet_v2_weights_tf_dim_ordering_tf_kernels_1.0_224.h5`,
...) name a layer per convolution and per BatchNorm: `Conv1` / `bn_Conv1`, block 0's
`expanded_conv_{depthwise,project}` and block `i`'s `block_{i}_{expand,depthwise,project}`, each
with a `_BN`, then `Conv_1` / `Conv_1_bn` and the Dense `predictions`. The function is Slim's:
its stride-2 padding (`ZeroPadding2D(correct_pad(x, 3))`, then 'valid') is one pixel at the
bottom/right of an even map and one on each side of an odd one, TensorFlow's 'SAME'; BatchNorm
epsilon 1e-3, ReLU6, Slim's rounded widths, and a last conv to `make_divisible(1280 * alpha, 8)`
above alpha 1, 1280 below it (our finegrain mode, which `mobilenet_v2_035` sets). Inputs are in
[-1, 1] (`preprocess_input`, mode 'tf'); 1000 classes.
"""

from itertools import groupby

import flax.linen as nn

from nets.layers import make_divisible
from nets_weights.convert import KERAS, Architecture, Layout, same_layout

_DEPTHWISE_SEPARABLE = {
    "depthwise/conv": "conv_dw",
    "depthwise/bn": "bn1",
    "project/conv": "conv_pw",
    "project/bn": "bn2",
}
_INVERTED_RESIDUAL = {
    "expand/conv": "conv_pw",
    "expand/bn": "bn1",
    "depthwise/conv": "conv_dw",
    "depthwise/bn": "bn2",
    "project/conv": "conv_pwl",
    "project/bn": "bn3",
}
_SQUEEZE_EXCITE = {
    "squeeze_excite/Conv": "se.conv_reduce",
    "squeeze_excite/Conv_1": "se.conv_expand",
}
_STEM = {"Conv/conv": "conv_stem", "Conv/bn": "bn1", "Logits": "classifier"}


def _expands(module: nn.Module) -> list[bool]:
    """Whether each block has an expansion convolution: `nets.layers.InvertedResidual`'s rule
    (an inner width `make_divisible(c_in * t, 8)` wider than its input)."""
    channels, expands = module.depth(module.stem_filters), []
    for block in module.blocks:
        expands.append(make_divisible(channels * block.expansion, 8) > channels)
        channels = module.depth(block.filters)
    return expands


def _block_index(scope: str) -> int:
    """`expanded_conv` -> 0, `expanded_conv_3` -> 3."""
    return int(scope.rpartition("_")[2]) if scope != "expanded_conv" else 0


def _refuse_fused(module: nn.Module) -> None:
    if any(block.fused for block in module.blocks):
        raise ValueError("EdgeTPU's fused blocks have no timm or torchvision layout here yet")


def timm_layout(module: nn.Module) -> Layout:
    """Our module paths -> timm's prefixes, for a built `nets.mobilenet.MobileNet`."""
    _refuse_fused(module)
    blocks = [
        (stage, j)
        for stage, (_, run) in enumerate(groupby(module.blocks, lambda b: b.filters))
        for j, _ in enumerate(run)
    ]
    stages = blocks[-1][0] + 1 if blocks else 0
    expands = _expands(module)
    # V3: the conv to 960 / 576 is timm's last stage and `conv_head` follows the pool (`Conv_2`);
    # V2: that conv is `conv_head` itself.
    head = (
        {"Conv_1/conv": f"blocks.{stages}.0.conv", "Conv_1/bn": f"blocks.{stages}.0.bn1"}
        if module.last_filters
        else {"Conv_1/conv": "conv_head", "Conv_1/bn": "bn2"}
    )
    head["Conv_2/conv"] = "conv_head"

    def source(path: tuple[str, ...]) -> str:
        if not path[0].startswith("expanded_conv"):
            return {**_STEM, **head}["/".join(path)]
        i = _block_index(path[0])
        stage, j = blocks[i]
        layers = {**(_INVERTED_RESIDUAL if expands[i] else _DEPTHWISE_SEPARABLE), **_SQUEEZE_EXCITE}
        return f"blocks.{stage}.{j}.{layers['/'.join(path[1:])]}"

    return source


def torchvision_layout(module: nn.Module) -> Layout:
    """Our module paths -> torchvision's prefixes, for a built `nets.mobilenet.MobileNet`."""
    _refuse_fused(module)
    expands, n, v3 = _expands(module), len(module.blocks), bool(module.last_filters)
    top = {
        "Conv/conv": "features.0.0",
        "Conv/bn": "features.0.1",
        "Conv_1/conv": f"features.{n + 1}.0",
        "Conv_1/bn": f"features.{n + 1}.1",
        "Conv_2/conv": "classifier.0",  # V3's Linear(960, 1280): a dense weight in a 1x1 conv
        "Logits": "classifier.3" if v3 else "classifier.1",
    }
    # A conv-norm-act layer is `.0` / `.1`, squeeze-excite `fc1` / `fc2`; V2's projection is a
    # bare conv and a BatchNorm, one entry of the block each.
    leaves = {"conv": "0", "bn": "1", "Conv": "fc1", "Conv_1": "fc2"}

    def source(path: tuple[str, ...]) -> str:
        if not path[0].startswith("expanded_conv"):
            return top["/".join(path)]
        i = _block_index(path[0])
        # The block's layers, numbered as torchvision's nn.Sequential numbers them.
        layers = ["expand"] * expands[i] + ["depthwise"] + ["squeeze_excite"] * module.blocks[i].se
        k = (layers + ["project"]).index(path[1])
        if v3:
            return f"features.{i + 1}.block.{k}.{leaves[path[2]]}"
        if path[1] == "project":
            return f"features.{i + 1}.conv.{k + (path[2] == 'bn')}"
        return f"features.{i + 1}.conv.{k}.{leaves[path[2]]}"

    return source


_KERAS_TOP = {
    "Conv/conv": "Conv1",
    "Conv/bn": "bn_Conv1",
    "Conv_1/conv": "Conv_1",
    "Conv_1/bn": "Conv_1_bn",
    "Logits": "predictions",
}


def keras_layout(path: tuple[str, ...]) -> str:
    """Our module path -> its Keras layer name, for a built V2 `nets.mobilenet.MobileNet`."""
    if not path[0].startswith("expanded_conv"):
        return _KERAS_TOP["/".join(path)]
    i = _block_index(path[0])
    name = f"block_{i}_{path[1]}" if i else f"expanded_conv_{path[1]}"
    return name if path[2] == "conv" else f"{name}_BN"


def _timm(network: str, padding: str, bn_epsilon: float) -> Architecture:
    return Architecture(
        network,
        {"padding": padding, "bn_epsilon": bn_epsilon},
        timm_layout,
        head=("Logits",),
        source_head="classifier",
    )


# timm's `tf_` networks are Slim's weights ported: Slim's 'SAME' padding and epsilon 1e-3, our
# defaults. Its own were trained in PyTorch: symmetric padding, epsilon 1e-5. The same tensors
# load under either convention: only the name (or a Hub folder's config.json) tells which.
_TF = ("SAME", 1e-3)
_TORCH = ("SYMMETRIC", 1e-5)
ARCHITECTURES = {
    "tf_mobilenetv3_large_100": _timm("mobilenet_v3_large", *_TF),
    "tf_mobilenetv3_small_100": _timm("mobilenet_v3_small", *_TF),
    "tf_mobilenetv3_large_minimal_100": _timm("mobilenet_v3_large_minimalistic", *_TF),
    "tf_mobilenetv3_small_minimal_100": _timm("mobilenet_v3_small_minimalistic", *_TF),
    "mobilenetv3_large_100": _timm("mobilenet_v3_large", *_TORCH),
    "mobilenetv3_small_100": _timm("mobilenet_v3_small", *_TORCH),
    "mobilenetv2_100": _timm("mobilenet_v2", *_TORCH),
    "mobilenetv2_140": _timm("mobilenet_v2_140", *_TORCH),
}


def _torchvision(network: str, bn_epsilon: float, source_head: str) -> Architecture:
    return Architecture(
        network,
        {"padding": "SYMMETRIC", "bn_epsilon": bn_epsilon},
        torchvision_layout,
        head=("Logits",),
        source_head=source_head,
    )


# torchvision's names, which are ours too. Its V3 BatchNorm has epsilon 1e-3 (V2's is PyTorch's
# default); both pad symmetrically.
ARCHITECTURES |= {
    "mobilenet_v2": _torchvision("mobilenet_v2", 1e-5, "classifier.1"),
    "mobilenet_v3_large": _torchvision("mobilenet_v3_large", 1e-3, "classifier.3"),
    "mobilenet_v3_small": _torchvision("mobilenet_v3_small", 1e-3, "classifier.3"),
}


def _keras(network: str) -> Architecture:
    # Slim's conventions (`_TF`, our defaults), stated so that a caller's `padding="SYMMETRIC"`
    # raises rather than computing another function.
    return Architecture(
        network,
        {"padding": _TF[0], "bn_epsilon": _TF[1]},
        same_layout(keras_layout),
        head=("Logits",),
        source_head="predictions",
        preprocessing={"mean": (0.5,) * 3, "std": (0.5,) * 3},
        framework=KERAS,
    )


# Keras's files name no architecture: every resolution's file of one alpha loads into one network,
# under `keras_mobilenet_v2_<alpha>` (`1_0` for the files' `1.0`). Its alphas 0.5, 0.75 and 1.3
# have no network in our registry.
ARCHITECTURES |= {
    "keras_mobilenet_v2_1_0": _keras("mobilenet_v2"),
    "keras_mobilenet_v2_1_4": _keras("mobilenet_v2_140"),
    "keras_mobilenet_v2_0_35": _keras("mobilenet_v2_035"),
}

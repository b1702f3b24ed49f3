"""Keras Applications' MobileNet (V1) weights (`mobilenet_1_0_224_tf.h5`, ...), as our
`nets.mobilenet_v1` (Slim's scopes).

Keras names a layer per convolution and per BatchNorm: `conv1` / `conv1_bn` (the stem),
`conv_dw_{i}` / `conv_dw_{i}_bn` and `conv_pw_{i}` / `conv_pw_{i}_bn` (separable layer `i`, 1 to
13), and `conv_preds`, a biased 1x1 convolution after the pool (our dense `Logits`). Ours are
`Conv2d_0`, `Conv2d_{i}_depthwise`, `Conv2d_{i}_pointwise`, each with `conv` and `bn`.

The function is Slim's but for one convention: Keras pads the stride-2 depthwise convolutions by
one pixel at the bottom/right only (`ZeroPadding2D(((0, 1), (0, 1)))`, then 'valid'), which is
'SAME' on even maps only. Its stem is 'SAME', BatchNorm epsilon 1e-3, ReLU6, widths
`int(filters * alpha)` (ours for the published alphas), and 1000 classes (Slim's have 1001).
Inputs are in [-1, 1] (Keras's `preprocess_input`, mode 'tf').
"""

from nets_weights.convert import KERAS, Architecture, same_layout

KERAS_PADDING = ((0, 1), (0, 1))
_LAYERS = {"Conv2d_0/conv": "conv1", "Conv2d_0/bn": "conv1_bn", "Logits": "conv_preds"}


def layout(path: tuple[str, ...]) -> str:
    """Our module path -> its Keras layer name (the same for every width)."""
    if "/".join(path) in _LAYERS:
        return _LAYERS["/".join(path)]
    scope, layer = path  # ('Conv2d_3_depthwise', 'bn')
    _, i, kind = scope.split("_")
    name = f"conv_{'dw' if kind == 'depthwise' else 'pw'}_{i}"
    return name if layer == "conv" else f"{name}_bn"


def _keras(network: str) -> Architecture:
    return Architecture(
        network,
        {"downsample_padding": KERAS_PADDING},
        same_layout(layout),
        head=("Logits",),
        source_head="conv_preds",
        preprocessing={"mean": (0.5,) * 3, "std": (0.5,) * 3},
        framework=KERAS,
    )


# Keras's files name no architecture: every resolution's file of one width
# (`mobilenet_2_5_128_tf.h5` ... `mobilenet_2_5_224_tf.h5`) loads into the same network, under
# `keras_mobilenet_<alpha>` (the files' own alpha spelling) or our registry name.
_WIDTHS = {"1_0": "mobilenet_v1", "7_5": "mobilenet_v1_075"}
_WIDTHS |= {"5_0": "mobilenet_v1_050", "2_5": "mobilenet_v1_025"}
ARCHITECTURES = {f"keras_mobilenet_{alpha}": _keras(net) for alpha, net in _WIDTHS.items()}
ARCHITECTURES |= {net: _keras(net) for net in _WIDTHS.values()}

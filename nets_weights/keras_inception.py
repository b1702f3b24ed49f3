"""Keras Applications' InceptionV3 and InceptionResNetV2 weights
(`inception_v3_weights_tf_dim_ordering_tf_kernels.h5`,
`inception_resnet_v2_weights_tf_dim_ordering_tf_kernels.h5`), as our `nets.inception_v3` and
`nets.inception_resnet_v2`.

Keras builds every convolution with `conv2d_bn` (a bias-free `Conv2D`, a `BatchNormalization`
without scale, ReLU) and names most of them automatically: `conv2d_7`, `batch_normalization_7`.
Those numbers count the layers as Keras built them, which is the order of our layer tables (each
block's branches in turn, each branch's layers in turn), but not the order the file lists them
in (Keras sorts a model's layers by their depth in the graph), and they start wherever the
session's counter stood: from 1 in the published files (Keras 2), from 0 in a fresh Keras 3
session (`conv2d`, `conv2d_1`), from 94 in a second InceptionV3 of one session. So `renumber`
ranks each kind's numbers and names the layers as the published files do, `conv2d_1` for the
first built; the layouts pair the `i`-th of our `ConvNormAct`s in table order with `conv2d_i` and
`batch_normalization_i`. InceptionResNetV2's other layers have names: each residual block's biased
up-projection `block35_1_conv` ... `block8_10_conv` (our `Repeat/block35_1/Conv2d_1x1` ...
`Block8/Conv2d_1x1`), `conv_7b` / `conv_7b_bn` (our `Conv2d_7b_1x1`). Both end in global average
pooling and the Dense `predictions` (InceptionV3's fills our 1x1 convolution
`Logits/Conv2d_1c_1x1`, InceptionResNetV2's our dense `Logits/Logits`).

The function is Slim's, as our defaults compute it: TensorFlow's 'same' padding, the strided
layers 'valid', average pools that leave the padding out, BatchNorm epsilon 1e-3 and no scale;
InceptionResNetV2's residual scales 0.17, 0.1, 0.2 and an unscaled, unactivated last block. Keras
has no auxiliary head and 1000 classes (Slim's have 1001). Inputs are in [-1, 1]
(`preprocess_input`, mode 'tf'), 299 px.
"""

import re
from collections.abc import Iterable, Iterator

from nets import inception_resnet_v2 as irv2
from nets import inception_v3 as v3
from nets.inception_utils import Concat, Conv2d, Mixed
from nets_weights.convert import KERAS, Architecture, Layout, same_layout

Path = tuple[str, ...]
_AUTOMATIC = re.compile(r"(conv2d|batch_normalization)(?:_(\d+))?")


def renumber(keys: Iterable[str]) -> dict[str, str]:
    """The file's keys -> the same with the automatic layer names numbered as the published
    files number them, from 1 in the order Keras built the layers (`conv2d/kernel:0` ->
    `conv2d_1/kernel:0` in a Keras 3 file)."""
    keys = list(keys)
    numbers: dict[str, set[int]] = {}
    for key in keys:
        if automatic := _AUTOMATIC.fullmatch(key.partition("/")[0]):
            numbers.setdefault(automatic[1], set()).add(int(automatic[2] or 0))
    rank = {(kind, n): i for kind, found in numbers.items() for i, n in enumerate(sorted(found), 1)}

    def published(key: str) -> str:
        layer, _, leaf = key.partition("/")
        automatic = _AUTOMATIC.fullmatch(layer)
        if not automatic:
            return key
        return f"{automatic[1]}_{rank[automatic[1], int(automatic[2] or 0)]}/{leaf}"

    return {key: published(key) for key in keys}


def _convolutions(layers: tuple, scope: Path = ()) -> Iterator[Path]:
    """Our paths of the `Conv2d`s of a layer table, in the order the network builds them."""
    for layer in layers:
        if isinstance(layer, Conv2d):
            yield (*scope, layer.name)
        elif isinstance(layer, Concat):
            yield from _convolutions(layer.layers, scope)
        elif isinstance(layer, Mixed):
            for i, branch in enumerate(layer.branches):
                yield from _convolutions(branch, (*scope, layer.name, f"Branch_{i}"))


def _numbered(paths: Iterable[Path]) -> dict[Path, int]:
    return {path: i for i, path in enumerate(paths, 1)}


_V3 = _numbered(_convolutions(v3._INCEPTION_V3))


def _residual(scope: str, prefix: str, count: int, branches: tuple) -> list[tuple]:
    """Our residual blocks `scope/{prefix}_{i}` as `Mixed` layers of that name (their branches
    are scoped alike), each with Keras's name for it."""
    names = [f"{prefix}_{i}" for i in range(1, count + 1)]
    return [((scope,), Mixed(name, branches), name) for name in names]


# Our Inception-ResNet-v2 in the order Keras builds it: (scope, layer, Keras's name of a residual
# block or None). The last `Block8` is Keras's `block8_10`.
_IRV2_ORDER = (
    *(((), layer, None) for layer in irv2._STEM),
    *_residual("Repeat", "block35", 10, irv2._BLOCK35),
    ((), irv2._MIXED_6A, None),
    *_residual("Repeat_1", "block17", 20, irv2._BLOCK17),
    ((), irv2._MIXED_7A, None),
    *_residual("Repeat_2", "block8", 9, irv2._BLOCK8),
    ((), Mixed("Block8", irv2._BLOCK8), "block8_10"),
)


def _irv2() -> tuple[dict[Path, int], dict[Path, str]]:
    """Our Inception-ResNet-v2's automatically named convolutions, numbered in the order Keras
    builds them, and its named layers with their Keras names."""
    automatic = []
    named = {("Conv2d_7b_1x1",): "conv_7b", ("Logits", "Logits"): "predictions"}
    for scope, layer, block in _IRV2_ORDER:
        automatic += _convolutions((layer,), scope)
        if block:  # the biased up-projection
            named[(*scope, layer.name, "Conv2d_1x1")] = f"{block}_conv"
    return _numbered(automatic), named


_IRV2, _IRV2_NAMED = _irv2()
_V3_NAMED = {("Logits", "Conv2d_1c_1x1"): "predictions"}
_LEAF_MODULES = {"conv": "conv2d", "BatchNorm": "batch_normalization"}


def _layout(numbered: dict[Path, int], named: dict[Path, str]) -> Layout:
    def source(path: Path) -> str:
        if path in named:
            return named[path]
        if path[:-1] in named:  # `Conv2d_7b_1x1/BatchNorm`: Keras's `conv_7b_bn`
            return f"{named[path[:-1]]}_bn" if path[-1] == "BatchNorm" else named[path[:-1]]
        return f"{_LEAF_MODULES[path[-1]]}_{numbered[path[:-1]]}"

    return source


def _keras(network: str, numbered: dict[Path, int], named: dict[Path, str], head: Path):
    layout = _layout(numbered, named)
    return Architecture(
        network,
        # Slim's function (our defaults), stated so that torchvision's and timm's conventions
        # (a BatchNorm scale, pools that count the padding) raise rather than compute another.
        {"batch_norm_scale": False, "count_include_pad": False, "create_aux_logits": False},
        same_layout(layout),
        head=head,
        source_head="predictions",
        preprocessing={"image_size": 299, "mean": (0.5,) * 3, "std": (0.5,) * 3},
        framework=KERAS,
        rename=renumber,
    )


INCEPTION_V3 = _keras("inception_v3", _V3, _V3_NAMED, ("Logits", "Conv2d_1c_1x1"))
INCEPTION_RESNET_V2 = _keras("inception_resnet_v2", _IRV2, _IRV2_NAMED, ("Logits", "Logits"))
# Keras's files name no architecture: `keras_<theirs>`, or our registry names, whose timm entries
# take them as an alternative key layout (their classifier is `predictions`).
ARCHITECTURES = {
    "keras_inception_v3": INCEPTION_V3,
    "keras_inception_resnet_v2": INCEPTION_RESNET_V2,
}

"""torchvision's and timm's DenseNet state dicts, as our `nets.densenet`.

Both libraries' keys are torchvision's module paths under `features`: `features.conv0`,
`features.norm0`, `features.denseblock{b}.denselayer{l}.norm1` / `conv1` / `norm2` / `conv2`,
`features.transition{b}.norm` / `conv`, `features.norm5`, then `classifier`; ours are the same
paths without `features` (timm's `densenet121.tv_in1k` .. `densenet201.tv_in1k` are
torchvision's weights re-saved, `densenet121.ra_in1k` timm's own).

torchvision's `.pth` downloads were saved before PyTorch allowed dots in module names: their
dense layers' keys read `denselayer1.norm.1.weight` for `denselayer1.norm1.weight` (and
`relu.1`, `conv.1`, ... likewise). torchvision renames them when it loads such a file; `rename`
does the same here, so either spelling loads.

Keras Applications' files (`densenet121_weights_tf_dim_ordering_tf_kernels.h5`, 169, 201) name a
layer per convolution and per BatchNorm: `conv1/conv` / `conv1/bn` (the stem; Keras 3 spells them
`conv1_conv` / `conv1_bn`), dense layer `l` of block `b` `conv{b + 1}_block{l}_0_bn`, `_1_conv`,
`_1_bn`, `_2_conv`, transition `b` `pool{b + 1}_bn` / `pool{b + 1}_conv`, the last BatchNorm `bn`
and the Dense classifier `predictions` (keras-applications' builder called it `fc1000`);
`keras_rename` reads either spelling. The function is torchvision's (the stem's 3-pixel and the
max pool's 1-pixel zero padding are symmetric, and zeros pad the max pool's non-negative inputs
as -inf would) but for BatchNorm epsilon 1.001e-5 (`bn_epsilon`). Inputs as torchvision's:
`densenet.preprocess_input` is mode 'torch', ImageNet's mean and std of [0, 1] RGB.
"""

import re
from collections.abc import Collection

from nets_weights.convert import KERAS, Architecture, same_layout

_OLD_KEY = re.compile(r"^(.*denselayer\d+\.(?:norm|relu|conv))\.([12])\.(\w+)$")


def rename(keys: Collection[str]) -> dict[str, str]:
    """torchvision's old `denselayer{l}.norm.1.weight` keys -> `denselayer{l}.norm1.weight`;
    other keys as they are."""
    return {key: _OLD_KEY.sub(r"\1\2.\3", key) for key in keys}


def layout(path: tuple[str, ...]) -> str:
    """Our module path -> the libraries' prefix: `features.` before all but the classifier."""
    return ".".join(path if path == ("classifier",) else ("features", *path))


_KERAS_TOP = {
    "conv0": "conv1/conv",
    "norm0": "conv1/bn",
    "norm5": "bn",
    "classifier": "predictions",
}
_KERAS_LAYER = {"norm1": "0_bn", "conv1": "1_conv", "norm2": "1_bn", "conv2": "2_conv"}
_KERAS_SPELLINGS = re.compile(r"^(?:conv1_(conv|bn)|fc1000)/")


def keras_rename(keys: Collection[str]) -> dict[str, str]:
    """Keras 3's `conv1_conv/kernel:0` and keras-applications' `fc1000/kernel:0` -> Keras 2's
    `conv1/conv/kernel:0` and `predictions/kernel:0`; other keys as they are."""
    published = lambda m: f"conv1/{m[1]}/" if m[1] else "predictions/"  # noqa: E731
    return {key: _KERAS_SPELLINGS.sub(published, key) for key in keys}


def keras_layout(path: tuple[str, ...]) -> str:
    """Our module path -> its Keras layer name."""
    if len(path) == 1:
        return _KERAS_TOP[path[0]]
    if path[0].startswith("transition"):  # ('transition1', 'norm') -> 'pool2_bn'
        block = int(path[0].removeprefix("transition")) + 1
        return f"pool{block}_{'bn' if path[1] == 'norm' else 'conv'}"
    block = int(path[0].removeprefix("denseblock")) + 1
    layer = int(path[1].removeprefix("denselayer"))
    return f"conv{block}_block{layer}_{_KERAS_LAYER[path[2]]}"


def _keras(network: str) -> Architecture:
    return Architecture(
        network,
        {"bn_epsilon": 1.001e-5},
        same_layout(keras_layout),
        head=("classifier",),
        source_head="predictions",
        framework=KERAS,
        rename=keras_rename,
    )


def _architecture(network: str) -> Architecture:
    # The function is torchvision's at our defaults (symmetric padding, PyTorch's epsilon).
    # Keras's files (classifier `predictions`) load under the same name, with their epsilon.
    keras = (_keras(network),) if network != "densenet161" else ()
    return Architecture(
        network,
        {"bn_epsilon": 1e-5},
        same_layout(layout),
        head=("classifier",),
        source_head="classifier",
        rename=rename,
        alternatives=keras,
    )


# torchvision's names, which are timm's and ours too; Keras has no DenseNet-161.
ARCHITECTURES = {
    name: _architecture(name)
    for name in ("densenet121", "densenet161", "densenet169", "densenet201")
}
ARCHITECTURES |= {
    f"keras_{name}": _keras(name) for name in ("densenet121", "densenet169", "densenet201")
}

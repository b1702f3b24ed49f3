"""timm's Inception v4 and Inception-ResNet-v2 state dicts, as our `nets.inception_v4` and
`nets.inception_resnet_v2`.

timm's files (`inception_v4.tf_in1k`, `inception_resnet_v2.tf_in1k`, `.tf_ens_adv_in1k`) are
ports of TF-Slim's checkpoints, which our networks' scopes name; timm's module names are
positions instead. Their names pair up with ours by position in our layer tables: a branch of one
layer is the module itself (`branch0`), a longer branch an `nn.Sequential` whose indices count the
pools too (`branch3.1` after the average pool); v4's Inception-C blocks name their layers flat
(`branch2_3a`, `branch2_3b` for a `Concat`'s pair). v4's blocks are `features.N` in table order;
Inception-ResNet-v2's stem convolutions are Slim's names lower-cased without the kernel size
(`conv2d_4a`), its repeated blocks `repeat.N` .. `repeat_2.N` (`block35_{N + 1}` ..), each block's
biased projection `conv2d`. Their `ConvNormAct` is `conv` + `bn`, ours `conv` + `BatchNorm`;
their classifiers `last_linear` / `classif` are our dense `Logits/Logits`.
"""

from nets import inception_resnet_v2 as irv2
from nets import inception_v4 as v4  # our layer tables, which the names pair up with
from nets.inception_utils import Concat, Conv2d, Mixed
from nets_weights import keras_inception
from nets_weights.convert import Architecture, Layout, same_layout
from nets_weights.inception import INCEPTION_INPUTS, LEAF_MODULES

Names = dict[tuple[str, ...], str]


def _branch_names(branches: tuple) -> Names:
    """timm's names of a block's convolutions: `{('Branch_1', 'Conv2d_0b_3x3'): 'branch1.1'}`."""
    names = {}
    for i, layers in enumerate(branches):
        flat = any(isinstance(layer, Concat) for layer in layers)
        for j, layer in enumerate(layers):
            if isinstance(layer, Concat):
                for letter, member in zip("ab", layer.layers, strict=True):
                    names[(f"Branch_{i}", member.name)] = f"branch{i}_{j}{letter}"
            elif isinstance(layer, Conv2d):
                single = f"branch{i}" if len(layers) == 1 else f"branch{i}.{j}"
                names[(f"Branch_{i}", layer.name)] = f"branch{i}_{j}" if flat else single
    return names


def _prefixed(scope: tuple[str, ...], prefix: str, names: Names) -> Names:
    return {(*scope, *path): f"{prefix}.{name}" for path, name in names.items()}


def _with_leaf(names: Names, path: tuple[str, ...]) -> str:
    """`names[path]`, or for a `ConvNormAct`'s `conv` / `BatchNorm` its module's `.conv` / `.bn`."""
    if path[-1] in LEAF_MODULES:
        return f"{names[path[:-1]]}.{LEAF_MODULES[path[-1]]}"
    return names[path]


def _v4_names() -> Names:
    """`{('Mixed_6b', 'Branch_1', 'Conv2d_0b_1x7'): 'features.7.branch1.1', ...}`."""
    names = {("Logits", "Logits"): "last_linear"}
    for i, layer in enumerate(v4._INCEPTION_V4):
        if isinstance(layer, Conv2d):
            names[(layer.name,)] = f"features.{i}"
        elif isinstance(layer, Mixed):
            block = _branch_names(layer.branches)
            if layer.name in ("Mixed_3a", "Mixed_5a"):  # timm's `conv` beside a `maxpool`
                block = dict.fromkeys(block, "conv")
            names.update(_prefixed((layer.name,), f"features.{i}", block))
    return names


_V4_NAMES = _v4_names()


def v4_layout(path: tuple[str, ...]) -> str:
    """Our Inception v4 module path -> timm's prefix."""
    return _with_leaf(_V4_NAMES, path)


def _residual_names(branches: tuple) -> Names:
    return {**_branch_names(branches), ("Conv2d_1x1",): "conv2d"}


# Slim's `slim.repeat` scopes, timm's `nn.Sequential`s, and their blocks' names.
_REPEATS = {
    "Repeat": ("repeat", _residual_names(irv2._BLOCK35)),
    "Repeat_1": ("repeat_1", _residual_names(irv2._BLOCK17)),
    "Repeat_2": ("repeat_2", _residual_names(irv2._BLOCK8)),
}


def _irv2_names() -> Names:
    """`{('Conv2d_4a_3x3',): 'conv2d_4a', ('Block8', 'Conv2d_1x1'): 'block8.conv2d', ...}`;
    the repeated blocks are `_REPEATS`."""
    names = {
        ("Logits", "Logits"): "classif",
        ("Conv2d_7b_1x1",): "conv2d_7b",
        **_prefixed(("Block8",), "block8", _residual_names(irv2._BLOCK8)),
    }
    for layer in (*irv2._STEM, irv2._MIXED_6A, irv2._MIXED_7A):
        if isinstance(layer, Conv2d):
            names[(layer.name,)] = layer.name.lower().rsplit("_", 1)[0]
        elif isinstance(layer, Mixed):
            names.update(
                _prefixed((layer.name,), layer.name.lower(), _branch_names(layer.branches))
            )
    return names


_IRV2_NAMES = _irv2_names()


def irv2_layout(path: tuple[str, ...]) -> str:
    """Our Inception-ResNet-v2 module path -> timm's prefix (`Repeat_1/block17_3` is
    `repeat_1.2`)."""
    if path[0] not in _REPEATS:
        return _with_leaf(_IRV2_NAMES, path)
    sequential, names = _REPEATS[path[0]]
    index = int(path[1].rsplit("_", 1)[1]) - 1
    return f"{sequential}.{index}.{_with_leaf(names, path[2:])}"


def _architecture(
    network: str,
    layout: Layout,
    source_head: str,
    crop_fraction: float,
    alternatives: tuple[Architecture, ...] = (),
) -> Architecture:
    # Slim's function, as timm computes it: stride-1 padding is symmetric in both, the strided
    # layers VALID, the average pools leave the padding out, BatchNorm's epsilon is 1e-3. The
    # port added a BatchNorm scale of ones (Slim's checkpoints have none); it is loaded as a
    # variable, so a file with other scales (fine-tuned in timm) computes timm's function too.
    convention = {"batch_norm_scale": True, "count_include_pad": False, "create_aux_logits": False}
    return Architecture(
        network,
        convention,
        same_layout(layout),
        head=("Logits", "Logits"),
        source_head=source_head,
        preprocessing={
            "image_size": 299,
            "crop_fraction": crop_fraction,
            "interpolation": "bicubic",
            **INCEPTION_INPUTS,
        },
        alternatives=alternatives,
    )


# timm's files have no auxiliary head (Slim's `AuxLogits` was not ported). Keras's
# InceptionResNetV2 files (`predictions`, not `classif`) load under `inception_resnet_v2` too.
ARCHITECTURES = {
    "inception_v4": _architecture("inception_v4", v4_layout, "last_linear", 0.875),
    "inception_resnet_v2": _architecture(
        "inception_resnet_v2",
        irv2_layout,
        "classif",
        0.8975,
        alternatives=(keras_inception.INCEPTION_RESNET_V2,),
    ),
}

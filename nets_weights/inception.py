"""timm's / torchvision's Inception v3 and torchvision's GoogLeNet state dicts, as our
`nets.inception_v3` and `nets.inception_v1.GoogLeNet`.

Inception v3: torchvision's module names (which timm keeps) are the layers' roles, ours Slim's
scopes; within a mixed block both list the same convolutions in the same order, so each branch's
names pair up by position (`Mixed_5b/Branch_1/Conv2d_0b_5x5` is `Mixed_5b.branch5x5_2`). Their
`BasicConv2d` is `conv` + `bn`, ours `conv` + `BatchNorm`; their classifier `fc` is a Linear,
ours the 1x1 convolution `Logits/Conv2d_1c_1x1` (`convert` reshapes the weight). GoogLeNet's
module names are torchvision's already.

Both published files carry training-only auxiliary classifiers (`AuxLogits`, `aux1`/`aux2`); the
networks leave them out, as torchvision's and timm's own constructors do when they load these
files, so a new class count can be fine-tuned. (GoogLeNet built with `aux_logits=True` loads its
heads too.)
"""

from nets.inception_utils import Concat, Conv2d, Mixed
from nets.inception_v3 import _INCEPTION_V3  # our layer order, which the names pair up with
from nets_weights import keras_inception
from nets_weights.convert import Architecture

# torchvision's convolutions of each kind of block, branch by branch, in the order of ours.
_A = (
    ("branch1x1",),
    ("branch5x5_1", "branch5x5_2"),
    ("branch3x3dbl_1", "branch3x3dbl_2", "branch3x3dbl_3"),
    ("branch_pool",),
)
_B = (("branch3x3",), ("branch3x3dbl_1", "branch3x3dbl_2", "branch3x3dbl_3"), ())
_C = (
    ("branch1x1",),
    ("branch7x7_1", "branch7x7_2", "branch7x7_3"),
    tuple(f"branch7x7dbl_{i}" for i in range(1, 6)),
    ("branch_pool",),
)
_D = (("branch3x3_1", "branch3x3_2"), tuple(f"branch7x7x3_{i}" for i in range(1, 5)), ())
_E = (
    ("branch1x1",),
    ("branch3x3_1", "branch3x3_2a", "branch3x3_2b"),
    ("branch3x3dbl_1", "branch3x3dbl_2", "branch3x3dbl_3a", "branch3x3dbl_3b"),
    ("branch_pool",),
)
_BLOCKS = {
    **dict.fromkeys(("Mixed_5b", "Mixed_5c", "Mixed_5d"), _A),
    "Mixed_6a": _B,
    **dict.fromkeys(("Mixed_6b", "Mixed_6c", "Mixed_6d", "Mixed_6e"), _C),
    "Mixed_7a": _D,
    **dict.fromkeys(("Mixed_7b", "Mixed_7c"), _E),
}
LEAF_MODULES = {"conv": "conv", "BatchNorm": "bn"}


def _convolutions(layers: tuple) -> list[str]:
    """The names of a branch's `Conv2d` layers, in order (a `Concat`'s included)."""
    names = []
    for layer in layers:
        if isinstance(layer, Concat):
            names += _convolutions(layer.layers)
        elif isinstance(layer, Conv2d):
            names.append(layer.name)
    return names


def _v3_names() -> dict[tuple[str, ...], str]:
    """`{('Mixed_5b', 'Branch_1', 'Conv2d_0b_5x5'): 'Mixed_5b.branch5x5_2', ...}`."""
    names = {("Logits", "Conv2d_1c_1x1"): "fc"}
    for layer in _INCEPTION_V3:
        if isinstance(layer, Conv2d):
            names[(layer.name,)] = layer.name
        if not isinstance(layer, Mixed):
            continue
        theirs = _BLOCKS[layer.name]
        for i, (branch, torch_names) in enumerate(zip(layer.branches, theirs, strict=True)):
            ours = _convolutions(branch)
            for name, torch_name in zip(ours, torch_names, strict=True):
                names[(layer.name, f"Branch_{i}", name)] = f"{layer.name}.{torch_name}"
    return names


_V3_NAMES = _v3_names()


def v3_layout(path: tuple[str, ...]) -> str:
    """Our Inception v3 module path -> the torch prefix."""
    if path[-1] in LEAF_MODULES:
        return f"{_V3_NAMES[path[:-1]]}.{LEAF_MODULES[path[-1]]}"
    return _V3_NAMES[path]


def googlenet_layout(path: tuple[str, ...]) -> str:
    """Our GoogLeNet's module paths are torchvision's: `inception3a/branch2/0/conv`."""
    return ".".join(path)


# torchvision's `transform_input=True` (set when its weights load) turns ImageNet-normalised
# images into `(x - 0.5) / 0.5`, which these weights expect; timm's configs say the same.
INCEPTION_INPUTS = {"mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5)}


def _inception_v3(count_include_pad: bool, alternatives: tuple = ()) -> Architecture:
    convention = {
        "batch_norm_scale": True,
        "count_include_pad": count_include_pad,
        "create_aux_logits": False,
    }
    return Architecture(
        "inception_v3",
        convention,
        lambda module: v3_layout,
        head=("Logits", "Conv2d_1c_1x1"),
        source_head="fc",
        dropped=("AuxLogits",),
        preprocessing={"image_size": 299, **INCEPTION_INPUTS},
        alternatives=alternatives,
    )


# `inception_v3`: timm's function, which is torchvision's: BatchNorm with a scale (epsilon 1e-3
# as Slim's), average pools that count the padding; for torchvision's weights (timm's `tv_in1k`)
# and timm's others without an entry here (`gluon_in1k`). `inception_v3.tf_in1k` /
# `.tf_adv_in1k`: timm's ports of Slim's checkpoints, run as TensorFlow trained them, with pools
# that leave the padding out (timm runs them with PyTorch's pools, another function); the port
# has a BatchNorm scale. A config.json with timm's tag picks these; a file without one needs the
# tagged name. The strided layers are VALID and stride-1 padding is symmetric in both libraries.
# Keras's files (`predictions`, not `fc`) load under `inception_v3` too (keras_inception.py).
ARCHITECTURES = {
    "inception_v3": _inception_v3(
        count_include_pad=True, alternatives=(keras_inception.INCEPTION_V3,)
    ),
    "inception_v3.tf_in1k": _inception_v3(count_include_pad=False),
    "inception_v3.tf_adv_in1k": _inception_v3(count_include_pad=False),
    "googlenet": Architecture(
        "googlenet",
        {},  # our GoogLeNet is torchvision's function
        lambda module: googlenet_layout,
        head=("fc",),
        source_head="fc",
        dropped=("aux1", "aux2"),
        preprocessing=INCEPTION_INPUTS,
    ),
}

"""timm's `pnasnet5large` and `nasnetalarge` (TF-Slim's ImageNet checkpoints, ported by Cadene)
as our `pnasnet_large` and `nasnet_large`; Keras Applications' `NASNet-mobile.h5` and
`NASNet-large.h5` as our `nasnet_mobile` and `nasnet_large`.

Both files keep Slim's cell and combination names (`cell_stem_0`, `reduction_cell_1`, `cell_11`,
`comb_iter_3_left`). Within a cell, our `conv_1x1` + `beginning_bn` is their `conv_1x1.conv` /
`.bn`, `prev_1x1` + `prev_bn` their `conv_prev_1x1.conv` / `.bn`; a stacked separable operation's
`separable_5x5_2_depthwise` / `_pointwise` / `bn_sep_5x5_2` is `separable_2.depthwise_conv2d` /
`.pointwise_conv2d` / `bn_sep_2`, a pool's or a strided identity's 1x1 projection `conv` / `bn`.
Our factorized reduction of the older input (`prev_reduction`: `path1_conv`, `path2_conv`,
`final_path_bn`) is `path_1.conv`, `path_2.conv`, `final_path_bn`, inside `conv_prev_1x1` in
PNASNet's file and at the cell's top in NASNet's. The stem is `conv_0` (PNASNet) / `conv0`
(NASNet) with its `.conv` and `.bn`; the classifier `last_linear`.

The functions are Slim's, which our defaults compute: TensorFlow's SAME padding (timm builds
both with `pad_type='same'`: asymmetric on even maps, -inf for max pools), BatchNorm epsilon
1e-3 with a scale, the factorized reduction's shifted path, the same combinations and outputs
in the same order, ReLU before the global pool. One exception, which we do not copy: timm's
stride-2 average pools (NASNet's `comb_iter_2_left` in the stem and reduction cells) pad
explicitly and then divide by 9 on even maps where TensorFlow leaves the padding out of the
average; we run the weights as Slim trained them (at 331 px only `reduction_cell_0`, on a 42x42
map, is affected). Neither file has Slim's training-only auxiliary head.

Keras's files (`keras_layout`) have no auxiliary head either. Keras's NASNet is Slim's function
(measured on fixtures its `NASNet(...)` builder wrote: its `correct_pad` padding of the stride-2
separable convolutions is 'SAME' on even and odd maps) but for the reduction cells' stride-2
pools, which read a zero-padded map with 'valid' windows: the zeros enter the max and count in
the average (`strided_pool_padding='ZEROS'`; TensorFlow's 'SAME' pools, Slim's, ignore them).
Keras's 1000 classes have no background class; its inputs are in [-1, 1] (mode 'tf').
"""

import dataclasses

import flax.linen as nn

from nets.nasnet import reduction_layers
from nets_weights.convert import KERAS, Architecture, Layout

_OUTSIDE = {"conv0": "conv", "conv0_bn": "bn"}
_CELL = {
    "conv_1x1": "conv_1x1.conv",
    "beginning_bn": "conv_1x1.bn",
    "prev_1x1": "conv_prev_1x1.conv",
    "prev_bn": "conv_prev_1x1.bn",
}
_REDUCTION = {"path1_conv": "path_1.conv", "path2_conv": "path_2.conv"}
_PROJECTION = {"conv_1x1": "conv", "bn_1": "bn"}  # after a pool, or a strided identity


def layout(stem: str, reduction: str) -> Layout:
    """Our module paths -> timm's prefixes: `stem` is the stem convolution's module (`conv_0`),
    `reduction` the prefix of a cell's factorized reduction (`conv_prev_1x1.`, or '')."""

    def source(path: tuple[str, ...]) -> str:
        if path == ("final_layer",):
            return "last_linear"
        if len(path) == 1:
            return f"{stem}.{_OUTSIDE[path[0]]}"
        cell, module, *rest = path
        if module in _CELL:
            return f"{cell}.{_CELL[module]}"
        if module == "prev_reduction":
            return f"{cell}.{reduction}{_REDUCTION.get(rest[0], rest[0])}"
        (layer,) = rest  # comb_iter_{i}_{left,right}: one operation's layers
        if layer in _PROJECTION:
            return f"{cell}.{module}.{_PROJECTION[layer]}"
        # separable_5x5_2_depthwise -> separable_2.depthwise_conv2d; bn_sep_5x5_2 -> bn_sep_2
        parts = layer.split("_")
        if parts[0] == "bn":
            return f"{cell}.{module}.bn_sep_{parts[3]}"
        return f"{cell}.{module}.separable_{parts[2]}.{parts[3]}_conv2d"

    return source


def _architecture(network: str, stem: str, reduction: str) -> Architecture:
    return Architecture(
        network,
        # Slim's functions (our defaults); the files have no auxiliary head.
        {"use_aux_head": False},
        lambda module: layout(stem, reduction),
        head=("final_layer",),
        source_head="last_linear",
        # Both were trained on 331 px images scaled to [-1, 1] (timm's pretrained_cfg).
        preprocessing={
            "image_size": 331,
            "crop_fraction": 0.911,
            "interpolation": "bicubic",
            "mean": (0.5, 0.5, 0.5),
            "std": (0.5, 0.5, 0.5),
        },
    )


_KERAS_OUTSIDE = {"conv0": "stem_conv1", "conv0_bn": "stem_bn1", "final_layer": "predictions"}
_KERAS_ADJUST = {  # the older input's 1x1 projection or factorized reduction
    "prev_1x1": "adjust_conv_projection",
    "prev_bn": "adjust_bn",
    "path1_conv": "adjust_conv_1",
    "path2_conv": "adjust_conv_2",
    "final_path_bn": "adjust_bn",
}


def keras_layout(module: nn.Module) -> Layout:
    """Our module paths -> Keras's layer names, for a built `nets.nasnet.NASNet`.

    Keras numbers its blocks `stem_1`, `stem_2`, then normal cells `0`.. with the reduction cells
    among them (`reduce_{n}` after the n-th normal cell, which shifts the later ones by one), and
    a cell's branches by combination (`normal_left1` is `comb_iter_0_left`; the reduction cell's
    last separable branch, `comb_iter_4_left`, is `reduction_left4`).
    """
    reductions = reduction_layers(module.num_cells, module.num_reduction_layers)

    def block(cell: str) -> tuple[str, str]:
        """Our cell's scope -> Keras's cell kind and block id."""
        scope, _, index = cell.rpartition("_")
        if scope == "cell_stem":
            return "reduction", f"stem_{int(index) + 1}"
        if scope == "reduction_cell":
            return "reduction", f"reduce_{reductions[int(index)]}"
        return "normal", str(int(index) + (int(index) >= reductions[0]))

    def source(path: tuple[str, ...]) -> str:
        if len(path) == 1:
            return _KERAS_OUTSIDE[path[0]]
        cell, scope, *rest = path
        kind, block_id = block(cell)
        if scope in ("conv_1x1", "beginning_bn"):
            return f"{kind}_{'conv' if scope == 'conv_1x1' else 'bn'}_1_{block_id}"
        if scope == "prev_reduction":  # its path1_conv, path2_conv, final_path_bn
            scope = rest[0]
        if scope in _KERAS_ADJUST:
            return f"{_KERAS_ADJUST[scope]}_{block_id}"
        (layer,) = rest  # comb_iter_{i}_{side}: separable_5x5_2_depthwise, bn_sep_5x5_2
        _, _, i, side = scope.split("_")
        number = 4 if (kind, scope) == ("reduction", "comb_iter_4_left") else int(i) + 1
        branch = f"{kind}_{side}{number}_{block_id}"
        parts = layer.split("_")
        if parts[0] == "bn":
            return f"separable_conv_{parts[3]}_bn_{branch}"
        return f"separable_conv_{parts[2]}_{branch}/{parts[3]}"  # one of the layer's two kernels

    return source


def _keras(network: str, image_size: int) -> Architecture:
    return Architecture(
        network,
        {"use_aux_head": False, "strided_pool_padding": "ZEROS"},
        keras_layout,
        head=("final_layer",),
        source_head="predictions",
        preprocessing={"image_size": image_size, "mean": (0.5,) * 3, "std": (0.5,) * 3},
        framework=KERAS,
    )


_KERAS = {
    "keras_nasnet_mobile": _keras("nasnet_mobile", 224),
    "keras_nasnet_large": _keras("nasnet_large", 331),
}
# timm's names, Keras's, and ours: `nasnet_large` takes timm's files and Keras's (told apart by
# their classifier's key), `nasnet_mobile` Keras's, its only published weights.
ARCHITECTURES = {
    "pnasnet5large": _architecture("pnasnet_large", "conv_0", "conv_prev_1x1."),
    "nasnetalarge": _architecture("nasnet_large", "conv0", ""),
}
ARCHITECTURES |= {arch.network: arch for arch in ARCHITECTURES.values()}
ARCHITECTURES["nasnet_large"] = dataclasses.replace(
    ARCHITECTURES["nasnet_large"], alternatives=(_KERAS["keras_nasnet_large"],)
)
ARCHITECTURES |= _KERAS | {"nasnet_mobile": _KERAS["keras_nasnet_mobile"]}

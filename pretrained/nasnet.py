"""timm's `pnasnet5large` and `nasnetalarge` (TF-Slim's ImageNet checkpoints, ported by Cadene)
as our `pnasnet_large` and `nasnet_large`.

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
"""

from pretrained.convert import Architecture, Layout

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


# timm's names, and ours: our networks compute the files' function.
ARCHITECTURES = {
    "pnasnet5large": _architecture("pnasnet_large", "conv_0", "conv_prev_1x1."),
    "nasnetalarge": _architecture("nasnet_large", "conv0", ""),
}
ARCHITECTURES |= {arch.network: arch for arch in ARCHITECTURES.values()}

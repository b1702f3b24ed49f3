"""timm's GhostNet and GhostNetV2 state dicts (`ghostnet_100`, `ghostnetv2_*`), as our
`nets.ghostnet`.

timm's keys: `conv_stem`, `bn1`, then `blocks.{stage}.{block}`: `ghost1` and `ghost2` (each
`primary_conv.0`/`.1` and `cheap_operation.0`/`.1`: convolution and BatchNorm of a Sequential;
V2's attention `short_conv.0` ... `.5`, three convolutions and their BatchNorms), `conv_dw` and
`bn_dw`, `se.conv_reduce` and `se.conv_expand`, `shortcut.0` ... `.3`; the 1x1 convolution to 960
is the last stage, `blocks.{len(stages)}.0.conv` / `.bn1` (ours `conv_final`); then `conv_head`
(after the pool, biased, no BatchNorm) and `classifier`. The weights were trained with PyTorch's
symmetric padding and BatchNorm epsilon 1e-5, our defaults for the family, stated so that a
contradicting field raises.
"""

from functools import partial

from nets_weights.convert import IMAGENET_MEAN, IMAGENET_STD, Architecture


def _sequential(name: str, layer: str) -> str:
    """timm's Sequentials of (convolution, BatchNorm), our pair `i` its `2i` and `2i + 1`:
    `primary_conv/bn` -> `primary_conv.1`; `short_conv_2/conv` -> `short_conv.4`."""
    base, _, pair = name.rpartition("_") if name[-1].isdigit() else (name, "", "0")
    return f"{base}.{2 * int(pair) + (layer == 'bn')}"


def _layout(stages: int, path: tuple[str, ...]) -> str:
    """Our module path -> timm's prefix, for a network of `stages` stages of bottlenecks."""
    top = {"stem/conv": "conv_stem", "stem/bn": "bn1", "head": "conv_head"}
    top |= {"classifier": "classifier", "conv_final/conv": f"blocks.{stages}.0.conv"}
    top["conv_final/bn"] = f"blocks.{stages}.0.bn1"
    if not path[0].startswith("blocks_"):
        return top["/".join(path)]
    _, stage, block = path[0].split("_")
    prefix, inner = f"blocks.{stage}.{block}", path[1:]
    if inner[0] == "dw":
        return f"{prefix}.{'conv_dw' if inner[1] == 'conv' else 'bn_dw'}"
    if inner[0] == "se":
        return f"{prefix}.se.{inner[1]}"
    if inner[0].startswith("shortcut"):
        return f"{prefix}.{_sequential(inner[0], inner[1])}"
    return f"{prefix}.{inner[0]}.{_sequential(inner[1], inner[2])}"  # ghost1, ghost2


def layout(module) -> partial:
    """`Architecture.layout`: the last stage's index is the number of bottleneck stages."""
    return partial(_layout, len(module.stages))


ARCHITECTURES = {
    name: Architecture(
        name,
        {"padding": "SYMMETRIC", "bn_epsilon": 1e-5},
        layout,
        head=("classifier",),
        source_head="classifier",
        preprocessing={
            "image_size": 224,
            "crop_fraction": 0.875,
            "interpolation": "bicubic",
            "mean": IMAGENET_MEAN,
            "std": IMAGENET_STD,
        },
    )
    for name in ("ghostnet_100", "ghostnetv2_100", "ghostnetv2_130", "ghostnetv2_160")
}

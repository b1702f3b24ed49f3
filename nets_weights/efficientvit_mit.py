"""timm's EfficientViT (MIT) state dicts (`efficientvit_b0.r224_in1k`, `efficientvit_l2.r384_in1k`,
...), as our `nets.efficientvit_mit`.

timm's keys: `stem.in_conv.{conv,norm}`, `stem.res{j}.main.{depth_conv,point_conv}` (B) or
`.main.{conv1,conv2}` (L), `stages.{i}.blocks.{j}.main.{inverted_conv,depth_conv,point_conv}` or
`.main.{spatial_conv,point_conv}`, each `.conv` (and `.norm`); the attention blocks'
`stages.{i}.blocks.{j}.context_module.main.{qkv.conv,aggreg.0.0,aggreg.0.1,proj.conv,proj.norm}`
and `.local_module.main.{inverted_conv,depth_conv,point_conv}`; `head.in_conv.{conv,norm}`,
`head.classifier.0` (dense, no bias), `head.classifier.1` (LayerNorm), `head.classifier.4` (the
logits). Ours are flat at the top (`stem_res0`, `stages_2_blocks_1`, `head_classifier_0`) and
without timm's `main` (its `ResidualBlock`'s wrapped module).
The weights were trained with PyTorch's symmetric padding and BatchNorm epsilon 1e-5 (B) or 1e-7
(L, its LayerNorm's too), our defaults for each series, stated so that a contradicting field
raises; they expect bicubic resizing, ImageNet's mean and std, a crop of 0.95 (B) or 1.0 (L) at
224 px (timm's r224 configs; the r256/r288/r320/r384 files' config.json say their own).
"""

import re

from nets_weights.convert import Architecture, same_layout

# timm's `ResidualBlock`s, whose wrapped module is `.main`.
_RESIDUAL = re.compile(r"res\d+|blocks\.\d+|context_module|local_module")


def layout(path: tuple[str, ...]) -> str:
    """Our module path -> timm's prefix: `('stages_2_blocks_1', 'context_module', 'aggreg_0_0')`
    -> `stages.2.blocks.1.context_module.main.aggreg.0.0`; `('stem_res0', 'depth_conv', 'conv')`
    -> `stem.res0.main.depth_conv.conv`; `('head_classifier_4',)` -> `head.classifier.4`."""
    parts = []
    for part in path:
        part = re.sub(r"^(stem|head)_", r"\1.", part)
        parts += re.sub(r"(\d)_", r"\1.", re.sub(r"_(\d+)", r".\1", part)).split(".")
    joined = []
    for i, part in enumerate(parts):
        joined.append(part)
        prefix = ".".join(parts[max(i - 1, 0) : i + 1])
        wraps = _RESIDUAL.fullmatch(part) or _RESIDUAL.fullmatch(prefix)
        if wraps and parts[i + 1 : i + 2] not in (["context_module"], ["local_module"]):
            joined.append("main")
    return ".".join(joined)


def _architecture(network: str, large: bool) -> Architecture:
    return Architecture(
        network,
        {"padding": "SYMMETRIC", "bn_epsilon": 1e-7 if large else 1e-5},
        same_layout(layout),
        head=("head_classifier_4",),
        source_head="head.classifier.4",
        preprocessing={
            "image_size": 224,
            "crop_fraction": 1.0 if large else 0.95,
            "interpolation": "bicubic",
        },
    )


# timm's names, which are ours.
ARCHITECTURES = {
    f"efficientvit_{size}": _architecture(f"efficientvit_{size}", size.startswith("l"))
    for size in ("b0", "b1", "b2", "b3", "l1", "l2", "l3")
}

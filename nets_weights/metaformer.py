"""timm's MetaFormer state dicts (PoolFormer, PoolFormerV2, ConvFormer, CAFormer), as our
`nets.metaformer`.

timm's keys are ours with dots: `stem.conv` / `stem.norm`, `stages.{i}.downsample.norm` /
`.conv` (stages 1-3), `stages.{i}.blocks.{j}.norm1` / `token_mixer` (`pwconv1`, `act1`,
`dwconv`, `pwconv2`; or `qkv`, `proj`) / `layer_scale1` / `res_scale1` / `norm2` / `mlp.fc1` /
`mlp.act` / `mlp.fc2` / `layer_scale2` / `res_scale2`, then `head.norm` and `head.fc` (a Linear,
or the MLP head's `fc1`, `norm`, `fc2`). Our top-level `stem_conv`, `stages_0`, `head_norm` are
timm's `stem.conv`, `stages.0`, `head.norm`, and our `head` its `head.fc`. The MLP's 1x1
convolutions `[out, in, 1, 1]` fill our dense kernels (`convert`'s generic view). Three leaves
are named `scale`: a norm's (`weight` in PyTorch), StarReLU's (`scale`) and, for our
`LayerScale`'s `gamma`, the layer and res scales' (`scale`).

The MLP head's classifier is its last layer (`head.fc.fc2`, timm's `pretrained_cfg`): under
another class count it is replaced and `fc1` and `norm` load, as timm's loading does; with 0
classes the whole head is left out. Every file expects ImageNet's mean and std, bicubic resizing.
"""

import dataclasses

from nets_weights.convert import TORCH, Architecture, module_index, same_layout

# PyTorch's names, and StarReLU's and the scales' `scale`.
FRAMEWORK = dataclasses.replace(
    TORCH, leaves={**TORCH.leaves, "scale": ("weight", "scale"), "gamma": ("scale",)}
)
_TOP = {"stem_conv": "stem.conv", "stem_norm": "stem.norm", "head_norm": "head.norm"}


def layout(path: tuple[str, ...]) -> str:
    """Our module path -> timm's prefix."""
    top, rest = path[0], path[1:]
    if top in _TOP:
        return _TOP[top]
    if top == "head":
        return ".".join(("head.fc", *rest))
    stage = f"stages.{module_index(top, 'stages')}"
    if rest[0] in ("downsample_norm", "downsample_conv"):
        return f"{stage}.downsample.{rest[0].removeprefix('downsample_')}"
    return ".".join((stage, f"blocks.{module_index(rest[0], 'blocks')}", *rest[1:]))


def _architecture(network: str, crop: float) -> Architecture:
    mlp_head = not network.startswith("poolformer")
    return Architecture(
        network,
        {},
        same_layout(layout),
        head=("head", "fc2") if mlp_head else ("head",),
        source_head="head.fc.fc2" if mlp_head else "head.fc",
        head_hidden=("head.fc.fc1", "head.fc.norm") if mlp_head else (),
        framework=FRAMEWORK,
        preprocessing={"crop_fraction": crop, "interpolation": "bicubic"},
    )


# timm's names, which are ours -> the crop of timm's default weights (`sail_in1k`) for files
# without a config.json: PoolFormer v1's 0.9 and 0.95, the others' 1.0.
_CROPS = {
    "poolformer_s12": 0.9,
    "poolformer_s24": 0.9,
    "poolformer_s36": 0.9,
    "poolformer_m36": 0.95,
    "poolformer_m48": 0.95,
    **{f"poolformerv2_{size}": 1.0 for size in ("s12", "s24", "s36", "m36", "m48")},
    **{
        f"{kind}_{size}": 1.0
        for kind in ("convformer", "caformer")
        for size in ("s18", "s36", "m36", "b36")
    },
}
ARCHITECTURES = {name: _architecture(name, crop) for name, crop in _CROPS.items()}

"""timm's and torchvision's ConvNeXt state dicts, as our `nets.convnext`.

timm (`convnext_tiny.fb_in1k`, ...): `stem.0` (4x4/4 conv) / `stem.1` (LayerNorm2d),
`stages.{i}.downsample.0` (LayerNorm2d) / `.1` (2x2/2 conv) for stages 1-3,
`stages.{i}.blocks.{j}.conv_dw` / `norm` / `mlp.fc1` / `mlp.fc2` and the layer scale `gamma`
`[c]`, then `head.norm` and `head.fc`. ConvNeXt V2's blocks have `mlp.grn` (`weight`, `bias`)
and no `gamma`; timm's small sizes (`atto` .. `nano`, both versions) keep their MLP's `fc1` /
`fc2` as 1x1 convolutions `[out, in, 1, 1]`, viewed as our dense kernels. ConvNeXt V2's FCMAE
weights (`convnextv2_tiny.fcmae`) have neither classifier nor `head.norm`: they load as
features, the head's LayerNorm at its initial ones and zeros, as timm's non-strict load leaves
it.

torchvision (`convnext_tiny-983f1562.pth`, ...) numbers one `features` sequence: `features.0.0` /
`.1` the stem, `features.{2i + 1}.{j}` stage `i`'s blocks (`block.0` depthwise conv, `block.2`
LayerNorm, `block.3` / `block.5` the MLP, `layer_scale` `[c, 1, 1]`), `features.{2i}.0` / `.1`
stage `i`'s downsampling; `classifier.0` the LayerNorm, `classifier.2` the Linear.

Ours: `stem_conv`, `stem_norm`, `stages_{i}/downsample_norm` / `downsample_conv`,
`stages_{i}/blocks_{j}/conv_dw` / `norm` / `fc1` / `grn` / `fc2` and `gamma`, `head_norm`,
`head`. The
function is the same for both sources (no padding or epsilon convention differs: every strided
convolution is 'VALID', the depthwise one pads 3 on each side, every LayerNorm has epsilon 1e-6).

Keras Applications' files (`convnext_tiny.h5`, ..., from the official checkpoints) name layers
after the model, `convnext_tiny_`: the `Sequential` stem `..._stem` holds `..._stem_conv` and
`..._stem_layernorm` (its weights are keyed `convnext_tiny_stem/convnext_tiny_stem_conv/kernel:0`,
`nets_weights.files`), stage `i`'s downsampling `..._downsampling_block_{i - 1}` holds
`..._downsampling_layernorm_{i - 1}` and `..._downsampling_conv_{i - 1}`, block `j` of stage `i` is
`..._stage_{i}_block_{j}_` `depthwise_conv` (a grouped `Conv2D`: our kernel layout), `layernorm`,
`pointwise_conv_1`, `pointwise_conv_2` (Dense) and `layer_scale` (`gamma:0`), then
`..._head_layernorm` and `..._head_dense`. The function is ours (exact GELU, epsilon 1e-6); the
model holds its preprocessing, a `Normalization` by constants (no weights) that takes [0, 255]
inputs to `(x / 255 - mean) / std` with ImageNet's mean and std: our `Pretrained` defaults.
"""

import dataclasses

from nets_weights.convert import (
    KERAS,
    OPENAI_CLIP_MEAN,
    OPENAI_CLIP_STD,
    TORCH,
    Architecture,
    Layout,
    module_index,
    same_layout,
    timm_and_torchvision,
    torch_layout_viewing,
)

_BLOCK = {
    "conv_dw": "conv_dw",
    "norm": "norm",
    "fc1": "mlp.fc1",
    "grn": "mlp.grn",
    "fc2": "mlp.fc2",
}
_TV_BLOCK = {"conv_dw": "block.0", "norm": "block.2", "fc1": "block.3", "fc2": "block.5"}
_STEM = {"stem_conv": "stem.0", "stem_norm": "stem.1", "head_norm": "head.norm", "head": "head.fc"}
_TV_STEM = {
    "stem_conv": "features.0.0",
    "stem_norm": "features.0.1",
    "head_norm": "classifier.0",
    "head": "classifier.2",
}
_DOWNSAMPLE = {"downsample_norm": "0", "downsample_conv": "1"}
# Keras's, after the model's name: `{model}_stage_0_block_0_depthwise_conv`, ...
_KERAS_BLOCK = {
    "conv_dw": "depthwise_conv",
    "norm": "layernorm",
    "fc1": "pointwise_conv_1",
    "fc2": "pointwise_conv_2",
}
_KERAS_TOP = {
    "stem_conv": "{model}_stem/{model}_stem_conv",
    "stem_norm": "{model}_stem/{model}_stem_layernorm",
    "head_norm": "{model}_head_layernorm",
    "head": "{model}_head_dense",
}
_KERAS_DOWNSAMPLE = {"downsample_norm": "layernorm", "downsample_conv": "conv"}


# PyTorch's names, and the layer scale: timm's `gamma`, torchvision's `layer_scale`.
FRAMEWORK = dataclasses.replace(
    TORCH,
    leaves={**TORCH.leaves, "gamma": ("gamma", "layer_scale")},
    layout=torch_layout_viewing("gamma"),
)


def timm_layout(path: tuple[str, ...]) -> str:
    """Our module path -> timm's prefix."""
    if len(path) == 1:
        return _STEM[path[0]]
    stage = module_index(path[0], "stages")
    if path[1] in _DOWNSAMPLE:
        return f"stages.{stage}.downsample.{_DOWNSAMPLE[path[1]]}"
    block = f"stages.{stage}.blocks.{module_index(path[1], 'blocks')}"
    return block if len(path) == 2 else f"{block}.{_BLOCK[path[2]]}"


def torchvision_layout(path: tuple[str, ...]) -> str:
    """Our module path -> torchvision's prefix."""
    if len(path) == 1:
        return _TV_STEM[path[0]]
    stage = module_index(path[0], "stages")
    if path[1] in _DOWNSAMPLE:
        return f"features.{2 * stage}.{_DOWNSAMPLE[path[1]]}"
    block = f"features.{2 * stage + 1}.{module_index(path[1], 'blocks')}"
    return block if len(path) == 2 else f"{block}.{_TV_BLOCK[path[2]]}"


def keras_layout(model: str) -> Layout:
    """Our module path -> the Keras layer of the model named `model` (`convnext_tiny`)."""

    def source(path: tuple[str, ...]) -> str:
        if len(path) == 1:
            return _KERAS_TOP[path[0]].format(model=model)
        stage = module_index(path[0], "stages")
        if path[1] in _DOWNSAMPLE:
            layer = _KERAS_DOWNSAMPLE[path[1]]
            return (
                f"{model}_downsampling_block_{stage - 1}/{model}_downsampling_{layer}_{stage - 1}"
            )
        name = f"{model}_stage_{stage}_block_{module_index(path[1], 'blocks')}"
        return f"{name}_layer_scale" if len(path) == 2 else f"{name}_{_KERAS_BLOCK[path[2]]}"

    return source


# Keras 2's names, and the layer scale's `gamma:0`.
KERAS_FRAMEWORK = dataclasses.replace(KERAS, leaves={**KERAS.leaves, "gamma": ("gamma:0",)})


def _architecture(network: str, timm_crop: float, torchvision_resize: int) -> Architecture:
    # The preprocessing of files without a config.json: timm's `fb_in1k` pretrained_cfg
    # (bicubic, crop 0.95 for tiny/small, 0.875 for base/large); torchvision's weights resize to
    # `torchvision_resize` and crop 224, bilinear.
    return timm_and_torchvision(
        network,
        FRAMEWORK,
        timm_layout=timm_layout,
        torchvision_layout=torchvision_layout,
        torchvision_head="classifier.2",
        timm_preprocessing={"crop_fraction": timm_crop, "interpolation": "bicubic"},
        torchvision_preprocessing={
            "crop_fraction": 224 / torchvision_resize,
            "interpolation": "bilinear",
        },
    )


def _keras(network: str) -> Architecture:
    # Keras's pipeline resizes to 224 and says nothing of a crop: the official evaluation's
    # bicubic 0.875 crop.
    return Architecture(
        network,
        {},
        same_layout(keras_layout(network)),
        head=("head",),
        source_head=f"{network}_head_dense",
        framework=KERAS_FRAMEWORK,
        preprocessing={"interpolation": "bicubic"},
    )


_KERAS = {
    f"keras_{name}": _keras(name)
    for name in ("convnext_tiny", "convnext_small", "convnext_base", "convnext_large")
}


def _timm_only(network: str, features: bool = False, **preprocessing) -> Architecture:
    # Networks only timm publishes; `preprocessing` is its default weights' pretrained_cfg.
    # `features`: files without a classifier are published too, and without `head.norm`
    # (ConvNeXt V2's FCMAE encoders, timm's note in `_create_convnext`).
    return Architecture(
        network,
        {},
        same_layout(timm_layout),
        head=("head",),
        source_head="head.fc",
        framework=FRAMEWORK,
        preprocessing={"interpolation": "bicubic", **preprocessing},
        headless=features,
        headless_lacks=(("head_norm",),) if features else (),
    )


# timm's names, which are torchvision's and ours; Keras's files load as `keras_convnext_*` or
# under these names (their classifier `convnext_tiny_head_dense` tells them apart).
ARCHITECTURES = {
    "convnext_tiny": _architecture("convnext_tiny", 0.95, 236),
    "convnext_small": _architecture("convnext_small", 0.95, 230),
    "convnext_base": _architecture("convnext_base", 0.875, 232),
    "convnext_large": _architecture("convnext_large", 0.875, 232),
}
ARCHITECTURES = {
    name: dataclasses.replace(arch, alternatives=(*arch.alternatives, _KERAS[f"keras_{name}"]))
    for name, arch in ARCHITECTURES.items()
}
ARCHITECTURES |= _KERAS
ARCHITECTURES |= {
    "convnext_atto": _timm_only("convnext_atto"),
    "convnext_femto": _timm_only("convnext_femto"),
    "convnext_pico": _timm_only("convnext_pico"),
    "convnext_nano": _timm_only("convnext_nano", crop_fraction=0.95),
    "convnext_xlarge": _timm_only("convnext_xlarge"),
    "convnext_xxlarge": _timm_only(
        "convnext_xxlarge",
        image_size=256,
        crop_fraction=1.0,
        mean=OPENAI_CLIP_MEAN,
        std=OPENAI_CLIP_STD,
    ),
    **{
        f"convnextv2_{size}": _timm_only(f"convnextv2_{size}", features=True)
        for size in ("atto", "femto", "pico", "nano", "tiny", "small", "base", "large")
    },
    "convnextv2_huge": _timm_only(
        "convnextv2_huge", features=True, image_size=384, crop_fraction=1.0, crop_mode="squash"
    ),
}

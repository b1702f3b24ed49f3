"""timm's NFNet state dicts (`dm_nfnet_f*`, `nfnet_l0`, `eca_nfnet_l*`), as our `nets.nfnet`.

timm's keys: `stem.conv{1..4}`, `stages.{i}.{j}.conv1` / `conv2` / `conv2b` / `conv3` /
`downsample.conv` / `attn_last.fc1` / `attn_last.fc2` (squeeze-excite) or `attn_last.conv` (ECA,
a 1-D kernel `[1, 1, k]`) and the block's scalar `skipinit_gain` (DeepMind's), `final_conv`,
`head.fc`. Each standardised convolution holds `weight`, `bias` and `gain` `[out, 1, 1, 1]`,
ours `kernel`, `bias` and `gain` `[out]`. The weights expect ImageNet's mean and std and
bicubic resizing; DeepMind's were evaluated squashed (both sides resized, timm's
`crop_mode='squash'`).
"""

import dataclasses

from nets_weights.convert import TORCH, Architecture, same_layout, torch_layout_viewing

# PyTorch's names, and the standardised convolutions' gains and DeepMind's skip-init gains.
FRAMEWORK = dataclasses.replace(
    TORCH,
    leaves={**TORCH.leaves, "gain": ("gain",), "skipinit_gain": ("skipinit_gain",)},
    layout=torch_layout_viewing("gain"),
)


def layout(path: tuple[str, ...]) -> str:
    """Our module path -> timm's prefix: `stem_conv2` -> `stem.conv2`, `stages_1_0/downsample`
    -> `stages.1.0.downsample.conv`, `head/fc` -> `head.fc`."""
    if path[0].startswith("stem_"):
        return f"stem.{path[0].removeprefix('stem_')}"
    if not path[0].startswith("stages_"):
        return ".".join(path)  # final_conv, head.fc
    _, stage, block = path[0].split("_")
    layers = ("downsample", "conv") if path[1:] == ("downsample",) else path[1:]
    return ".".join((f"stages.{stage}.{block}", *layers))


# timm's names, which are ours -> the preprocessing of files without a config.json: timm's
# pretrained_cfg (input size, crop_pct, crop_mode).
_PREPROCESSING = {
    "dm_nfnet_f0": (192, 0.9, "squash"),
    "dm_nfnet_f1": (224, 0.91, "squash"),
    "dm_nfnet_f2": (256, 0.92, "squash"),
    "dm_nfnet_f3": (320, 0.94, "squash"),
    "dm_nfnet_f4": (384, 0.951, "squash"),
    "dm_nfnet_f5": (416, 0.954, "squash"),
    "dm_nfnet_f6": (448, 0.956, "squash"),
    "nfnet_l0": (224, 0.9, "center"),
    "eca_nfnet_l0": (224, 0.9, "center"),
    "eca_nfnet_l1": (256, 0.9, "center"),
    "eca_nfnet_l2": (320, 0.9, "center"),
}


def _convention(network: str) -> dict:
    # DeepMind's weights under TensorFlow's padding and gamma in the activation, timm's own
    # under PyTorch's and gamma in the kernel's scale: either computes another function otherwise.
    dm = network.startswith("dm_")
    return {"padding": "SAME" if dm else "SYMMETRIC", "gamma_in_act": dm}


ARCHITECTURES = {
    name: Architecture(
        name,
        _convention(name),
        same_layout(layout),
        head=("head", "fc"),
        source_head="head.fc",
        framework=FRAMEWORK,
        preprocessing={
            "image_size": size,
            "crop_fraction": crop,
            "crop_mode": mode,
            "interpolation": "bicubic",
        },
    )
    for name, (size, crop, mode) in _PREPROCESSING.items()
}

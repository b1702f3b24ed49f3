"""timm's FastViT state dicts (`fastvit_t8.apple_in1k`, ..., MobileCLIP's
`fastvit_mci0.apple_mclip`, `fastvit_mci3.apple_mclip2_dfndr2b`, ...), as our `nets.fastvit`.

timm publishes the training form, its keys ours with dots: `stem.{0,1,2}.conv_kxk.0.conv` / `.bn`,
`conv_scale.*`, `identity`; `stages.{i}.downsample.proj.0.large_conv` / `small_conv` / `se.fc1`,
`proj.1.*`; `stages.{i}.pos_emb.pos_enc`; `stages.{i}.blocks.{j}.token_mixer.mixer.*` /
`token_mixer.norm.identity` / `token_mixer.layer_scale.gamma` (RepMixer) or `norm`,
`token_mixer.qkv` / `proj`, `layer_scale_1.gamma` (attention); `mlp.conv.conv` / `.bn`, `mlp.fc1`
/ `fc2` (1x1 convolutions, our dense layers), `layer_scale(_2).gamma` (`[c, 1, 1]`, our `[c]`);
`final_conv.*`, `head.fc` (MobileCLIP's: the CLIP projection, 512 or 768 wide, bias zero).
`nets.fastvit.reparameterize` fuses the loaded variables for the deploy network.
ImageNet's weights expect its mean and std, bicubic resizing to 256 px and a crop of 0.9 (MA36:
0.95); MobileCLIP's [0, 1] inputs (mean 0, std 1), MobileCLIP2's MCi3/4 OpenAI CLIP's mean and
std, at a crop of 0.95: timm's configs.
"""

import re

from nets_weights.convert import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, Architecture, same_layout
from nets_weights.convnext import FRAMEWORK  # PyTorch's names and timm's `gamma` of [c, 1, 1]

_NUMBERED = re.compile(r"^(stem|stages|blocks|proj|conv_kxk)_(\d+)$")


def layout(path: tuple[str, ...]) -> str:
    """Our module path -> timm's prefix: `('stages_1', 'downsample', 'proj_0', 'large_conv',
    'bn')` -> `stages.1.downsample.proj.0.large_conv.bn`."""
    return ".".join(_NUMBERED.sub(r"\1.\2", part) for part in path)


_IMAGENET = {"image_size": 256, "crop_fraction": 0.9, "interpolation": "bicubic"}
_MCLIP = {**_IMAGENET, "crop_fraction": 0.95, "mean": (0.0,) * 3, "std": (1.0,) * 3}
_MCLIP2 = {**_MCLIP, "mean": OPENAI_CLIP_MEAN, "std": OPENAI_CLIP_STD}
# timm's names, which are ours -> the preprocessing of files without a config.json: timm's
# default weights'.
_PREPROCESSING = {
    **{f"fastvit_{s}": _IMAGENET for s in ("t8", "t12", "s12", "sa12", "sa24", "sa36")},
    "fastvit_ma36": {**_IMAGENET, "crop_fraction": 0.95},
    **{f"fastvit_mci{i}": _MCLIP for i in range(3)},
    **{f"fastvit_mci{i}": _MCLIP2 for i in (3, 4)},
}
ARCHITECTURES = {
    name: Architecture(
        name,
        {},
        same_layout(layout),
        head=("head", "fc"),
        source_head="head.fc",
        preprocessing=preprocessing,
        framework=FRAMEWORK,
    )
    for name, preprocessing in _PREPROCESSING.items()
}

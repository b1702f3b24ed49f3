"""timm's EfficientViT (MSRA) state dicts (`efficientvit_m0.r224_in1k` ... `efficientvit_m5`), as
our `nets.efficientvit_msra`.

timm's keys: `patch_embed.conv{1..4}.{conv,bn}`; `stages.{i}.downsample.res1.0.m` (the
depthwise residual), `res1.1.m.{pw1,pw2}` (the feed-forward one), `patchmerge.{conv1,conv2,conv3}`
and `patchmerge.se.{fc1,fc2}`, `res2.*` alike; `stages.{i}.blocks.{j}.{dw0,dw1}.m`,
`.{ffn0,ffn1}.m.{pw1,pw2}`, `.mixer.m.attn.{qkvs.{h},dws.{h},proj.1}` and
`.mixer.m.attn.attention_biases` (`[heads, window**2]` for the 224 px maps' windows: 7x7, and
4x4 in the last stage; copied as they are); `head.{bn,linear}`. Ours are flat at the top
(`stages_1_downsample_res1_1_pw1`, `stages_0_blocks_0_mixer`), without timm's `ResidualDrop`
`.m`, and the mixer's attention under `mixer/attn`. `attention_bias_idxs` is not persistent in
timm's; files that hold it have it skipped. The head's BatchNorm is read by the classifier alone
(`head_hidden`). The weights expect PyTorch's symmetric padding and BatchNorm epsilon 1e-5 (our
defaults, stated so that a contradicting field raises), bicubic resizing, ImageNet's mean and
std, a crop of 0.875 at 224 px (timm's configs).
"""

import re

from nets_weights.convert import Architecture, same_layout
from nets_weights.tiny_vit import FRAMEWORK  # attention_biases, attention_bias_idxs dropped

# Our flat names -> timm's prefixes; timm's `ResidualDrop` wraps its module as `.m`.
_RENAMES = (
    (r"^patch_embed_conv(\d)", r"patch_embed.conv\1"),
    (r"^stages_(\d+)_downsample_(res\d)_(\d)(_|$)", r"stages.\1.downsample.\2.\3.m."),
    (r"^stages_(\d+)_downsample_patchmerge", r"stages.\1.downsample.patchmerge"),
    (r"^stages_(\d+)_blocks_(\d+)_(dw\d|ffn\d|mixer)(_|$)", r"stages.\1.blocks.\2.\3.m."),
    (r"_(\d+)$", r".\1"),  # qkvs_0, dws_0, proj_1
)


def layout(path: tuple[str, ...]) -> str:
    """Our module path -> timm's prefix: `('stages_1_downsample_res1_1_pw1', 'conv')` ->
    `stages.1.downsample.res1.1.m.pw1.conv`; `('stages_0_blocks_0_mixer', 'attn', 'qkvs_2',
    'bn')` -> `stages.0.blocks.0.mixer.m.attn.qkvs.2.bn`."""
    parts = []
    for part in path:
        for pattern, replacement in _RENAMES:
            part = re.sub(pattern, replacement, part)
        parts.append(part.rstrip("."))
    return ".".join(parts)


ARCHITECTURES = {
    f"efficientvit_m{i}": Architecture(
        f"efficientvit_m{i}",
        {"padding": "SYMMETRIC", "bn_epsilon": 1e-5},
        same_layout(layout),
        head=("head", "linear"),
        source_head="head.linear",
        head_hidden=("head.bn",),
        framework=FRAMEWORK,
        preprocessing={"image_size": 224, "crop_fraction": 0.875, "interpolation": "bicubic"},
    )
    for i in range(6)
}

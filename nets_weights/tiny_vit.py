"""timm's TinyViT state dicts (`tiny_vit_5m_224.dist_in22k_ft_in1k`, ...), as our `nets.tiny_vit`.

timm's keys: `patch_embed.conv{1,2}.{conv,bn}`, `stages.0.blocks.{j}.conv{1,2,3}.{conv,bn}`,
`stages.{i}.downsample.conv{1,2,3}.{conv,bn}`, `stages.{i}.blocks.{j}.attn.norm` / `attn.qkv` /
`attn.proj` / `attn.attention_biases` (`[heads, w * w]`, copied as it is) / `local_conv.{conv,bn}`
/ `mlp.norm` / `mlp.fc1` / `mlp.fc2`, `head.norm`, `head.fc`. Ours are the same with `_` for the
dots of `stages_{i}` and `blocks_{j}`, `head_norm` and `head`. `attention_bias_idxs` is a buffer
the network computes from the window (timm's is not persistent; the original repository's files
hold it): files that have it have it skipped. The bias tables' shapes are the windows'
(`tiny_vit_21m_384`'s `[3, 144]` where the 224 px network's are `[3, 49]`): a file of another
window is refused, where timm's loader would resize its tables (bicubic).
The weights expect PyTorch's symmetric padding (our default, stated so that a contradicting field
raises), bicubic resizing, ImageNet's mean and std, a crop of 0.95 at 224 px, none at 384 and 512
(squashed to 512 px), as timm's configs say.
"""

import dataclasses
import re

from nets_weights.convert import TORCH, Architecture, Framework, same_layout

FRAMEWORK: Framework = dataclasses.replace(
    TORCH,
    leaves={**TORCH.leaves, "attention_biases": ("attention_biases",)},
    dropped=(*TORCH.dropped, "attention_bias_idxs"),
)
_HEAD = {"head_norm": "head.norm", "head": "head.fc"}


def layout(path: tuple[str, ...]) -> str:
    """Our module path -> timm's prefix: `('stages_1', 'blocks_0', 'attn', 'qkv')` ->
    `stages.1.blocks.0.attn.qkv`; `('head_norm',)` -> `head.norm`; `('head',)` -> `head.fc`."""
    if path[0] in _HEAD:
        return _HEAD[path[0]]
    return ".".join(re.sub(r"^(stages|blocks)_(\d+)$", r"\1.\2", part) for part in path)


def _architecture(network: str, size: int, crop: float, mode: str = "center") -> Architecture:
    return Architecture(
        network,
        {"padding": "SYMMETRIC"},
        same_layout(layout),
        head=("head",),
        source_head="head.fc",
        framework=FRAMEWORK,
        preprocessing={
            "image_size": size,
            "crop_fraction": crop,
            "crop_mode": mode,
            "interpolation": "bicubic",
        },
    )


# timm's names, which are ours -> the preprocessing of files without a config.json (timm's
# pretrained_cfg: bicubic, ImageNet's mean and std, which are `Pretrained`'s defaults).
ARCHITECTURES = {
    "tiny_vit_5m_224": _architecture("tiny_vit_5m_224", 224, 0.95),
    "tiny_vit_11m_224": _architecture("tiny_vit_11m_224", 224, 0.95),
    "tiny_vit_21m_224": _architecture("tiny_vit_21m_224", 224, 0.95),
    "tiny_vit_21m_384": _architecture("tiny_vit_21m_384", 384, 1.0),
    "tiny_vit_21m_512": _architecture("tiny_vit_21m_512", 512, 1.0, "squash"),
}

"""timm's RepViT state dicts (`repvit_m0_9.dist_450e_in1k`, ...), as our `nets.repvit`.

timm's keys: `stem.conv{1,2}.{c,bn}`, `stages.{i}.downsample.{pre_block,spatial_downsample,
channel_downsample,ffn}`, `stages.{i}.blocks.{j}.token_mixer.{conv.{c,bn},conv1,bn}` (the legacy
M1, M2, M3: `conv1.{c,bn}`, no `bn`), `.se.{fc1,fc2}`, `.channel_mixer.{conv1,conv2}.{c,bn}`,
then the distilled pair `head.head.{bn,l}` and `head.head_dist.{bn,l}`. Ours are the same with
`_` for the dots of `stages_{i}` and `blocks_{j}`, and the two heads at the top as LeViT's
(`head`, `head_dist`, each `bn` and `linear`: `nets.levit.NormLinear`). Their BatchNorms are
read by the classifiers alone (`head_hidden`). The weights expect PyTorch's symmetric padding
(the network's), bicubic resizing, ImageNet's mean and std, a crop of 0.95 at 224 px, as timm's
configs say.
"""

import re

from nets_weights.convert import Architecture, same_layout

_HEADS = {"head": "head.head", "head_dist": "head.head_dist"}


def layout(path: tuple[str, ...]) -> str:
    """Our module path -> timm's prefix: `('stages_1', 'blocks_0', 'token_mixer', 'conv', 'c')`
    -> `stages.1.blocks.0.token_mixer.conv.c`; `('head_dist', 'linear')` -> `head.head_dist.l`."""
    if path[0] in _HEADS:
        return ".".join((_HEADS[path[0]], *("l" if p == "linear" else p for p in path[1:])))
    return ".".join(re.sub(r"^(stages|blocks)_(\d+)$", r"\1.\2", part) for part in path)


def _architecture(network: str) -> Architecture:
    return Architecture(
        network,
        {},
        same_layout(layout),
        head=("head", "linear"),
        source_head="head.head.l",
        other_heads=((("head_dist", "linear"), "head.head_dist.l"),),
        head_hidden=("head.head.bn", "head.head_dist.bn"),
        preprocessing={"image_size": 224, "crop_fraction": 0.95, "interpolation": "bicubic"},
    )


_NAMES = ("m0_9", "m1", "m1_0", "m1_1", "m1_5", "m2", "m2_3", "m3")
ARCHITECTURES = {f"repvit_{name}": _architecture(f"repvit_{name}") for name in _NAMES}

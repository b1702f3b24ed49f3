"""timm's LeViT state dicts (`levit_128s.fb_dist_in1k`, ...), as our `nets.levit`.

timm's keys: `stem.conv{1..4}.{linear,bn}`, `stages.{i}.downsample.attn_downsample.{kv,q.ln,
proj.ln}.{linear,bn}` and `.attention_biases`, `stages.{i}.downsample.mlp.{ln1,ln2}`,
`stages.{i}.blocks.{j}.attn.{qkv,proj.ln}` and `.attention_biases`, `...mlp.{ln1,ln2}`,
`head.{bn,linear}`, `head_dist.{bn,linear}`. Ours are the same with `_` for the dots of
`stages_{i}` and `blocks_{j}`, and without the `ln` of timm's `proj` and `q` sequences (whose
other members, Hardswish and the subsampling, hold nothing). `attention_bias_idxs` is a buffer
the network computes (timm's is not persistent; the original repository's files hold it): files
that have it have it skipped. The biases' tables `[heads, h * w]` are the 224 px maps' (14x14,
7x7, 4x4 tokens).

timm's conv-mode files (`levit_conv_128s.fb_dist_in1k`, ...) hold the same tensors under the
same keys, the dense layers as 1x1 convolutions `[out, in, 1, 1]`, which fill our dense kernels
as they are (`nets_weights.convert`'s view; the `qkv` outputs are ordered alike, heads first):
they load into the same networks, under their own names too.

The two heads are classifiers over the same classes (`head_dist` another of `head`'s), their
BatchNorms read by the classifiers alone (`head_hidden`: kept under another class count, left
out with none). The weights expect PyTorch's symmetric padding (our default, stated so that a
contradicting field raises), bicubic resizing, ImageNet's mean and std, a crop of 0.9 at 224 px,
as timm's configs say.
"""

import re

from nets_weights.convert import Architecture, same_layout
from nets_weights.tiny_vit import FRAMEWORK  # attention_biases, attention_bias_idxs dropped

_LN = {"proj": "proj.ln", "q": "q.ln"}


def layout(path: tuple[str, ...]) -> str:
    """Our module path -> timm's prefix: `('stages_1', 'downsample', 'attn_downsample', 'q')` ->
    `stages.1.downsample.attn_downsample.q.ln` (its `linear` and `bn` under it); `('head_dist',
    'bn')` -> `head_dist.bn`."""
    parts = [re.sub(r"^(stages|blocks)_(\d+)$", r"\1.\2", part) for part in path]
    for i in range(1, len(path)):
        if path[i - 1] in ("attn", "attn_downsample") and path[i] in _LN:
            parts[i] = _LN[path[i]]
    return ".".join(parts)


def _architecture(network: str) -> Architecture:
    return Architecture(
        network,
        {"padding": "SYMMETRIC"},
        same_layout(layout),
        head=("head", "linear"),
        source_head="head.linear",
        other_heads=((("head_dist", "linear"), "head_dist.linear"),),
        head_hidden=("head.bn", "head_dist.bn"),
        framework=FRAMEWORK,
        preprocessing={"image_size": 224, "crop_fraction": 0.9, "interpolation": "bicubic"},
    )


_NAMES = ("levit_128s", "levit_128", "levit_192", "levit_256", "levit_384")
# timm's names, which are ours, and its conv-mode twins -> the preprocessing of files without a
# config.json (timm's pretrained_cfg: bicubic, crop 0.9, ImageNet's mean and std).
ARCHITECTURES = {name: _architecture(name) for name in _NAMES}
ARCHITECTURES |= {name.replace("levit_", "levit_conv_"): _architecture(name) for name in _NAMES}

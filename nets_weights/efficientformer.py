"""timm's EfficientFormer and EfficientFormerV2 state dicts (`efficientformer_l1.snap_dist_in1k`,
`efficientformerv2_s0.snap_dist_in1k`, ...), as our `nets.efficientformer` and
`nets.efficientformer_v2`.

timm's keys are ours with dots for `stages_{i}` and `blocks_{j}`: `stem.{conv1,norm1,conv2,
norm2}`, `stages.{i}.downsample.{conv,norm}`, `stages.{i}.blocks.{j}.ls1.gamma` / `mlp.fc1` /
`mlp.norm1` / `mlp.fc2` / `mlp.norm2` / `ls2.gamma` (the MLP's 1x1 convolutions `[out, in, 1,
1]` fill our dense kernels), the attention blocks' `norm1` / `token_mixer.qkv` /
`token_mixer.attention_biases` (`[heads, r * r]`, copied as it is) / `token_mixer.proj` /
`norm2` / `mlp.fc1` / `mlp.fc2`, then `norm`, `head`, `head_dist`. `attention_bias_idxs` is a
buffer the network computes from `attention_resolution`: it is skipped. The distillation head
is a second classifier over the same classes: under another class count both are replaced.
V2's keys are ours with dots too: `stem.conv{1,2}.{conv,bn}`, `stages.{i}.downsample.conv.{conv,
bn}`, `stages.3.downsample.attn.{q.local,q.proj,k,v,v_local,proj}` and its `attention_biases`
(`[heads, R * R]` for the 14x14 keys), `stages.{i}.blocks.{j}.token_mixer.{stride_conv,q,k,v,
v_local,talking_head1,talking_head2,proj,attention_biases}` (the talking heads' 1x1 convolutions
`[heads, heads, 1, 1]` fill dense kernels), `ls1.gamma`, `mlp.{fc1,mid,fc2}.{conv,bn}`,
`ls2.gamma`, then `norm` (a BatchNorm), `head`, `head_dist`; V2's `attention_bias_idxs` are not
persistent.
The weights expect bicubic resizing, ImageNet's mean and std, a crop of 0.95 (timm's configs).
"""

import dataclasses
import re

from nets_weights.convert import TORCH, Architecture, Framework, same_layout

FRAMEWORK: Framework = dataclasses.replace(
    TORCH,
    leaves={**TORCH.leaves, "gamma": ("gamma",), "attention_biases": ("attention_biases",)},
    dropped=(*TORCH.dropped, "attention_bias_idxs"),
)


def layout(path: tuple[str, ...]) -> str:
    """Our module path -> timm's prefix: `('stages_3', 'blocks_4', 'token_mixer', 'qkv')` ->
    `stages.3.blocks.4.token_mixer.qkv`."""
    return ".".join(re.sub(r"^(stages|blocks)_(\d+)$", r"\1.\2", part) for part in path)


def _architecture(network: str) -> Architecture:
    return Architecture(
        network,
        {},
        same_layout(layout),
        head=("head",),
        source_head="head",
        other_heads=((("head_dist",), "head_dist"),),
        framework=FRAMEWORK,
        preprocessing={"crop_fraction": 0.95, "interpolation": "bicubic"},
    )


# timm's names, which are ours.
ARCHITECTURES = {
    name: _architecture(name)
    for name in (
        "efficientformer_l1",
        "efficientformer_l3",
        "efficientformer_l7",
        "efficientformerv2_s0",
        "efficientformerv2_s1",
        "efficientformerv2_s2",
        "efficientformerv2_l",
    )
}

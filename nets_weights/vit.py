"""timm's Vision Transformer, DeiT (I and III), CLIP-tower and DINOv2 state dicts, as our
`nets.vit`.

timm's keys are ours with dots: `patch_embed.proj`, `cls_token`, `dist_token`, `reg_token`,
`pos_embed`, `norm_pre`, `blocks.{i}.norm1` / `attn.qkv` / `attn.proj` / `ls1.gamma` / `norm2` /
`mlp.fc1` / `mlp.fc2` / `ls2.gamma`, `norm`, `head`, `head_dist`; ours are `patch_embed`,
`blocks_{i}/...`. The tokens and position embeddings are parameters of the network itself (no
module prefix) and keep timm's shapes (`[1, tokens, dim]`), so they are copied as they are;
`attn.qkv` is one `Linear(dim, 3 * dim)` in both, with the outputs ordered (q, k, v), then heads.
The weights were trained with LayerNorm epsilon 1e-6, our default (CLIP's towers with 1e-5,
which their registry names set). The `augreg` ViT weights expect inputs scaled by mean = std =
0.5 (their config.json says so); DeiT's and DINOv2's, ImageNet's mean and std; CLIP's, OpenAI's.
DINOv2's files hold no classifier: they load as features (`num_classes=0`), or under a new
classifier for fine-tuning.
"""

import dataclasses
from collections.abc import Callable

from nets_weights.convert import TORCH, Architecture, Framework, same_layout

# PyTorch's leaves, and the network's own parameters, named alike in both.
# gamma: LayerScale's; latent: the attention pooling's query.
_TOKENS = ("cls_token", "dist_token", "reg_token", "pos_embed", "gamma", "latent")
TIMM_VIT: Framework = dataclasses.replace(
    TORCH, leaves={**TORCH.leaves, **{name: (name,) for name in _TOKENS}}
)


def layout(path: tuple[str, ...]) -> str:
    """Our module path -> timm's prefix: `('blocks_3', 'attn', 'qkv')` -> `blocks.3.attn.qkv`;
    `()` (the network's own parameters) -> `''`."""
    if path == ("patch_embed",):
        return "patch_embed.proj"
    return ".".join(part.replace("blocks_", "blocks.", 1) for part in path)


def timm_architecture(
    network: str,
    convention: dict | None = None,
    framework: Framework = TIMM_VIT,
    keys: Callable[[tuple[str, ...]], str] = layout,
    **fields,
) -> Architecture:
    """timm's files of a ViT-like `network` (ViT's, EVA-02's, BEiT's, CaiT's): its keys ours
    with dots (`layout`, or `keys`), the classifier `head`; `fields` are `Architecture`'s
    others."""
    return Architecture(
        network,
        convention or {},
        same_layout(keys),
        head=("head",),
        source_head="head",
        framework=framework,
        **fields,
    )


def _architecture(network: str) -> Architecture:
    # CLIP's towers compute another function under ViT's LayerNorm epsilon, and OpenAI's weights
    # under exact GELU: a field set otherwise is refused (`load_pretrained`).
    convention = {"epsilon": 1e-5} if "_clip_" in network else {}
    if "_quickgelu_" in network:
        convention["act_layer"] = "quick_gelu"
    return timm_architecture(
        network,
        convention,
        other_heads=((("head_dist",), "head_dist"),) if "distilled" in network else (),
        headless=True,  # DINOv2's weights, and any timm ViT saved with num_classes=0
    )


# timm's names, which are ours.
ARCHITECTURES = {
    name: _architecture(name)
    for name in (
        "vit_tiny_patch16_224",
        "vit_small_patch16_224",
        "vit_base_patch16_224",
        "vit_base_patch32_224",
        "vit_large_patch16_224",
        "deit_tiny_patch16_224",
        "deit_small_patch16_224",
        "deit_base_patch16_224",
        "deit_tiny_distilled_patch16_224",
        "deit_small_distilled_patch16_224",
        "deit_base_distilled_patch16_224",
        "vit_tiny_patch16_384",
        "vit_small_patch16_384",
        "vit_base_patch16_384",
        "vit_base_patch32_384",
        "vit_large_patch16_384",
        "deit3_small_patch16_224",
        "deit3_base_patch16_224",
        "deit3_large_patch16_224",
        "deit3_small_patch16_384",
        "deit3_base_patch16_384",
        "deit3_large_patch16_384",
        "vit_base_patch32_clip_224",
        "vit_base_patch16_clip_224",
        "vit_large_patch14_clip_224",
        "vit_base_patch32_clip_quickgelu_224",
        "vit_base_patch16_clip_quickgelu_224",
        "vit_large_patch14_clip_quickgelu_224",
        "vit_small_patch14_dinov2",
        "vit_base_patch14_dinov2",
        "vit_large_patch14_dinov2",
        "vit_small_patch14_reg4_dinov2",
        "vit_base_patch14_reg4_dinov2",
        "vit_large_patch14_reg4_dinov2",
        "vit_base_patch16_siglip_224",
        "vit_base_patch16_siglip_256",
        "vit_base_patch16_siglip_384",
        "vit_base_patch16_siglip_512",
        "vit_large_patch16_siglip_256",
        "vit_large_patch16_siglip_384",
        "vit_so400m_patch14_siglip_224",
        "vit_so400m_patch14_siglip_384",
        "vit_base_patch16_siglip_gap_224",
        "vit_so400m_patch14_siglip_gap_224",
        "vit_so400m_patch14_siglip_gap_384",
    )
}

# CLIP weights trained with QuickGELU, which timm publishes under the plain towers' names (its
# `_quickgelu_` networks' pretrained configs point at these files; the plain ones' note that
# they are "natively QuickGELU"): their config.json's architecture and tag load them into the
# `_quickgelu_` network, which computes what OpenAI's and MetaCLIP's towers compute.
QUICK_GELU_WEIGHTS = {
    "vit_base_patch32_clip_224": ("openai", "laion400m_e32", "metaclip_400m", "metaclip_2pt5b"),
    "vit_base_patch16_clip_224": ("openai", "metaclip_400m", "metaclip_2pt5b"),
    "vit_large_patch14_clip_224": ("openai", "dfn2b", "metaclip_400m", "metaclip_2pt5b"),
}
ARCHITECTURES |= {
    f"{plain}.{tag}": _architecture(plain.replace("_clip_", "_clip_quickgelu_"))
    for plain, tags in QUICK_GELU_WEIGHTS.items()
    for tag in tags
}

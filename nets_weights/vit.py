"""timm's Vision Transformer and DeiT state dicts, as our `nets.vit`.

timm's keys are ours with dots: `patch_embed.proj`, `cls_token`, `dist_token`, `pos_embed`,
`blocks.{i}.norm1` / `attn.qkv` / `attn.proj` / `norm2` / `mlp.fc1` / `mlp.fc2`, `norm`, `head`,
`head_dist`; ours are `patch_embed`, `blocks_{i}/...`. The tokens and position embeddings are
parameters of the network itself (no module prefix) and keep timm's shapes (`[1, tokens, dim]`),
so they are copied as they are; `attn.qkv` is one `Linear(dim, 3 * dim)` in both, with the
outputs ordered (q, k, v), then heads. The weights were trained with LayerNorm epsilon 1e-6,
our default. The `augreg` ViT weights expect inputs scaled by mean = std = 0.5 (their
config.json says so); DeiT's, ImageNet's mean and std.
"""

import dataclasses

from nets_weights.convert import TORCH, Architecture, Framework, same_layout

# PyTorch's leaves, and the network's own parameters, named alike in both.
_TOKENS = ("cls_token", "dist_token", "pos_embed")
TIMM_VIT: Framework = dataclasses.replace(
    TORCH, leaves={**TORCH.leaves, **{name: (name,) for name in _TOKENS}}
)


def layout(path: tuple[str, ...]) -> str:
    """Our module path -> timm's prefix: `('blocks_3', 'attn', 'qkv')` -> `blocks.3.attn.qkv`;
    `()` (the network's own parameters) -> `''`."""
    if path == ("patch_embed",):
        return "patch_embed.proj"
    return ".".join(part.replace("blocks_", "blocks.", 1) for part in path)


def _architecture(network: str) -> Architecture:
    return Architecture(
        network,
        {},
        same_layout(layout),
        head=("head",),
        source_head="head",
        other_heads=((("head_dist",), "head_dist"),) if "distilled" in network else (),
        framework=TIMM_VIT,
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
    )
}

"""timm's EVA-02 state dicts, as our `nets.eva`.

timm's keys are ours with dots, as its ViT's (`nets_weights.vit.layout`): `patch_embed.proj`,
`cls_token`, `pos_embed`, `blocks.{i}.norm1` / `attn.qkv` / `attn.q_bias` / `attn.v_bias` (Ti,
S) or `attn.q_proj` / `attn.k_proj` / `attn.v_proj` (B, L) / `attn.proj` / `norm2` / `mlp.fc1`
(Ti, S) or `mlp.fc1_g` / `mlp.fc1_x` / `mlp.norm` (B, L) / `mlp.fc2`, `fc_norm`, `head`. The
rotary embedding is computed, not stored (timm's buffers are not in its state dict), and the
key projection's bias is timm's zero buffer, not a tensor of the file. The weights expect OpenAI
CLIP's mean and std, bicubic resizing (their config.json says so; files without one get timm's
default weights' preprocessing). The 224-px MIM encoders are published without a
classifier: they load as features (`num_classes=0`), or under a new classifier.
"""

import dataclasses

from nets_weights.convert import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD
from nets_weights.vit import TIMM_VIT, timm_architecture

# The fused projection's biases of the query and value, parameters of timm's `EvaAttention`.
TIMM_EVA = dataclasses.replace(
    TIMM_VIT, leaves={**TIMM_VIT.leaves, "q_bias": ("q_bias",), "v_bias": ("v_bias",)}
)

# timm's names, which are ours -> the preprocessing of files without a config.json: timm's
# default weights' (the MIM encoders at 224 px, crop 0.9; the fine-tunes uncropped, B's and L's
# ImageNet-22k ones squashed).
_PREPROCESSING = {
    "eva02_tiny_patch14_224": (224, 0.9, "center"),
    "eva02_small_patch14_224": (224, 0.9, "center"),
    "eva02_base_patch14_224": (224, 0.9, "center"),
    "eva02_large_patch14_224": (224, 0.9, "center"),
    "eva02_tiny_patch14_336": (336, 1.0, "center"),
    "eva02_small_patch14_336": (336, 1.0, "center"),
    "eva02_base_patch14_448": (448, 1.0, "squash"),
    "eva02_large_patch14_448": (448, 1.0, "squash"),
}
ARCHITECTURES = {
    name: timm_architecture(
        name,
        framework=TIMM_EVA,
        headless=True,  # the MIM encoders
        preprocessing={
            "image_size": size,
            "crop_fraction": crop,
            "crop_mode": mode,
            "interpolation": "bicubic",
            "mean": OPENAI_CLIP_MEAN,
            "std": OPENAI_CLIP_STD,
        },
    )
    for name, (size, crop, mode) in _PREPROCESSING.items()
}

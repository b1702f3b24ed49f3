"""Parity fixtures of the ViT / DeiT family (see tools/parity.py for how to run it)."""

from functools import partial

import torch
from parity import timm, write_case, write_index  # noqa: F401  (timm first: it applies the shims)
from timm.models.deit import VisionTransformerDistilled  # noqa: E402
from timm.models.vision_transformer import VisionTransformer  # noqa: E402

# The small configuration of every case: 32 px images of 4x4 patches of 8 pixels, two blocks.
SMALL = {"img_size": 32, "patch_size": 8, "embed_dim": 32, "depth": 2, "num_heads": 2}


def small(cls, **kwargs) -> torch.nn.Module:
    """timm's `cls` in the small configuration (`kwargs` change it), with the parameters
    `parity.perturb` leaves as initialised made non-trivial: LayerNorm scales ~U(0.5, 1.5), the
    tokens and position embeddings ~N(0, 0.5) (timm starts the class and register tokens at
    ~1e-6, which would hide their path)."""
    model = cls(**{"num_classes": 10, **SMALL, **kwargs})
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.uniform_(0.5, 1.5)
        for name in ("cls_token", "dist_token", "reg_token", "pos_embed"):
            if getattr(model, name, None) is not None:
                getattr(model, name).normal_(0.0, 0.5)
    return model


def unit_linears(model: torch.nn.Module) -> torch.nn.Module:
    """`model` with every Linear weight ~N(0, 1 / fan_in): pre-activations of unit scale, where
    the activations differ (GELU and QuickGELU by ~2e-2; at timm's init, std 0.02, the MLP's
    inputs are ~0.1 and the two agree to ~3e-4 of the logits)."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.normal_(0.0, module.in_features**-0.5)
    return model


# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments. The second and third run at other sizes than the
# position embeddings': timm's `dynamic_img_size=True` resamples them (`resample_abs_pos_embed`,
# antialiased bicubic) to the 6x6 grid of 48 px and the 3x3 grid of 24 px.
CASES = {
    "vit_small_config": ("vit_tiny_patch16_224", lambda: small(VisionTransformer), 32),
    "vit_resampled_48": (
        "vit_tiny_patch16_224",
        lambda: small(VisionTransformer, dynamic_img_size=True),
        48,
    ),
    "deit_distilled_resampled_24": (
        "deit_tiny_distilled_patch16_224",
        lambda: small(VisionTransformerDistilled, dynamic_img_size=True),
        24,
    ),
    # DeiT III: LayerScale, position embeddings for the patches only.
    "deit3_config": (
        "deit3_small_patch16_224",
        lambda: unit_linears(small(VisionTransformer, no_embed_class=True, init_values=1e-6)),
        32,
    ),
    # OpenAI CLIP's tower: norm_pre, no patch bias, LayerNorm eps 1e-5, QuickGELU.
    "clip_quickgelu_config": (
        "vit_base_patch16_clip_quickgelu_224",
        lambda: unit_linears(
            small(
                VisionTransformer,
                pre_norm=True,
                norm_layer=partial(torch.nn.LayerNorm, eps=1e-5),
                act_layer="quick_gelu",
            )
        ),
        32,
    ),
    # DINOv2 with registers, published without a classifier (its logits are the class token's
    # features): LayerScale, 4 register tokens without position embeddings, 7-pixel patches on a
    # 4x4 grid (28 px) resampled to 6x6 (42 px).
    "dinov2_reg_features_42": (
        "vit_small_patch14_reg4_dinov2",
        lambda: unit_linears(
            small(
                VisionTransformer,
                num_classes=0,
                patch_size=7,
                img_size=28,
                init_values=1e-5,
                reg_tokens=4,
                no_embed_class=True,
                dynamic_img_size=True,
            )
        ),
        42,
    ),
    # SigLIP's tower, published without a classifier: no class token, attention pooling.
    "siglip_features_config": (
        "vit_base_patch16_siglip_224",
        lambda: unit_linears(
            small(VisionTransformer, num_classes=0, class_token=False, global_pool="map")
        ),
        32,
    ),
    # Average pooling with timm's default `fc_norm` after it (MAE's and BEiT's fine-tuning).
    "vit_avg_fc_norm_config": (
        "vit_tiny_patch16_224",
        lambda: unit_linears(small(VisionTransformer, global_pool="avg")),
        32,
    ),
}

# Full-size networks whose state-dict index (keys and shapes) the tests convert: the
# architectures of nets_weights/vit.py's table (which torch's environment cannot import: it needs
# JAX).
FULL_SIZE = [f"vit_{size}_patch16_224" for size in ("tiny", "small", "base", "large")] + [
    "vit_base_patch32_224"
]
FULL_SIZE += [f"deit_{size}_patch16_224" for size in ("tiny", "small", "base")]
FULL_SIZE += [f"deit_{size}_distilled_patch16_224" for size in ("tiny", "small", "base")]
FULL_SIZE += [f"vit_{size}_patch16_384" for size in ("tiny", "small", "base", "large")]
FULL_SIZE += ["vit_base_patch32_384"]
FULL_SIZE += [
    f"deit3_{size}_patch16_{px}" for px in (224, 384) for size in ("small", "base", "large")
]
FULL_SIZE += [
    f"vit_{size}_clip{gelu}_224"
    for gelu in ("", "_quickgelu")
    for size in ("base_patch32", "base_patch16", "large_patch14")
]
FULL_SIZE += [f"vit_base_patch16_siglip_{px}" for px in (224, 256, 384, 512)]
FULL_SIZE += [f"vit_large_patch16_siglip_{px}" for px in (256, 384)]
FULL_SIZE += [f"vit_so400m_patch14_siglip{gap}_{px}" for gap in ("", "_gap") for px in (224, 384)]
FULL_SIZE += ["vit_base_patch16_siglip_gap_224"]
FULL_SIZE += [
    f"vit_{size}_patch14{reg}_dinov2"
    for reg in ("", "_reg4")
    for size in ("small", "base", "large")
]


def create(name: str) -> torch.nn.Module:
    """timm's network as its published files hold it: DINOv2's and SigLIP's without a
    classifier, the others with ImageNet's (CLIP's towers' default is their 512-wide
    projection)."""
    headless = "dinov2" in name or "siglip" in name
    return timm.create_model(name, num_classes=0 if headless else 1000)


if __name__ == "__main__":
    for case, (arch, build, size) in CASES.items():
        classes = {"num_classes": 0} if "features" in case else None
        write_case(case, arch, build, size, calibration_size=size, config=classes)
    write_index("vit", FULL_SIZE, create)

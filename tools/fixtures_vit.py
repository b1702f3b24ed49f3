"""Parity fixtures of the ViT / DeiT family (see tools/parity.py for how to run it)."""

import torch
from parity import timm, write_case, write_index  # noqa: F401  (timm first: it applies the shims)
from timm.models.deit import VisionTransformerDistilled  # noqa: E402
from timm.models.vision_transformer import VisionTransformer  # noqa: E402

# The small configuration of every case: 32 px images of 4x4 patches of 8 pixels, two blocks.
SMALL = {"img_size": 32, "patch_size": 8, "embed_dim": 32, "depth": 2, "num_heads": 2}


def small(cls, **kwargs) -> torch.nn.Module:
    """timm's `cls` in the small configuration, with the parameters `parity.perturb` leaves as
    initialised made non-trivial: LayerNorm scales ~U(0.5, 1.5), the tokens and position
    embeddings ~N(0, 0.5) (timm starts the class token at ~1e-6, which would hide its path)."""
    model = cls(num_classes=10, **SMALL, **kwargs)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.uniform_(0.5, 1.5)
        for name in ("cls_token", "dist_token", "pos_embed"):
            if hasattr(model, name):
                getattr(model, name).normal_(0.0, 0.5)
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
}

# Full-size networks whose state-dict index (keys and shapes) the tests convert: the
# architectures of nets_weights/vit.py's table (which torch's environment cannot import: it needs
# JAX).
FULL_SIZE = [f"vit_{size}_patch16_224" for size in ("tiny", "small", "base", "large")] + [
    "vit_base_patch32_224"
]
FULL_SIZE += [f"deit_{size}_patch16_224" for size in ("tiny", "small", "base")]
FULL_SIZE += [f"deit_{size}_distilled_patch16_224" for size in ("tiny", "small", "base")]


if __name__ == "__main__":
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size, calibration_size=size)
    write_index("vit", FULL_SIZE)

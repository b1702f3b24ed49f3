"""Parity fixtures of the EVA-02 family (see tools/parity.py for how to run it)."""

import torch
from parity import ROOT, timm, write_case, write_index  # noqa: F401  (timm first: the shims)
from safetensors.numpy import save_file
from timm.models.eva import Eva  # noqa: E402

# The small configuration of every case: 32 px images of 4x4 patches of 8 pixels, two blocks of
# width 32 in two heads of 16 channels (4 rotary frequencies per axis), SwiGLU of 85 hidden
# units (int(32 * 8 / 3)), as timm's eva02 networks set the rest.
SMALL = {
    "img_size": 32,
    "patch_size": 8,
    "embed_dim": 32,
    "depth": 2,
    "num_heads": 2,
    "mlp_ratio": 4 * 2 / 3,
    "swiglu_mlp": True,
    "use_rot_pos_emb": True,
}


def small(**kwargs) -> torch.nn.Module:
    """timm's `Eva` in the small configuration (`kwargs` change it), with what `parity.perturb`
    leaves as initialised made non-trivial: LayerNorm scales ~U(0.5, 1.5), the class token and
    position embeddings ~N(0, 0.5), the attention's `q_bias` and `v_bias` ~N(0, 0.1) (timm's
    zeros: `perturb` draws only attributes named `bias`), and every Linear weight ~N(0, 1 /
    fan_in), so that SiLU's gates and the head (timm's at a thousandth of its init) count."""
    model = Eva(**{"num_classes": 10, **SMALL, **kwargs})
    with torch.no_grad():
        for name, tensor in model.named_parameters():
            if name.endswith(("q_bias", "v_bias")):
                tensor.normal_(0.0, 0.1)
        for module in model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.uniform_(0.5, 1.5)
            if isinstance(module, torch.nn.Linear):
                module.weight.normal_(0.0, module.in_features**-0.5)
        model.cls_token.normal_(0.0, 0.5)
        model.pos_embed.normal_(0.0, 0.5)
    return model


# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments.
CASES = {
    # Ti's and S's layout: one qkv projection with q_bias and v_bias, one packed fc1. RoPE on
    # the 4x4 grid scaled to a reference grid of 2x2.
    "eva02_fused_config": ("eva02_tiny_patch14_336", lambda: small(ref_feat_shape=(2, 2)), 32),
    # B's and L's: q_proj, k_proj (no bias), v_proj; fc1_g, fc1_x and the MLP's LayerNorm. At
    # 40 px (timm's dynamic_img_size=True): position embeddings resampled from 4x4 to 5x5, RoPE
    # for 5x5 scaled to a reference grid of 3x3.
    "eva02_scale_mlp_resampled_40": (
        "eva02_base_patch14_448",
        lambda: small(
            ref_feat_shape=(3, 3), qkv_fused=False, scale_mlp=True, dynamic_img_size=True
        ),
        40,
    ),
}

# timm's rotary embedding (sin, then cos) of a 5x5 grid scaled to 3x3, 16 channels a head: the
# second case's, which the tests compare with `nets.eva.rotary_embedding`.
ROPE = {"grid": (5, 5), "ref_grid": (3, 3), "head_dim": 16}

FULL_SIZE = [
    "eva02_tiny_patch14_224",
    "eva02_small_patch14_224",
    "eva02_base_patch14_224",
    "eva02_large_patch14_224",
    "eva02_tiny_patch14_336",
    "eva02_small_patch14_336",
    "eva02_base_patch14_448",
    "eva02_large_patch14_448",
]


def create(name: str) -> torch.nn.Module:
    """timm's network as its published files hold it: the 224-px MIM encoders without a
    classifier, the fine-tunes with ImageNet's."""
    return timm.create_model(name, num_classes=0 if name.endswith("_224") else 1000)


def write_rope() -> None:
    from timm.layers import RotaryEmbeddingCat

    rope = RotaryEmbeddingCat(ROPE["head_dim"], in_pixels=False, ref_feat_shape=ROPE["ref_grid"])
    embed = rope.get_embed(shape=ROPE["grid"])  # [25, 2 * head_dim]: sin, then cos
    folder = ROOT / "parity" / "eva02_scale_mlp_resampled_40"
    save_file({"rope": embed.numpy()}, folder / "rope.safetensors")


if __name__ == "__main__":
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size, calibration_size=size)
    write_rope()
    write_index("eva", FULL_SIZE, create)

"""Parity fixtures of the MLP-Mixer family: MLP-Mixer, gMixer, ResMLP, gMLP (see tools/parity.py
for how to run it)."""

from functools import partial

import torch
from parity import timm, write_case, write_index  # noqa: F401  (timm first: the shims)
from timm.layers import GatedMlp, GluMlp  # noqa: E402
from timm.models.mlp_mixer import Affine, MlpMixer, ResBlock, SpatialGatingBlock  # noqa: E402

# The small configuration of every case: 32 px images of 4x4 patches of 8 pixels (16 tokens),
# two blocks of width 32, as timm's registry sets the rest of each kind.
SMALL = {"img_size": 32, "patch_size": 8, "num_blocks": 2, "embed_dim": 32}


def nontrivial(model: torch.nn.Module) -> torch.nn.Module:
    """What `parity.perturb` leaves as initialised made non-trivial: every Linear weight ~N(0, 1 /
    fan_in) (timm's classifier starts at zero, gMLP's spatial gating and gMixer's gates near
    zero, which would hide their inputs), ResMLP's `Affine` alpha ~U(0.5, 1.5) and beta ~N(0,
    0.1) and its layer scales `ls1`, `ls2` ~U(0.5, 1.5) (`perturb` draws only `gamma`s)."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.normal_(0.0, module.in_features**-0.5)
            if isinstance(module, Affine):
                module.alpha.uniform_(0.5, 1.5)
                module.beta.normal_(0.0, 0.1)
        for name, tensor in model.named_parameters():
            if name.rpartition(".")[2] in ("ls1", "ls2"):
                tensor.uniform_(0.5, 1.5)
    return model


def small(**kwargs) -> torch.nn.Module:
    """timm's `MlpMixer` in the small configuration (`kwargs` change it), made `nontrivial`."""
    return nontrivial(MlpMixer(**{"num_classes": 10, **SMALL, **kwargs}))


# name -> (architecture in config.json, the small timm network); the tests hold the matching
# `load_pretrained` keyword arguments. Images at the networks' 32 px.
CASES = {
    # MLP-Mixer: token MLP of 16 hidden units over the 16 tokens, channel MLP of 128.
    "mixer": ("mixer_b16_224", lambda: small()),
    # gMixer: SwiGLU MLPs, the gate the second half of each fc1.
    "gmixer": (
        "gmixer_24_224",
        lambda: small(mlp_ratio=(1.0, 4.0), mlp_layer=GluMlp, act_layer=torch.nn.SiLU),
    ),
    # ResMLP: Affine norms, one linear layer over the tokens, layer scales.
    "resmlp": (
        "resmlp_24_224",
        lambda: small(
            mlp_ratio=4, block_layer=partial(ResBlock, init_values=1e-5), norm_layer=Affine
        ),
    ),
    # gMLP: the spatial gating unit, its LayerNorm at PyTorch's epsilon 1e-5.
    "gmlp": (
        "gmlp_s16_224",
        lambda: small(mlp_ratio=6, block_layer=SpatialGatingBlock, mlp_layer=GatedMlp),
    ),
}

FULL_SIZE = [
    "mixer_s32_224",
    "mixer_s16_224",
    "mixer_b32_224",
    "mixer_b16_224",
    "mixer_l32_224",
    "mixer_l16_224",
    "gmixer_12_224",
    "gmixer_24_224",
    "resmlp_12_224",
    "resmlp_24_224",
    "resmlp_36_224",
    "resmlp_big_24_224",
    "gmlp_ti16_224",
    "gmlp_s16_224",
    "gmlp_b16_224",
]

if __name__ == "__main__":
    for case, (arch, build) in CASES.items():
        write_case(f"mlp_mixer_{case}", arch, build, 32, calibration_size=32)
    write_index("mlp_mixer", FULL_SIZE)

"""Parity fixtures of the CaiT family (see tools/parity.py for how to run it)."""

import torch
from parity import timm, write_case, write_index  # noqa: F401  (timm first: the shims)
from timm.models.cait import Cait  # noqa: E402

# The small configuration: 32 px images of 4x4 patches of 8 pixels, two self-attention blocks
# of width 24 in four heads of 6 channels (the heads' mixing 4x4), timm's two class-attention
# blocks.
SMALL = {"img_size": 32, "patch_size": 8, "embed_dim": 24, "depth": 2, "num_heads": 4}


def nontrivial(model: torch.nn.Module) -> None:
    """The layer scales `gamma_1`, `gamma_2` ~U(0.5, 1.5): timm's 1e-5 or 1e-6 would hide the
    branches (`parity.perturb` draws only those named `gamma`)."""
    with torch.no_grad():
        for name, tensor in model.named_parameters():
            if name.endswith(("gamma_1", "gamma_2")):
                tensor.uniform_(0.5, 1.5)


def small() -> torch.nn.Module:
    """timm's `Cait` in the small configuration, with what `parity.perturb` leaves as initialised
    made non-trivial: the layer scales (`nontrivial`), the class token and position embeddings
    ~N(0, 0.5), and every Linear weight ~N(0, 1 / fan_in), so that the heads' mixing (`proj_l`,
    `proj_w`: 4x4) and the head count."""
    model = Cait(num_classes=10, **SMALL)
    nontrivial(model)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.normal_(0.0, module.in_features**-0.5)
        model.cls_token.normal_(0.0, 0.5)
        model.pos_embed.normal_(0.0, 0.5)
    return model


# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments.
CASES = {"cait_config": ("cait_xxs24_224", small, 32)}

FULL_SIZE = [
    "cait_xxs24_224",
    "cait_xxs24_384",
    "cait_xxs36_224",
    "cait_xxs36_384",
    "cait_xs24_384",
    "cait_s24_224",
    "cait_s24_384",
    "cait_s36_384",
    "cait_m36_384",
    "cait_m48_448",
]

if __name__ == "__main__":
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size, calibration_size=size)
    write_index("cait", FULL_SIZE)

"""Parity fixtures of the MambaOut family (see tools/parity.py for how to run it)."""

import torch
from parity import timm, write_case, write_index  # noqa: F401  (timm first: the shims)
from timm.models.mambaout import MambaOut

# The small configuration: four stages of 1, 1, 2, 1 blocks of widths 8 to 32.
SMALL = {"depths": (1, 1, 2, 1), "dims": (8, 16, 24, 32), "num_classes": 10}
# timm's `_rw` conventions, with base_wide's and base_plus's ratios and SiLU.
RW = {
    "expansion_ratio": 3.0,
    "conv_ratio": 1.5,
    "stem_mid_norm": False,
    "downsample": "conv_nf",
    "ls_init_value": 1e-6,
    "act_layer": "silu",
    "head_fn": "norm_mlp",
}


def small(**kwargs) -> torch.nn.Module:
    """timm's `MambaOut` in the small configuration, every convolution and Linear weight
    ~N(0, 1 / fan_in) (timm's 0.02 would fade the blocks and the head out at these widths);
    `parity.perturb` draws the norms, biases and layer scales."""
    model = MambaOut(**{**SMALL, **kwargs})
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Conv2d | torch.nn.Linear):
                module.weight.normal_(0.0, module.weight[0].numel() ** -0.5)
    return model


# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments. 48 px: maps of 12, 6, 3 and 2 pixels, the last
# smaller than the 7x7 depthwise kernels (their padding shows).
CASES = {
    "mambaout": ("mambaout_tiny", small, 48),
    "mambaout_rw": ("mambaout_base_plus_rw", lambda: small(**RW), 48),
}

FULL_SIZE = [
    f"mambaout_{size}"
    for size in (
        "femto",
        "kobe",
        "tiny",
        "small",
        "base",
        "small_rw",
        "base_short_rw",
        "base_tall_rw",
        "base_wide_rw",
        "base_plus_rw",
    )
]

if __name__ == "__main__":
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size, calibration_size=size)
    write_index("mambaout", FULL_SIZE)

"""Parity fixtures of the EdgeNeXt family (see tools/parity.py for how to run it)."""

import torch
from parity import timm, write_case, write_index  # noqa: F401  (timm first: the shims)
from timm.models.edgenext import EdgeNeXt  # noqa: E402

# The small configurations: four stages of one ConvNeXt block and one SDTA block (two ConvNeXt
# blocks in the first stage, which has none), 2 heads, the split into 2, 2, 3, 4 groups as
# timm's: widths 8, 16, 22, 24 (22 into 8 + 8 + 6, torch.chunk's uneven last group), the position
# encoding in the second stage's, on 32x48 images (stage 2's 4x6 map: the encoding's axes cannot
# be swapped unseen). The `rw` case is edgenext_small_rw's: overlapping stem, downsampling
# blocks that change the width (8, 16, 16, 32; 16 into 6 + 6 + 4), no convolution biases.
SMALL = {
    "depths": (2, 2, 2, 2),
    "dims": (8, 16, 22, 24),
    "heads": (2, 2, 2, 2),
    "num_classes": 10,
}
RW = {
    **SMALL,
    "dims": (8, 16, 16, 32),
    "downsample_block": True,
    "conv_bias": False,
    "stem_type": "overlap",
}


def nontrivial(model: torch.nn.Module) -> None:
    """The SDTA blocks' `gamma_xca` and the temperatures ~U(0.5, 1.5): `parity.perturb` draws
    only parameters named `gamma` (`measure_parity.py make` calls it too)."""
    with torch.no_grad():
        for name, tensor in model.named_parameters():
            if name.endswith(("gamma_xca", "temperature")):
                tensor.uniform_(0.5, 1.5)


def small(**kwargs) -> torch.nn.Module:
    """timm's `EdgeNeXt` in a small configuration, its layer scales and temperatures
    non-trivial, every convolution and Linear weight ~N(0, 1 / fan_in) (timm's 0.02 would leave
    the small network's logits near its biases)."""
    model = EdgeNeXt(**kwargs)
    nontrivial(model)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (torch.nn.Conv2d, torch.nn.Linear)):
                fan_in = module.weight[0].numel()
                module.weight.normal_(0.0, fan_in**-0.5)
    return model


# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments.
CASES = {
    "edgenext_small": ("edgenext_small", lambda: small(**SMALL), (32, 48)),
    "edgenext_rw": ("edgenext_small_rw", lambda: small(**RW), (32, 48)),
}

FULL_SIZE = [
    "edgenext_xx_small",
    "edgenext_x_small",
    "edgenext_small",
    "edgenext_base",
    "edgenext_small_rw",
]

if __name__ == "__main__":
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size)
    write_index("edgenext", FULL_SIZE)

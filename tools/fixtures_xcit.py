"""Parity fixtures of the XCiT family (see tools/parity.py for how to run it)."""

import torch
from parity import timm, write_case, write_index  # noqa: F401  (timm first: the shims)
from timm.models.xcit import Xcit  # noqa: E402

# The small configurations: two XCA blocks of width 24 in four heads of 6 channels, timm's two
# class-attention blocks; 16-pixel patches on 48x32 images (a 3x2 grid: the encoding's and the
# local patch interaction's axes cannot be swapped unseen), or 8-pixel ones on 40x24 (5x3).
P16 = {"patch_size": 16, "embed_dim": 24, "depth": 2, "num_heads": 4, "tokens_norm": True}
P8 = {**P16, "patch_size": 8, "tokens_norm": False, "eta": 1e-5}


def nontrivial(model: torch.nn.Module) -> None:
    """The layer scales `gamma1`, `gamma2`, `gamma3` and the XCA temperatures ~U(0.5, 1.5):
    `parity.perturb` draws only parameters named `gamma`, and the 24-block networks' 1e-5 would
    hide the branches (`measure_parity.py make` calls it too)."""
    with torch.no_grad():
        for name, tensor in model.named_parameters():
            if name.endswith(("gamma1", "gamma2", "gamma3", "temperature")):
                tensor.uniform_(0.5, 1.5)


def small(**kwargs) -> torch.nn.Module:
    """timm's `Xcit` in a small configuration, with what `parity.perturb` leaves as initialised
    made non-trivial: the layer scales and temperatures (`nontrivial`), the class token
    ~N(0, 0.5), and every Linear weight ~N(0, 1 / fan_in)."""
    model = Xcit(num_classes=10, **kwargs)
    nontrivial(model)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.normal_(0.0, module.in_features**-0.5)
        model.cls_token.normal_(0.0, 0.5)
    return model


# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments.
CASES = {
    "xcit_p16_tokens_norm": ("xcit_tiny_12_p16_224", lambda: small(**P16), (48, 32)),
    "xcit_p8_class_norm": ("xcit_nano_12_p8_224", lambda: small(**P8), (40, 24)),
}

FULL_SIZE = [
    f"xcit_{size}_p{patch}_{pixels}"
    for patch in (16, 8)
    for size in ("nano_12", "tiny_12", "small_12", "tiny_24", "small_24", "medium_24", "large_24")
    for pixels in (224, 384)
]

if __name__ == "__main__":
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size, calibration_size=32)
    write_index("xcit", FULL_SIZE)

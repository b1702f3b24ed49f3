"""Parity fixtures of the LeViT family (see tools/parity.py for how to run it).

The cases are timm's own `LevitDistilled` (two heads, averaged) in a small configuration: widths
(16, 24, 32), key_dim 8, (2, 3, 4) heads, one block a stage. `levit` runs at 48 px in timm's
linear mode (maps of 3x3, 2x2, 1x1 tokens: an odd map subsampled to its rounded-up half);
`levit_conv` at 32 px in timm's conv mode (`use_conv=True`: 1x1 convolutions, files as
`levit_conv_*`), loaded into the same network. tools/parity.py's perturbation draws the
BatchNorm1d scales ~U(0.5, 1.5) and `attention_biases` ~N(0, 1) (timm starts them at zero).
"""

from parity import timm, write_case, write_index  # noqa: F401  (timm first: it applies the shims)
from timm.models.levit import LevitDistilled  # noqa: E402

SMALL = {"embed_dim": (16, 24, 32), "key_dim": 8, "num_heads": (2, 3, 4), "depth": (1, 1, 1)}


def small(size: int, use_conv: bool = False):
    return LevitDistilled(img_size=size, num_classes=10, use_conv=use_conv, **SMALL)


# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments (SMALL under our names).
CASES = {
    "levit": ("levit_128s", lambda: small(48), 48),
    "levit_conv": ("levit_conv_128s", lambda: small(32, use_conv=True), 32),
}

NAMES = ["levit_128s", "levit_128", "levit_192", "levit_256", "levit_384"]
NAMES += [name.replace("levit_", "levit_conv_") for name in NAMES]  # conv mode: 1x1 kernels

if __name__ == "__main__":
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size, calibration_size=size)
    write_index("levit", NAMES, timm.create_model)

"""Parity fixtures of MSRA's EfficientViT (see tools/parity.py for how to run it).

The case is timm's own `EfficientVitMsra` in a small configuration at 48 px (calibrated there):
stages 8, 12, 16 wide of one block each, 2, 3, 2 heads (the cascade through three heads in the
second) of 4-channel keys, the heads' query kernels 5, 3, 3, windows of 2. The maps are 3x3
(padded to 4x4: four windows, as timm pads them), 2x2 (one window) and 1x1 (the window shrunk to
it); `perturb` draws the attention biases ~N(0, 1).
"""

from parity import timm, write_case, write_index  # noqa: F401  (timm first: it applies the shims)
from timm.models.efficientvit_msra import EfficientVitMsra  # noqa: E402

SMALL = {
    "embed_dim": (8, 12, 16),
    "key_dim": (4, 4, 4),
    "depth": (1, 1, 1),
    "num_heads": (2, 3, 2),
    "window_size": (2, 2, 2),
    "kernels": (5, 3, 3, 3),
}
FULL_SIZE = [f"efficientvit_m{i}" for i in range(6)]


if __name__ == "__main__":
    build = lambda: EfficientVitMsra(img_size=48, num_classes=10, **SMALL)  # noqa: E731
    write_case("efficientvit_msra_small", "efficientvit_m1", build, 48, calibration_size=48)
    write_index("efficientvit_msra", FULL_SIZE)

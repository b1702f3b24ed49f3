"""XLA:CPU's convolutions on Eigen, not YNNPACK: a setting `train.py` makes before JAX starts.

jaxlib 0.10 hands XLA:CPU's convolutions of 32 or more channels to YNNPACK (`ynn_fusion` in a
profile). On ResNets' 3x3 convolutions it ran at ~200 GFLOP/s where XLA's Eigen path runs the
same ones at 310-360 (batch 128, 16x16x32 and 8x8x64 maps, float32, a 2-core AMD EPYC). Taking
convolutions, and only them, off YNNPACK's list (it keeps reductions and matrix products) made
train steps faster or left them unchanged, interleaved in one process:

    ResNet-20 (b128, 32 px) 1.10x, Inception v3 1.12x, ResNet-18 (64 px) 1.06x, ResNet-50 1.04x;
    EfficientNet-B0, MobileNet v2, DenseNet-121, ConvNeXt-T within noise (0.98-1.01x).

XLA reads `XLA_FLAGS` once, when JAX starts its CPU backend, and aborts on a flag it does not
know, so the flag is added only for the jaxlib versions it was measured on, and never over a
choice of the user's: an `XLA_FLAGS` that already names it stays as it is.
"""

import importlib.metadata
import os

FLAG = "--xla_cpu_experimental_ynn_fusion_type"
SETTING = f"{FLAG}=-individual_convolution"
_MEASURED_JAXLIB = ((0, 10), (0, 11))  # [from, to): the versions whose flag this is


def prefer_eigen_convolutions() -> bool:
    """Adds `SETTING` to `XLA_FLAGS` as the module doc says; whether it did."""
    flags = os.environ.get("XLA_FLAGS", "")
    if FLAG in flags or not _measured_jaxlib():
        return False
    os.environ["XLA_FLAGS"] = f"{flags} {SETTING}".strip()
    return True


def _measured_jaxlib() -> bool:
    try:
        version = importlib.metadata.version("jaxlib")
    except importlib.metadata.PackageNotFoundError:
        return False
    major_minor = tuple(int(part) for part in version.split(".")[:2] if part.isdigit())
    low, high = _MEASURED_JAXLIB
    return low <= major_minor < high

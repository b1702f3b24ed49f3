"""Parity fixtures of the EfficientFormer family (see tools/parity.py for how to run it).

The cases are timm's own `EfficientFormer` in a small configuration: widths (8, 16, 16, 24),
stages of (1, 1, 2, 2) blocks. timm fixes its attention at 8 heads of 32-channel keys over a 7x7
map (`Attention`'s defaults, which `MetaBlock1d` does not pass on): the cases build it with
2 heads of 4-channel keys (values 16) over the small images' last maps, which our fields
`num_heads`, `key_dim`, `attention_resolution` say. `efficientformer`: 48 px (last map 2x2), one
attention block after a pooling one in the last stage (timm's flattening module between them);
`efficientformer_all_vit`: 56 px (maps 14, 7, 4, 2: an odd one under a strided convolution), both
last-stage blocks attention blocks (the flattening first). tools/parity.py's perturbation draws
the layer scales ~U(0.5, 1.5) and `attention_biases` ~N(0, 1).
"""

from functools import partial

import torch
from parity import timm, write_case, write_index  # noqa: F401  (timm first: it applies the shims)
from timm.models import efficientformer, efficientformer_v2  # noqa: E402

SMALL = {"embed_dims": (8, 16, 16, 24), "depths": (1, 1, 2, 2)}
ATTENTION = {"num_heads": 2, "key_dim": 4}


def small(num_vit: int, resolution: int) -> torch.nn.Module:
    original = efficientformer.Attention
    efficientformer.Attention = partial(original, resolution=resolution, **ATTENTION)
    try:
        return efficientformer.EfficientFormer(num_classes=10, num_vit=num_vit, **SMALL)
    finally:
        efficientformer.Attention = original


def small_v2() -> torch.nn.Module:
    """timm's EfficientFormerV2 at 64 px (maps 16, 8, 4, 2): stage 3 attends over its 4x4 map
    strided to 2x2, stage 4's downsampling from 4x4 keys; 2 heads of 4-channel keys there too."""
    v2, patched = efficientformer_v2, ("Attention2d", "Attention2dDownsample")
    originals = {name: getattr(v2, name) for name in patched}
    for name in patched:
        setattr(v2, name, partial(originals[name], **ATTENTION))
    try:
        return v2.EfficientFormerV2(num_classes=10, img_size=64, num_vit=1, **SMALL_V2)
    finally:
        for name, original in originals.items():
            setattr(v2, name, original)


SMALL_V2 = {
    "embed_dims": (8, 8, 16, 16),
    "depths": (1, 1, 2, 2),
    "mlp_ratios": ((4,), (4,), (4, 3), (3, 4)),
}

# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments (SMALL, ATTENTION, num_vit and the resolution).
CASES = {
    "efficientformer": ("efficientformer_l1", lambda: small(1, 2), 48),
    "efficientformer_all_vit": ("efficientformer_l1", lambda: small(2, 2), 56),
    "efficientformer_v2": ("efficientformerv2_s0", small_v2, 64),
}

NAMES = ["efficientformer_l1", "efficientformer_l3", "efficientformer_l7"]
NAMES += [f"efficientformerv2_{size}" for size in ("s0", "s1", "s2", "l")]

if __name__ == "__main__":
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size, calibration_size=size)
    write_index("efficientformer", NAMES)

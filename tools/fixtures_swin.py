"""Parity fixtures of the Swin Transformer family (see tools/parity.py for how to run it).

The cases are timm's own `SwinTransformer` in a small configuration: 8 channels after 4x4
patches, stages of (2, 2, 2, 1) blocks with (1, 2, 2, 4) heads, windows of 4 set for 64 px
images (grids 16, 8, 4, 2: the first two stages shift their windows, the third's map is one
window and the last's shrinks it to 2x2, neither shifting). `swin` runs at those 64 px; the
second, with timm's `dynamic_img_size=True`, at 88 px, whose maps (22, 11, 6, 3) are not window
multiples: each block pads them after the roll and builds the mask for the padded map, and the
odd 11 is padded before merging. The relative position bias tables are drawn ~N(0, 1) (timm
starts them at ~0.02, which would hide a wrong index) besides tools/parity.py's perturbation.
"""

import torch
from parity import timm, write_case, write_index  # noqa: F401  (timm first: it applies the shims)
from timm.models.swin_transformer import SwinTransformer  # noqa: E402

SMALL = {
    "img_size": 64,
    "embed_dim": 8,
    "depths": (2, 2, 2, 1),
    "num_heads": (1, 2, 2, 4),
    "window_size": 4,
}


def small(**kwargs) -> torch.nn.Module:
    model = SwinTransformer(num_classes=10, drop_path_rate=0.0, **SMALL, **kwargs)
    with torch.no_grad():
        for name, tensor in model.named_parameters():
            if name.endswith("relative_position_bias_table"):
                tensor.normal_(0.0, 1.0)
    return model


# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments (SMALL).
CASES = {
    "swin": ("swin_tiny_patch4_window7_224", small, 64),
    "swin_padded_88": (
        "swin_tiny_patch4_window7_224",
        lambda: small(dynamic_img_size=True),
        88,
    ),
}

NAMES = [f"swin_{size}_patch4_window7_224" for size in ("tiny", "small", "base")]


if __name__ == "__main__":
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size, calibration_size=size)
    write_index("swin", NAMES)

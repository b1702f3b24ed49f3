"""Parity fixtures of the PiT family (see tools/parity.py for how to run it)."""

import torch
from parity import timm, write_case, write_index  # noqa: F401  (timm first: the shims)
from timm.models.pit import PoolingVisionTransformer  # noqa: E402

# The small configuration of every case: 8-pixel patches every 4 pixels, three stages of
# 1, 2, 1 blocks with 2, 4, 8 heads of 4 channels (widths 8, 16, 32).
SMALL = {"patch_size": 8, "stride": 4, "base_dims": (4, 4, 4), "depth": (1, 2, 1)}


def nontrivial(model: torch.nn.Module) -> None:
    """The position embeddings and class tokens ~N(0, 0.5), which `parity.perturb` leaves at
    timm's init (~N(0, 0.02)), where a wrong layout of the map would hardly show."""
    with torch.no_grad():
        model.pos_embed.normal_(0.0, 0.5)
        model.cls_token.normal_(0.0, 0.5)


def small(**kwargs) -> torch.nn.Module:
    """timm's PiT in the small configuration (`kwargs` change it), made `nontrivial`."""
    model = PoolingVisionTransformer(**{"num_classes": 10, "heads": (2, 4, 8), **SMALL, **kwargs})
    nontrivial(model)
    return model


# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments.
CASES = {
    # 32 px: a 7x7 map (odd), pooled to 4x4 and 2x2.
    "pit_small_32": ("pit_s_224", lambda: small(img_size=32), 32),
    # Distilled, 36 px: an 8x8 map (even, where PyTorch's symmetric padding of the pooling is not
    # 'SAME'), pooled to 4x4 and 2x2; the two tokens and heads.
    "pit_distilled_36": ("pit_s_distilled_224", lambda: small(img_size=36, distilled=True), 36),
}

FULL_SIZE = [
    "pit_ti_224",
    "pit_xs_224",
    "pit_s_224",
    "pit_b_224",
    "pit_ti_distilled_224",
    "pit_xs_distilled_224",
    "pit_s_distilled_224",
    "pit_b_distilled_224",
]


if __name__ == "__main__":
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size, calibration_size=size)
    write_index("pit", FULL_SIZE)

"""Parity fixtures of the Swin Transformer V2 family (see tools/parity.py for how to run it).

The cases are timm's own `SwinTransformerV2` in a small configuration: 4 channels after 4x4
patches, stages of (2, 2, 1, 1) blocks with (1, 2, 2, 4) heads, windows of 4 set for 48 px
images (grids 12, 6, 3, 2: the first two stages shift, the second's map padded to 8, the last two
shrink their windows to their maps). `swinv2` runs at those 48 px; `swinv2_from_3_56`, with
`pretrained_window_sizes=(3, 3, 2, 1)` (each stage's coordinates scaled by another window, as the
fine-tunes to larger windows) and timm's `dynamic_img_size=True`, at 56 px, whose maps (14, 7,
4, 2) are not window multiples (the odd 7 padded before merging). Besides tools/parity.py's
perturbation, the weights are drawn so that each of V2's conventions shows in the logits:
`q_bias` and `v_bias` ~N(0, 0.1) (timm starts them at zero), `logit_scale` ~U(2, 8) (some above
the clamp at log(100) = 4.6), and the position bias MLP ~N(0, 1) and ~N(0, 0.05) (at ~0.02 its
bias would be a near-constant 8; larger, its sigmoid would saturate).
"""

import torch
from parity import timm, write_case, write_index  # noqa: F401  (timm first: it applies the shims)
from timm.models.swin_transformer_v2 import SwinTransformerV2  # noqa: E402

SMALL = {
    "img_size": 48,
    "embed_dim": 4,
    "depths": (2, 2, 1, 1),
    "num_heads": (1, 2, 2, 4),
    "window_size": 4,
}
STDS = {"cpb_mlp.0.weight": 1.0, "cpb_mlp.2.weight": 0.05, "q_bias": 0.1, "v_bias": 0.1}


def small(**kwargs) -> torch.nn.Module:
    model = SwinTransformerV2(num_classes=10, drop_path_rate=0.0, **SMALL, **kwargs)
    with torch.no_grad():
        for name, tensor in model.named_parameters():
            if name.endswith("logit_scale"):
                tensor.uniform_(2.0, 8.0)
            for suffix, std in STDS.items():
                if name.endswith(suffix):
                    tensor.normal_(0.0, std)
    return model


# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments (SMALL).
CASES = {
    "swinv2": ("swinv2_tiny_window8_256", small, 48),
    "swinv2_from_3_56": (
        "swinv2_tiny_window8_256",
        lambda: small(pretrained_window_sizes=(3, 3, 2, 1), dynamic_img_size=True),
        56,
    ),
}

# Full-size networks whose state-dict index (keys and shapes) the tests convert, at 1000 classes
# (timm's default for the 192-px ImageNet-22k networks is 21,841).
NAMES = [
    "swinv2_tiny_window8_256",
    "swinv2_base_window12_192",
    "swinv2_large_window12to24_192to384",
]

if __name__ == "__main__":
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size, calibration_size=size)
    write_index("swinv2", NAMES, lambda name: timm.create_model(name, num_classes=1000))

"""Parity fixtures of the PVT v2 family (see tools/parity.py for how to run it).

The cases are timm's own `PyramidVisionTransformerV2` in a small configuration: stages of
(2, 1, 1, 1) blocks, 8, 16, 16, 24 channels in 1, 2, 2, 3 heads of 8, MLPs twice as wide, ten
classes. `pvt_v2` reduces the keys by (4, 3, 2, 1) at 52 px (timm's (8, 4, 2, 1) would leave one
key at sizes whose images keep the folder small), whose maps (13, 7, 4, 2) are odd or not
multiples of the reduction (the 'VALID' reduction convolution drops their last rows and columns:
3x3, 2x2, 2x2 keys, self-attention over 2x2 in the last stage).
`pvt_v2_li` is the linear variant at 48 px: the map of 12 pooled to 7x7 through overlapping
bins, those of 6, 3 and 2 upsampled to it by repetition. Every Linear weight is drawn
~N(0, 1 / fan_in) (timm's 0.02 would leave the attention near uniform and hide a wrong query or
key) besides tools/parity.py's perturbation.
"""

import torch
from parity import timm, write_case, write_index  # noqa: F401  (timm first: it applies the shims)
from timm.models.pvt_v2 import PyramidVisionTransformerV2  # noqa: E402

SMALL = {
    "depths": (2, 1, 1, 1),
    "embed_dims": (8, 16, 16, 24),
    "num_heads": (1, 2, 2, 3),
    "mlp_ratios": (2, 2, 2, 2),
}


def small(**kwargs) -> torch.nn.Module:
    model = PyramidVisionTransformerV2(num_classes=10, **SMALL, **kwargs)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                module.weight.normal_(0.0, module.in_features**-0.5)
    return model


# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments (SMALL).
CASES = {
    "pvt_v2": ("pvt_v2_b0", lambda: small(sr_ratios=(4, 3, 2, 1)), 52),
    "pvt_v2_li": ("pvt_v2_b2_li", lambda: small(linear=True), 48),
}

# Full-size networks whose state-dict index (keys and shapes) the tests convert: each layout
# (B0's widths, B2's, the linear variant's, B5's MLP ratios and depth).
NAMES = ["pvt_v2_b0", "pvt_v2_b2", "pvt_v2_b2_li", "pvt_v2_b5"]


if __name__ == "__main__":
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size, calibration_size=size)
    write_index("pvt_v2", NAMES)

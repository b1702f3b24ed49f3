"""Parity fixtures of the TinyViT family (see tools/parity.py for how to run it).

The cases are timm's own `TinyVit` in a small configuration: widths (8, 16, 16, 24), stages of
(2, 2, 1, 1) blocks with (-, 2, 2, 3) heads. `tiny_vit` runs at 64 px with windows (-, 4, 4, 2)
(maps 16, 8, 4, 2: four windows in stage 1, one in each of the others); `tiny_vit_padded_52` at
52 px with windows (-, 3, 4, 3) (maps 13, 7, 4, 2: the odd maps merged by the 3x3/2 convolutions,
stage 1's 7 padded to 9 and stage 3's 2 to 3, whose padding tokens take part in the attention).
tools/parity.py's perturbation draws `attention_biases` ~N(0, 1) (timm starts them at zero, where
the offsets' indexing would not show).
"""

import torch
from parity import timm, write_case, write_index  # noqa: F401  (timm first: it applies the shims)
from timm.models.tiny_vit import TinyVit  # noqa: E402

SMALL = {"embed_dims": (8, 16, 16, 24), "depths": (2, 2, 1, 1), "num_heads": (1, 2, 2, 3)}


def small(window_sizes) -> torch.nn.Module:
    return TinyVit(num_classes=10, drop_path_rate=0.0, window_sizes=window_sizes, **SMALL)


# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments (SMALL and the windows).
CASES = {
    "tiny_vit": ("tiny_vit_5m_224", lambda: small((1, 4, 4, 2)), 64),
    "tiny_vit_padded_52": ("tiny_vit_5m_224", lambda: small((1, 3, 4, 3)), 52),
}

# Full-size networks whose state-dict index (keys and shapes) the tests convert, at 1000 classes
# (timm's default for the 224 px networks is ImageNet-22k's 21,841).
NAMES = ["tiny_vit_5m_224", "tiny_vit_11m_224", "tiny_vit_21m_224", "tiny_vit_21m_384"]
NAMES += ["tiny_vit_21m_512"]

if __name__ == "__main__":
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size, calibration_size=size)
    write_index("tiny_vit", NAMES, lambda name: timm.create_model(name, num_classes=1000))

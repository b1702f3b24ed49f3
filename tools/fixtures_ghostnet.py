"""Parity fixtures of GhostNet (see tools/parity.py for how to run it).

Each case is timm's own `GhostNet` class with a reduced `cfgs` table at width 0.5 (stem 8): an
identity block, a stride-2 block with squeeze-excite, a width change at stride 1 (the shortcut's
convolutions unstrided), and a stride-2 5x5 block; timm's 1280-wide `conv_head` and classifier
replaced by 16- and 10-wide ones. At 52 px the maps are 26, 13, 7: V2's DFC attention (every block
from the third) pools 13 to 6 (the last row dropped) and upsamples it unevenly.
"""

import torch
from parity import timm, write_case, write_index  # noqa: F401  (timm first: it applies the shims)
from timm.models.ghostnet import GhostNet  # noqa: E402

# timm's rows: kernel, expanded width, output width, squeeze-excite ratio, stride.
CFGS = [
    [[3, 16, 16, 0, 1]],
    [[3, 32, 16, 0.25, 2]],
    [[3, 32, 24, 0.25, 1], [5, 48, 24, 0, 1]],
    [[5, 48, 32, 0.25, 2]],
]
HEAD = 16


def small(version: str) -> GhostNet:
    model = GhostNet(CFGS, num_classes=10, width=0.5, version=version)
    model.conv_head = torch.nn.Conv2d(model.pool_dim, HEAD, 1, bias=True)
    model.classifier = torch.nn.Linear(HEAD, 10)
    return model


# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments.
CASES = {
    "ghostnet": ("ghostnet_100", lambda: small("v1"), 52),
    "ghostnetv2": ("ghostnetv2_100", lambda: small("v2"), 52),
}

NAMES = ["ghostnet_100", "ghostnetv2_100", "ghostnetv2_130", "ghostnetv2_160"]

if __name__ == "__main__":
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size, calibration_size=size)
    write_index("ghostnet", NAMES)

"""Parity fixtures of the HRNet family (see tools/parity.py for how to run it)."""

from parity import timm, write_case, write_index  # noqa: F401  (timm first: it applies the shims)
from timm.models.hrnet import HighResolutionNet  # noqa: E402

# timm's classification head is 32, 64, 128, 256 bottlenecks wide and 2048 after `final_layer`
# whatever the stages (`_make_head`'s constants): a million-parameter head. This subclass keeps
# timm's code and reads narrower constants where `__init__` and `_make_head` write theirs.
HEAD_WIDTHS = (2, 2, 4, 4)
NUM_FEATURES = 16


class NarrowHead(HighResolutionNet):
    head_channels = property(
        lambda self: list(HEAD_WIDTHS) if self.__dict__.get("_head_made") else None,
        lambda self, value: self.__dict__.__setitem__("_head_made", value is not None),
    )
    num_features = property(lambda self: NUM_FEATURES, lambda self, value: None)


def _stage(modules, blocks, widths, block="BASIC"):
    return {
        "num_modules": modules,
        "num_branches": len(widths),
        "block_type": block,
        "num_blocks": blocks,
        "num_channels": widths,
        "fuse_method": "SUM",
    }


# Two modules in stage3 (a module reading the last's fused maps), a stage4 of four branches
# (the fusion's two- and three-step strided paths, 8x upsampling), a transition1 convolving the
# bottlenecks' 16 channels to 4 and each later one adding a branch.
CFG = {
    "stem_width": 8,
    "stage1": _stage(1, (1,), (4,), "BOTTLENECK"),
    "stage2": _stage(1, (1, 1), (4, 8)),
    "stage3": _stage(2, (1, 1, 1), (4, 8, 8)),
    "stage4": _stage(1, (1, 1, 1, 1), (4, 8, 8, 8)),
}

# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments. The fusion's upsampling meets its maps at sizes of
# 32k pixels (so does the calibration's 64).
CASES = {
    "hrnet_tiny": ("hrnet_w18", lambda: NarrowHead(CFG, num_classes=10), 32),
    # The SSLD files' head: downsamp_modules and final_layer convolutions without biases.
    "hrnet_tiny_ssld": (
        "hrnet_w18_ssld",
        lambda: NarrowHead(CFG, num_classes=10, head_conv_bias=False),
        32,
    ),
}

FULL_SIZE = [
    *("hrnet_w18_small", "hrnet_w18_small_v2", "hrnet_w18", "hrnet_w30", "hrnet_w32"),
    *("hrnet_w40", "hrnet_w44", "hrnet_w48", "hrnet_w64", "hrnet_w18_ssld", "hrnet_w48_ssld"),
]


if __name__ == "__main__":
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size, calibration_size=64)
    write_index("hrnet", FULL_SIZE)

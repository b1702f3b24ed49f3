"""Parity fixtures of the DLA family (see tools/parity.py for how to run it)."""

from parity import timm, write_case, write_index  # noqa: F401  (timm first: it applies the shims)
from timm.models.dla import DLA, DlaBasic, DlaBottleneck  # noqa: E402

# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments. Sizes halve evenly five times, as DLA needs
# (so does the calibration's 64).
CASES = {
    # DLA-34's basic blocks: level2 projects its shortcut (4 -> 8 wide), level3 pools it (8 -> 8),
    # level4's two-level tree hands its input to the root (level_root).
    "dla_basic": (
        "dla34",
        lambda: DLA(
            levels=(1, 1, 1, 2, 2, 1),
            channels=(4, 4, 8, 8, 16, 16),
            block=DlaBasic,
            num_classes=10,
        ),
        32,
    ),
    # DLA-X-102's: grouped bottlenecks (2 groups), roots adding their first child back, a
    # three-level tree, and a level of two convolutions (`level1.3`).
    "dla_x_root": (
        "dla102x",
        lambda: DLA(
            levels=(1, 2, 1, 3, 2, 1),
            channels=(4, 8, 16, 16, 32, 32),
            block=DlaBottleneck,
            cardinality=2,
            base_width=32,
            shortcut_root=True,
            num_classes=10,
        ),
        32,
    ),
}

FULL_SIZE = [
    *("dla34", "dla46_c", "dla46x_c", "dla60", "dla60x", "dla60x_c"),
    *("dla102", "dla102x", "dla102x2", "dla169"),
]


if __name__ == "__main__":
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size, calibration_size=64)
    write_index("dla", FULL_SIZE)

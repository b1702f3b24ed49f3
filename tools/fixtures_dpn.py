"""Parity fixtures of the Dual Path Networks (see tools/parity.py for how to run it)."""

from parity import timm, write_case, write_index  # noqa: F401  (timm first: it applies the shims)
from timm.models.dpn import DPN  # noqa: E402

# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments.
CASES = {
    # dpn48b's: the small networks' 3x3 stem and residual widths (64, 128), the split last 1x1
    # ("b"), SiLU; two stages, so both projections (stride 1, then 2).
    "dpn_small_b": (
        "dpn48b",
        lambda: DPN(
            k_sec=(1, 2),
            inc_sec=(8, 8),
            k_r=16,
            groups=4,
            small=True,
            num_init_features=8,
            b=True,
            act_layer="silu",
            num_classes=10,
        ),
        32,
    ),
    # dpn92's: the 7x7 stem, residual paths four times as wide (256), one last 1x1 split, ReLU;
    # one stage (the next would be 512 wide), on an odd 35 px image.
    "dpn_wide": (
        "dpn92",
        lambda: DPN(
            k_sec=(2,), inc_sec=(8,), k_r=16, groups=4, num_init_features=8, num_classes=10
        ),
        35,
    ),
}

FULL_SIZE = ["dpn48b", "dpn68", "dpn68b", "dpn92", "dpn98", "dpn107", "dpn131"]


if __name__ == "__main__":
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size)
    write_index("dpn", FULL_SIZE)

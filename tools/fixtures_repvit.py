"""Parity fixtures of the RepViT family (see tools/parity.py for how to run it).

timm's own `RepVit` (two heads, averaged) in a small configuration: widths 8, 16, 24, 32 in
2, 1, 2, 1 blocks (a gated and an ungated block in two stages), at 40 px (maps of 10, 5, 3 and 2
pixels: odd maps downsampled), with the current token mixers (`repvit`, as `repvit_m0_9`) and
the legacy ones (`repvit_legacy`, as `repvit_m1`). For each, timm's own `fuse()` of the
perturbed network: its logits and two of its fused token mixers (`fused.safetensors`, float32),
which `nets.repvit.reparameterize` must give.
"""

from parity import timm, write_case, write_fused, write_index  # noqa: F401  (timm first: the shims)
from timm.models.repvit import RepVit  # noqa: E402

SMALL = {"embed_dim": (8, 16, 24, 32), "depth": (2, 1, 2, 1)}
SIZE = 40


def small(legacy: bool) -> RepVit:
    return RepVit(num_classes=10, legacy=legacy, **SMALL)


# name -> (architecture in config.json, the small timm network, image size).
CASES = {
    "repvit": ("repvit_m0_9", lambda: small(False), SIZE),
    "repvit_legacy": ("repvit_m1", lambda: small(True), SIZE),
}
NAMES = ["repvit_m0_9", "repvit_m1", "repvit_m1_0", "repvit_m1_1", "repvit_m1_5", "repvit_m2"]
NAMES += ["repvit_m2_3", "repvit_m3"]

# The fused token mixers kept (a few, for the fixture's size): a gated block's and a stage's
# downsampling block's.
KEPT = ("stages.0.blocks.0.token_mixer", "stages.2.downsample.pre_block.token_mixer")


if __name__ == "__main__":
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size)
        write_fused(case, build, KEPT, fuse=lambda model: model.fuse())
    write_index("repvit", NAMES)

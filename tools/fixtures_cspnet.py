"""Parity fixtures of the CSPNet family (see tools/parity.py for how to run it; with the
argument `output_stride`, only the dilated case and its logits at output strides 8 and 16)."""

import sys

from parity import timm, write_case, write_index, write_output_strides  # noqa: F401  (timm first)
from timm.models.cspnet import CspModelCfg, CspNet, CspStagesCfg, CspStemCfg  # noqa: E402


def small(stem: CspStemCfg, act: str = "leaky_relu", output_stride: int = 32, **stages) -> CspNet:
    """timm's `CspNet` of three stages (`stages`: `CspStagesCfg`'s fields) and 10 classes."""
    cfg = CspModelCfg(stem, CspStagesCfg(**stages), act_layer=act)
    return CspNet(cfg, num_classes=10, output_stride=output_stride)


# cs3sedarknet_xdw's bottleneck, grouped and gated, in CSPResNet-50d's cross stages (linear
# expansion) after its deep stem at stride 4 with a max pool.
_CSPRESNET_SE = {
    "stem": CspStemCfg(out_chs=(4, 8), kernel_size=3, stride=4, pool="max"),
    "groups": 2,
    "expand_ratio": 2.0,
    "bottle_ratio": 0.5,
    "cross_linear": True,
    "attn_layer": "se",
    "attn_kwargs": {"rd_ratio": 0.25},
}


def cspresnet_dilated(output_stride: int = 32) -> CspNet:
    """`cspresnet_se` with one block a stage and a fourth stage: at stride 32, so that output
    strides 16 and 8 dilate one and two stages (timm's `first_dilation` 1, then 2 for the
    second's downsampling)."""
    return small(
        **_CSPRESNET_SE,
        output_stride=output_stride,
        depth=(1, 1, 1, 1),
        out_chs=(16, 32, 32, 40),
        stride=(1, 2, 2, 2),
    )


# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments.
CASES = {
    # CSPResNet-50d's: a deep stem at stride 4 with its max pool, cross stages of bottlenecks
    # (linear expansion), here grouped and gated (cs3sedarknet_xdw's bottleneck).
    "cspresnet_se": (
        "cspresnet50d",
        lambda: small(**_CSPRESNET_SE, depth=(2, 1, 1), out_chs=(16, 32, 32), stride=(1, 2, 2)),
        36,
    ),
    # CSPDarkNet-53's: stride-1 stem, the first stage's own ratios, downsampling to the width.
    "cspdarknet": (
        "cspdarknet53",
        lambda: small(
            CspStemCfg(out_chs=8, kernel_size=3, stride=1, pool=""),
            depth=(1, 2, 1),
            out_chs=(16, 32, 32),
            stride=2,
            expand_ratio=(2.0, 1.0, 1.0),
            bottle_ratio=(0.5, 1.0, 1.0),
            block_ratio=(1.0, 0.5, 0.5),
            down_growth=True,
            block_type="dark",
        ),
        32,
    ),
    # DarkNet-AA-53's 2x2 average pools on odd maps (27 -> 13 -> 6 -> 3), SE-DarkNet's gates.
    "darknetaa_se": (
        "darknetaa53",
        lambda: small(
            CspStemCfg(out_chs=8, kernel_size=3, stride=1, pool=""),
            depth=(1, 2, 1),
            out_chs=(16, 16, 32),
            stride=2,
            bottle_ratio=0.5,
            avg_down=True,
            attn_layer="se",
            stage_type="dark",
            block_type="dark",
        ),
        27,
    ),
    # The focus stem (6x6/2, padding 2, on an odd 35 px image) before CS3-SE-EdgeNet's stages:
    # edge blocks, quarter-width gates, SiLU.
    "cs3_focus_se_edge": (
        "cs3darknet_focus_l",
        lambda: small(
            CspStemCfg(out_chs=8, kernel_size=6, stride=2, padding=2, pool=""),
            act="silu",
            depth=(1, 2, 1),
            out_chs=(16, 32, 32),
            stride=2,
            bottle_ratio=1.5,
            block_ratio=0.5,
            attn_layer="se",
            attn_kwargs={"rd_ratio": 0.25},
            stage_type="cs3",
            block_type="edge",
        ),
        35,
    ),
    "cspresnet_dilated": ("cspresnet50d", cspresnet_dilated, 48),
}
# The cases written at `output_stride` 8 and 16 (the others stop at 16 or 8: none dilates at 16).
OUTPUT_STRIDE = {"cspresnet_dilated": cspresnet_dilated}

FULL_SIZE = [
    *("cspresnet50", "cspresnet50d", "cspresnet50w", "cspresnext50", "cspdarknet53"),
    *("darknet17", "darknet21", "sedarknet21", "darknet53", "darknetaa53"),
    *(f"cs3darknet_{s}" for s in "smlx"),
    *(f"cs3darknet_focus_{s}" for s in "smlx"),
    *("cs3sedarknet_l", "cs3sedarknet_x", "cs3sedarknet_xdw", "cs3edgenet_x", "cs3se_edgenet_x"),
]


if __name__ == "__main__":
    if sys.argv[1:] == ["output_stride"]:  # the cases dilated (the others' files untouched)
        for case, build in OUTPUT_STRIDE.items():
            write_case(case, *CASES[case])
            write_output_strides(case, build)
        sys.exit()
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size)
    write_index("cspnet", FULL_SIZE)

"""timm's `feature_info` for every network of ours that timm also builds, the reference our
feature pyramids (`NetworkFn.feature_info`) are tested against.

    PYTHONPATH=../shared/tools /work/torchenv/bin/python tools/fixtures_feature_info.py
    (... tools/fixtures_feature_info.py output_stride: timm's strides with dilation, below)

Writes `tests/fixtures/feature_info_timm.json`: for each of our names, timm's name and its levels
as `[stride, channels]` (timm's `reduction`, `num_chs`). Models are built without weights.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / ".." / "shared" / "tools"))
from timm_compat import import_timm  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "feature_info_timm.json"

# Networks whose `model.feature_info` lists a level their `features_only` default leaves out: DLA's
# stride-1 `level0` (its `out_indices` are 1 to 5). Their levels are `features_only`'s.
DLA = [
    *("dla34", "dla46_c", "dla46x_c", "dla60", "dla60x", "dla60x_c"),
    *("dla102", "dla102x", "dla102x2", "dla169"),
]
# HRNet's `features_only` is a class of its own (`HighResolutionNetFeatures`, the incre location):
# its levels, which `model.feature_info` repeats, are read from it too.
HRNET = [
    *("hrnet_w18_small", "hrnet_w18_small_v2", "hrnet_w18", "hrnet_w30", "hrnet_w32"),
    *("hrnet_w40", "hrnet_w44", "hrnet_w48", "hrnet_w64", "hrnet_w18_ssld", "hrnet_w48_ssld"),
]

SAME_NAMES = [
    *[f"resnet{d}" for d in (18, 34, 50, 101, 152, 200)],
    "wide_resnet50_2",
    "wide_resnet101_2",
    "resnext50_32x4d",
    "resnext101_32x8d",
    *("resnest14d", "resnest26d", "resnest50d", "resnest101e", "resnest200e", "resnest269e"),
    *("resnest50d_4s2x40d", "resnest50d_1s4x24d", "res2net50_26w_4s", "res2net101_26w_4s"),
    *("res2net50_26w_6s", "res2net50_26w_8s", "res2net50_48w_2s", "res2net50_14w_8s"),
    *("res2next50", "res2net50d", "res2net101d"),
    *[f"convnext_{s}" for s in ("tiny", "small", "base", "large")],
    *[f"densenet{d}" for d in (121, 161, 169, 201)],
    *[f"{p}efficientnet_b{i}" for p in ("", "tf_") for i in range(8)],
    *[f"{p}efficientnetv2_{s}" for p in ("", "tf_") for s in "sml"],
    *[f"mobilenetv4_conv_{s}" for s in ("small", "small_050", "small_035", "medium", "large")],
    *[f"mobilenetv4_hybrid_{s}" for s in ("medium", "large")],
    *[f"mobilevit_{s}" for s in ("xxs", "xs", "s")],
    *[f"mobilevitv2_{m}" for m in ("050", "075", "100", "125", "150", "175", "200")],
    *[f"swin_{s}_patch4_window7_224" for s in ("tiny", "small", "base")],
    *[f"swinv2_{s}_window{w}_256" for s in ("tiny", "small", "base") for w in (8, 16)],
    *[f"swinv2_{s}_window12_192" for s in ("base", "large")],
    *[
        f"swinv2_{s}_window12to{w}"
        for s in ("base", "large")
        for w in ("16_192to256", "24_192to384")
    ],
    *[f"tiny_vit_{s}" for s in ("5m_224", "11m_224", "21m_224", "21m_384", "21m_512")],
    *[f"levit_{s}" for s in ("128s", "128", "192", "256", "384")],
    *[
        f"maxvit_{s}_tf_{r}"
        for s in ("tiny", "small", "base", "large", "xlarge")
        for r in (224, 384, 512)
    ],
    *[f"pvt_v2_{s}" for s in ("b0", "b1", "b2", "b2_li", "b3", "b4", "b5")],
    *[f"efficientformer_{s}" for s in ("l1", "l3", "l7")],
    *[f"efficientformerv2_{s}" for s in ("s0", "s1", "s2", "l")],
    *[f"efficientvit_{s}" for s in ("b0", "b1", "b2", "b3", "l1", "l2", "l3")],
    *[f"efficientvit_m{i}" for i in range(6)],
    *[f"inception_next_{s}" for s in ("atto", "tiny", "small", "base")],
    *[f"mambaout_{s}" for s in ("femto", "kobe", "tiny", "small", "base", "small_rw")],
    *[f"mambaout_base_{s}_rw" for s in ("short", "tall", "wide", "plus")],
    "ghostnet_100",
    *[f"ghostnetv2_{m}" for m in (100, 130, 160)],
    "regnetx_004",
    "regnety_008",
    "regnety_080",
    *[f"repvgg_{s}" for s in ("a0", "a1", "a2", "b0", "b1", "b1g4", "b2", "b2g4", "b3")],
    *("repvgg_b3g4", "repvgg_d2se"),
    *[f"fastvit_{s}" for s in ("t8", "t12", "s12", "sa12", "sa24", "sa36", "ma36")],
    *[f"fastvit_mci{i}" for i in range(5)],
    *[f"repvit_{m}" for m in ("m0_9", "m1", "m1_0", "m1_1", "m1_5", "m2", "m2_3", "m3")],
    *[f"vit_{s}" for s in ("tiny_patch16_224", "small_patch16_224", "base_patch16_224")],
    "vit_base_patch32_224",
    "vit_large_patch16_224",
    *[f"beit_{s}" for s in ("base_patch16_224", "base_patch16_384", "large_patch16_224")],
    *[f"beit_large_patch16_{s}" for s in (384, 512)],
    *[f"beitv2_{s}_patch16_224" for s in ("base", "large")],
    *[f"deit_{s}_{d}patch16_224" for s in ("tiny", "small", "base") for d in ("", "distilled_")],
    "inception_v3",
    "inception_v4",
    "inception_resnet_v2",
    "legacy_xception",
    *[f"xception{d}" for d in ("41", "65", "71", "41p", "65p")],
    *[f"vgg{d}{bn}" for d in (11, 13, 16, 19) for bn in ("", "_bn")],
    *[f"poolformer{v}_{s}" for v in ("", "v2") for s in ("s12", "s24", "s36", "m36", "m48")],
    *[f"{kind}_{s}" for kind in ("convformer", "caformer") for s in ("s18", "s36", "m36", "b36")],
    *[f"mixer_{s}_224" for s in ("s32", "s16", "b32", "b16", "l32", "l16")],
    *[f"gmixer_{d}_224" for d in (12, 24)],
    *[f"resmlp_{d}_224" for d in ("12", "24", "36", "big_24")],
    *[f"gmlp_{s}16_224" for s in ("ti", "s", "b")],
    *DLA,
    *[f"resnetv2_{d}" for d in ("18", "18d", "34", "34d", "50", "101", "50d_gn", "50d_evos")],
    *[f"resnetv2_{s}_bit" for s in ("50x1", "50x3", "101x1", "101x3", "152x2", "152x4")],
    *("cspresnet50", "cspresnet50d", "cspresnet50w", "cspresnext50", "cspdarknet53"),
    *("darknet17", "darknet21", "sedarknet21", "darknet53", "darknetaa53"),
    *(f"cs3darknet_{s}" for s in "smlx"),
    *(f"cs3darknet_focus_{s}" for s in "smlx"),
    *("cs3sedarknet_l", "cs3sedarknet_x", "cs3sedarknet_xdw", "cs3edgenet_x", "cs3se_edgenet_x"),
    *("dpn48b", "dpn68", "dpn68b", "dpn92", "dpn98", "dpn107", "dpn131"),
    *[f"edgenext_{s}" for s in ("xx_small", "x_small", "small", "base", "small_rw")],
    *[f"pit_{s}{d}_224" for s in ("ti", "xs", "s", "b") for d in ("", "_distilled")],
    *HRNET,
    *(f"rexnet{r}_{m}" for r in ("", "r") for m in (100, 130, 150, 200, 300)),
]
RENAMED = {
    "resnet_v2_50": "resnetv2_50",
    "resnet_v2_101": "resnetv2_101",
    "resnet_v2_152": "resnetv2_152",
    "mobilenet_v1": "mobilenetv1_100",
    "mobilenet_v2": "mobilenetv2_100",
    "mobilenet_v2_035": "mobilenetv2_035",
    "mobilenet_v2_140": "mobilenetv2_140",
    "mobilenet_v3_large": "mobilenetv3_large_100",
    "mobilenet_v3_small": "mobilenetv3_small_100",
    "mobilenet_v3_large_minimalistic": "tf_mobilenetv3_large_minimal_100",
    "mobilenet_v3_small_minimalistic": "tf_mobilenetv3_small_minimal_100",
    "mobilenet_edgetpu": "mobilenet_edgetpu_100",
    "nasnet_large": "nasnetalarge",
    "pnasnet_large": "pnasnet5large",
}


def main() -> None:
    timm = import_timm()
    table = {}
    for ours, theirs in [*((n, n) for n in SAME_NAMES), *RENAMED.items()]:
        if theirs in DLA or theirs in HRNET:
            info = timm.create_model(theirs, pretrained=False, features_only=True).feature_info
            levels = [list(level) for level in zip(info.reduction(), info.channels(), strict=True)]
        else:
            model = timm.create_model(theirs, pretrained=False)
            levels = [[d["reduction"], d["num_chs"]] for d in model.feature_info]
        table[ours] = {"timm": theirs, "levels": levels}
        print(ours, theirs, levels)
    OUT.write_text(json.dumps(table, indent=1) + "\n")
    print(f"wrote {len(table)} networks to {OUT}")


def dilated() -> None:
    """timm's strides at `output_stride` 8 and 16 for each of those networks that timm dilates
    (its pyramid's strides change; the others refuse the argument or ignore it), as
    `tests/fixtures/output_stride_timm.json`: our name -> {"8": [...], "16": [...]}."""
    import torch  # noqa: PLC0415

    timm = import_timm()
    table = {}
    for ours, theirs in [*((n, n) for n in SAME_NAMES), *RENAMED.items()]:
        strides = {}
        for output_stride in (8, 16, 32):
            # The classifier's `feature_info` (all levels, as `main`'s), else `features_only`'s
            # where only that takes the argument (MobileNetV3's class: its features trunk does).
            try:
                with torch.device("meta"):
                    model = timm.create_model(theirs, output_stride=output_stride)
                levels = [d["reduction"] for d in model.feature_info]
            except TypeError:
                try:
                    with torch.device("meta"):
                        model = timm.create_model(
                            theirs, features_only=True, output_stride=output_stride
                        )
                except (AssertionError, TypeError, ValueError):
                    break
                levels = model.feature_info.reduction()
            except (AssertionError, ValueError):
                break
            strides[str(output_stride)] = levels
        if strides and strides["8"] != strides["32"]:
            table[ours] = {"8": strides["8"], "16": strides["16"]}
            print(ours, table[ours])
    out = OUT.with_name("output_stride_timm.json")
    out.write_text(json.dumps(table, indent=1) + "\n")
    print(f"wrote {len(table)} networks to {out}")


if __name__ == "__main__" and sys.argv[1:] == ["output_stride"]:
    dilated()
elif __name__ == "__main__":
    main()

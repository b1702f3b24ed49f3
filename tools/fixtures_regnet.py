"""Parity fixtures of the RegNet family (see tools/parity.py for how to run it).

timm's RegNet at a small configuration (four stages of widths 8, 16, 32, 64), X and Y, in
timm's key layout, and the Y case again in torchvision's (`tv_regnet_y`: the same tensors under
torchvision's keys, which timm's own torchvision converter, `_filter_fn`, maps back).
"""

import re
import sys

from parity import ROOT, timm, write_case, write_index, write_output_strides  # noqa: F401
from safetensors.numpy import load_file, save_file  # noqa: E402
from timm.models.regnet import RegNet, RegNetCfg, _filter_fn  # noqa: E402

_TORCHVISION = [
    ("conv1.conv", "f.a.0"),
    ("conv1.bn", "f.a.1"),
    ("conv2.conv", "f.b.0"),
    ("conv2.bn", "f.b.1"),
    ("conv3.conv", "f.c.0"),
    ("conv3.bn", "f.c.1"),
    ("se.fc", "f.se.fc"),
    ("downsample.conv", "proj.0"),
    ("downsample.bn", "proj.1"),
]


def torchvision_keys(state_dict: dict) -> dict:
    """timm's keys -> torchvision's, checked by timm's converter mapping them back."""
    out = {}
    for key, value in state_dict.items():
        key = key.replace("stem.conv", "stem.0").replace("stem.bn", "stem.1")
        key = re.sub(
            r"^s(\d)\.b(\d+)\.",
            lambda m: f"trunk_output.block{m[1]}.block{m[1]}-{int(m[2]) - 1}.",
            key,
        )
        for theirs, tv in _TORCHVISION:
            key = key.replace(theirs, tv)
        out[key.replace("head.fc.", "fc.")] = value
    assert set(_filter_fn(dict(out))) == set(state_dict)
    return out


def small(se_ratio: float, output_stride: int = 32) -> RegNet:
    # Block widths 8, 16, 32, 32, 32, 64: four stages of 1, 1, 3, 1 blocks, groups of 8.
    cfg = RegNetCfg(w0=8, wa=8.0, wm=2.0, depth=6, group_size=8, se_ratio=se_ratio, stem_width=8)
    return RegNet(cfg, num_classes=10, output_stride=output_stride)


CASES = {
    "regnet_x": ("regnetx_008", lambda: small(0.0), 48),
    "regnet_y": ("regnety_016", lambda: small(0.25), 48),
}
# timm's full-size networks; torchvision's layout for a few of them.
FULL_SIZE = [
    *("regnetx_004", "regnetx_004_tv", "regnetx_008", "regnetx_016", "regnetx_032"),
    *("regnetx_080", "regnetx_160", "regnety_004", "regnety_008", "regnety_008_tv"),
    *("regnety_016", "regnety_032", "regnety_080", "regnety_080_tv", "regnety_160"),
]
TORCHVISION = {
    "regnet_x_400mf": "regnetx_004_tv",
    "regnet_x_16gf": "regnetx_160",
    "regnet_y_800mf": "regnety_008_tv",
    "regnet_y_16gf": "regnety_160",
}

# The case dilated by timm's `output_stride` (8, 16): its small network at that stride on the
# written weights (Y's blocks: X's are the same less the squeeze-excite). At 8 the last two
# stages keep 6-pixel maps (48 px), the third's three blocks the first at dilation 1, then 2.
OUTPUT_STRIDES = {"regnet_y": lambda s: small(0.25, s)}


if __name__ == "__main__":
    if sys.argv[1:] == ["output_stride"]:  # only the dilated logits: the cases stay as written
        for case, build in OUTPUT_STRIDES.items():
            write_output_strides(case, build)
        sys.exit()
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size)
    # The Y case under torchvision's keys: the same tensors and logits.
    source, target = ROOT / "parity" / "regnet_y", ROOT / "parity" / "tv_regnet_y"
    target.mkdir(exist_ok=True)
    save_file(
        torchvision_keys(load_file(source / "model.safetensors")), target / "model.safetensors"
    )
    (target / "config.json").write_text('{"architecture": "regnet_y_1_6gf", "num_classes": 10}\n')
    (target / "expected.safetensors").write_bytes((source / "expected.safetensors").read_bytes())
    write_index("regnet", FULL_SIZE)
    lines = []
    for ours, theirs in TORCHVISION.items():
        model = timm.create_model(theirs, pretrained=False)
        lines.append(f"[{ours}]")
        state = torchvision_keys(model.state_dict())
        lines += [f"{k} {','.join(map(str, v.shape))}" for k, v in state.items()]
    with (ROOT / "state_dicts" / "regnet.txt").open("a") as f:
        f.write("\n".join(lines) + "\n")

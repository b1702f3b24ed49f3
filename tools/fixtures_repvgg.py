"""Parity fixtures of the RepVGG family (see tools/parity.py for how to run it).

timm's ByobNet in RepVGG's small configurations: stages of widths 8, 16, 32, 64 (1, 3, 2, 1
blocks, stem 8) with every second block in 4 groups (the `g4` rule), and the same ungrouped with
`repvgg_d2se`'s squeeze-excite gates (of one channel at this width). For each, timm's own
`reparameterize()` of the perturbed network: the logits of its fused network and three of its
fused convolutions (`fused.safetensors`, float32), which `nets.repvgg.reparameterize` must give.
"""

import torch
from parity import ROOT, timm, write_case, write_index  # noqa: F401  (timm first: the shims)
from safetensors.numpy import load_file, save_file  # noqa: E402
from timm.models.byobnet import ByobNet, ByoModelCfg, _rep_vgg_bcfg  # noqa: E402
from timm.utils.model import reparameterize_model  # noqa: E402

DEPTHS = (1, 3, 2, 1)


def small(scale: float, groups: int = 0, **cfg) -> ByobNet:
    blocks = _rep_vgg_bcfg(d=DEPTHS, wf=(scale,) * 4, groups=groups)
    return ByobNet(
        ByoModelCfg(blocks=blocks, stem_type="rep", stem_chs=int(64 * scale), **cfg),
        num_classes=10,
    )


SE = {"attn_layer": "se", "attn_kwargs": {"rd_ratio": 0.0625, "rd_divisor": 1}}
CASES = {
    "repvgg_g4": ("repvgg_b1g4", lambda: small(0.125, groups=4), 40),
    "repvgg_se": ("repvgg_d2se", lambda: small(0.125, **SE), 40),
}
FULL_SIZE = ["repvgg_a0", "repvgg_a1", "repvgg_a2", "repvgg_b0", "repvgg_b1", "repvgg_b1g4"]
FULL_SIZE += ["repvgg_b2", "repvgg_b2g4", "repvgg_b3", "repvgg_b3g4", "repvgg_d2se"]


# The fused tensors kept (a few, for the fixture's size): the stem's (no identity), a grouped
# block's with an identity, and an ungrouped one's.
KEPT = ("stem.reparam_conv", "stages.1.1.reparam_conv", "stages.1.2.reparam_conv")


def write_fused(case: str, build) -> None:
    """timm's fused tensors of the case's network and their logits on the case's images."""
    folder = ROOT / "parity" / case
    model = build()
    state = {
        k: torch.from_numpy(v).float() for k, v in load_file(folder / "model.safetensors").items()
    }
    model.load_state_dict(state)
    model.eval()
    model = reparameterize_model(model)
    images = torch.from_numpy(load_file(folder / "expected.safetensors")["images"])
    with torch.no_grad():
        logits = model(images.permute(0, 3, 1, 2))
    fused = {k: v.numpy() for k, v in model.state_dict().items() if k.startswith(KEPT)}
    assert len(fused) == 2 * len(KEPT)
    save_file({**fused, "logits": logits.numpy()}, folder / "fused.safetensors")


if __name__ == "__main__":
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size)
        write_fused(case, build)
    write_index("repvgg", FULL_SIZE)

"""Parity fixtures of the NFNet family (see tools/parity.py for how to run it).

timm's `NormFreeNet` in a small configuration (stem of 4, 8, 16 and 32 channels; stages of
16, 32, 48 and 64 with 1, 2, 1, 1 blocks; groups of 8), once with DeepMind's conventions
(`dm_nfnet_f0`'s: 'SAME' padding, gamma-scaled GELU, skip-init gains, squeeze-excite) and once
with timm's own (`eca_nfnet_l0`'s: symmetric padding, SiLU with gamma in the kernels, ECA), on
44-px images: 'SAME' pads a stride-2 3x3 window on an even map (22 -> 11 is not; 6 -> 3 is)
otherwise than PyTorch, and the 2x2 average pools of the shortcuts see odd maps (11, 3), where
ceil mode keeps a last lone pixel.
"""

import sys
from dataclasses import replace

import parity
import torch
from parity import timm, write_case, write_index, write_output_strides  # noqa: F401  (timm first)
from timm.models.nfnet import NormFreeNet, _dm_nfnet_cfg, _nfnet_cfg  # noqa: E402

SMALL = {"depths": (1, 2, 1, 1), "channels": (16, 32, 48, 64)}
# eca_nfnet_l0's configuration but its groups: of 8 channels, not 64.
ECA_L0 = {
    "feat_mult": 1.5,
    "group_size": 8,
    "bottle_ratio": 0.25,
    "attn_layer": "eca",
    "attn_kwargs": {},
    "act_layer": "silu",
}


def small(cfg, output_stride: int = 32) -> torch.nn.Module:
    """timm's network, its classifier ~N(0, 1 / fan_in) (timm's 0.01); `parity.perturb` draws
    the gains (the last convolution's starts at 0 without skip-init, DeepMind's skip-init gain
    at 0: the branches would vanish)."""
    model = NormFreeNet(cfg, num_classes=10, output_stride=output_stride)
    with torch.no_grad():
        model.head.fc.weight.normal_(0.0, model.head.fc.in_features**-0.5)
    return model


DM_SMALL = replace(_dm_nfnet_cfg(**SMALL), stem_chs=32, group_size=8)
# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments.
CASES = {
    "dm_nfnet_small": ("dm_nfnet_f0", lambda: small(DM_SMALL), 44),
    "eca_nfnet_small": (
        "eca_nfnet_l0",
        lambda: small(replace(_nfnet_cfg(**SMALL, **ECA_L0), stem_chs=32)),
        44,
    ),
}

FULL_SIZE = [
    *(f"dm_nfnet_f{i}" for i in range(7)),
    *("nfnet_l0", "eca_nfnet_l0", "eca_nfnet_l1", "eca_nfnet_l2"),
]

# The cases written at `output_stride` 8 and 16: DeepMind's (dilated 'SAME' convolutions; the
# shortcut's 2x2 pool of a stage that stops striding is timm's `AvgPool2dSame`).
OUTPUT_STRIDE = {"dm_nfnet_small": lambda s: small(DM_SMALL, output_stride=s)}

AGC_CLIP = 0.01  # the NFNet paper's clipping factor at batch 4096


def write_agc(case: str = "dm_nfnet_small") -> None:
    """timm's adaptive gradient clipping on the case's network (its written weights): the
    cross-entropy gradient of its images (labels 0, 1, ...) in training mode, as `grad.<key>`,
    and that gradient after timm's train.py clips it (`--clip-mode agc --clip-grad 0.01`:
    `dispatch_clip_grad(model_parameters(model, exclude_head=True), 0.01, 'agc')`, the
    classifier left alone), as `clipped.<key>`, in `agc.safetensors` (float32)."""
    from safetensors.numpy import load_file, save_file
    from timm.models._manipulate import model_parameters
    from timm.utils import dispatch_clip_grad

    folder = parity.ROOT / "parity" / case
    model = CASES[case][1]()
    state = load_file(folder / "model.safetensors")
    model.load_state_dict({k: torch.from_numpy(v).float() for k, v in state.items()})
    model.train()
    images = torch.from_numpy(load_file(folder / "expected.safetensors")["images"])
    labels = torch.arange(images.shape[0]) % 10
    loss = torch.nn.functional.cross_entropy(model(images.permute(0, 3, 1, 2)), labels)
    loss.backward()
    names = {id(p): k for k, p in model.named_parameters()}
    out = {f"grad.{names[id(p)]}": p.grad.numpy().copy() for p in model.parameters()}
    dispatch_clip_grad(model_parameters(model, exclude_head=True), AGC_CLIP, mode="agc")
    out |= {f"clipped.{names[id(p)]}": p.grad.numpy().copy() for p in model.parameters()}
    changed = [k for k in state if not (out[f"grad.{k}"] == out[f"clipped.{k}"]).all()]
    print(f"{case}: AGC at {AGC_CLIP} clipped {len(changed)} of {len(state)} gradients")
    save_file(out, folder / "agc.safetensors")


if __name__ == "__main__":
    if sys.argv[1:] == ["output_stride"]:  # only `output_stride.safetensors` files written
        for case, build in OUTPUT_STRIDE.items():
            write_output_strides(case, build)
        sys.exit()
    if sys.argv[1:] == ["agc"]:  # only `agc.safetensors` written
        write_agc()
        sys.exit()
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size, calibration_size=size)
    write_index("nfnet", FULL_SIZE)

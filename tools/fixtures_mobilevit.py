"""Parity fixtures of the MobileViT family (see tools/parity.py for how to run it).

`output_stride` (run `tools/fixtures_mobilevit.py output_stride` to write only these): the 40 px
cases of v1 and v2 at timm's `output_stride` 8 and 16 (feature_info reductions 2, 4, 8, 8, 8 and
2, 4, 8, 16, 16), their logits on the cases' images (`output_stride.safetensors`). The last three
stages' maps: at 8, v1's 5, 5, 5 (each resized to 6 and back in its MobileViT block), v2's 6, 6, 6
(enlarged once and kept); at 16, v1's 5, 3, 3 and v2's 6, 4, 4.
"""

import sys
from collections.abc import Callable
from functools import partial

import torch
from parity import (  # noqa: F401  (timm first: the shims)
    timm,
    write_case,
    write_index,
    write_output_strides,
)
from timm.models.byobnet import ByobNet, ByoModelCfg
from timm.models.mobilevit import _inverted_residual_block, _mobilevit_block, _mobilevitv2_block


def small(output_stride: int = 32) -> torch.nn.Module:
    """timm's `ByobNet` as `mobilevit_xxs` builds it, at small widths: a stem of 8, a stage of
    one unstrided inverted residual (with its shortcut), one of two to 16 (the second with its
    shortcut), three MobileViT stages (Transformer widths 16, 16, 24: heads of 4 and 6
    channels; 1, 2, 1 blocks deep), a `final_conv` of 32. Every convolution and Linear weight
    ~N(0, 1 / fan_in): timm's initialisation of the Linears (std 0.02) would fade the
    Transformer branches out at these widths."""
    vit_block = partial(_mobilevit_block, d=1, s=2, patch_size=2, br=2.0)
    cfg = ByoModelCfg(
        blocks=(
            _inverted_residual_block(d=1, c=8, s=1, br=2.0),
            _inverted_residual_block(d=2, c=16, s=2, br=2.0),
            vit_block(c=16, transformer_dim=16, transformer_depth=1),
            vit_block(c=16, transformer_dim=16, transformer_depth=2),
            vit_block(c=24, transformer_dim=24, transformer_depth=1),
        ),
        stem_chs=8,
        stem_type="3x3",
        stem_pool="",
        downsample="",
        act_layer="silu",
        num_features=32,
    )
    return perturbed(ByobNet(cfg, num_classes=10, output_stride=output_stride))


def small_v2(output_stride: int = 32) -> torch.nn.Module:
    """timm's `ByobNet` as `mobilevitv2_050` builds it, at small widths: `small`'s first two
    stages, three MobileViT v2 stages of 16, 16, 24 (Transformers half as wide: 8, 8, 16; 1, 2, 1
    blocks deep), no `final_conv`; the weights as `small`'s."""
    cfg = ByoModelCfg(
        blocks=(
            _inverted_residual_block(d=1, c=8, s=1, br=2.0),
            _inverted_residual_block(d=2, c=16, s=2, br=2.0),
            _mobilevitv2_block(d=1, c=16, s=2, transformer_depth=1),
            _mobilevitv2_block(d=1, c=16, s=2, transformer_depth=2),
            _mobilevitv2_block(d=1, c=24, s=2, transformer_depth=1),
        ),
        stem_chs=8,
        stem_type="3x3",
        stem_pool="",
        downsample="",
        act_layer="silu",
    )
    return perturbed(ByobNet(cfg, num_classes=10, output_stride=output_stride))


def perturbed(model: torch.nn.Module) -> torch.nn.Module:
    """Every convolution and Linear weight ~N(0, 1 / fan_in)."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Conv2d | torch.nn.Linear):
                module.weight.normal_(0.0, module.weight[0].numel() ** -0.5)
    return model


# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments. 32 px: the MobileViT blocks' maps of 8 and 4
# unfold into whole patches, the last one's single pixel is resized to 2x2 and back; 40 px: maps
# of 10 (whole patches), 5 and 3, resized bilinearly to 6 and 4 and back.
CASES = {
    "mobilevit_32": ("mobilevit_xxs", small, 32),
    "mobilevit_resized_40": ("mobilevit_s", small, 40),
    # MobileViT v2 at 40 px: its blocks enlarge the maps of 5 and 3 to 6 and 4 (PyTorch's
    # bilinear `align_corners=True`) and keep them: maps of 10, 6, 4, 2.
    "mobilevitv2_resized_40": ("mobilevitv2_050", small_v2, 40),
}

FULL_SIZE = [
    "mobilevit_xxs",
    "mobilevit_xs",
    "mobilevit_s",
    *(f"mobilevitv2_{m}" for m in ("050", "075", "100", "125", "150", "175", "200")),
]


def reporting(build: Callable[[int], torch.nn.Module]) -> Callable[[int], torch.nn.Module]:
    """`build`, printing its network's feature_info reductions (that it dilates)."""

    def at(output_stride: int) -> torch.nn.Module:
        model = build(output_stride)
        print(f"output_stride={output_stride}: {[f['reduction'] for f in model.feature_info]}")
        return model

    return at


if __name__ == "__main__" and sys.argv[1:] == ["output_stride"]:
    write_output_strides("mobilevit_resized_40", reporting(small))
    write_output_strides("mobilevitv2_resized_40", reporting(small_v2))
elif __name__ == "__main__":
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size, calibration_size=size)
    write_index("mobilevit", FULL_SIZE)

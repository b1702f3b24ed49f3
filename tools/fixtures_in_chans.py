"""Parity fixture of `load_pretrained(..., in_chans=C)`: timm's own loader adapting existing
fixtures' RGB input convolutions to 1 and 4 channels (see tools/parity.py for how to run it).

Each case's weights are an existing fixture's `model.safetensors` (tests/fixtures/parity/<case>),
in float32 as published timm files are: timm adapts a float16 kernel in float32 and rounds the
result back to float16, which published weights never meet. timm's `load_pretrained` adapts the
kernel its `first_conv` names (`adapt_input_conv`) into the network built for C channels, whose
logits on fixed C-channel inputs are written to tests/fixtures/parity/in_chans/expected.safetensors
as `<case>_<C>_images` (NHWC) and `<case>_<C>_logits`.
"""

import numpy as np
import torch
from fixtures_resnet import BasicBlock, small_resnet
from fixtures_vit import SMALL, VisionTransformer
from parity import ROOT, timm  # noqa: F401  (timm first: it applies the shims)
from safetensors.numpy import save_file
from safetensors.torch import load_file
from timm.models._builder import load_pretrained  # noqa: E402


def resnet(in_chans: int) -> torch.nn.Module:
    """The resnet_basic fixture's timm ResNet, its stem taking `in_chans` channels."""
    model = small_resnet(BasicBlock, (2, 1, 1, 1), (8, 16, 32, 64))
    model.conv1 = torch.nn.Conv2d(in_chans, 8, 7, stride=2, padding=3, bias=False)
    return model


# case -> (the network for C channels, timm's name of its input convolution, image size)
CASES = {
    "resnet_basic": (resnet, "conv1", 48),
    "vit_small_config": (
        lambda c: VisionTransformer(num_classes=10, in_chans=c, **SMALL),
        "patch_embed.proj",
        32,
    ),
}


def main() -> None:
    expected = {}
    for case, (build, first_conv, size) in CASES.items():
        weights = load_file(ROOT / "parity" / case / "model.safetensors")
        for in_chans in (1, 4):
            generator = torch.Generator().manual_seed(in_chans)
            model = build(in_chans)
            state = {k: v.float() if v.is_floating_point() else v for k, v in weights.items()}
            load_pretrained(
                model, {"state_dict": state, "first_conv": first_conv}, 10, in_chans=in_chans
            )
            model.eval()
            images = torch.randn(2, in_chans, size, size, generator=generator)
            with torch.no_grad():
                logits = model(images)
            expected[f"{case}_{in_chans}_images"] = np.ascontiguousarray(
                images.permute(0, 2, 3, 1).numpy()
            )
            expected[f"{case}_{in_chans}_logits"] = logits.numpy()
    folder = ROOT / "parity" / "in_chans"
    folder.mkdir(exist_ok=True)
    save_file(expected, folder / "expected.safetensors")
    print(", ".join(f"{k} {v.shape}" for k, v in expected.items()))


if __name__ == "__main__":
    main()

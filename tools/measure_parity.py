"""Measures full-size parity with the reference: `load_pretrained` logits against timm's.

Two steps, in two environments (torch and timm are never the project's dependencies):

    # 1. with torch + timm (see tools/parity.py): full-size networks with non-trivial weights,
    #    their files and their eval logits on two random 224 px images (`IMAGE_SIZES`: others)
    cd tools && PYTHONPATH=../../shared/tools /tmp/torchenv/bin/python measure_parity.py make \\
        /tmp/parity resnet18 resnet50 ...
    #    (`make /tmp/parity --size=331 pnasnet5large`: images of another size)
    # 2. with the project installed: our logits from the same files, a Markdown table
    python tools/measure_parity.py check /tmp/parity

Prints one row per architecture: max |ours - reference| / max |reference|.
"""

import sys
from pathlib import Path

# (image, calibration) sizes of networks whose smallest input exceeds the calibration's 56 px.
IMAGE_SIZES = {"inception_v4": (299, 299), "inception_resnet_v2": (299, 299)}
# MaxViT's windows are made for its size (`img_size // 32`): it runs at that size alone.
IMAGE_SIZES |= {
    f"maxvit_{size}_tf_{res}": (res, res)
    for size in ("tiny", "small", "base", "large", "xlarge")
    for res in (224, 384, 512)
}
# LeViT's attention biases are made for its 224 px maps: it runs (and calibrates) at 224 alone.
IMAGE_SIZES |= {
    f"levit_{mode}{size}": (224, 224)
    for mode in ("", "conv_")
    for size in ("128s", "128", "192", "256", "384")
}
# GhostNetV2's attention gates are calibrated where they run: at 56 px the last stage's gate is
# a 1x1 map, and BatchNorm statistics from it leave the 224 px network ill-conditioned.
IMAGE_SIZES |= {f"ghostnetv2_{width}": (224, 224) for width in (100, 130, 160)}

# EfficientFormer's (V1's, V2's) attention biases are made for the maps of 224 px images alone.
IMAGE_SIZES |= {f"efficientformer_{size}": (224, 224) for size in ("l1", "l3", "l7")}
IMAGE_SIZES |= {f"efficientformerv2_{size}": (224, 224) for size in ("s0", "s1", "s2", "l")}
# MSRA's EfficientViT: timm fixes its windows (and their biases' tables) by its 224 px maps.
IMAGE_SIZES |= {f"efficientvit_m{i}": (224, 224) for i in range(6)}

# HRNet's fusion upsamples 2x, 4x, 8x to maps of its own: 56 px leaves a 7x7 above a 4x4.
IMAGE_SIZES |= {
    name: (224, 64)
    for name in ("hrnet_w18_small", "hrnet_w18_small_v2", "hrnet_w18", "hrnet_w30", "hrnet_w32")
    + ("hrnet_w40", "hrnet_w44", "hrnet_w48", "hrnet_w64", "hrnet_w18_ssld", "hrnet_w48_ssld")
}

# DLA's 2x2 pools and strided 3x3 convolutions agree on even maps alone: 56 px leaves a 7x7.
IMAGE_SIZES |= {
    name: (224, 64)
    for name in ("dla34", "dla46_c", "dla46x_c", "dla60", "dla60x", "dla60x_c")
    + ("dla102", "dla102x", "dla102x2", "dla169")
}

# timm's MLP-Mixer family takes its 224 px patch grid alone; its classifier starts at zero and
# gMLP's and gMixer's gates near it: `fixtures_mlp_mixer.nontrivial` draws them first.
MLP_MIXERS = ("mixer_", "gmixer_", "resmlp_", "gmlp_")


def make(folder: Path, architectures: list[str], size: int = 224, dynamic: bool = False) -> None:
    """`dynamic`: timm's ViTs (Swins) built with `dynamic_img_size=True`, run at `size` (their
    position embeddings resampled; their maps padded to window multiples), where they would run
    at their own size."""
    import json

    import numpy as np
    import torch
    from parity import perturb, timm
    from safetensors.numpy import save_file

    for architecture in architectures:
        generator = torch.Generator().manual_seed(0)
        extra = {"dynamic_img_size": True} if dynamic else {}
        model = timm.create_model(architecture, pretrained=False, **extra)
        # timm's ViTs and Swins without `dynamic_img_size` take only the size their position
        # embeddings (attention masks) were made for: 224, 384, DINOv2's 518.
        own = None if dynamic else getattr(getattr(model, "patch_embed", None), "img_size", None)
        image_size, calibration_size = (
            (size, size)
            if dynamic
            else (own[0], own[0])
            if own
            else IMAGE_SIZES.get(architecture, (size, 56))
        )
        if architecture.startswith(MLP_MIXERS):
            from fixtures_mlp_mixer import nontrivial

            nontrivial(model)
            image_size = calibration_size = 224
        if architecture.startswith("cait_"):  # layer scales at 1e-5 or 1e-6
            from fixtures_cait import nontrivial

            nontrivial(model)
        if architecture.startswith("xcit_"):  # layer scales at 1e-5, temperatures at 1
            from fixtures_xcit import nontrivial

            nontrivial(model)
        if architecture.startswith("edgenext_"):  # SDTA's gamma_xca at 1e-6, temperatures at 1
            from fixtures_edgenext import nontrivial

            nontrivial(model)
        if architecture.startswith("pit_"):  # position embeddings and class tokens at 0.02
            from fixtures_pit import nontrivial

            nontrivial(model)
        perturb(model, generator, calibration_size)
        images = torch.randn(2, 3, image_size, image_size, generator=generator)
        with torch.no_grad():
            logits = model(images)
        out = folder / architecture
        out.mkdir(parents=True, exist_ok=True)
        state = {
            k: v.float().numpy() if v.is_floating_point() else v.numpy()
            for k, v in model.state_dict().items()
        }
        save_file(state, out / "model.safetensors")
        (out / "config.json").write_text(json.dumps({"architecture": architecture}))
        save_file(
            {
                "images": np.ascontiguousarray(images.permute(0, 2, 3, 1).numpy()),
                "logits": np.ascontiguousarray(logits.numpy()),  # features: a strided view
            },
            out / "expected.safetensors",
        )
        print(f"{architecture}: written", flush=True)


def check(folder: Path) -> None:
    import jax
    import numpy as np
    from safetensors.numpy import load_file

    import nets_factory

    print("| architecture | our network | max relative logit error |")
    print("|---|---|---|")
    for out in sorted(p for p in folder.iterdir() if (p / "expected.safetensors").exists()):
        network_fn, variables = nets_factory.load_pretrained(out.name, out)
        expected = load_file(out / "expected.safetensors")
        logits, _ = jax.jit(network_fn.apply)(variables, expected["images"])
        error = np.abs(np.asarray(logits) - expected["logits"]).max()
        relative = error / np.abs(expected["logits"]).max()
        print(f"| {out.name} | {network_fn.name} | {relative:.1e} |", flush=True)


if __name__ == "__main__":
    command, folder, *names = sys.argv[1:]
    # `make FOLDER --size=331 NAMES...`: images of another size than 224 px; `--dynamic` (after
    # the size): timm's ViTs with `dynamic_img_size=True`, at that size.
    size = (
        int(names.pop(0).removeprefix("--size="))
        if names[:1] and names[0].startswith("--size=")
        else 224
    )
    dynamic = names[:1] == ["--dynamic"] and bool(names.pop(0))
    make(Path(folder), names, size, dynamic) if command == "make" else check(Path(folder))

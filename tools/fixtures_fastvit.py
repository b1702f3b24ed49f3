"""Parity fixtures of the FastViT family (see tools/parity.py for how to run it).

timm's `FastVit` in small configurations, one block a stage, 40 px images (the fixtures' size):
- `fastvit_sa`: widths 8, 8, 16, 32, RepMixer blocks then a RepCPE and an attention block (one
  head: two would double the fixture; the head split is `nets.vit.Attention`'s, which ViT's
  fixtures check) over 2x2 pixels with BatchNorm (SA12's layout, MLP ratio 3);
- `fastvit_mci_se`: the same with MCi0..2's patch embeddings (a squeeze-excite gate in the last
  two, GELU after the large kernel);
- `fastvit_mci_ln`: MCi3/4's five stages (8, 8, 16, 32, 32 wide, attention in the last two,
  LayerNorm there), no 1x1 branches in the stem, MLP ratio 4 (1 in the attention blocks).
For each, timm's own `reparameterize_model` of the perturbed network: the logits of its fused
network and a few of its fused convolutions (`fused.safetensors`, float32), which
`nets.fastvit.reparameterize` must give.
"""

from functools import partial

import torch
from parity import timm, write_case, write_fused, write_index  # noqa: F401  (timm first)
from timm.layers import LayerNorm2d  # noqa: E402
from timm.models.fastvit import FastVit, RepConditionalPosEnc  # noqa: E402

SA = {
    "layers": (1, 1, 1, 1),
    "embed_dims": (8, 8, 16, 32),
    "mlp_ratios": (3, 3, 3, 3),
    "token_mixers": ("repmixer", "repmixer", "repmixer", "attention"),
    "pos_embs": (None, None, None, RepConditionalPosEnc),
}
MCI_SE = {
    **SA,
    "se_downsamples": (False, False, True, True),
    "lkc_use_act": True,
}
MCI_LN = {
    "layers": (1, 1, 1, 1, 1),
    "embed_dims": (8, 8, 16, 32, 32),
    "mlp_ratios": (4, 4, 4, 1, 1),
    "downsamples": (False, True, True, True, True),
    "se_downsamples": (False,) * 5,
    "token_mixers": ("repmixer",) * 3 + ("attention",) * 2,
    "pos_embs": (None, None, None, RepConditionalPosEnc, RepConditionalPosEnc),
    "lkc_use_act": True,
    "norm_layer": partial(LayerNorm2d, eps=1e-5),
    "stem_use_scale_branch": False,
}


def small(**cfg) -> FastVit:
    return FastVit(num_classes=10, **cfg)


CASES = {
    "fastvit_sa": ("fastvit_sa12", lambda: small(**SA), 40),
    "fastvit_mci_se": ("fastvit_mci0", lambda: small(**MCI_SE), 40),
    "fastvit_mci_ln": ("fastvit_mci3", lambda: small(**MCI_LN), 40),
}
FULL_SIZE = [f"fastvit_{s}" for s in ("t8", "t12", "s12", "sa12", "sa24", "sa36", "ma36")]
FULL_SIZE += [f"fastvit_mci{i}" for i in range(5)]

# The fused tensors kept (a few, for the fixtures' size): a stem block's, a patch embedding's
# large kernel, a RepMixer's and a RepCPE's.
KEPT = (
    "stem.1.reparam_conv",
    "stages.2.downsample.proj.0.reparam_conv",
    "stages.1.blocks.0.token_mixer.reparam_conv",
    "stages.3.pos_emb.reparam_conv",
)


def create(name: str) -> torch.nn.Module:
    """timm's network at 1000 classes, as the tests build ours (MobileCLIP's files hold their
    CLIP projection instead: a classifier of 512 or 768 classes, which loads as any other)."""
    return timm.create_model(name, num_classes=1000)


if __name__ == "__main__":
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size, calibration_size=size)
        write_fused(case, build, KEPT)
    write_index("fastvit", FULL_SIZE, create)

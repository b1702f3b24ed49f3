"""Parity fixtures of the MetaFormer family (see tools/parity.py for how to run it)."""

import torch
from parity import timm, write_case, write_index  # noqa: F401  (timm first: the shims)
from timm.layers import GroupNorm1
from timm.models.metaformer import (
    Attention,
    GroupNorm1NoBias,
    LayerNorm2dNoBias,
    LayerNormNoBias,
    MetaFormer,
    SepConv,
)

# The small configuration of every case: four stages of 1, 1, 2, 1 blocks of widths 8 to 24
# (CAFormer's attention in heads of 8 channels: 2 and 3 heads), as timm's registry sets the rest.
SMALL = {"depths": (1, 1, 2, 1), "dims": (8, 12, 16, 24), "num_classes": 10}


def small(quiet_stem: bool = True, **kwargs) -> torch.nn.Module:
    """timm's `MetaFormer` in the small configuration, with what `parity.perturb` leaves as
    initialised made non-trivial: every convolution and Linear weight ~N(0, 1 / fan_in) (timm's
    0.02 would fade the branches out at these widths); the scales of norms without a bias,
    GroupNorm's, the layer and res scales and StarReLU's ~U(0.5, 1.5) (`perturb` draws
    LayerNorm's with a bias, and the biases, StarReLU's too). With `quiet_stem`, the stem's
    outputs are a thousandth of that (its norm's scales, or without one its convolution's
    weights), so that the first block's norms see variances near their epsilon: a wrong one
    shows in the logits."""
    model = MetaFormer(**{**SMALL, **kwargs})
    stem_norm = not isinstance(model.stem.norm, torch.nn.Identity)
    quiet = {"stem.norm" if stem_norm else "stem.conv": 1e-3 if quiet_stem else 1.0}
    with torch.no_grad():
        for name, module in model.named_modules():
            if isinstance(module, torch.nn.Conv2d | torch.nn.Linear):
                module.weight.normal_(0.0, module.weight[0].numel() ** -0.5)
            no_bias = isinstance(module, torch.nn.LayerNorm) and module.bias is None
            if isinstance(module, torch.nn.GroupNorm) or no_bias:
                module.weight.uniform_(0.5, 1.5)
            if name in quiet:
                module.weight.mul_(quiet[name])
        for name, tensor in model.named_parameters():
            if name.endswith(("scale1.scale", "scale2.scale", "act.scale", "act1.scale")):
                tensor.uniform_(0.5, 1.5)
    return model


# PoolFormer v1's fields: GroupNorm1 with a bias (epsilon 1e-5), no norm in the stem and
# downsampling, GELU MLP with biases, layer scales, no res scales, a linear classifier.
V1 = {
    "downsample_norm": None,
    "mlp_act": torch.nn.GELU,
    "mlp_bias": True,
    "norm_layers": GroupNorm1,
    "layer_scale_init_values": 1e-5,
    "res_scale_init_values": None,
    "use_mlp_head": False,
}
CA_MIXERS = [SepConv, SepConv, Attention, Attention]
CA_NORMS = [LayerNorm2dNoBias] * 2 + [LayerNormNoBias] * 2

# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments. 40 px: maps of 10, 5, 3 and 2 pixels, odd ones
# among them (the pooling's borders, the strided convolutions' padding); CAFormer's attention
# over 9 and 4 tokens.
CASES = {
    "poolformer_v1": ("poolformer_s12", lambda: small(**V1), 40),
    "poolformerv2": (
        "poolformerv2_s12",
        lambda: small(norm_layers=GroupNorm1NoBias, use_mlp_head=False),
        40,
    ),
    "convformer": (
        "convformer_s18",
        lambda: small(token_mixers=SepConv, norm_layers=LayerNorm2dNoBias),
        40,
    ),
    "caformer": (
        "caformer_s18",
        lambda: small(token_mixers=CA_MIXERS, norm_layers=CA_NORMS, head_dim=8),
        40,
    ),
}

FULL_SIZE = [
    *(f"poolformer_{size}" for size in ("s12", "s24", "s36", "m36", "m48")),
    *(f"poolformerv2_{size}" for size in ("s12", "s24", "s36", "m36", "m48")),
    *(
        f"{kind}_{size}"
        for kind in ("convformer", "caformer")
        for size in ("s18", "s36", "m36", "b36")
    ),
]

if __name__ == "__main__":
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size, calibration_size=size)
    write_index("metaformer", FULL_SIZE)

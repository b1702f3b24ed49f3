"""MobileViT v1 and v2: timm's parameter counts and MACs, the blocks' resizing to whole
patches, and `output_stride`'s feature pyramid and maps at full size (its parity:
tests/test_pretrained_mobilevit.py)."""

import jax.numpy as jnp
import numpy as np
import pytest

import nets_summary as summary
from nets import mobilevit

# timm 1.0's counts at 1000 classes (sum of `numel` of `timm.create_model(name).parameters()`).
# MobileViT-XXS: stem 3*3*3*16 + 2*16 = 464; inverted residuals 1x1 c->2c, 3x3 depthwise, 1x1
# 2c->c' with BatchNorms; each MobileViT block 3*3*c*c (+BN), 1x1 c->d, Transformer blocks of
# 12d^2 + 13d (qkv, proj, the MLP 2d wide, two LayerNorms), a LayerNorm, 1x1 d->c (+BN) and the
# 3x3 fusion 2c->c (+BN); final_conv 80*320 + 640; head 320*1000 + 1000: 1,272,024.
PUBLISHED_COUNTS = {
    "mobilevit_xxs": 1_272_024,
    "mobilevit_xs": 2_317_848,
    "mobilevit_s": 5_578_632,
    # v2: no final_conv; each Transformer block 2 GroupNorms (4d), qkv_proj d*(2d+1) + 2d+1,
    # out_proj d^2 + d, the MLP 4d^2 + 3d.
    "mobilevitv2_050": 1_370_593,
    "mobilevitv2_075": 2_866_009,
    "mobilevitv2_100": 4_901_841,
    "mobilevitv2_125": 7_478_089,
    "mobilevitv2_150": 10_594_753,
    "mobilevitv2_175": 14_251_833,
    "mobilevitv2_200": 18_449_329,
}

# MACs at 256 px, batch 1: PyTorch's `FlopCounterMode` on timm's networks with
# `timm.layers.set_fused_attn(False)`, halved (as tests/test_vit.py's TORCH_MACS): equal to ours.
TORCH_MACS = {
    "mobilevit_xxs": 407_364_096,
    "mobilevit_xs": 1_025_911_808,
    "mobilevit_s": 2_000_831_488,
    "mobilevitv2_050": 464_594_944,
    "mobilevitv2_100": 1_812_090_880,
    "mobilevitv2_200": 7_155_785_728,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_published_parameter_counts(name):
    # The recorded figures (nets/sizes.tsv), which the registry tests compare with a trace.
    assert summary.recorded_sizes()[name].params == PUBLISHED_COUNTS[name]


@pytest.mark.parametrize("name", sorted(TORCH_MACS))
def test_macs_are_torchs(name):
    assert summary.recorded_sizes()[name].macs == TORCH_MACS[name]


def test_resize_is_pytorchs_bilinear_without_antialiasing():
    # PyTorch's `interpolate(mode='bilinear', align_corners=False)`'s figures: 3 -> 4 pixels
    # samples -0.125 (clamped), 0.625, 1.375, 2.125 (clamped); 4 -> 3 back samples 0.1667, 1.5,
    # 2.8333 of those, two neighbours each (an antialiased shrink would average three).
    x = jnp.asarray([0.0, 1.0, 4.0]).reshape(1, 1, 3, 1)
    up = mobilevit.resize(x, (1, 4))
    np.testing.assert_allclose(up[0, 0, :, 0], [0.0, 0.625, 2.125, 4.0], atol=1e-6)
    down = mobilevit.resize(up, (1, 3))
    np.testing.assert_allclose(down[0, 0, :, 0], [0.10417, 1.375, 3.6875], atol=1e-4)
    assert mobilevit.resize(x, (1, 3)) is x


def test_v2_resize_aligns_the_corners():
    # PyTorch's `interpolate(mode='bilinear', align_corners=True)`'s figures: 3 -> 4 pixels
    # samples 0, 2/3, 4/3, 2 of the input.
    x = jnp.asarray([0.0, 1.0, 4.0]).reshape(1, 1, 3, 1)
    up = mobilevit.resize_align_corners(x, (1, 4))
    np.testing.assert_allclose(up[0, 0, :, 0], [0.0, 2 / 3, 2.0, 4.0], atol=1e-6)

"""MLP-Mixer, gMixer, ResMLP, gMLP: timm's parameter counts and MACs, the fixed patch grid, the
spatial gating's start, bfloat16 compute with float32 parameters,
and weight decay on kernels only. Full-size networks through the
recorded sizes; stochastic depth's one rate in tests/test_stochastic_depth.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nets_factory
import nets_summary as summary
from nets import mlp_mixer

# timm 1.0's counts at 1000 classes (sum of `numel` of `timm.create_model(name).parameters()`).
# Mixer-S/32 at 224 px, 49 tokens of width 512: patch embedding 32*32*3*512 + 512 = 1,573,376;
# 8 blocks of 2 LayerNorms (4*512), a token MLP 49*256 + 256 + 256*49 + 49 = 25,393 and a
# channel MLP 512*2048 + 2048 + 2048*512 + 512 = 2,099,712, 2,127,153 each; the final LayerNorm
# 1,024; head 512*1000 + 1000: 19,104,624.
PUBLISHED_COUNTS = {
    "mixer_s32_224": 19_104_624,
    "mixer_s16_224": 18_528_264,
    "mixer_b32_224": 60_293_428,
    "mixer_b16_224": 59_880_472,
    "mixer_l32_224": 206_939_264,
    "mixer_l16_224": 208_196_168,
    "gmixer_12_224": 12_701_080,
    "gmixer_24_224": 24_721_096,
    "resmlp_12_224": 15_350_872,
    "resmlp_24_224": 30_020_680,
    "resmlp_36_224": 44_690_488,
    "resmlp_big_24_224": 129_138_280,
    "gmlp_ti16_224": 5_867_328,
    "gmlp_s16_224": 19_422_656,
    "gmlp_b16_224": 73_075_392,
}

# MACs at 224 px, batch 1: PyTorch's `FlopCounterMode` on timm's networks, halved (the matrix
# products and the patch embedding: all the network's multiply-adds).
TORCH_MACS = {
    "mixer_s32_224": 1_002_426_368,
    "mixer_b16_224": 12_601_767_936,
    "mixer_l16_224": 44_547_678_208,
    "gmixer_24_224": 5_260_434_432,
    "resmlp_12_224": 3_009_739_776,
    "resmlp_big_24_224": 100_230_739_968,
    "gmlp_s16_224": 4_392_060_928,
}

# 16x16 px images of 2x2 patches of 8 pixels (4 tokens), width 8, two blocks.
TINY = {"patch_size": 8, "embed_dim": 8, "depth": 2, "default_image_size": 16}
KINDS = ("mixer_s32_224", "gmixer_12_224", "resmlp_12_224", "gmlp_ti16_224")


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_published_parameter_counts(name):
    # The recorded figures (nets/sizes.tsv), which the registry tests compare with a trace.
    assert summary.recorded_sizes()[name].params == PUBLISHED_COUNTS[name]


@pytest.mark.parametrize("name", sorted(TORCH_MACS))
def test_macs_are_torchs(name):
    assert summary.recorded_sizes()[name].macs == TORCH_MACS[name]


def test_another_patch_grid_is_refused_in_one_line():
    fn = nets_factory.get_network_fn("mixer_s32_224", 10, **TINY)
    images = jax.ShapeDtypeStruct((1, 24, 24, 3), jnp.float32)  # 3x3 patches, made for 2x2
    with pytest.raises(ValueError, match="3x3 patches: the token mixing is made for 2x2"):
        jax.eval_shape(fn.module.init, jax.random.key(0), images)


def test_spatial_gating_starts_as_its_first_half():
    # timm's init: `proj` ~N(0, 1e-6) and biases of 1, so `u * proj(norm(v))` starts at `u`.
    x = jax.random.normal(jax.random.key(0), (2, 5, 8))
    y, _ = mlp_mixer.SpatialGatingUnit().init_with_output(jax.random.key(1), x)
    np.testing.assert_allclose(y, x[..., :4], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", KINDS)
def test_bfloat16_compute_float32_parameters_and_decay_on_kernels_only(name):
    fn = nets_factory.get_network_fn(name, 10, weight_decay=1.0, dtype=jnp.bfloat16, **TINY)
    images = jax.ShapeDtypeStruct((2, 16, 16, 3), jnp.float32)
    variables = jax.eval_shape(fn.init, jax.random.key(0), images)
    assert {leaf.dtype for leaf in jax.tree.leaves(variables)} == {jnp.dtype(jnp.float32)}
    logits, end_points = jax.eval_shape(fn.apply, variables, images)
    assert logits.dtype == jnp.bfloat16 and end_points["block2"].shape == (2, 4, 8)
    params = jax.tree.map(lambda leaf: jnp.ones(leaf.shape, leaf.dtype), variables["params"])
    # Kernels only: the patch embedding 8*8*3*8 and the head 8*10, and per block: Mixer's token
    # MLP 4*4 + 4*4 (hidden 0.5*8) and channel MLP 8*32 + 32*8; gMixer's 4*8 + 4*4 and 8*32 +
    # 16*8; ResMLP's linear_tokens 4*4 and MLP 8*32 + 32*8; gMLP's fc1 8*48, proj 4*4, fc2 24*8.
    # Not the norms, Affine's alpha and beta, the layer scales or the biases.
    per_block = {
        "mixer_s32_224": 16 + 16 + 256 + 256,
        "gmixer_12_224": 32 + 16 + 256 + 128,
        "resmlp_12_224": 16 + 256 + 256,
        "gmlp_ti16_224": 384 + 16 + 192,
    }[name]
    kernels = 8 * 8 * 3 * 8 + 2 * per_block + 8 * 10
    assert fn.regularization_loss(params) == pytest.approx(0.5 * kernels)

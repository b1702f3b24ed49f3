"""EVA-02: timm's parameter counts and MACs, its rotary embedding, bfloat16 compute with float32
parameters, and weight decay on kernels only."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file

import nets_factory
import nets_summary as summary
from nets import eva
from tests.test_pretrained import FIXTURES

# timm 1.0's counts at 1000 classes (sum of `numel` of `timm.create_model(name,
# num_classes=1000).parameters()`). EVA-02 Ti at 224: patch embedding 14*14*3*192 + 192 =
# 113,088; class token 192; position embeddings 257*192 = 49,344; 12 blocks of 2 LayerNorms
# (4*192), qkv 192*576 (no bias), q_bias and v_bias 2*192, proj 192*192 + 192, fc1 192*1024 +
# 1024 (gate and value), fc2 512*192 + 192 = 444,928 each; fc_norm 384; head 192*1000 + 1000:
# 5,695,144.
PUBLISHED_COUNTS = {
    "eva02_tiny_patch14_224": 5_695_144,
    "eva02_small_patch14_224": 22_006_120,
    "eva02_base_patch14_224": 86_527_720,
    "eva02_large_patch14_224": 304_293_800,
    "eva02_tiny_patch14_336": 5_756_584,
    "eva02_small_patch14_336": 22_129_000,
    "eva02_base_patch14_448": 87_117_544,
    "eva02_large_patch14_448": 305_080_232,
}

# MACs at 224 px, batch 1: PyTorch's `FlopCounterMode` on timm's networks with
# `timm.layers.set_fused_attn(False)`, halved (as tests/test_vit.py's TORCH_MACS).
TORCH_MACS = {"eva02_tiny_patch14_224": 1_697_710_080, "eva02_base_patch14_224": 23_161_995_264}

# The configuration of the parity fixtures (tools/fixtures_eva.py).
SMALL = {"patch_size": 8, "embed_dim": 32, "depth": 2, "num_heads": 2, "img_size": 32}


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_published_parameter_counts(name):
    # The recorded figures (nets/sizes.tsv), which the registry tests compare with a trace.
    assert summary.recorded_sizes()[name].params == PUBLISHED_COUNTS[name]


@pytest.mark.parametrize("name", sorted(TORCH_MACS))
def test_macs_are_torchs_with_the_attention_products(name):
    assert summary.recorded_sizes()[name].macs == TORCH_MACS[name]


def test_rotary_embedding_is_timms():
    # timm's RotaryEmbeddingCat for a 5x5 grid scaled to 3x3, 16 channels a head (sin, cos).
    reference = load_file(FIXTURES / "parity" / "eva02_scale_mlp_resampled_40" / "rope.safetensors")
    sin, cos = eva.rotary_embedding((5, 5), 16, (3, 3))
    np.testing.assert_allclose(np.concatenate([sin, cos], -1), reference["rope"], atol=1e-6)
    # Channels 2m and 2m + 1 share an angle: 4 frequencies of the row, then 4 of the column.
    angles = np.arctan2(sin, cos)
    np.testing.assert_array_equal(angles[:, 0::2], angles[:, 1::2])
    np.testing.assert_allclose(angles[5 * 2 + 3, 0], 2 * 3 / 5, rtol=1e-6)  # row 2, scaled
    np.testing.assert_allclose(angles[5 * 2 + 3, 8], 3 * 3 / 5, rtol=1e-6)  # column 3


def test_rotation_keeps_the_class_token_and_the_norms():
    x = jnp.asarray(np.random.default_rng(0).normal(size=(2, 1 + 25, 3, 16)), jnp.float32)
    sin, cos = eva.rotary_embedding((5, 5), 16, (16, 16))
    rotated = eva.rotate(x, sin, cos, prefix=1)
    np.testing.assert_array_equal(rotated[:, 0], x[:, 0])
    pairs = lambda t: jnp.linalg.norm(t.reshape(*t.shape[:-1], 8, 2), axis=-1)  # noqa: E731
    np.testing.assert_allclose(pairs(rotated), pairs(x), rtol=1e-5)
    assert not np.allclose(rotated[:, 2:], x[:, 2:])  # the first patch, at (0, 0), is not turned


def test_bfloat16_compute_float32_parameters_and_decay_on_kernels_only():
    fn = nets_factory.get_network_fn(
        "eva02_tiny_patch14_336", 10, weight_decay=1.0, dtype=jnp.bfloat16, **SMALL
    )
    images = jax.ShapeDtypeStruct((2, 32, 32, 3), jnp.float32)
    variables = jax.eval_shape(fn.init, jax.random.key(0), images)
    assert {leaf.dtype for leaf in jax.tree.leaves(variables)} == {jnp.dtype(jnp.float32)}
    logits, end_points = jax.eval_shape(fn.apply, variables, images)
    assert logits.dtype == jnp.bfloat16 and end_points["block2"].shape == (2, 17, 32)
    params = jax.tree.map(lambda leaf: jnp.ones(leaf.shape, leaf.dtype), variables["params"])
    # Kernels only: patch embedding 8*8*3*32, per block qkv 32*96, proj 32*32, fc1 32*170,
    # fc2 85*32, head 32*10; not q_bias, v_bias, LayerNorms, biases, tokens, position embeddings.
    kernels = 8 * 8 * 3 * 32 + 2 * (32 * 96 + 32 * 32 + 32 * 170 + 85 * 32) + 32 * 10
    assert fn.regularization_loss(params) == pytest.approx(0.5 * kernels)
    layer_ids = {fn.module.layer_id(path) for path in (("patch_embed",), (), ("fc_norm",))}
    assert layer_ids == {0, 3}

"""InceptionNeXt: timm's parameter counts and MACs, the Inception mixer's numerics, the fields
each size sets, the MLP head's features, and weight decay on kernels only."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nets_factory
import nets_summary as summary
from nets import inception_next
from nets.layers import Conv
from tests.helpers import XLA_CONVS, numpy_variables, training_gradients

# timm 1.0's counts at 1000 classes (sum of `numel` of `timm.create_model(name).parameters()`).
# Tiny: stem 4*4*3*96 + 96 + BatchNorm 2*96 = 4,896; downsamplings BatchNorm 2c + 2*2*c*c' + c'
# (74,304 + 295,296 + 1,180,416); per block of width c with g = c/8: the mixer's 3x3, 1x11 and
# 11x1 depthwise kernels and biases (31g + 3g), BatchNorm 2c, MLP r*c*c + r*c + r*c*c + c (r = 4,
# 3 in the last stage), gamma c; head fc1 768*2304 + 2304, LayerNorm 2*2304, fc2 2304*1000 + 1000.
PUBLISHED_COUNTS = {
    "inception_next_atto": 4_156_520,
    "inception_next_tiny": 28_055_680,
    "inception_next_small": 49_374_016,
    "inception_next_base": 86_672_136,
}

# MACs at 224 px, batch 1: PyTorch's `FlopCounterMode` on timm's networks, halved (as
# tests/test_metaformer.py's): the norms and activations count none.
TORCH_MACS = {
    "inception_next_atto": 503_035_040,
    "inception_next_tiny": 4_188_634_272,
    "inception_next_base": 14_841_072_000,
}

SMALL = {"depths": (1, 1, 2, 1), "dims": (8, 16, 24, 32)}


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_published_parameter_counts(name):
    # The recorded figures (nets/sizes.tsv), which the registry tests compare with a trace.
    assert summary.recorded_sizes()[name].params == PUBLISHED_COUNTS[name]


@pytest.mark.parametrize("name", sorted(TORCH_MACS))
def test_macs_are_torchs(name):
    assert summary.recorded_sizes()[name].macs == TORCH_MACS[name]


def _window_sums(x, height, width):
    """Sums of `x` `[h, w]` over centred `height x width` windows, zeros outside the map."""
    ph, pw = height // 2, width // 2
    padded = np.pad(x, ((ph, ph), (pw, pw)))
    rows, cols = x.shape
    return np.array(
        [[padded[i : i + height, j : j + width].sum() for j in range(cols)] for i in range(rows)]
    )


def test_the_mixer_keeps_the_first_channels_and_convolves_three_groups():
    # 8 channels, branch ratio 1/8: channels 0-4 kept, 5 through the 3x3, 6 through the 1x11,
    # 7 through the 11x1, each kernel of ones without bias: sums over the windows in the map.
    x = np.random.default_rng(0).normal(size=(1, 5, 7, 8)).astype(np.float32)
    mixer = inception_next.InceptionDWConv(Conv)
    variables = jax.eval_shape(mixer.init, jax.random.key(0), x)
    params = jax.tree.map(lambda leaf: np.ones(leaf.shape, leaf.dtype), variables)
    params = jax.tree_util.tree_map_with_path(
        lambda path, leaf: leaf * 0 if path[-1].key == "bias" else leaf, params
    )
    out = np.asarray(mixer.apply(params, x))
    np.testing.assert_array_equal(out[..., :5], x[..., :5])
    for channel, (height, width) in zip((5, 6, 7), ((3, 3), (1, 11), (11, 1)), strict=True):
        expected = _window_sums(x[0, ..., channel], height, width)
        np.testing.assert_allclose(out[0, ..., channel], expected, rtol=1e-5, atol=1e-5)


# timm's registry: atto's mixer has bands of 9 and a quarter of the channels per branch.
FIELDS = {
    "inception_next_atto": {
        "band_kernel_size": 9,
        "branch_ratio": 0.25,
        "dims": (40, 80, 160, 320),
    },
    "inception_next_small": {
        "band_kernel_size": 11,
        "branch_ratio": 0.125,
        "depths": (3, 3, 27, 3),
        "mlp_ratios": (4, 4, 4, 3),
        "layer_scale_init_value": 1e-6,
        "head_mlp_ratio": 3.0,
    },
}


@pytest.mark.parametrize("name", sorted(FIELDS))
def test_the_variants_fields_are_timms(name):
    module = nets_factory.get_network_fn(name, 10).module
    assert {field: getattr(module, field) for field in FIELDS[name]} == FIELDS[name]


def test_mlp_head_features_and_decay_on_kernels_only():
    # The head's hidden layer is `pre_logits` (timm's), in bfloat16 with float32 parameters;
    # without classes it is the output, only `head_fc2` left out.
    fn = nets_factory.get_network_fn("inception_next_tiny", 10, dtype=jnp.bfloat16, **SMALL)
    images = jax.ShapeDtypeStruct((2, 64, 64, 3), jnp.float32)
    variables = jax.eval_shape(fn.init, jax.random.key(0), images)
    assert {leaf.dtype for leaf in jax.tree.leaves(variables)} == {jnp.dtype(jnp.float32)}
    logits, end_points = jax.eval_shape(fn.apply, variables, images)
    assert logits.dtype == jnp.bfloat16 and end_points["pre_logits"].shape == (2, 96)
    assert [end_points[f"stage{i}"].shape[1] for i in (1, 2, 3, 4)] == [16, 8, 4, 2]
    # `regularization_loss` decays the leaves named `kernel`: stem 4*4*3*8, downsamplings
    # 2*2*(8*16 + 16*24 + 24*32), per block the mixer's depthwise 3x3, 1x11, 11x1 over g = c/8
    # channels each (31g) and the MLP's 2*r*c*c (r = 4, 3 in the last stage); the head 32*96 +
    # 96*10. Not the norms, `gamma` or the biases.
    blocks = [(8, 4), (16, 4), (24, 4), (24, 4), (32, 3)]
    kernels = 4 * 4 * 3 * 8 + 4 * (8 * 16 + 16 * 24 + 24 * 32)
    kernels += sum(31 * (c // 8) + 2 * r * c * c for c, r in blocks) + 32 * 96 + 96 * 10
    decayed = [
        leaf.size
        for path, leaf in jax.tree_util.tree_leaves_with_path(variables["params"])
        if path[-1].key == "kernel"
    ]
    assert sum(decayed) == kernels

    features_fn = nets_factory.get_network_fn("inception_next_tiny", 0, **SMALL)
    variables = jax.eval_shape(features_fn.init, jax.random.key(0), images)
    assert "head_fc2" not in variables["params"] and "head_fc1" in variables["params"]
    features, _ = jax.eval_shape(features_fn.apply, variables, images)
    assert features.shape == (2, 96)


def test_bad_fields_are_refused_in_one_line():
    fn = nets_factory.get_network_fn("inception_next_tiny", 10, mlp_ratios=(4, 4, 3))
    with pytest.raises(ValueError, match="one width and MLP ratio per stage"):
        jax.eval_shape(
            fn.init, jax.random.key(0), jax.ShapeDtypeStruct((1, 32, 32, 3), jnp.float32)
        )


@pytest.mark.slow  # compiles a gradient
def test_gradient_reaches_every_parameter():
    # The mixer's three convolutions, BatchNorms in training, the layer scales, the MLP head.
    fields = {"depths": (1, 1), "dims": (8, 16), "mlp_ratios": (4, 3)}
    fn = nets_factory.get_network_fn(
        "inception_next_tiny", 10, is_training=True, **fields, **XLA_CONVS
    )
    images = jax.random.normal(jax.random.key(1), (2, 16, 16, 3))
    variables = numpy_variables(jax.eval_shape(fn.init, jax.random.key(0), images))
    # `gamma` at 1 (numpy_variables' 0 would cut the blocks' branches off).
    variables["params"] = jax.tree_util.tree_map_with_path(
        lambda path, leaf: np.ones_like(leaf) if path[-1].key == "gamma" else leaf,
        variables["params"],
    )
    # With the running means in the loss: the mixer's biases meet a BatchNorm in training, which
    # takes the batch's mean off the logits (their gradient through them is rounding, exactly
    # zero on some CPUs).
    grads, _ = training_gradients(fn, variables, images)
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
        assert np.any(np.asarray(g) != 0), jax.tree_util.keystr(path)

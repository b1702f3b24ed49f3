"""MambaOut: timm's parameter counts and MACs, the Gated CNN block's split, the fields each
variant sets, the MLP heads' features, and weight decay on kernels only."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nets_factory
import nets_summary as summary
from nets import mambaout
from nets.layers import Conv
from tests.helpers import XLA_CONVS, numpy_variables

# timm 1.0's counts at 1000 classes (sum of `numel` of `timm.create_model(name).parameters()`).
# Tiny: stem 3*3*3*48 + 48 + LayerNorm 2*48 + 3*3*48*96 + 96 + 2*96 = 43,248; downsamplings
# 3*3*c*c' + c' + 2c' (166,464 + 664,704 + 1,991,808); per block of width c, h = int(8c/3):
# LayerNorm 2c, fc1 c*2h + 2h, the 7x7 depthwise 49c + c, fc2 h*c + c; head LayerNorm 2*576,
# fc 576*2304 + 2304, LayerNorm 2*2304, fc 2304*1000 + 1000.
PUBLISHED_COUNTS = {
    "mambaout_femto": 7_304_536,
    "mambaout_kobe": 9_141_208,
    "mambaout_tiny": 26_545_096,
    "mambaout_small": 48_488_072,
    "mambaout_base": 84_813_092,
    "mambaout_small_rw": 48_495_560,
    "mambaout_base_short_rw": 88_827_688,
    "mambaout_base_tall_rw": 86_481_448,
    "mambaout_base_wide_rw": 94_448_104,
    "mambaout_base_plus_rw": 101_656_552,
}

# MACs at 224 px, batch 1: PyTorch's `FlopCounterMode` on timm's networks, halved (as
# tests/test_metaformer.py's): the norms and activations count none.
TORCH_MACS = {
    "mambaout_femto": 1_147_984_992,
    "mambaout_small_rw": 8_936_423_616,
    "mambaout_base_plus_rw": 19_161_191_808,
}

SMALL = {"depths": (1, 1, 2, 1), "dims": (8, 16, 24, 32)}


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_published_parameter_counts(name):
    # The recorded figures (nets/sizes.tsv), which the registry tests compare with a trace.
    assert summary.recorded_sizes()[name].params == PUBLISHED_COUNTS[name]


@pytest.mark.parametrize("name", sorted(TORCH_MACS))
def test_macs_are_torchs(name):
    assert summary.recorded_sizes()[name].macs == TORCH_MACS[name]


@pytest.mark.slow  # runs the block (~3 s of tracing on CPU)
def test_the_block_gates_kept_and_convolved_channels():
    # Width 6, expansion 2, conv ratio 0.5: fc1 gives 24 channels, the gate 12, then 9 kept
    # and 3 through the depthwise 7x7. With the convolution's kernel at zero its channels are
    # its bias: the block is `x + fc2(gelu(g) * [i, bias])` from numpy's LayerNorm and fc1.
    x = np.random.default_rng(0).normal(size=(1, 3, 4, 6)).astype(np.float32)
    block = mambaout.GatedConvBlock(Conv, expansion_ratio=2.0, conv_ratio=0.5)
    variables = numpy_variables(
        jax.eval_shape(lambda x: block.init(jax.random.key(0), x, False), x), seed=1
    )
    params = jax.tree.map(np.asarray, variables["params"])
    rng = np.random.default_rng(2)
    for layer in ("fc1", "fc2"):
        params[layer]["bias"] = rng.normal(size=params[layer]["bias"].shape).astype(np.float32)
    params["conv"]["bias"] = np.array([1.0, -2.0, 0.5], np.float32)
    params["conv"]["kernel"] = np.zeros_like(params["conv"]["kernel"])
    out = np.asarray(block.apply({"params": params}, x, False))

    normed = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-6)
    y = normed @ params["fc1"]["kernel"] + params["fc1"]["bias"]
    gate, kept = y[..., :12], y[..., 12:21]
    value = np.concatenate(
        [kept, np.broadcast_to(params["conv"]["bias"], kept.shape[:-1] + (3,))], -1
    )
    gelu = np.asarray(jax.nn.gelu(gate, approximate=False))
    expected = x + (gelu * value) @ params["fc2"]["kernel"] + params["fc2"]["bias"]
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


# timm's registry: the paper's sizes, then the `_rw` experiments' conventions.
FIELDS = {
    "mambaout_kobe": {"depths": (3, 3, 15, 3), "dims": (48, 96, 192, 288)},
    "mambaout_base": {
        "expansion_ratio": 8 / 3,
        "conv_ratio": 1.0,
        "activation": "gelu",
        "stem_mid_norm": True,
        "downsample_norm_first": False,
        "layer_scale_init_value": None,
        "head_hidden_norm": True,
    },
    "mambaout_base_tall_rw": {
        "depths": (3, 4, 30, 3),
        "expansion_ratio": 2.5,
        "conv_ratio": 1.25,
        "stem_mid_norm": False,
        "downsample_norm_first": True,
        "layer_scale_init_value": 1e-6,
        "head_hidden_norm": False,
    },
    "mambaout_base_wide_rw": {"depths": (3, 4, 27, 3), "conv_ratio": 1.5, "activation": "silu"},
}


@pytest.mark.parametrize("name", sorted(FIELDS))
def test_the_variants_fields_are_timms(name):
    module = nets_factory.get_network_fn(name, 10).module
    assert {field: getattr(module, field) for field in FIELDS[name]} == FIELDS[name]


def test_mlp_head_features_and_decay_on_kernels_only():
    # The head's hidden layer is `pre_logits` (timm's), in bfloat16 with float32 parameters;
    # without classes it is the output, only `head_fc` left out.
    fn = nets_factory.get_network_fn("mambaout_tiny", 10, dtype=jnp.bfloat16, **SMALL)
    images = jax.ShapeDtypeStruct((2, 64, 64, 3), jnp.float32)
    variables = jax.eval_shape(fn.init, jax.random.key(0), images)
    assert {leaf.dtype for leaf in jax.tree.leaves(variables)} == {jnp.dtype(jnp.float32)}
    logits, end_points = jax.eval_shape(fn.apply, variables, images)
    assert logits.dtype == jnp.bfloat16 and end_points["pre_logits"].shape == (2, 128)
    assert [end_points[f"stage{i}"].shape[1] for i in (1, 2, 3, 4)] == [16, 8, 4, 2]
    # `regularization_loss` decays the leaves named `kernel`: the stem 3*3*3*4 + 3*3*4*8, the
    # downsamplings 3*3*(8*16 + 16*24 + 24*32), per block of width c (h = int(8c/3)) fc1 2hc,
    # the depthwise 49c and fc2 hc; the head 32*128 + 128*10. Not the norms or the biases.
    kernels = 3 * 3 * 3 * 4 + 3 * 3 * 4 * 8 + 9 * (8 * 16 + 16 * 24 + 24 * 32)
    kernels += sum(3 * int(8 * c / 3) * c + 49 * c for c in (8, 16, 24, 24, 32))
    kernels += 32 * 128 + 128 * 10
    decayed = [
        leaf.size
        for path, leaf in jax.tree_util.tree_leaves_with_path(variables["params"])
        if path[-1].key == "kernel"
    ]
    assert sum(decayed) == kernels

    features_fn = nets_factory.get_network_fn("mambaout_small_rw", 0, **SMALL)
    variables = jax.eval_shape(features_fn.init, jax.random.key(0), images)
    params = variables["params"]
    assert "head_fc" not in params and "head_pre_logits_norm" not in params
    assert "head_pre_logits_fc" in params and "stem_norm1" not in params
    features, _ = jax.eval_shape(features_fn.apply, variables, images)
    assert features.shape == (2, 128)


def test_bad_fields_are_refused_in_one_line():
    fn = nets_factory.get_network_fn("mambaout_tiny", 10, dims=(8, 16, 24))
    with pytest.raises(ValueError, match="one width per stage"):
        jax.eval_shape(
            fn.init, jax.random.key(0), jax.ShapeDtypeStruct((1, 32, 32, 3), jnp.float32)
        )


@pytest.mark.slow  # compiles a gradient
def test_gradient_reaches_every_parameter():
    # The blocks' gate, kept and convolved channels, the layer scales, the rw head.
    fields = {"depths": (1, 1), "dims": (8, 16)}
    fn = nets_factory.get_network_fn("mambaout_base_plus_rw", 10, **fields, **XLA_CONVS)
    images = jax.random.normal(jax.random.key(1), (2, 16, 16, 3))
    variables = numpy_variables(jax.eval_shape(fn.init, jax.random.key(0), images))
    # The layer scales at 1 (numpy_variables' 0 would cut the blocks' branches off), LayerNorm
    # biases away from 0 (the gate's input).
    params = jax.tree_util.tree_map_with_path(
        lambda path, leaf: (
            np.ones_like(leaf) + 0.1 * np.arange(leaf.size).reshape(leaf.shape)
            if path[-1].key in ("gamma", "bias")
            else leaf
        ),
        variables["params"],
    )

    def loss(params):
        logits, _ = fn.apply({**variables, "params": params}, images)
        return jnp.sum(jax.nn.log_softmax(logits)[:, 0])

    grads = jax.jit(jax.grad(loss))(params)
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
        assert np.any(np.asarray(g) != 0), jax.tree_util.keystr(path)

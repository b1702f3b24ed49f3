"""MetaFormer (PoolFormer, PoolFormerV2, ConvFormer, CAFormer): timm's parameter counts and MACs,
its mixers' numerics, the fields each variant sets, and weight decay on kernels only."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nets_factory
import nets_summary as summary
from nets import metaformer
from tests.helpers import XLA_CONVS, numpy_variables

# timm 1.0's counts at 1000 classes (sum of `numel` of `timm.create_model(name).parameters()`).
# PoolFormer-S12: stem 7*7*3*64 + 64 = 9,472; downsamplings 3*3*c*c' + c' (73,856 + 368,960 +
# 1,475,072); per block two GroupNorms (4c), two layer scales (2c), fc1 4c*c + 4c, fc2 4c*c + c
# (8c^2 + 11c: 33,472 at 64, 132,480 at 128, 822,720 at 320, 2,102,784 at 512; 2, 2, 6, 2
# blocks); head norm 1,024; head 512*1000 + 1000: 11,915,176. PoolFormerV2-S12 drops the
# norms' and MLP's biases, adds the stem's and downsamplings' norms (their scales), StarReLU's
# scale and bias per block and res scales in the last two stages.
PUBLISHED_COUNTS = {
    "poolformer_s12": 11_915_176,
    "poolformer_s24": 21_388_968,
    "poolformer_s36": 30_862_760,
    "poolformer_m36": 56_172_520,
    "poolformer_m48": 73_473_448,
    "poolformerv2_s12": 11_891_712,
    "poolformerv2_s24": 21_341_464,
    "poolformerv2_s36": 30_791_216,
    "poolformerv2_m36": 56_077_168,
    "poolformerv2_m48": 73_346_056,
    "convformer_s18": 26_774_448,
    "convformer_s36": 40_012_152,
    "convformer_m36": 57_051_640,
    "convformer_b36": 99_882_616,
    "caformer_s18": 26_341_656,
    "caformer_s36": 39_297_102,
    "caformer_m36": 56_204_878,
    "caformer_b36": 98_753_614,
}

# MACs at 224 px, batch 1: PyTorch's `FlopCounterMode` on timm's networks with
# `timm.layers.set_fused_attn(False)`, halved (as tests/test_vit.py's TORCH_MACS): the pooling,
# norms and activations count none, CAFormer's attention its two products.
TORCH_MACS = {
    "poolformer_s12": 1_812_267_008,
    "poolformerv2_s12": 1_812_267_008,
    "convformer_s18": 3_940_984_320,
    "caformer_s18": 4_106_941_440,
    "caformer_b36": 23_160_476_160,
}

# The configuration of the parity fixtures (tools/fixtures_metaformer.py).
SMALL = {"depths": (1, 1, 2, 1), "dims": (8, 12, 16, 24)}


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_published_parameter_counts(name):
    # The recorded figures (nets/sizes.tsv), which the registry tests compare with a trace.
    assert summary.recorded_sizes()[name].params == PUBLISHED_COUNTS[name]


@pytest.mark.parametrize("name", sorted(TORCH_MACS))
def test_macs_are_torchs(name):
    assert summary.recorded_sizes()[name].macs == TORCH_MACS[name]


def test_pooling_counts_only_the_pixels_inside_the_map():
    x = jnp.arange(12, dtype=jnp.float32).reshape(1, 3, 4, 1)
    # A constant map is left unchanged by the average: the mixer gives zeros at the borders too.
    np.testing.assert_array_equal(metaformer.pooling(jnp.ones((1, 3, 4, 2))), 0.0)
    # The corner averages its 2x2 window (0, 1, 4, 5), the top edge's next pixel 2x3 of them.
    np.testing.assert_allclose(metaformer.pooling(x)[0, 0, 0, 0], 2.5 - 0.0)
    np.testing.assert_allclose(metaformer.pooling(x)[0, 0, 1, 0], (0 + 1 + 2 + 4 + 5 + 6) / 6 - 1)


def test_star_relu_is_a_scaled_square_plus_a_bias():
    x = jnp.asarray([[-2.0, 0.5, 3.0]])
    params = {"params": {"scale": jnp.asarray([0.8]), "bias": jnp.asarray([-0.4])}}
    out = metaformer.StarReLU().apply(params, x)
    np.testing.assert_allclose(out, [[-0.4, 0.8 * 0.25 - 0.4, 0.8 * 9 - 0.4]], rtol=1e-6)
    init = metaformer.StarReLU().init(jax.random.key(0), x)["params"]
    assert (float(init["scale"][0]), float(init["bias"][0])) == (1.0, 0.0)


# timm's registry: PoolFormer v1's GroupNorm1 (PyTorch's epsilon 1e-5, a bias), GELU MLP with
# biases and layer scales; V2's GroupNorm1NoBias (timm sets 1e-6), StarReLU, res scales; CAFormer's
# LayerNorm2dNoBias / LayerNormNoBias (1e-6) and MLP head.
FIELDS = {
    "poolformer_s36": {
        "norm": "group_norm",
        "norm_bias": True,
        "norm_epsilon": 1e-5,
        "downsample_norm": False,
        "mlp_activation": "gelu",
        "mlp_bias": True,
        "mlp_head": False,
        "layer_scale_init_values": (1e-6,) * 4,
        "res_scale_init_values": (None,) * 4,
    },
    "poolformer_s24": {"layer_scale_init_values": (1e-5,) * 4},
    "poolformerv2_s36": {
        "norm": "group_norm",
        "norm_bias": False,
        "norm_epsilon": 1e-6,
        "downsample_norm": True,
        "mlp_activation": "star_relu",
        "mlp_bias": False,
        "mlp_head": False,
        "layer_scale_init_values": (None,) * 4,
        "res_scale_init_values": (None, None, 1.0, 1.0),
    },
    "caformer_m36": {
        "norm": "layer_norm",
        "norm_bias": False,
        "norm_epsilon": 1e-6,
        "mlp_head": True,
        "token_mixers": ("sepconv", "sepconv", "attention", "attention"),
    },
    "convformer_b36": {"token_mixers": ("sepconv",) * 4, "mlp_head": True},
}


@pytest.mark.parametrize("name", sorted(FIELDS))
def test_the_variants_fields_are_timms(name):
    module = nets_factory.get_network_fn(name, 10).module
    assert {field: getattr(module, field) for field in FIELDS[name]} == FIELDS[name]


def test_mlp_head_features_and_decay_on_kernels_only():
    # CAFormer's MLP head after the pooled, normalised features (`pre_logits`), in bfloat16
    # with float32 parameters; no head at all in the feature mode.
    fn = nets_factory.get_network_fn("caformer_s18", 10, dtype=jnp.bfloat16, head_dim=8, **SMALL)
    images = jax.ShapeDtypeStruct((2, 40, 40, 3), jnp.float32)
    variables = jax.eval_shape(fn.init, jax.random.key(0), images)
    assert {leaf.dtype for leaf in jax.tree.leaves(variables)} == {jnp.dtype(jnp.float32)}
    head = jax.tree.map(lambda leaf: leaf.shape, variables["params"]["head"])
    assert head == {
        "fc1": {"kernel": (24, 96), "bias": (96,)},
        "norm": {"scale": (96,), "bias": (96,)},
        "fc2": {"kernel": (96, 10), "bias": (10,)},
    }
    logits, end_points = jax.eval_shape(fn.apply, variables, images)
    assert logits.dtype == jnp.bfloat16 and end_points["pre_logits"].shape == (2, 24)
    assert [end_points[f"stage{i}"].shape[1] for i in (1, 2, 3, 4)] == [10, 5, 3, 2]
    # `regularization_loss` decays the leaves named `kernel`: stem 7*7*3*8, downsamplings
    # 3*3*(8*12 + 12*16 + 16*24), SepConv in stages 1 and 2 (pwconv1 c*2c, dwconv 7*7*2c,
    # pwconv2 2c*c), attention in 3 and 4 (qkv c*3c, proj c*c), MLPs 8c^2 each; the head 24*96
    # + 96*10. Not the norms, layer and res scales, StarReLU's scale and bias, or the biases.
    sepconv = sum(4 * c * c + 49 * 2 * c + 8 * c * c for c in (8, 12))
    attention = sum(n * (4 * c * c + 8 * c * c) for n, c in ((2, 16), (1, 24)))
    kernels = 7 * 7 * 3 * 8 + 9 * (8 * 12 + 12 * 16 + 16 * 24) + sepconv + attention
    kernels += 24 * 96 + 96 * 10
    decayed = [
        leaf.size
        for path, leaf in jax.tree_util.tree_leaves_with_path(variables["params"])
        if path[-1].key == "kernel"
    ]
    assert sum(decayed) == kernels

    features_fn = nets_factory.get_network_fn("caformer_s18", 0, head_dim=8, **SMALL)
    variables = jax.eval_shape(features_fn.init, jax.random.key(0), images)
    assert "head" not in variables["params"] and "head_norm" in variables["params"]
    features, _ = jax.eval_shape(features_fn.apply, variables, images)
    assert features.shape == (2, 24)


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"token_mixers": ("pooling",) * 3}, "one entry per stage"),
        ({"token_mixers": ("pooling", "pooling", "conv", "pooling")}, "token mixer must be"),
        ({"token_mixers": ("pooling",) * 3 + ("attention",), "head_dim": 7}, "multiple of"),
        ({"norm": "batch_norm"}, "norm must be"),
    ],
)
def test_bad_fields_are_refused_in_one_line(fields, message):
    fn = nets_factory.get_network_fn("poolformerv2_s12", 10, **{**SMALL, **fields})
    with pytest.raises(ValueError, match=message):
        jax.eval_shape(
            fn.init, jax.random.key(0), jax.ShapeDtypeStruct((1, 32, 32, 3), jnp.float32)
        )


@pytest.mark.slow  # compiles a gradient
def test_gradient_reaches_every_parameter():
    # Every kind of parameter in one small network: the three mixers, GroupNorms with biases,
    # layer and res scales, StarReLU's scale and bias, the MLP head.
    fields = {
        "depths": (1, 1, 1, 1),
        "dims": (8, 8, 16, 16),
        "token_mixers": ("pooling", "sepconv", "attention", "attention"),
        "head_dim": 8,
        "norm": "group_norm",
        "norm_bias": True,
        "layer_scale_init_values": (1e-5,) * 4,
    }
    fn = nets_factory.get_network_fn("caformer_s18", 10, is_training=True, **fields, **XLA_CONVS)
    images = jax.random.normal(jax.random.key(1), (2, 24, 24, 3))
    abstract = jax.eval_shape(fn.init, jax.random.key(0), images)["params"]
    # numpy's values (compiling `init` costs more than the gradient), the scales `gamma` at 1
    # (numpy_variables' 0 would cut their branches off).
    params = jax.tree_util.tree_map_with_path(
        lambda path, leaf: np.ones_like(leaf) if path[-1].key == "gamma" else leaf,
        numpy_variables(abstract),
    )

    def loss(params):
        logits, _ = fn.apply({"params": params}, images)
        return jnp.sum(jax.nn.log_softmax(logits)[:, 0])

    grads = jax.jit(jax.grad(loss))(params)
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
        assert np.any(np.asarray(g) != 0), jax.tree_util.keystr(path)

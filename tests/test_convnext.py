"""The ConvNeXt family: timm's parameter counts, the published GMACs, and the fields (layer scale,
stochastic depth, LayerNorm epsilon, dtype, weight decay). Real compute on a tiny configuration."""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nets_factory
import nets_summary as summary
from nets import convnext
from nets.layers import Conv
from tests import variable_trees
from tests.helpers import XLA_CONVS, numpy_variables

NAMES = ["convnext_tiny", "convnext_small", "convnext_base", "convnext_large"]

# timm's (and torchvision's) counts at 1000 classes. convnext_tiny, for instance:
#   stem 4*4*3*96 + 96 + LayerNorm 2*96                                       =      4,896
#   a block of width c: depthwise 49c + c, LayerNorm 2c, fc1 4c*c + 4c, fc2 4c*c + c, gamma c
#     = 8c^2 + 58c: 3 blocks at 96 (237,888), 3 at 192 (918,144), 9 at 384 (10,816,128),
#     3 at 768 (14,289,408)
#   downsampling LayerNorm 2c + 2x2 conv 4*c*2c + 2c: 74,304 + 296,448 + 1,182,720
#   head LayerNorm 2*768 + 768 * 1000 + 1000                                 =    770,536
#   total                                                                      28,589,128
#   ConvNeXt V2 drops the layer scale (c a block) and adds GRN's scale and bias over the MLP's
#   4c hidden channels (8c a block): convnextv2_tiny = 28,589,128 - 6,624 + 52,992 = 28,635,496.
PUBLISHED_COUNTS = {
    "convnext_atto": 3_695_520,
    "convnext_femto": 5_217_784,
    "convnext_pico": 9_045_672,
    "convnext_nano": 15_593_560,
    "convnext_tiny": 28_589_128,
    "convnext_small": 50_223_688,
    "convnext_base": 88_591_464,
    "convnext_large": 197_767_336,
    "convnext_xlarge": 350_196_968,
    "convnext_xxlarge": 846_471_016,
    "convnextv2_atto": 3_708_400,
    "convnextv2_femto": 5_233_240,
    "convnextv2_pico": 9_066_280,
    "convnextv2_nano": 15_623_800,
    "convnextv2_tiny": 28_635_496,
    "convnextv2_small": 50_318_440,
    "convnextv2_base": 88_717_800,
    "convnextv2_large": 197_956_840,
    "convnextv2_huge": 660_289_640,
}

# GMACs at 224 px. The paper's, torchvision's (`_ops`) and timm's model cards' (one decimal: 4.5G
# for T) count convolutions and dense layers, as `python -m nets_factory` does. timm's benchmark
# tables (results/*.csv, two decimals) come from fvcore, which also counts 5 operations per
# LayerNorm element (normalise, scale, shift): that adds 0.015 GMACs to convnext_tiny.
PAPER_GMACS = {
    "convnext_tiny": 4.5,
    "convnext_small": 8.7,
    "convnext_base": 15.4,
    "convnext_large": 34.4,
}
TIMM_GMACS = {
    "convnext_tiny": 4.47,
    "convnext_small": 8.71,
    "convnext_base": 15.38,
    "convnext_large": 34.40,
}

TINY = {"depths": (1, 1, 2, 1), "widths": (8, 16, 24, 32)}
# Real compute (compiling costs seconds per layer): two stages have every kind of parameter.
TWO_STAGES = {"depths": (1, 1), "widths": (8, 16)}


def layer_norm_elements(name):
    """Elements every LayerNorm normalises, for one 224 px image."""
    sizes = []

    def record(next_fun, args, kwargs, context):
        if isinstance(context.module, nn.LayerNorm):
            sizes.append(args[0].size)
        return next_fun(*args, **kwargs)

    fn = nets_factory.get_network_fn(name, num_classes=1000, **XLA_CONVS)
    images = jax.ShapeDtypeStruct((1, 224, 224, 3), jnp.float32)
    with nn.intercept_methods(record):
        jax.eval_shape(fn.init, jax.random.key(0), images)
    return sum(sizes)


# Counts and MACs: the recorded figures (nets/sizes.tsv), which the registry tests compare with a
# trace of every network (tests/test_nets_factory.py::test_shapes_and_end_points).
def test_published_parameter_counts():
    assert {name: summary.recorded_sizes()[name].params for name in PUBLISHED_COUNTS} == (
        PUBLISHED_COUNTS
    )
    assert {n for n in nets_factory.networks_map if "convnext" in n} == set(PUBLISHED_COUNTS)


@pytest.mark.parametrize("name", NAMES)
def test_published_gmacs(name):
    macs = summary.recorded_sizes()[name].macs
    assert round(macs / 1e9, 1) == PAPER_GMACS[name], macs
    with_norms = macs + 5 * layer_norm_elements(name)
    assert round(with_norms / 1e9, 2) == TIMM_GMACS[name], with_norms


def test_end_points_per_stage():
    end_points = variable_trees.end_points("convnext_tiny")  # committed (test_nets_factory)
    assert end_points == {
        "stem": (1, 56, 56, 96),
        "stage1": (1, 56, 56, 96),
        "stage2": (1, 28, 28, 192),
        "stage3": (1, 14, 14, 384),
        "stage4": (1, 7, 7, 768),
        "pre_logits": (1, 768),
        "logits": (1, 1000),
        "predictions": (1, 1000),
    }


def tiny(**kw):
    kw = {**TINY, **kw}
    is_training = kw.pop("is_training", False)
    return nets_factory.get_network_fn("convnext_tiny", 10, is_training=is_training, **kw)


def tiny_variables(fn, images, gamma=1.0):
    """numpy's variables with every layer scale `gamma` (numpy_variables would zero them)."""
    variables = numpy_variables(jax.eval_shape(fn.init, jax.random.key(0), images))
    return jax.tree_util.tree_map_with_path(
        lambda path, x: np.full_like(x, gamma) if path[-1].key == "gamma" else x, variables
    )


IMAGES = jax.random.normal(jax.random.key(1), (4, 40, 40, 3))


def test_layer_scale_initial_value_and_none():
    fn = tiny(layer_scale_init_value=0.25)
    params = jax.jit(fn.init)(jax.random.key(0), IMAGES)["params"]
    gammas = [
        leaf for path, leaf in jax.tree_util.tree_leaves_with_path(params) if "gamma" in str(path)
    ]
    assert len(gammas) == 5 and all(np.all(np.asarray(g) == 0.25) for g in gammas)
    abstract = jax.eval_shape(tiny(layer_scale_init_value=None).init, jax.random.key(0), IMAGES)
    assert "gamma" not in str(jax.tree_util.tree_structure(abstract))
    default = jax.eval_shape(tiny().init, jax.random.key(0), IMAGES)
    assert jax.tree.leaves(default["params"]["stages_0"]["blocks_0"]["gamma"])[0].shape == (8,)
    assert tiny().module.layer_scale_init_value == 1e-6


def test_stochastic_depth_rises_linearly_and_only_trains():
    rates = []

    def record(next_fun, args, kwargs, context):
        if isinstance(context.module, convnext.ConvNeXtBlock):
            rates.append(context.module.drop_path_rate)
        return next_fun(*args, **kwargs)

    fn = tiny(drop_path_rate=0.4, is_training=True)
    with nn.intercept_methods(record):
        jax.eval_shape(fn.init, jax.random.key(0), IMAGES)
    np.testing.assert_allclose(rates, [0.0, 0.1, 0.2, 0.3, 0.4])

    fn = tiny(drop_path_rate=0.4, is_training=True, **TWO_STAGES)  # rates 0 and 0.4
    images = jax.random.normal(jax.random.key(3), (16, 32, 32, 3))
    variables = tiny_variables(fn, images)
    apply = jax.jit(fn.apply)
    one, _ = apply(variables, images, rngs={"dropout": jax.random.key(1)})
    two, _ = apply(variables, images, rngs={"dropout": jax.random.key(2)})
    same = np.all(np.isclose(one, two), axis=1)  # an example whose branch both kept or dropped
    assert 0 < same.sum() < 16  # whole examples dropped, differently under each key
    evaluate = tiny(drop_path_rate=0.4, **TWO_STAGES)
    plain = tiny(**TWO_STAGES)
    np.testing.assert_array_equal(
        jax.jit(evaluate.apply)(variables, images)[0], jax.jit(plain.apply)(variables, images)[0]
    )


def test_drop_path_drops_whole_examples_and_keeps_the_mean():
    class Branch(nn.Module):
        @nn.compact
        def __call__(self, x):
            return convnext.drop_path(self, x, 0.25, train=True)

    x = jnp.ones((4000, 3, 3, 2))
    y = np.asarray(Branch().apply({}, x, rngs={"dropout": jax.random.key(0)}))
    per_example = y.reshape(4000, -1)
    assert np.all(per_example.min(1) == per_example.max(1))  # all of an example, or nothing
    assert set(np.unique(y)) == {0.0, np.float32(1 / 0.75)}
    assert abs((y[:, 0, 0, 0] == 0).mean() - 0.25) < 0.03 and abs(y.mean() - 1.0) < 0.05
    assert Branch().apply({}, x, method=lambda m, x: convnext.drop_path(m, x, 0.25, False)) is x


def test_layer_norm_epsilon_is_timms_and_reaches_every_norm():
    epsilons = []

    def record(next_fun, args, kwargs, context):
        if isinstance(context.module, nn.LayerNorm):
            epsilons.append(context.module.epsilon)
        return next_fun(*args, **kwargs)

    for fn, expected in ((tiny(), 1e-6), (tiny(norm_epsilon=1e-5), 1e-5)):
        epsilons.clear()
        with nn.intercept_methods(record):
            jax.eval_shape(fn.init, jax.random.key(0), IMAGES)
        assert len(epsilons) == 1 + 3 + 5 + 1 and set(epsilons) == {expected}


def test_gradient_reaches_every_parameter():
    fn = tiny(is_training=True, **TWO_STAGES)
    variables = tiny_variables(fn, IMAGES, gamma=0.5)

    def gradient(fn):
        def loss(params):
            logits, _ = fn.apply({"params": params}, IMAGES)
            return jnp.sum(jax.nn.log_softmax(logits)[:, 0])

        return jax.grad(loss)

    # The default CPU convolutions' gradient is built, but not compiled: its 7x7 depthwise taps
    # compile in ~5 s, XLA's own convolutions in ~1 s. Which convolution computes it does not
    # change where the gradient reaches (tests/test_conv.py checks the CPU one against XLA's on
    # each kind of shape, ConvNeXt's 7x7 depthwise on smaller maps included).
    abstract = jax.eval_shape(gradient(fn), variables["params"])
    assert jax.tree.map(np.shape, abstract) == jax.tree.map(np.shape, variables["params"])
    xla = functools.partial(Conv, impl="xla")
    grads = jax.jit(gradient(tiny(is_training=True, conv=xla, **TWO_STAGES)))(variables["params"])
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
        assert np.any(np.asarray(g) != 0), jax.tree_util.keystr(path)


def test_bfloat16_computes_in_bfloat16_with_float32_params():
    fn = tiny(dtype=jnp.bfloat16, **TWO_STAGES)
    variables = tiny_variables(fn, IMAGES, gamma=0.5)
    assert {leaf.dtype for leaf in jax.tree.leaves(variables)} == {jnp.dtype("float32")}
    logits, end_points = jax.jit(fn.apply)(variables, IMAGES)
    assert logits.dtype == end_points["stage2"].dtype == end_points["pre_logits"].dtype
    assert logits.dtype == jnp.bfloat16
    reference, _ = jax.jit(tiny(**TWO_STAGES).apply)(variables, IMAGES)
    scale = np.max(np.abs(reference))
    assert np.max(np.abs(np.float32(logits) - reference)) <= 0.05 * scale


def test_global_response_norm_is_timms_formula_and_starts_as_the_identity():
    x = np.asarray(jax.random.normal(jax.random.key(4), (2, 5, 3, 6)))
    grn = convnext.GlobalResponseNorm()
    variables = grn.init(jax.random.key(0), x)
    np.testing.assert_array_equal(grn.apply(variables, x), x)  # scale and bias start at 0
    scale, bias = np.linspace(0.5, 1.5, 6), np.linspace(-0.2, 0.3, 6)
    # timm's GlobalResponseNorm, channels last, in numpy.
    norms = np.sqrt(np.sum(np.square(x), axis=(1, 2), keepdims=True))
    by_hand = x + (bias + scale * (x * (norms / (norms.mean(-1, keepdims=True) + 1e-6))))
    params = {"params": {"scale": scale, "bias": bias}}
    np.testing.assert_allclose(grn.apply(params, x), by_hand, rtol=1e-6, atol=1e-6)
    half = convnext.GlobalResponseNorm(dtype=jnp.bfloat16).apply(params, x)
    assert half.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.float32(half), by_hand, rtol=0.02, atol=0.05)


def test_version_2_has_grn_and_no_layer_scale_neither_decayed():
    fn = nets_factory.get_network_fn("convnextv2_tiny", 10, weight_decay=1e-2, **TINY)
    assert fn.module.grn and fn.module.layer_scale_init_value is None
    params = numpy_variables(jax.eval_shape(fn.init, jax.random.key(0), IMAGES))["params"]
    block = params["stages_3"]["blocks_0"]
    assert set(block) == {"conv_dw", "norm", "fc1", "grn", "fc2"}
    assert {k: v.shape for k, v in block["grn"].items()} == {"scale": (128,), "bias": (128,)}
    sevens = jax.tree_util.tree_map_with_path(
        lambda path, x: np.full_like(x, 7.0) if "grn" in jax.tree_util.keystr(path) else x, params
    )
    np.testing.assert_allclose(fn.regularization_loss(sevens), fn.regularization_loss(params))


def test_features_mode_and_weight_decay_on_kernels_only():
    fn = nets_factory.get_network_fn("convnext_tiny", 0, weight_decay=1e-2, **TINY)
    variables = tiny_variables(fn, IMAGES, gamma=0.5)
    assert set(variables["params"]) == {"stem_conv", "stem_norm", "head_norm"} | {
        f"stages_{i}" for i in range(4)
    }
    features, end_points = jax.jit(fn.apply)(variables, IMAGES)
    assert features.shape == (4, 32) and "logits" not in end_points
    np.testing.assert_array_equal(features, end_points["pre_logits"])
    # LayerNorm scales and offsets, layer scales and biases are not decayed: 7s change nothing.
    params = variables["params"]
    sevens = jax.tree_util.tree_map_with_path(
        lambda path, x: x if path[-1].key == "kernel" else np.full_like(x, 7.0), params
    )
    kernels = [x for p, x in jax.tree_util.tree_leaves_with_path(params) if p[-1].key == "kernel"]
    assert len(kernels) == 1 + 3 + 5 * 3  # stem, downsamplings, each block's three
    by_hand = 1e-2 * 0.5 * sum(float(np.sum(np.square(k, dtype=np.float64))) for k in kernels)
    np.testing.assert_allclose(fn.regularization_loss(params), by_hand, rtol=1e-5)
    np.testing.assert_allclose(fn.regularization_loss(sevens), by_hand, rtol=1e-5)


@pytest.mark.parametrize(
    "fields, message",
    [
        (
            {"depths": (1, 1), "widths": (8, 16, 24)},
            r"one width per stage: depths \(1, 1\), widths",
        ),
        ({"drop_path_rate": 1.0}, r"drop_path_rate must be in \[0, 1\), got 1.0"),
    ],
)
def test_bad_fields_are_one_line_errors(fields, message):
    fn = tiny(**fields)
    with pytest.raises(ValueError, match=message):
        jax.eval_shape(fn.init, jax.random.key(0), IMAGES)


def test_min_image_size_follows_the_stages():
    assert tiny().min_image_size == 32
    assert tiny(depths=(1, 1), widths=(8, 16)).min_image_size == 8


def test_dilated_stages_keep_their_maps_so_smaller_images_do():
    # The dilated stages' 2x2 downsampling keeps the map: 16 px make four stride-4 pixels.
    assert nets_factory.get_network_fn("convnext_atto", 10, output_stride=16).min_image_size == 16

"""The MobileNet family (V1, V2, V3, EdgeTPU): published sizes and Slim's layout and options;
V2's, V3's and EdgeTPU's `output_stride` (timm's)."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nets_factory
import nets_summary as summary
from nets import mobilenet_v1
from nets.layers import Conv, SqueezeExcite, make_divisible
from nets.layers.dilation import StageStride
from tests import variable_trees
from tests.helpers import XLA_CONVS, numpy_variables, training_gradients

# Exact counts at 1000 classes (all trainable parameters, BatchNorm scale and offset included).
#   mobilenet_v1 (Keras' MobileNet has the same trainable count; the paper says 4.2M):
#     convolution kernels, Slim's own per-layer table in mobilenet_v1.py       = 3,185,088
#     BatchNorm: 2 * (32 stem + 4,960 depthwise + 5,952 pointwise channels)    =    21,888
#     logits 1024 * 1000 + 1000                                                =  1,025,000
#     total                                                                      4,231,976
#   mobilenet_v2, mobilenet_v3_*: torchvision's published figures. Slim's V3 matches them
#   exactly: its expansion widths make_divisible(c_in * t, 8) and squeeze widths
#   make_divisible(c / 4, 8) come out as torchvision's listed ones.
EXACT_COUNTS = {
    "mobilenet_v1": 4_231_976,
    "mobilenet_v2": 3_504_872,
    "mobilenet_v3_large": 5_483_032,
    "mobilenet_v3_small": 2_542_856,
}

# (million MACs, million parameters) as published. V1: the paper's Table 6 (1000 classes,
# rounded). V2, V3 and EdgeTPU: Slim's nets/mobilenet/README.md, whose parameter figures are for
# 1001 classes without BatchNorm's scale and offset, cut (not rounded) to the digits shown: for
# mobilenet_v2 3,504,872 - 34,112 (BatchNorm) + 1,281 (one more class) = 3,472,041 -> 3.47.
# Not listed: the README's MACs for Small (66M) and Small minimalistic (65M), and its 2.9M
# parameters for Small, disagree with the paper's 56M / 2.5M for Small that we do match.
PUBLISHED = {
    "mobilenet_v1": (569, "4.2"),
    "mobilenet_v1_075": (325, "2.6"),
    "mobilenet_v1_050": (149, "1.3"),
    "mobilenet_v1_025": (41, "0.5"),
    "mobilenet_v2": (300, "3.47"),
    "mobilenet_v2_140": (582, "6.06"),
    "mobilenet_v2_035": (59, "1.66"),
    "mobilenet_v3_large": (217, "5.4"),
    "mobilenet_v3_small": (56, None),
    "mobilenet_v3_large_minimalistic": (209, "3.9"),
    "mobilenet_v3_small_minimalistic": (None, "2.0"),
    "mobilenet_edgetpu": (990, "4.0"),
    "mobilenet_edgetpu_075": (624, "2.9"),
}


# Tracing a network costs about a second of CPU: each network is traced once per configuration
# and shared between the tests (the results are read-only); its forward pass only, on the
# variables below (a MobileNet's do not depend on the image size), with XLA's convolutions (a
# third of the CPU path's trace: tests/helpers.py).
@functools.cache
def profile(name, size=224, **kw):
    fn = nets_factory.get_network_fn(name, num_classes=1000, **kw, **XLA_CONVS)
    return summary.profile(fn, size, variables=variables(name, **kw))


@functools.cache
def variables(name, **kw):
    if not kw:  # the registry's network: its committed variable tree, no trace
        return variable_trees.abstract(name)
    fn = nets_factory.get_network_fn(name, num_classes=1000, **kw, **XLA_CONVS)
    images = jax.ShapeDtypeStruct((1, 224, 224, 3), jnp.float32)
    return jax.eval_shape(fn.init, jax.random.key(0), images)


def count(params, keep=lambda path: True):
    leaves = jax.tree_util.tree_leaves_with_path(params)
    return sum(math.prod(leaf.shape) for path, leaf in leaves if keep([p.key for p in path]))


def width(name, *path, **kw):
    """Output channels of the convolution at `path` (module names) in network `name`."""
    module = variables(name, **kw)["params"]
    for key in path:
        module = module[key]
    return module["conv"]["kernel"].shape[-1]


# Counts and MACs at 224 px: the recorded figures (nets/sizes.tsv), which the registry tests
# compare with a trace of every network (tests/test_nets_factory.py::test_shapes_and_end_points).
@pytest.mark.parametrize("name", sorted(EXACT_COUNTS))
def test_exact_parameter_counts(name):
    assert summary.recorded_sizes()[name].params == EXACT_COUNTS[name]


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_macs_and_parameters(name):
    macs, published = PUBLISHED[name]
    if macs is not None:
        recorded = summary.recorded_sizes()[name]
        assert recorded.image_size == 224
        assert abs(recorded.macs / 1e6 - macs) <= 0.01 * macs, recorded.macs
    if published is not None:
        digits = len(published.split(".")[1])
        params = variables(name)["params"]
        if name.startswith("mobilenet_v1"):
            assert f"{count(params) / 1e6:.{digits}f}" == published
        else:
            n = count(params, lambda path: "bn" not in path)
            n += params["Logits"]["kernel"].shape[0] + 1  # the 1001st class
            assert f"{math.floor(n / 10 ** (6 - digits)) / 10**digits:.{digits}f}" == published


def test_mobilenet_v1_matches_slims_layer_table():
    # Slim's mobilenet_v1.py docstring: kernel parameters and MACs of the base (no logits).
    for name, size, kernels, base_macs in [
        ("mobilenet_v1", 224, 3_185_088, 567_716_352),
        ("mobilenet_v1_075", 128, 1_800_144, 106_002_432),
    ]:
        params = variables(name)["params"]
        assert count(params, lambda p: p[-1] == "kernel" and p[0] != "Logits") == kernels
        features = params["Logits"]["kernel"].shape[0]
        assert profile(name, size).macs == base_macs + features * 1000


def test_make_divisible_is_slims():
    assert make_divisible(32 * 1.4) == 48 and make_divisible(32 * 0.35) == 16  # 10% rule: 8 -> 16
    assert make_divisible(16 * 0.35) == 8 and make_divisible(72 / 4) == 24
    assert make_divisible(1280 / 0.35 * 0.35) == 1280 and make_divisible(3, 8, min_value=8) == 8


def test_v1_depth_multiplier_truncates_and_min_depth_clamps():
    assert width("mobilenet_v1_025", "Conv2d_0") == 8
    assert width("mobilenet_v1_025", "Conv2d_1_pointwise") == 16
    assert width("mobilenet_v1_025", "Conv2d_13_pointwise") == 256
    # 0.1: int(32 * 0.1) = 3 and int(64 * 0.1) = 6 are raised to min_depth; 1024 -> 102.
    assert width("mobilenet_v1", "Conv2d_0", depth_multiplier=0.1) == 8
    assert width("mobilenet_v1", "Conv2d_1_pointwise", depth_multiplier=0.1) == 8
    assert width("mobilenet_v1", "Conv2d_13_pointwise", depth_multiplier=0.1) == 102
    assert width("mobilenet_v1", "Conv2d_0", depth_multiplier=0.1, min_depth=16) == 16


def test_v2_depth_multiplier_and_finegrain_classification_mode():
    v2_035 = functools.partial(width, "mobilenet_v2_035")
    assert v2_035("Conv") == 16  # 32 * 0.35 = 11.2 -> 16 (8 would lose more than 10%)
    assert v2_035("expanded_conv", "project") == 8  # 16 * 0.35 = 5.6 -> 8
    assert v2_035("expanded_conv_16", "project") == 112  # 320 * 0.35
    assert v2_035("Conv_1") == 1280  # finegrain keeps the last layer
    assert width("mobilenet_v2", "Conv_1", depth_multiplier=0.35) == 448
    assert width("mobilenet_v2_140", "Conv") == 48 and width("mobilenet_v2_140", "Conv_1") == 1792


def test_v3_finegrain_keeps_the_last_convolution():
    assert width("mobilenet_edgetpu_075", "Conv") == 24
    assert width("mobilenet_edgetpu_075", "expanded_conv_21", "project") == 144  # 192 * 0.75
    assert width("mobilenet_edgetpu_075", "Conv_1") == 1280
    assert width("mobilenet_edgetpu", "Conv_1", depth_multiplier=0.75) == 960
    kw = {"depth_multiplier": 0.75, "finegrain_classification_mode": True}
    assert width("mobilenet_v3_large", "Conv_1", **kw) == 720  # the conv before the pool scales
    assert width("mobilenet_v3_large", "Conv_2", **kw) == 1280  # the last one does not


def test_end_point_names_are_slims():
    end_points = variable_trees.end_points  # committed; test_nets_factory traces them
    v1 = end_points("mobilenet_v1_025")
    separable = [f"Conv2d_{i}_{kind}" for i in range(1, 14) for kind in ("depthwise", "pointwise")]
    assert list(v1) == ["Conv2d_0", "stem", *separable, "AvgPool_1a", "pre_logits", "logits",
                        "predictions"]  # fmt: skip
    assert v1["AvgPool_1a"] == (1, 1, 1, 256)
    for name, layers in [("mobilenet_v2", 19), ("mobilenet_v3_large", 19),
                         ("mobilenet_v3_small", 15), ("mobilenet_edgetpu", 24)]:  # fmt: skip
        points = end_points(name)
        numbered = [f"layer_{i}" for i in range(1, layers + 1)]
        assert [p for p in points if p.startswith("layer_")] == numbered
        assert points["stem"] == points["layer_1"] and "global_pool" in points
    assert end_points("mobilenet_v3_large")["layer_18"] == (1, 1, 1, 960)  # V3 pools


def test_v2_parameter_tree_follows_slims_scopes():
    params = variables("mobilenet_v2")["params"]
    blocks = ["expanded_conv"] + [f"expanded_conv_{i}" for i in range(1, 17)]
    assert set(params) == {"Conv", *blocks, "Conv_1", "Logits"}
    assert set(params["expanded_conv"]) == {"depthwise", "project"}  # expansion 1: none
    assert set(params["expanded_conv_1"]) == {"expand", "depthwise", "project"}
    assert params["expanded_conv_1"]["depthwise"]["conv"]["kernel"].shape == (3, 3, 1, 96)
    assert set(params["Conv_1"]) == {"conv", "bn"} and "bias" not in params["Conv_1"]["conv"]


@pytest.mark.parametrize(
    "name, se_blocks, kernels",
    [
        ("mobilenet_v3_large", 8, {3, 5}),
        ("mobilenet_v3_small", 9, {3, 5}),
        ("mobilenet_v3_large_minimalistic", 0, {3}),
        ("mobilenet_v3_small_minimalistic", 0, {3}),
        ("mobilenet_edgetpu", 0, {3, 5}),
        ("mobilenet_edgetpu_075", 0, {3, 5}),
    ],
)
def test_v3_squeeze_excite_kernels_and_head_per_variant(name, se_blocks, kernels):
    params = variables(name)["params"]
    blocks = [v for k, v in params.items() if k.startswith("expanded_conv")]
    assert sum("squeeze_excite" in b for b in blocks) == se_blocks
    depthwise = {b["depthwise"]["conv"]["kernel"].shape[0] for b in blocks if "depthwise" in b}
    fused = [b["expand"] for b in blocks if "depthwise" not in b and "expand" in b]
    assert depthwise | {f["conv"]["kernel"].shape[0] for f in fused} == kernels
    assert bool(fused) == name.startswith("mobilenet_edgetpu")
    # The 1x1 conv after the pool has a bias and no BatchNorm; EdgeTPU has none.
    assert ("Conv_2" in params) == name.startswith("mobilenet_v3")
    if "Conv_2" in params:
        assert set(params["Conv_2"]) == {"conv"} and "bias" in params["Conv_2"]["conv"]


@pytest.mark.parametrize(
    "name, hard_swish",
    [("mobilenet_v3_small", True), ("mobilenet_v3_small_minimalistic", False)],
)
def test_hard_swish_only_where_slim_has_it(name, hard_swish):
    fn = nets_factory.get_network_fn(name, num_classes=1000)
    jaxpr = str(jax.make_jaxpr(fn.apply)(variables(name), jnp.ones((1, 64, 64, 3))))
    # jax.nn.hard_swish is jitted under the name hard_silu, so it shows in the jaxpr; the
    # squeeze-excite gate is hard_sigmoid.
    assert ("name=hard_silu" in jaxpr) == hard_swish
    assert ("name=hard_sigmoid" in jaxpr) == hard_swish


def test_edgetpu_fused_blocks():
    params = variables("mobilenet_edgetpu")["params"]
    # 32 -> 16 with expansion 1 has nothing to expand: Slim keeps only the projection.
    assert set(params["expanded_conv"]) == {"project"}
    assert params["expanded_conv_1"]["expand"]["conv"]["kernel"].shape == (3, 3, 16, 128)
    assert set(params["expanded_conv_1"]) == {"expand", "project"}
    assert set(params["expanded_conv_9"]) == {"expand", "depthwise", "project"}


def test_squeeze_excite_numerics():
    x = jax.random.normal(jax.random.key(0), (1, 2, 2, 16))
    se = SqueezeExcite(Conv)
    params = se.init(jax.random.key(1), x)["params"]
    assert params["Conv"]["kernel"].shape == (1, 1, 16, 8)  # make_divisible(16 / 4, 8) = 8
    w1, b1 = params["Conv"]["kernel"][0, 0], params["Conv"]["bias"]
    w2, b2 = params["Conv_1"]["kernel"][0, 0], params["Conv_1"]["bias"]
    squeezed = np.maximum(np.asarray(x).mean(axis=(1, 2)) @ w1 + b1, 0)
    gate = np.clip(squeezed @ w2 + b2 + 3, 0, 6) / 6  # Slim's relu6(x + 3) / 6
    np.testing.assert_allclose(se.apply({"params": params}, x), x * gate[:, None, None], rtol=1e-5)


def test_bfloat16_computes_in_bfloat16():
    fn = nets_factory.get_network_fn("mobilenet_v3_small", num_classes=10, dtype=jnp.bfloat16)
    images = jax.ShapeDtypeStruct((1, 64, 64, 3), jnp.float32)
    variables = jax.eval_shape(fn.init, jax.random.key(0), images)
    assert {leaf.dtype for leaf in jax.tree.leaves(variables["params"])} == {jnp.dtype("float32")}
    _, end_points = jax.eval_shape(fn.apply, variables, images)
    assert {point.dtype for point in end_points.values()} == {jnp.dtype("bfloat16")}


def test_depth_multiplier_must_be_positive():
    images = jax.ShapeDtypeStruct((1, 32, 32, 3), jnp.float32)
    for name in ["mobilenet_v1", "mobilenet_v2", "mobilenet_v3_small"]:
        fn = nets_factory.get_network_fn(name, num_classes=10, depth_multiplier=0.0)
        with pytest.raises(ValueError, match="depth_multiplier must be positive"):
            jax.eval_shape(fn.init, jax.random.key(0), images)


def test_mobilenet_v1_025_trains_gradient_reaches_every_parameter():
    fn = nets_factory.get_network_fn("mobilenet_v1_025", num_classes=10, is_training=True)
    images = jax.random.normal(jax.random.key(1), (2, 64, 64, 3))
    variables = numpy_variables(jax.eval_shape(fn.init, jax.random.key(0), images))
    grads, updates = training_gradients(fn, variables, images, {"dropout": jax.random.key(2)})
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
        assert np.all(np.isfinite(g)) and np.any(np.asarray(g) != 0), jax.tree_util.keystr(path)
    changed = jax.tree.map(
        lambda a, b: not np.allclose(a, b), variables["batch_stats"], updates["batch_stats"]
    )
    assert all(jax.tree.leaves(changed))


def test_output_stride_dilates_past_it_as_timms_builder():
    # Per block (timm's builder): V2 at 16, its stride-2 block 13 (160 wide) stops striding and
    # keeps dilation 1; the blocks after it take 2.
    module = nets_factory.get_network_fn("mobilenet_v2", 10, output_stride=16).module
    assert module.block_plan()[13:] == [StageStride(1, 2, 1)] + [StageStride(1, 2, 2)] * 3


@pytest.mark.parametrize("output_stride", [8, 16])
def test_mobilenet_v1_dilates_as_slims(output_stride):
    """Slim's `mobilenet_v1_base` loop, written out: once the stride so far is `output_stride`, a
    layer strides 1 at the rate so far and multiplies the rate by its stride for those after."""
    current, rate, slims = 2, 1, []  # after the stride-2 stem
    for stride, _ in mobilenet_v1._SEPARABLE_LAYERS:
        if current == output_stride:
            slims.append((1, rate))
            rate *= stride
        else:
            slims.append((stride, 1))
            current *= stride
    module = nets_factory.get_network_fn("mobilenet_v1", 10, output_stride=output_stride).module
    assert [(p.stride, p.first_dilation) for p in module.layer_strides()] == slims

"""MIT's EfficientViT: timm's parameter counts and MACs, its stage layouts, the contract's end
points and features; parity with timm on fixtures made by tools/fixtures_efficientvit_mit.py,
each convention shown to matter, and timm's key layout."""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

import nets_factory
import nets_summary as summary
from nets.efficientvit_mit import LinearAttentionProduct, LocalBlock
from nets.layers import Conv
from nets_weights import architectures
from tests.test_pretrained import FIXTURES, expected, parity_error, relative_error

# timm's counts at 1000 classes (`sum(p.numel() for p in m.parameters())` of
# `timm.create_model(name)`) and the MACs torch's FlopCounterMode counts for it at 224 px
# (FLOPs / 2; the linear attention's two batched products included), as tests/test_efficientnet.py.
TIMM = {
    "efficientvit_b0": (224, 3_410_008, 100_233_216),
    "efficientvit_b1": (224, 9_102_024, 519_214_592),
    "efficientvit_b2": (224, 24_330_712, 1_584_937_984),
    "efficientvit_b3": (224, 48_646_056, 3_953_822_208),
    "efficientvit_l1": (224, 52_654_088, 5_258_479_616),
    "efficientvit_l2": (224, 63_707_016, 6_949_862_400),
    "efficientvit_l3": (224, 246_037_288, 27_586_525_184),
}


@pytest.mark.parametrize("name", sorted(TIMM))
def test_timm_parameter_counts_and_macs(name):
    # The sizes `python -m nets_factory` lists, measured by the registry tests.
    assert summary.recorded_sizes()[name] == TIMM[name]


def abstract(name, num_classes=1000, size=224, **kwargs):
    fn = nets_factory.get_network_fn(name, num_classes, **kwargs)
    images = jax.ShapeDtypeStruct((2, size, size, 3), jnp.float32)
    init = functools.partial(fn.module.init_with_output, train=False)
    return fn, jax.eval_shape(init, {"params": jax.random.key(0)}, images)


def test_b0_parameters_add_up_end_points_and_features():
    fn, ((_, end_points), variables) = abstract("efficientvit_b0")
    params = variables["params"]
    count = lambda tree: sum(x.size for x in jax.tree.leaves(tree))  # noqa: E731
    # The stem: 3x3x3x8 and its BatchNorm; a DSConv of 8 (3x3 depthwise, 1x1, two BatchNorms).
    assert count(params["stem_in_conv"]) == 216 + 16
    assert count(params["stem_res0"]) == 72 + 16 + 64 + 16
    # The first attention block of the 64-wide stage: 4 heads of 16, qkv 64 -> 192, the 5x5
    # depthwise and 1x1 grouped (12 groups) aggregation, the projection 128 -> 64 with BatchNorm.
    context = params["stages_2_blocks_1"]["context_module"]
    assert count(context) == 64 * 192 + 25 * 192 + 16 * 192 + 128 * 64 + 128
    # The head: 128 -> 1024 with BatchNorm, 1024 -> 1280 without bias, LayerNorm, the logits.
    head = {k: v for k, v in params.items() if k.startswith("head_")}
    assert count(head) == 128 * 1024 + 2048 + 1024 * 1280 + 2560 + 1280 * 1000 + 1000
    assert count(params) == 3_410_008
    shapes = {name: x.shape[1:] for name, x in end_points.items()}
    assert shapes == {
        "stem": (112, 112, 8),
        "stages_0": (56, 56, 16),
        "stages_1": (28, 28, 32),
        "stages_2": (14, 14, 64),
        "stages_3": (7, 7, 128),
        "head": (7, 7, 1024),
        "global_pool": (1024,),
        "pre_logits": (1280,),
        "logits": (1000,),
        "predictions": (1000,),
    }
    # timm's feature_info: the four stages.
    strides = {"stages_0": 4, "stages_1": 8, "stages_2": 16, "stages_3": 32}
    assert fn.module.feature_strides() == strides


def test_stage_layouts_are_timms():
    # Blocks per stage (a strided one, then the residual and attention blocks), read from the
    # full-size state dicts in tests/fixtures/state_dicts/efficientvit_mit.txt.
    b1 = nets_factory.get_network_fn("efficientvit_b1", 10).module
    assert [len(b1.stage_blocks(i, d)) for i, d in enumerate(b1.depths[1:])] == [2, 3, 4, 5]
    assert b1.stage_blocks(2, 1) == [("mb", 4.0, True), 4.0]
    l2 = nets_factory.get_network_fn("efficientvit_l2", 10).module
    assert [len(l2.stage_blocks(i, d)) for i, d in enumerate(l2.depths[1:])] == [3, 3, 9, 9]
    assert l2.stage_blocks(0, 1) == [("fused", 16.0, False), ("fused", 4.0, False)]
    assert l2.stage_blocks(2, 1) == [("mb", 16.0, True), ("mb", 4.0, True)]
    assert l2.stage_blocks(3, 1) == [("mb", 24.0, True), 6.0]
    assert (l2.bn_epsilon, b1.bn_epsilon) == (1e-7, 1e-5)


def test_block_kinds_and_fewer_norm():
    x = jax.ShapeDtypeStruct((1, 9, 9, 8), jnp.float32)
    norm = functools.partial(nn.BatchNorm, use_running_average=True)
    layers = {
        "ds": {"depth_conv", "point_conv"},
        "conv": {"conv1", "conv2"},
        "mb": {"inverted_conv", "depth_conv", "point_conv"},
        "fused": {"spatial_conv", "point_conv"},
    }
    for kind, names in layers.items():
        block = LocalBlock(16, kind, Conv, norm, nn.relu, expansion=2, strides=2, residual=False)
        out, variables = jax.eval_shape(block.init_with_output, jax.random.key(0), x)
        assert set(variables["params"]) == names and out.shape == (1, 5, 5, 16)
    # fewer_norm: biases instead of BatchNorm but for the last layer.
    block = LocalBlock(8, "mb", Conv, norm, nn.relu, expansion=4, fewer_norm=True)
    params = jax.eval_shape(block.init, jax.random.key(0), x)["params"]
    assert set(params["depth_conv"]) == {"conv"} and "bias" in params["depth_conv"]["conv"]
    assert set(params["point_conv"]) == {"conv", "norm"}
    with pytest.raises(ValueError, match="block kinds"):
        jax.eval_shape(LocalBlock(8, "x", Conv, norm, nn.relu).init, jax.random.key(0), x)


def test_linear_attention_normalises_by_the_keys():
    # One head, one token per key: relu(q) relu(k)^T v over relu(q) relu(k)^T 1.
    q = jnp.array([[[[1.0, 2.0]]], [[[0.5, 0.0]]]]).reshape(1, 2, 1, 2)
    k = jnp.array([[1.0, 0.0], [0.0, 3.0]]).reshape(1, 2, 1, 2)
    v = jnp.array([[2.0], [4.0]]).reshape(1, 2, 1, 1)
    out = LinearAttentionProduct(epsilon=0.0).apply({}, q, k, v)
    # token 0: (1*1*2 + 2*3*4) / (1 + 6); token 1: (0.5*2) / 0.5.
    assert jnp.allclose(out.ravel(), jnp.array([26 / 7, 2.0]))
    assert LinearAttentionProduct.macs(q, k, v) == 2 * 2 * 1 * 2 * 2


# Each parity fixture's small timm network (tools/fixtures_efficientvit_mit.py), as
# `load_pretrained` keyword arguments.
SMALL = {"head_dim": 8, "head_widths": (16, 24)}
PARITY = {
    "efficientvit_b_small": (
        "efficientvit_b1",
        {**SMALL, "widths": (8, 8, 8, 16, 16), "depths": (1, 2, 1, 1, 2)},
    ),
    "efficientvit_l_small": (
        "efficientvit_l2",
        {**SMALL, "widths": (4, 4, 8, 8, 16), "depths": (1,) * 5},
    ),
}
# Conventions whose other value misses each fixture's logits (relative error > 1e-4, the
# parity bound): the padding (by 1.2), the epsilon (B's 1e-5 for L's 1e-7: by 0.4%, as the other
# way on the B fixture; one field reaches both series' BatchNorms and LayerNorm), and L's GELU:
# the exact one misses by 3.6e-4.
WRONG = {
    "efficientvit_b_small": ({"padding": "SAME"},),
    "efficientvit_l_small": (
        {"bn_epsilon": 1e-5},
        {"act": functools.partial(nn.gelu, approximate=False)},
    ),
}


@pytest.mark.slow  # parity: compiles thinned reference networks
@pytest.mark.parametrize("case", sorted(PARITY))
def test_logits_are_the_references(case):
    name, kwargs = PARITY[case]
    network_fn, variables = nets_factory.load_pretrained(name, FIXTURES / "parity" / case, **kwargs)
    reference = expected(case)
    logits, end_points = jax.jit(network_fn.apply)(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) <= 1e-4
    assert "predictions" in end_points
    for wrong in WRONG[case]:
        assert parity_error(name, kwargs, case, **wrong) > 1e-4, wrong


def test_the_architecture_sets_the_conventions():
    name, kwargs = PARITY["efficientvit_l_small"]
    with pytest.raises(ValueError, match=r"trained with bn_epsilon=1e-07; bn_epsilon=1e-05"):
        nets_factory.load_pretrained(
            name, FIXTURES / "parity" / "efficientvit_l_small", **kwargs, bn_epsilon=1e-5
        )


LAYOUT = {
    ("stem_in_conv", "conv"): "stem.in_conv.conv",
    ("stem_res0", "depth_conv", "norm"): "stem.res0.main.depth_conv.norm",
    ("stages_0_blocks_0", "inverted_conv", "conv"): "stages.0.blocks.0.main.inverted_conv.conv",
    ("stages_2_blocks_1", "context_module", "qkv", "conv"): (
        "stages.2.blocks.1.context_module.main.qkv.conv"
    ),
    ("stages_2_blocks_1", "context_module", "aggreg_0_1"): (
        "stages.2.blocks.1.context_module.main.aggreg.0.1"
    ),
    ("stages_3_blocks_10", "local_module", "point_conv", "norm"): (
        "stages.3.blocks.10.local_module.main.point_conv.norm"
    ),
    ("head_in_conv", "norm"): "head.in_conv.norm",
    ("head_classifier_0",): "head.classifier.0",
    ("head_classifier_1",): "head.classifier.1",
    ("head_classifier_4",): "head.classifier.4",
}


def test_layout_is_timms():
    arch = architectures.ARCHITECTURES["efficientvit_b3"]
    layout = arch.layout(nets_factory.get_network_fn("efficientvit_b3", 10).module)
    assert {path: layout(path) for path in LAYOUT} == LAYOUT
    assert architectures.ARCHITECTURES["efficientvit_l3"].convention["bn_epsilon"] == 1e-7

"""MobileNetV4's convolutional networks: timm's parameter counts and MACs, its tables and block
kinds, the contract's end points and features; parity with timm on fixtures made by
tools/fixtures_mobilenet_v4.py, each convention shown to matter, and timm's key layout; timm's
`output_stride` on the same weights."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nets_factory
import nets_summary as summary
from nets.layers import Conv, FusedMBConv
from nets.mobilenet_v4 import (
    CONV_MEDIUM,
    MobileMultiQueryAttention,
    MobileNetV4,
    UniversalInvertedResidual,
    cn,
    er,
    mqa,
    uir,
)
from nets_weights import architectures, published
from tests.helpers import XLA_CONVS, assert_dilated_parity
from tests.test_pretrained import FIXTURES, expected, relative_error
from tests.test_pretrained_mobilenet import assert_each_convention_matters
from tests.test_stochastic_depth import blocks_built

# timm's counts at 1000 classes (`sum(p.numel() for p in m.parameters())` of
# `timm.create_model(name)` built under `torch.device('meta')`) and the MACs torch's
# FlopCounterMode counts for it at our default size (FLOPs / 2), as tests/test_efficientnet.py.
# Conv-Small: 864 in the stem (3 * 3 * 3 * 32) + 64 in its BatchNorm, 1,260,736 in the blocks
# and the 960-wide last stage, 960 * 1280 + 2 * 1280 = 1,231,360 in the head, 1,281,000 in the
# classifier (1280 * 1000 + 1000): 3,774,024 (timm's 3.77M).
TIMM = {
    "mobilenetv4_conv_small": (224, 3_774_024, 186_005_568),
    "mobilenetv4_conv_medium": (256, 9_715_512, 1_080_244_224),
    "mobilenetv4_conv_large": (384, 32_590_864, 6_376_220_672),
    # Attention's two products counted, as FlopCounterMode counts scaled_dot_product_attention.
    "mobilenetv4_hybrid_medium": (256, 11_074_648, 1_271_183_360),
    "mobilenetv4_hybrid_large": (384, 37_764_624, 7_711_877_120),
}
# The narrow Smalls: timm's parameter counts (their MACs are recorded in nets/sizes.tsv).
NARROW = {"mobilenetv4_conv_small_050": 2_238_952, "mobilenetv4_conv_small_035": 1_905_384}
NAMES = sorted({*TIMM, *NARROW})


@pytest.mark.parametrize("name", sorted(TIMM))
def test_timm_parameter_counts_and_macs(name):
    # The sizes `python -m nets_factory` lists, measured by the registry tests.
    assert summary.recorded_sizes()[name] == TIMM[name]


def test_conv_small_parameters_add_up():
    images = jax.ShapeDtypeStruct((1, 224, 224, 3), jnp.float32)
    fn = nets_factory.get_network_fn("mobilenetv4_conv_small", 1000)
    params = jax.eval_shape(fn.init, jax.random.key(0), images)["params"]
    count = lambda tree: sum(x.size for x in jax.tree.leaves(tree))  # noqa: E731
    blocks = {k: v for k, v in params.items() if k.startswith("blocks_")}
    assert count(params["stem"]) == 864 + 64
    assert count(blocks) == 1_260_736
    assert count(params["head"]) == 960 * 1280 + 2 * 1280
    assert count(params["classifier"]) == 1280 * 1000 + 1000
    assert count(params) == 3_774_024


@pytest.mark.parametrize("name", sorted(NARROW))
def test_narrow_parameter_counts(name):
    assert summary.recorded_sizes()[name][1] == NARROW[name]


def test_tables_are_timms():
    # Blocks per stage (timm's arch_defs, read from the full-size state dicts in
    # tests/fixtures/state_dicts/mobilenet_v4.txt), stems and widths.
    blocks = {"small": (2, 2, 6, 6, 1), "medium": (1, 2, 8, 11, 1), "large": (1, 2, 11, 13, 1)}
    for size, repeats in blocks.items():
        module = nets_factory.get_network_fn(f"mobilenetv4_conv_{size}", 10).module
        assert tuple(sum(b.repeats for b in stage) for stage in module.stages) == repeats
        assert type(module) is MobileNetV4
    narrow = nets_factory.get_network_fn("mobilenetv4_conv_small_050", 10).module
    # Below width 1 the stem keeps its 32 channels (timm's fix_stem); the head keeps 1280.
    assert (narrow.stem_width(), narrow.width(960), narrow.head_filters) == (32, 480, 1280)
    assert CONV_MEDIUM[0] == (er(48, 3, 2, 4),) and CONV_MEDIUM[-1] == (cn(960, 1),)


def test_end_points_features_and_pooled_features():
    fn = nets_factory.get_network_fn("mobilenetv4_conv_medium", 0)
    images = jax.ShapeDtypeStruct((2, 256, 256, 3), jnp.float32)
    (features, end_points), _ = jax.eval_shape(
        functools.partial(fn.module.init_with_output, train=False),
        {"params": jax.random.key(0)},
        images,
    )
    assert features.shape == (2, 1280)
    shapes = {name: x.shape[1:] for name, x in end_points.items()}
    assert shapes == {
        "stem": (128, 128, 32),
        "blocks_0": (64, 64, 48),
        "blocks_1": (32, 32, 80),
        "blocks_2": (16, 16, 160),
        "blocks_3": (8, 8, 256),
        "blocks_4": (8, 8, 960),
        "global_pool": (1, 1, 960),
        "head": (1, 1, 1280),
        "pre_logits": (1280,),
    }
    # timm's feature_info: bn1, blocks.0, blocks.1, blocks.2, blocks.4.
    strides = {"stem": 2, "blocks_0": 4, "blocks_1": 8, "blocks_2": 16, "blocks_4": 32}
    assert fn.module.feature_strides() == strides


def uib(start, middle, strides, x_shape=(1, 9, 9, 16)):
    block = UniversalInvertedResidual(
        16, 2, conv=Conv, norm=None, act=jax.nn.relu,
        start_kernel=start, kernel_size=middle, strides=strides,
    )  # fmt: skip
    x = jax.ShapeDtypeStruct(x_shape, jnp.float32)
    return jax.eval_shape(block.init_with_output, jax.random.key(0), x)


def test_uib_instances_and_their_strides():
    # ExtraDW, IB, ConvNeXt-like, FFN: the convolutions each has, and where the stride goes.
    layers = {
        (3, 5): ["dw_start", "pw_exp", "dw_mid", "pw_proj"],
        (0, 3): ["pw_exp", "dw_mid", "pw_proj"],
        (3, 0): ["dw_start", "pw_exp", "pw_proj"],
        (0, 0): ["pw_exp", "pw_proj"],
    }
    for (start, middle), names in layers.items():
        out, variables = uib(start, middle, 1)
        assert set(variables["params"]) == set(names) and out.shape == (1, 9, 9, 16)
    out, _ = uib(5, 0, 2)  # strided by the start convolution alone
    assert out.shape == (1, 5, 5, 16)
    with pytest.raises(ValueError, match="needs a depthwise"):
        uib(0, 0, 2)


def test_block_kinds_are_checked():
    fn = nets_factory.get_network_fn("mobilenetv4_conv_small", 10, stages=((uir(8, 0, 3, 1, 2),),))
    assert fn.module.stages[0][0].kind == "uir"
    bad = nets_factory.get_network_fn(
        "mobilenetv4_conv_small", 10, stages=((cn(8, 1)._replace(kind="x"),),)
    )
    with pytest.raises(ValueError, match="block kinds"):
        jax.eval_shape(
            bad.init, jax.random.key(0), jax.ShapeDtypeStruct((1, 32, 32, 3), jnp.float32)
        )


# Each parity fixture's small timm network (its arch_def in tools/fixtures_mobilenet_v4.py), as
# `load_pretrained` keyword arguments; timm's `num_features` is our `head_filters`.
SMALL = (
    (cn(32, 3, 2), cn(32, 1)),
    (uir(48, 5, 5, 2, 3), uir(48, 0, 3, 1, 2), uir(48, 3, 0, 1, 4), uir(48, 0, 0, 1, 2)),
    (uir(64, 3, 3, 2, 6), uir(64, 5, 5, 1, 4)),
    (cn(192, 1),),
)
MEDIUM = (
    (er(48, 3, 2, 4),),
    (uir(80, 3, 5, 2, 4), uir(80, 3, 3, 1, 2)),
    (uir(96, 5, 0, 2, 4), uir(96, 5, 3, 1, 4)),
    (cn(240, 1),),
)
HYBRID = (
    (er(48, 3, 2, 4),),
    (uir(96, 3, 5, 2, 4),),
    (uir(96, 3, 5, 2, 4), mqa(96, 4, 16, kv_stride=2), uir(96, 3, 0, 1, 4)),
    (uir(128, 5, 5, 2, 4), mqa(128, 2, 32), uir(128, 5, 0, 1, 4)),
    (cn(240, 1),),
)
PARITY = {
    "mobilenetv4_conv_small": {"stages": SMALL, "width_multiplier": 0.5, "head_filters": 64},
    "mobilenetv4_conv_medium": {
        "stages": MEDIUM,
        "width_multiplier": 0.25,
        "stem_filters": 24,
        "head_filters": 64,
    },
    "mobilenetv4_hybrid_large": {
        "stages": HYBRID,
        "width_multiplier": 0.5,
        "stem_filters": 24,
        "head_filters": 64,
    },
}


@functools.cache  # read-only: the parity test and the tests of conventions share each load
def loaded(case):
    return nets_factory.load_pretrained(case, FIXTURES / "parity" / case, **PARITY[case])


@pytest.mark.slow  # parity: compiles thinned reference networks
@pytest.mark.parametrize("case", sorted(PARITY))
def test_logits_are_the_references(case):
    network_fn, variables = loaded(case)
    reference = expected(case)
    logits, end_points = jax.jit(network_fn.apply)(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) <= 1e-4
    assert "predictions" in end_points
    assert (network_fn.module.padding, network_fn.module.bn_epsilon) == ("SYMMETRIC", 1e-5)
    if case == "mobilenetv4_hybrid_large":
        # Exact GELU, as timm's nn.GELU: tanh's approximation misses the logits.
        approximate = network_fn.module.clone(act=jax.nn.gelu)
        apply = jax.jit(functools.partial(approximate.apply, train=False))
        logits, _ = apply(published.without_mark(variables), reference["images"])
        assert relative_error(logits, reference["logits"]) > 1e-4
    if case == "mobilenetv4_conv_medium":
        # Under 'SAME' padding, or epsilon 1e-3, the same weights compute another function.
        arch = architectures.ARCHITECTURES[case]
        assert_each_convention_matters(arch, PARITY[case], variables, reference)


# timm's logits at output strides 8 and 16 (tools/fixtures_mobilenet_v4.py output_stride): the
# small hybrid reaches 32; at 8 its stride-16 stage keeps dilation 1 in its first UIB, 2 in the
# Mobile MQA block's strided key and value convolutions and the UIB after, and the stride-32
# stage 2 in its first UIB (both depthwise convolutions), then 4. timm's classifier takes no
# output_stride: its blocks are those its features_only trunk builds at that stride.
def test_output_stride_is_timms():
    """The hybrid's universal inverted residuals and its attention's strided key/value
    convolutions dilated at 8, as timm's builder does."""
    case = "mobilenetv4_hybrid_large"
    assert_dilated_parity(case, case, {**PARITY[case], **XLA_CONVS})


LAYOUT = {
    ("stem", "conv"): "conv_stem",
    ("stem", "bn"): "bn1",
    ("blocks_0_0", "expand", "conv"): "blocks.0.0.conv_exp",
    ("blocks_0_0", "project", "bn"): "blocks.0.0.bn2",
    ("blocks_1_0", "dw_start", "bn"): "blocks.1.0.dw_start.bn",
    ("blocks_3_2", "dw_mid", "conv"): "blocks.3.2.dw_mid.conv",
    ("blocks_4_0", "conv"): "blocks.4.0.conv",
    ("blocks_4_0", "bn"): "blocks.4.0.bn1",
    ("head", "conv"): "conv_head",
    ("head", "bn"): "norm_head",
    ("classifier",): "classifier",
}


HYBRID_LAYOUT = {
    ("blocks_2_4", "norm"): "blocks.2.4.norm",
    ("blocks_2_4", "query_proj"): "blocks.2.4.attn.query.proj",
    ("blocks_2_4", "key_down_conv"): "blocks.2.4.attn.key.down_conv",
    ("blocks_2_4", "value_norm"): "blocks.2.4.attn.value.norm",
    ("blocks_2_4", "output_proj"): "blocks.2.4.attn.output.proj",
    ("blocks_2_4", "layer_scale"): "blocks.2.4.layer_scale",
    ("blocks_2_3", "layer_scale"): "blocks.2.3.layer_scale",
}


def test_hybrid_layout_names_attention_and_layer_scales():
    arch = architectures.ARCHITECTURES["mobilenetv4_hybrid_medium"]
    layout = arch.layout(nets_factory.get_network_fn("mobilenetv4_hybrid_medium", 10).module)
    assert {path: layout(path) for path in HYBRID_LAYOUT} == HYBRID_LAYOUT
    assert arch.framework.keys("blocks.2.4.layer_scale", "gamma") == [
        "blocks.2.4.layer_scale.gamma"
    ]


def test_layout_names_each_block_kind_and_the_head():
    arch = architectures.ARCHITECTURES["mobilenetv4_conv_medium"]
    layout = arch.layout(nets_factory.get_network_fn("mobilenetv4_conv_medium", 10).module)
    assert {path: layout(path) for path in LAYOUT} == LAYOUT


def test_drop_path_rates_grow_with_the_block_index():
    # timm's builder: rate * i / blocks over every block, the plain convolutions counted (they
    # have no residual, so no drop path); here 5 blocks, a Fused IB, three UIBs, an MQA block.
    stages = (
        (er(16, 3, 2, 4),),
        (uir(16, 3, 3, 1, 2, repeats=2), mqa(16, 2, 8), uir(24, 0, 3, 2, 2)),
    )
    kinds = (FusedMBConv, UniversalInvertedResidual, MobileMultiQueryAttention)
    built = blocks_built(
        "mobilenetv4_hybrid_medium", kinds, True, stages=stages, drop_path_rate=0.5
    )
    np.testing.assert_allclose([b.drop_path_rate for b in built], [0.0, 0.1, 0.2, 0.3, 0.4])
    assert {b.deterministic for b in built} == {False}

"""load_pretrained for MobileNet V2 / V3: parity with timm and torchvision on fixtures made by
tools/fixtures_mobilenet.py, each convention shown to matter, and both layouts; timm's
`output_stride` on the same weights."""

import functools

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file

import nets_factory
from nets.mobilenet import BlockDef, minimalistic
from nets_weights import WeightFileError, architectures, published
from tests.helpers import XLA_CONVS, assert_dilated_parity
from tests.test_pretrained import FIXTURES, expected, relative_error

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

# Each fixture's small timm network (see its arch_def in tools/fixtures_mobilenet.py), as
# `load_pretrained` keyword arguments. timm's `num_features` is our `last_filters` (V2: our
# `head_filters`) of 256 times the multiplier.
LARGE = (
    BlockDef(1, 16, 3),
    BlockDef(4, 24, 3, 2),
    BlockDef(3, 24, 3),
    BlockDef(3, 40, 5, 2, se=True, hswish=True),
    BlockDef(2.5, 40, 3, se=True, hswish=True),
)
SMALL = (
    BlockDef(1, 16, 3, 2, se=True),
    BlockDef(4.5, 24, 3, 2),
    BlockDef(3.67, 24, 3),
    BlockDef(4, 40, 5, 2, se=True, hswish=True),
    BlockDef(6, 40, 5, se=True, hswish=True),
)
SMALL_MINIMAL = minimalistic(SMALL)
V2 = (
    BlockDef(1, 16, 3),
    BlockDef(6, 24, 3, 2),
    BlockDef(6, 24, 3),
    BlockDef(6, 32, 3, 2),
    BlockDef(6, 32, 3),
)
PARITY = {
    "mobilenetv3_large_tf": (
        "tf_mobilenetv3_large_100",
        {"blocks": LARGE, "last_filters": 256, "depth_multiplier": 0.25},
    ),
    "mobilenetv3_small": (
        "mobilenetv3_small_100",
        {"blocks": SMALL, "last_filters": 256, "depth_multiplier": 0.35},
    ),
    "mobilenetv3_small_minimal_tf": (
        "tf_mobilenetv3_small_minimal_100",
        {"blocks": SMALL_MINIMAL, "last_filters": 256, "depth_multiplier": 0.35},
    ),
    "mobilenetv2": (
        "mobilenetv2_100",
        {"blocks": V2, "head_filters": 256, "depth_multiplier": 0.5},
    ),
}
# torchvision's: width 0.5, V3 Small's first block, then widths that halve cleanly.
TV_V3 = (
    BlockDef(1, 16, 3, 2, se=True),
    BlockDef(4, 32, 3, 2),
    BlockDef(3, 32, 3),
    BlockDef(3, 48, 5, 2, se=True, hswish=True),
    BlockDef(3, 48, 5, se=True, hswish=True),
)
PARITY |= {
    "tv_mobilenet_v3": (
        "mobilenet_v3_large",
        {"blocks": TV_V3, "head_filters": 288, "last_filters": 256, "depth_multiplier": 0.5},
    ),
    # torchvision keeps V2's last conv 1280 wide below width 1: Slim's finegrain mode.
    "tv_mobilenet_v2": (
        "mobilenet_v2",
        {"blocks": V2, "depth_multiplier": 0.5, "finegrain_classification_mode": True},
    ),
}


def wrong_conventions(convention):
    """The architecture's convention with the other padding, and with the other epsilon."""
    padding = {"SAME": "SYMMETRIC", "SYMMETRIC": "SAME"}[convention["padding"]]
    epsilon = {1e-3: 1e-5, 1e-5: 1e-3}[convention["bn_epsilon"]]
    return [{**convention, "padding": padding}, {**convention, "bn_epsilon": epsilon}]


def load(case, **kw):
    name, kwargs = PARITY[case]
    return nets_factory.load_pretrained(name, FIXTURES / "parity" / case, **kwargs, **kw)


@functools.cache  # read-only: the parity test and the tests of conventions share each load
def loaded(case):
    return load(case)


# Each field of the conventions is shown to matter once from each of its values: the padding and
# the epsilon reach every case's network through the same layers (nets/mobilenet.py's
# ConvNormAct and InvertedResidual, V2's blocks and V3's alike). mobilenetv3_large_tf flips
# Slim's ('SAME', 1e-3), for mobilenetv3_small_minimal_tf too; mobilenetv2 flips PyTorch's
# ('SYMMETRIC', 1e-5), for mobilenetv3_small and tv_mobilenet_v2 too, and between them the
# values of torchvision's V3 ('SYMMETRIC', 1e-3). test_the_architecture_sets_the_conventions
# pins each case's pair.
CONVENTION_CASES = ("mobilenetv3_large_tf", "mobilenetv2")


@pytest.mark.parametrize("case", sorted(PARITY))
def test_logits_are_the_references(case):
    network_fn, variables = loaded(case)
    reference = expected(case)
    logits, end_points = jax.jit(network_fn.apply)(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) <= 1e-4
    assert "predictions" in end_points

    # Each convention matters: under the other padding, or the other epsilon alone, the same
    # weights compute another function (relative errors 0.28-1.8, and 0.027-0.08 for the epsilon).
    if case not in CONVENTION_CASES:
        return
    name, kwargs = PARITY[case]
    assert_each_convention_matters(architectures.ARCHITECTURES[name], kwargs, variables, reference)


def assert_each_convention_matters(arch, kwargs, variables, reference):
    """The fixture's weights under the other padding, or the other epsilon, miss its logits
    (once the mark that refuses those networks is gone). On XLA's convolutions: the padding is
    the layer's whichever kernels run (tests/helpers.py), and they compile in 20-25% less CPU."""
    variables = published.without_mark(variables)
    for wrong in wrong_conventions(arch.convention):
        fn = nets_factory.get_network_fn(arch.network, 10, **kwargs, **wrong, **XLA_CONVS)
        logits, _ = jax.jit(fn.apply)(variables, reference["images"])
        assert relative_error(logits, reference["logits"]) > 0.01, wrong


# timm's logits at output strides 4 and 8 (tools/fixtures_mobilenet.py output_stride): the small
# V3 reaches 16, so 16 would dilate nothing; at 4 two strided blocks stop striding (the second
# keeps the first's dilation 2, then 4), 5x5 depthwise kernels with squeeze-excite, PyTorch's
# padding. timm's V3 classifier takes no output_stride: its blocks are those its features_only
# trunk builds at that stride.
def test_output_stride_is_timms():
    """At 4 (the small fixture's full stride is 16): its dilations compound, 1, then 2, then 4."""
    case = "mobilenetv3_small"
    name, kwargs = PARITY[case]
    assert_dilated_parity(name, case, {**kwargs, **XLA_CONVS}, output_stride=4)


CONVENTIONS = {
    "mobilenetv3_large_tf": ("SAME", 1e-3),
    "mobilenetv3_small_minimal_tf": ("SAME", 1e-3),
    "mobilenetv3_small": ("SYMMETRIC", 1e-5),
    "mobilenetv2": ("SYMMETRIC", 1e-5),
    "tv_mobilenet_v2": ("SYMMETRIC", 1e-5),
    "tv_mobilenet_v3": ("SYMMETRIC", 1e-3),
}


def test_the_architecture_sets_the_conventions():
    assert sorted(CONVENTIONS) == sorted(PARITY)
    for case, convention in CONVENTIONS.items():
        module = loaded(case)[0].module
        assert (module.padding, module.bn_epsilon) == convention, case
    with pytest.raises(ValueError, match=r"trained with bn_epsilon=1e-05; bn_epsilon=0.001"):
        load("mobilenetv3_small", bn_epsilon=1e-3)
    # Our registry name is torchvision's; a Hub folder's config.json names timm's network instead.
    folder = FIXTURES / "parity" / "mobilenetv3_small"
    fn, _ = nets_factory.load_pretrained("mobilenet_v3_small", folder, **PARITY[folder.name][1])
    assert fn.pretrained.source == "mobilenetv3_small_100"
    assert (fn.module.padding, fn.module.bn_epsilon) == ("SYMMETRIC", 1e-5)


def test_default_fields_are_slims():
    module = nets_factory.get_network_fn("mobilenet_v3_large", 10).module
    assert (module.padding, module.bn_epsilon) == ("SAME", 1e-3)


# (architecture, our full-size network) -> {our module path: the file's prefix}. timm: the first
# block has no expansion (its DepthwiseSeparableConv: conv_dw, bn1, conv_pw, bn2), the others are
# InvertedResiduals, and its stages are the runs of equal widths. torchvision numbers each block's
# layers: the first V3 Small block has no expansion, so its squeeze-excite is layer 1 and its
# projection layer 2; V2's projection is two entries of the block (a conv, then a BatchNorm).
LAYOUTS = {
    ("mobilenetv3_large_100", "mobilenet_v3_large"): {
        ("expanded_conv", "project", "bn"): "blocks.0.0.bn2",
        ("expanded_conv_3", "depthwise", "conv"): "blocks.2.0.conv_dw",
        ("expanded_conv_5", "squeeze_excite", "Conv_1"): "blocks.2.2.se.conv_expand",
        ("expanded_conv_14", "project", "bn"): "blocks.5.2.bn3",
        ("Conv_1", "bn"): "blocks.6.0.bn1",
        ("Conv_2", "conv"): "conv_head",
    },
    ("mobilenetv2_100", "mobilenet_v2"): {
        ("expanded_conv_16", "expand", "conv"): "blocks.6.0.conv_pw",
        ("Conv_1", "conv"): "conv_head",
        ("Conv_1", "bn"): "bn2",
    },
    ("mobilenet_v3_small", "mobilenet_v3_small"): {
        ("expanded_conv", "squeeze_excite", "Conv"): "features.1.block.1.fc1",
        ("expanded_conv", "project", "bn"): "features.1.block.2.1",
        ("expanded_conv_3", "project", "conv"): "features.4.block.3.0",
        ("Conv_1", "bn"): "features.12.1",
        ("Conv_2", "conv"): "classifier.0",
        ("Logits",): "classifier.3",
    },
    ("mobilenet_v2", "mobilenet_v2"): {
        ("expanded_conv", "project", "bn"): "features.1.conv.2",
        ("expanded_conv_1", "project", "conv"): "features.2.conv.2",
        ("expanded_conv_1", "project", "bn"): "features.2.conv.3",
        ("Conv_1", "conv"): "features.18.0",
        ("Logits",): "classifier.1",
    },
}


@pytest.mark.parametrize(("architecture", "network"), sorted(LAYOUTS))
def test_layouts_name_each_block_kind_and_the_heads(architecture, network):
    module = nets_factory.get_network_fn(network, 1000).module
    layout = architectures.ARCHITECTURES[architecture].layout(module)
    keys = LAYOUTS[architecture, network]
    assert {path: layout(path) for path in keys} == keys


def test_torchvision_linear_fills_the_1x1_conv_after_the_pool():
    _, variables = loaded("tv_mobilenet_v3")
    tensors = load_file(FIXTURES / "parity" / "tv_mobilenet_v3" / "model.safetensors")
    kernel = np.asarray(variables["params"]["Conv_2"]["conv"]["kernel"])
    np.testing.assert_array_equal(kernel[0, 0], tensors["classifier.0.weight"].T)


def test_edgetpu_has_no_layout():
    module = nets_factory.get_network_fn("mobilenet_edgetpu", 1000).module
    for name in ("mobilenetv2_100", "mobilenet_v2"):
        with pytest.raises(ValueError, match=r"EdgeTPU's fused blocks have no"):
            architectures.ARCHITECTURES[name].layout(module)


def test_a_v2_file_is_not_a_v3_network():
    with pytest.raises(WeightFileError, match=r"config.json is for 'mobilenetv2_100'"):
        nets_factory.load_pretrained("mobilenetv3_large_100", FIXTURES / "parity" / "mobilenetv2")


def test_pretrained_weights_fine_tune_with_a_new_head():
    network_fn, variables = load("mobilenetv3_small", num_classes=3, is_training=True)
    assert variables["params"]["Logits"]["kernel"].shape == (88, 3)
    _, reference = loaded("mobilenetv3_small")
    np.testing.assert_array_equal(
        variables["params"]["Conv_2"]["conv"]["kernel"],
        reference["params"]["Conv_2"]["conv"]["kernel"],
    )

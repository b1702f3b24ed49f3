"""load_pretrained for timm's ResNetV2 family: parity on fixtures timm produced
(tools/fixtures_resnetv2.py) for each block, stem and norm (BatchNorm, GroupNorm, EvoNorm-S0, BiT's
standardised convolutions), and the conventions the weights need."""

import functools
from functools import partial

import flax.linen as nn
import jax
import numpy as np
import pytest
from safetensors.numpy import load_file

import nets_factory
from nets import resnetv2
from tests.helpers import assert_dilated_parity
from tests.test_pretrained import FIXTURES, expected, parity_error, relative_error

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

# Each fixture's small timm network, as `load_pretrained` keyword arguments: the norms of 2
# groups where timm's networks have 32 (tools/fixtures_resnetv2.py's `tiny`).
_TINY = {"stage_sizes": (2, 1, 1), "num_filters": 8}
_DEEP = {**_TINY, "stem_widths": (4, 4)}
_GROUP_NORM = partial(nn.GroupNorm, num_groups=2, epsilon=1e-5)
PARITY = {
    "resnetv2_50": ("resnetv2_50", {"stage_sizes": (2, 1, 1, 1), "num_filters": 8}),
    "resnetv2_101": ("resnetv2_101", {"stage_sizes": (1, 2, 1, 1), "num_filters": 8}),
    "resnetv2_basic": ("resnetv2_18", _TINY),
    "resnetv2_basic_d": ("resnetv2_34d", _DEEP),
    "resnetv2_d_gn": ("resnetv2_50d_gn", {**_DEEP, "norm": _GROUP_NORM}),
    "resnetv2_d_evos": (
        "resnetv2_50d_evos",
        {**_DEEP, "norm": partial(resnetv2.EvoNormS0, groups=2)},
    ),
    "resnetv2_bit": ("resnetv2_50x1_bit", {**_TINY, "norm": _GROUP_NORM}),
}


@functools.cache  # read-only: the parity test and the tests of its variables share each load
def loaded(case):
    name, kwargs = PARITY[case]
    return nets_factory.load_pretrained(name, FIXTURES / "parity" / case, **kwargs)


@pytest.mark.parametrize("case", sorted(PARITY))
def test_logits_are_the_references(case):
    network_fn, variables = loaded(case)
    reference = expected(case)
    logits, _ = jax.jit(network_fn.apply)(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) <= 1e-4
    assert network_fn.module.padding == "SYMMETRIC" and not network_fn.module.bias_without_norm


@pytest.mark.parametrize("case", ["resnetv2_50", "resnetv2_basic_d"])
def test_dilated_networks_compute_timms(case):
    """`output_stride` 8 and 16 (8 only for the three-stage fixture, whose full stride is 16):
    pre-activation blocks dilated as timm's, the 'd' shortcuts' `AvgPool2dSame`."""
    name, kwargs = PARITY[case]
    assert_dilated_parity(name, case, kwargs)


# Each convention the weights need, turned off, computes another function of the same weights
# (relative errors 0.16-0.49 on these fixtures): TensorFlow's SAME padding (the bottleneck's;
# the basic block's and the norms' are the same layers under the same field); BiT's zero-padded
# stem pool and its weight standardisation; EvoNorm-S0 as its own activation (a ReLU after it
# is another function); the 'd' networks' averaging shortcuts.
CONVENTIONS = [
    ("resnetv2_50", {"padding": "SAME"}),
    ("resnetv2_bit", {"stem_pool_zeros": False}),
    ("resnetv2_bit", {"kernel_transform": None}),
    ("resnetv2_d_evos", {"act": nn.relu}),
    ("resnetv2_basic_d", {"avg_down": False}),
]


@pytest.mark.parametrize(("case", "changes"), CONVENTIONS)
def test_each_convention_matters(case, changes):
    name, kwargs = PARITY[case]
    assert parity_error(name, kwargs, case, **changes) > 0.05


def test_no_biases_and_the_head_viewed_as_dense():
    case = FIXTURES / "parity" / "resnetv2_50"
    _, variables = loaded("resnetv2_50")
    params = variables["params"]
    assert (
        "bias" not in params["conv_init"]
        and "bias" not in params["PreActBottleneckBlock_0"]["Conv_2"]
    )
    head = load_file(case / "model.safetensors")["head.fc.weight"]  # [10, 256, 1, 1]
    np.testing.assert_array_equal(params["Dense_0"]["kernel"], head[:, :, 0, 0].T)


def test_evo_norms_v_and_the_deep_stem_are_timms():
    case = FIXTURES / "parity" / "resnetv2_d_evos"
    _, variables = loaded("resnetv2_d_evos")
    params, state = variables["params"], load_file(case / "model.safetensors")
    block = params["PreActBottleneckBlock_1"]
    np.testing.assert_array_equal(block["EvoNormS0_1"]["v"], state["stages.0.blocks.1.norm3.v"])
    np.testing.assert_array_equal(block["preact"]["scale"], state["stages.0.blocks.1.norm1.weight"])
    np.testing.assert_array_equal(params["stem_bn_1"]["bias"], state["stem.norm2.bias"])
    kernel = state["stem.conv3.weight"].transpose(2, 3, 1, 0)
    np.testing.assert_array_equal(params["conv_init"]["kernel"], kernel)


def test_slim_biases_are_refused():
    with pytest.raises(ValueError, match=r"bias_without_norm=False; bias_without_norm=True would"):
        nets_factory.load_pretrained(
            "resnetv2_50",
            FIXTURES / "parity" / "resnetv2_50",
            bias_without_norm=True,
            num_filters=8,
        )
    with pytest.raises(
        ValueError, match=r"no published weights load into 'resnet_v2_50'.*resnetv2_50"
    ):
        nets_factory.load_pretrained("resnet_v2_50", FIXTURES / "parity" / "resnetv2_50")

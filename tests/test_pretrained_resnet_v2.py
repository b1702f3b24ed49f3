"""load_pretrained for timm's pre-activation ResNetV2: parity on fixtures timm produced
(tools/fixtures_resnet_v2.py), and the two conventions the weights need."""

import functools

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file

import nets_factory
from nets_weights import published
from tests.helpers import XLA_CONVS
from tests.test_pretrained import FIXTURES, expected, relative_error

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

# Each fixture's small timm network, as `load_pretrained` keyword arguments.
PARITY = {
    "resnetv2_50": {"stage_sizes": (2, 1, 1, 1), "num_filters": 8},
    "resnetv2_101": {"stage_sizes": (1, 2, 1, 1), "num_filters": 8},
}


@functools.cache  # read-only: the parity test and the tests of its variables share each load
def loaded(case):
    return nets_factory.load_pretrained(case, FIXTURES / "parity" / case, **PARITY[case])


@pytest.mark.parametrize("case", sorted(PARITY))
def test_logits_are_the_references(case):
    network_fn, variables = loaded(case)
    reference = expected(case)
    logits, _ = jax.jit(network_fn.apply)(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) <= 1e-4
    assert network_fn.module.padding == "SYMMETRIC" and not network_fn.module.bias_without_norm
    # TensorFlow's SAME padding computes another function of the same weights: shown on
    # resnetv2_50, for resnetv2_101 too (the same blocks, `PreActBottleneckBlock`, and the same
    # convention), on XLA's convolutions (the padding is the layer's whichever kernels run).
    if case != "resnetv2_50":
        return
    same = nets_factory.get_network_fn(
        network_fn.name, 10, bias_without_norm=False, **PARITY[case], **XLA_CONVS
    )
    wrong, _ = jax.jit(same.apply)(published.without_mark(variables), reference["images"])
    assert relative_error(wrong, reference["logits"]) > 0.05


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

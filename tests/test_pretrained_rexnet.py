"""load_pretrained for timm's ReXNet: parity on fixtures timm produced (tools/fixtures_rexnet.py),
its own class at reduced depth and width, with and without the rounding of `rexnetr_*`."""

import functools

import jax
import pytest

import nets_factory
from nets_weights import architectures
from tests.helpers import XLA_CONVS, assert_dilated_parity
from tests.test_pretrained import FIXTURES, expected, relative_error
from tests.test_pretrained_mobilenet import assert_each_convention_matters

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

# The fixtures' networks (tools/fixtures_rexnet.py's `small`), as `load_pretrained` keyword
# arguments: the last convolution sized for 32 rather than 1280.
_NARROW = {"initial_filters": 8, "final_filters": 8, "head_filters": 32}
SMALL = {
    "rexnet": {"width_multiplier": 0.75, "depth_multiplier": 0.34, **_NARROW},
    "rexnetr": {"width_multiplier": 1.0, "depth_multiplier": 0.2, **_NARROW},
}
PARITY = {"rexnet": "rexnet_100", "rexnetr": "rexnetr_100"}


@functools.cache  # read-only: the parity test and the tests of conventions share each load
def loaded(case: str):
    return nets_factory.load_pretrained(PARITY[case], FIXTURES / "parity" / case, **SMALL[case])


def logits(case: str, **changes):
    network_fn, variables = loaded(case)
    if changes:
        network_fn = nets_factory.get_network_fn(PARITY[case], 10, **SMALL[case], **changes)
    return jax.jit(network_fn.apply)(variables, expected(case)["images"])[0]


@pytest.mark.parametrize("case", sorted(PARITY))
def test_logits_are_the_references(case):
    assert relative_error(logits(case), expected(case)["logits"]) <= 1e-4


def test_output_stride_is_timms():
    """timm's rule on the `rexnet` fixture at 8, block by block: a block past the stride keeps the
    map at the dilation before, the next ones dilate."""
    assert_dilated_parity(PARITY["rexnet"], "rexnet", {**SMALL["rexnet"], **XLA_CONVS})


def test_padding_and_epsilon_matter():
    # Under 'SAME' padding, or BatchNorm epsilon 1e-3, the same weights compute another function.
    _, variables = loaded("rexnet")
    arch = architectures.ARCHITECTURES["rexnet_100"]
    assert_each_convention_matters(arch, SMALL["rexnet"], variables, expected("rexnet"))


def test_relu6_matters():
    # ReLU6's clamp at 6 (not ReLU's) is part of the function these weights compute.
    wrong = logits("rexnet", dw_act=jax.nn.relu)
    assert relative_error(wrong, expected("rexnet")["logits"]) > 1e-2

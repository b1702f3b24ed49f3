"""load_pretrained for timm's ReXNet: parity on fixtures timm produced (tools/fixtures_rexnet.py),
its own class at reduced depth and width, with and without the rounding of `rexnetr_*`."""

import functools

import jax
import pytest
from safetensors.numpy import load_file

import nets_factory
from nets_weights import architectures
from tests.helpers import XLA_CONVS, output_stride_error
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


@pytest.mark.parametrize("output_stride", [8, 16])
def test_output_stride_dilates_as_timms(output_stride):
    """timm's `output_stride` on the `rexnet` fixture (tools/fixtures_rexnet.py), block by block:
    a block past the stride keeps the map at the dilation before, the next ones dilate; its
    logits at 32, which the network matches without dilation, miss these by far."""
    kwargs = {**SMALL["rexnet"], **XLA_CONVS}
    assert output_stride_error(PARITY["rexnet"], "rexnet", kwargs, output_stride) <= 1e-4
    dilated = load_file(FIXTURES / "parity" / "rexnet" / "output_stride.safetensors")
    reference = expected("rexnet")["logits"]
    assert relative_error(reference, dilated[f"logits_{output_stride}"]) > 0.05


def test_padding_and_epsilon_matter():
    # Under 'SAME' padding, or BatchNorm epsilon 1e-3, the same weights compute another function.
    _, variables = loaded("rexnet")
    arch = architectures.ARCHITECTURES["rexnet_100"]
    assert_each_convention_matters(arch, SMALL["rexnet"], variables, expected("rexnet"))


def test_relu6_matters():
    # ReLU6's clamp at 6 (not ReLU's) is part of the function these weights compute.
    wrong = logits("rexnet", dw_act=jax.nn.relu)
    assert relative_error(wrong, expected("rexnet")["logits"]) > 1e-2

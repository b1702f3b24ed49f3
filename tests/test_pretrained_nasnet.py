"""load_pretrained for timm's PNASNet-5 Large and NASNet-A Large (Slim's checkpoints, ported):
parity on fixtures of thinned timm networks (tools/fixtures_nasnet.py), one compile per case."""

import functools

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file

import nets_factory
from tests.helpers import XLA_CONVS
from tests.test_pretrained import FIXTURES, expected, relative_error

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

# Each fixture: the architecture and its small timm network, as `load_pretrained` arguments.
PARITY = {
    "pnasnet": ("pnasnet5large", {"num_conv_filters": 12, "stem_multiplier": 0.375}),
    "nasnet": ("nasnetalarge", {"num_conv_filters": 8, "stem_multiplier": 0.375}),
}


@functools.cache
def loaded(case):
    # XLA's own convolutions: the CPU path's thousands of depthwise taps take most of the
    # compile, and tests/test_conv.py checks that path against XLA's on each kind of shape
    # (NASNet's separable ones included). What is checked here is the network and the weights.
    name, kwargs = PARITY[case]
    return nets_factory.load_pretrained(name, FIXTURES / "parity" / case, **XLA_CONVS, **kwargs)


@pytest.mark.parametrize("case", sorted(PARITY))
def test_logits_are_the_references(case):
    network_fn, variables = loaded(case)
    assert network_fn.pretrained.source == PARITY[case][0]
    reference = expected(case)
    logits, _ = jax.jit(network_fn.apply)(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) <= 1e-4
    if "timm_logits" in reference:
        # timm's stride-2 average pools count their padding on even maps, where TensorFlow's
        # (the weights' training, our default) do not: 0.34 relative on this fixture.
        assert relative_error(logits, reference["timm_logits"]) > 0.1


@pytest.mark.parametrize("case", sorted(PARITY))
def test_slims_functions_without_the_auxiliary_head(case):
    network_fn, variables = loaded(case)
    module, info = network_fn.module, network_fn.pretrained
    assert (module.bn_epsilon, module.use_aux_head) == (1e-3, False)
    assert not any(k.startswith("aux_") for k in variables["params"])
    assert (info.image_size, info.mean, info.std) == (331, (0.5,) * 3, (0.5,) * 3)
    with pytest.raises(ValueError, match=r"use_aux_head=False; use_aux_head=True would"):
        nets_factory.load_pretrained(
            PARITY[case][0], FIXTURES / "parity" / case, use_aux_head=True, **PARITY[case][1]
        )


def test_layouts_place_separable_and_reduction_layers():
    tensors = load_file(FIXTURES / "parity" / "pnasnet" / "model.safetensors")
    params = loaded("pnasnet")[1]["params"]
    np.testing.assert_array_equal(  # depthwise [c, 1, k, k] -> [k, k, 1, c]
        params["cell_4"]["comb_iter_1_left"]["separable_7x7_2_depthwise"]["kernel"],
        tensors["cell_4.comb_iter_1_left.separable_2.depthwise_conv2d.weight"].transpose(
            2, 3, 1, 0
        ),
    )
    np.testing.assert_array_equal(  # PNASNet's factorized reduction is inside conv_prev_1x1
        params["cell_5"]["prev_reduction"]["final_path_bn"]["scale"],
        tensors["cell_5.conv_prev_1x1.final_path_bn.weight"],
    )
    tensors = load_file(FIXTURES / "parity" / "nasnet" / "model.safetensors")
    params = loaded("nasnet")[1]["params"]
    np.testing.assert_array_equal(  # NASNet's at the cell's top
        params["cell_6"]["prev_reduction"]["path2_conv"]["kernel"],
        tensors["cell_6.path_2.conv.weight"].transpose(2, 3, 1, 0),
    )
    np.testing.assert_array_equal(params["final_layer"]["kernel"], tensors["last_linear.weight"].T)


def test_our_names_load_the_same_files():
    network_fn, _ = nets_factory.load_pretrained(  # `loaded`'s network: one trace of it
        "pnasnet_large", FIXTURES / "parity" / "pnasnet", **XLA_CONVS, **PARITY["pnasnet"][1]
    )
    assert network_fn.pretrained.source == "pnasnet5large"  # the file's config.json names it

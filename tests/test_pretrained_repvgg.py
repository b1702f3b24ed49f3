"""load_pretrained for timm's RepVGG: parity on fixtures timm produced (tools/fixtures_repvgg.py),
grouped (`g4`) and with `repvgg_d2se`'s squeeze-excite, in the training form; and
`reparameterize` against timm's own `reparameterize()` of the same networks: its fused
convolutions and the deploy network's logits; timm's `output_stride` 8 and 16 on the grouped
case, in the training form and fused."""

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file

import nets_factory
from nets import repvgg
from nets_weights.repvgg import layout
from tests.helpers import XLA_CONVS, assert_dilated_parity, assert_fused_like_timms
from tests.test_pretrained import FIXTURES, expected, relative_error
from tests.test_repvgg import SMALL

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

PARITY = {"repvgg_g4": "repvgg_b1g4", "repvgg_se": "repvgg_d2se"}


def load(case):
    return nets_factory.load_pretrained(PARITY[case], FIXTURES / "parity" / case, **SMALL)


def fused_logits(case, variables, **reparameterize):
    deploy = nets_factory.get_network_fn(PARITY[case], 10, deploy=True, **SMALL)
    fused = repvgg.reparameterize(variables, **reparameterize)
    return jax.jit(deploy.apply)(fused, expected(case)["images"])[0], fused


@pytest.mark.parametrize("case", sorted(PARITY))
def test_logits_are_the_references(case):
    network_fn, variables = load(case)
    reference = expected(case)
    logits, end_points = jax.jit(network_fn.apply)(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) <= 1e-4  # 2.0e-7 / 1.7e-7 measured (g4 / se)
    assert end_points["stages_3"].shape == (2, 2, 2, 64)


@pytest.mark.parametrize("case", sorted(PARITY))
def test_the_fused_network_is_timms_reparameterized_one(case):
    _, variables = load(case)
    timm_fused = load_file(FIXTURES / "parity" / case / "fused.safetensors")
    logits, fused = fused_logits(case, variables)
    assert relative_error(logits, timm_fused["logits"]) <= 1e-4  # 1.8e-7 / 2.2e-7 measured
    assert relative_error(logits, expected(case)["logits"]) <= 1e-4  # the training form's too
    paths = ["stem", "stages_1/blocks_1", "stages_1/blocks_2"]  # no identity, grouped, plain
    assert_fused_like_timms(fused["params"], timm_fused, paths, layout, atol=1e-6)


def test_pytorchs_epsilon_matters_to_the_fusion():
    """Folded with another BatchNorm epsilon (Slim's 1e-3) the deploy network is another
    function: the fusion must use the epsilon the training form normalises with."""
    _, variables = load("repvgg_g4")
    logits, _ = fused_logits("repvgg_g4", variables, eps=1e-3)
    assert relative_error(logits, expected("repvgg_g4")["logits"]) > 1e-3  # 3.2e-2 measured


def test_reparameterize_leaves_its_input_as_it_was():
    _, variables = load("repvgg_se")
    before = jax.tree.map(np.array, variables)
    fused = repvgg.reparameterize(variables)
    jax.tree.map(np.testing.assert_array_equal, before, variables)
    assert fused["params"]["stem"]["attn"]["fc1"]["kernel"].shape == (1, 1, 8, 1)


def timms_output_strides():
    return load_file(FIXTURES / "parity" / "repvgg_g4" / "output_stride.safetensors")


def test_output_stride_is_timms():
    assert_dilated_parity("repvgg_b1g4", "repvgg_g4", {**SMALL, **XLA_CONVS})


def test_the_fused_network_dilates_as_the_training_form():
    """`reparameterize` of the network at 8 in the deploy network at 8: timm's logits at 8 (its
    training form's), so the fused convolution dilates as the 3x3 it folds."""
    network_fn, variables = nets_factory.load_pretrained(
        "repvgg_b1g4", FIXTURES / "parity" / "repvgg_g4", output_stride=8, **SMALL, **XLA_CONVS
    )
    deploy = nets_factory.get_network_fn(
        "repvgg_b1g4", 10, deploy=True, output_stride=8, **SMALL, **XLA_CONVS
    )
    fused = repvgg.reparameterize(variables)
    logits, end_points = jax.jit(deploy.apply)(fused, expected("repvgg_g4")["images"])
    assert relative_error(logits, timms_output_strides()["logits_8"]) <= 1e-4  # 3.6e-7 measured
    assert end_points["stages_3"].shape == (2, 5, 5, 64)  # 40 px at 8

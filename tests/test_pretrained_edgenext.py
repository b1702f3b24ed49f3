"""load_pretrained for timm's EdgeNeXt: parity on fixtures timm produced
(tools/fixtures_edgenext.py), the split, encoding and attention of its SDTA blocks (with
torch.chunk's uneven last group) and edgenext_small_rw's overlapping stem, widening downsampling
blocks and unbiased convolutions; and what each convention matched is worth: the learnt
temperatures, the encoding's y-then-x, the two layer scales' places, the split convolutions'
order."""

import jax
import numpy as np
import pytest

import nets_factory
from nets import xcit
from tests.test_pretrained import FIXTURES, expected, relative_error

pytestmark = pytest.mark.slow  # parity: compiles small reference networks

# The fixtures' small timm networks, as `load_pretrained` keyword arguments.
SMALL = {"depths": (2, 2, 2, 2), "num_heads": (2, 2, 2, 2)}
CASES = {
    "edgenext_small": ("edgenext_small", {**SMALL, "widths": (8, 16, 22, 24)}),
    "edgenext_rw": ("edgenext_small_rw", {**SMALL, "widths": (8, 16, 16, 32)}),
}


@pytest.fixture(scope="module")
def loaded():
    out = {}
    for case, (name, fields) in CASES.items():
        network_fn, variables = nets_factory.load_pretrained(
            name, FIXTURES / "parity" / case, **fields
        )
        out[case] = jax.jit(network_fn.apply), variables, expected(case)
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_are_the_references(loaded, case):
    apply, variables, reference = loaded[case]
    logits, _ = apply(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) <= 1e-4  # 6.3e-7, 3.9e-7


def _changed(variables, change):
    # `change` applied to the SDTA block (blocks_1) of stages 1 to 3.
    params = dict(variables["params"])
    for stage in ("stages_1", "stages_2", "stages_3"):
        params[stage] = {**params[stage], "blocks_1": change(dict(params[stage]["blocks_1"]))}
    return {**variables, "params": params}


def _unit_temperature(block):
    xca = block["xca"]
    return {**block, "xca": {**xca, "temperature": np.ones_like(xca["temperature"])}}


def _swapped_scales(block):  # gamma_xca on the MLP, gamma on the attention
    return {**block, "gamma": block["gamma_xca"], "gamma_xca": block["gamma"]}


def _swapped_convs(block):  # the split's hierarchy reordered (stages 2 and 3: 2 and 3 convs)
    if "convs_1" not in block:
        return block
    return {**block, "convs_0": block["convs_1"], "convs_1": block["convs_0"]}


@pytest.mark.parametrize("change", [_unit_temperature, _swapped_scales, _swapped_convs])
def test_the_temperatures_scales_and_split_order_count(loaded, change):
    apply, variables, reference = loaded["edgenext_small"]
    logits, _ = apply(_changed(variables, change), reference["images"])  # compiled already
    assert relative_error(logits, reference["logits"]) > 1e-2


def test_the_encoding_is_y_then_x(loaded, monkeypatch):
    # On stage 2's 4x6 map of the 32x48 images: x's sinusoids first, then y's, breaks parity.
    _, variables, reference = loaded["edgenext_small"]
    name, fields = CASES["edgenext_small"]
    encoding = xcit.fourier_encoding
    monkeypatch.setattr(xcit, "fourier_encoding", lambda h, w: np.roll(encoding(h, w), 32, -1))
    fn = nets_factory.get_network_fn(name, 10, **fields)
    logits, _ = jax.jit(fn.apply)(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) > 1e-2

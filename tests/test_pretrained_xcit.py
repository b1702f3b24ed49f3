"""load_pretrained for timm's XCiT: parity on fixtures timm produced (tools/fixtures_xcit.py),
16-pixel patches with `tokens_norm` and 8-pixel ones without, on non-square images; and what
each convention matched is worth: `tokens_norm`, the learnt temperatures, the branches' layer
scales in timm's order (`gamma3` the local patch interaction's), the encoding's y-then-x."""

import jax
import numpy as np
import pytest

import nets_factory
from nets import xcit
from tests.test_pretrained import FIXTURES, expected, relative_error

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

# The fixtures' small timm networks, as `load_pretrained` keyword arguments.
SMALL = {"embed_dim": 24, "depth": 2, "num_heads": 4}
CASES = {
    "xcit_p16_tokens_norm": "xcit_tiny_12_p16_224",
    "xcit_p8_class_norm": "xcit_nano_12_p8_224",
}


@pytest.fixture(scope="module")
def loaded():
    out = {}
    for case, name in CASES.items():
        network_fn, variables = nets_factory.load_pretrained(
            name, FIXTURES / "parity" / case, **SMALL
        )
        out[case] = name, jax.jit(network_fn.apply), variables, expected(case)
    return out


def _error(name, variables, reference, **fields):
    fn = nets_factory.get_network_fn(name, 10, **SMALL, **fields)
    logits, _ = jax.jit(fn.apply)(variables, reference["images"])
    return relative_error(logits, reference["logits"])


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_are_the_references(loaded, case):
    _, apply, variables, reference = loaded[case]
    logits, _ = apply(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) <= 1e-4  # 3.3e-7, 4.9e-7


def test_tokens_norm_counts(loaded):
    # The patches normalised with the class token by `norm2` in the nano networks' blocks.
    name, _, variables, reference = loaded["xcit_p8_class_norm"]
    assert not nets_factory.networks_map[name].keywords["tokens_norm"]
    with pytest.raises(ValueError, match="trained with tokens_norm=False"):
        _error(name, variables, reference, tokens_norm=True)  # the loaded variables refuse it
    unguarded = {k: v for k, v in variables.items() if k != "conventions"}
    assert _error(name, unguarded, reference, tokens_norm=True) > 1e-2


def _changed(variables, change):
    params = dict(variables["params"])
    for i in range(SMALL["depth"]):
        params[f"blocks_{i}"] = change(dict(params[f"blocks_{i}"]))
    return {**variables, "params": params}


def _unit_temperature(block):
    attn = block["attn"]
    return {**block, "attn": {**attn, "temperature": np.ones_like(attn["temperature"])}}


def _swapped_scales(block):  # gamma2 on the local patch interaction, gamma3 on the MLP
    return {**block, "ls2": block["ls3"], "ls3": block["ls2"]}


@pytest.mark.parametrize("change", [_unit_temperature, _swapped_scales])
def test_the_temperatures_and_the_scales_order_count(loaded, change):
    _, apply, variables, reference = loaded["xcit_p16_tokens_norm"]
    logits, _ = apply(_changed(variables, change), reference["images"])  # compiled already
    assert relative_error(logits, reference["logits"]) > 1e-2


def test_the_encoding_is_y_then_x(loaded, monkeypatch):
    # On the 3x2 grid of the 48x32 images: x's sinusoids first, then y's, breaks parity.
    name, _, variables, reference = loaded["xcit_p16_tokens_norm"]
    encoding = xcit.fourier_encoding
    monkeypatch.setattr(xcit, "fourier_encoding", lambda h, w: np.roll(encoding(h, w), 32, -1))
    assert _error(name, variables, reference) > 1e-2

"""load_pretrained for timm's CaiT: parity on a fixture timm produced (tools/fixtures_cait.py),
and what each convention matched is worth: the heads' mixing before and after the softmax, and
timm's layer scales (`gamma_1`, `gamma_2`) in the class-attention blocks as in the others."""

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file

import nets_factory
from tests.test_pretrained import FIXTURES, expected, relative_error

pytestmark = pytest.mark.slow  # parity: compiles a thinned reference network

CASE = "cait_config"
# The fixture's small timm network, as `load_pretrained` keyword arguments.
SMALL = {"patch_size": 8, "embed_dim": 24, "depth": 2, "num_heads": 4, "img_size": 32}


def _identity(dense):
    return {"kernel": np.eye(dense["kernel"].shape[0], dtype=np.float32), "bias": 0 * dense["bias"]}


def _unmixed(attn):  # talking heads reduced to ordinary multi-head attention
    return {**attn, "proj_l": _identity(attn["proj_l"]), "proj_w": _identity(attn["proj_w"])}


def _swapped(attn):  # the mixing after the softmax taken before it, and the reverse
    return {**attn, "proj_l": attn["proj_w"], "proj_w": attn["proj_l"]}


@pytest.fixture(scope="module")
def loaded():
    network_fn, variables = nets_factory.load_pretrained(
        "cait_xxs24_224", FIXTURES / "parity" / CASE, **SMALL
    )
    return jax.jit(network_fn.apply), variables, expected(CASE)


def test_logits_are_the_references(loaded):
    apply, variables, reference = loaded
    logits, _ = apply(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) <= 1e-4  # 2.7e-7


@pytest.mark.parametrize("change", [_unmixed, _swapped])
def test_the_heads_mixing_counts(loaded, change):
    apply, variables, reference = loaded
    params = dict(variables["params"])
    for i in range(SMALL["depth"]):
        params[f"blocks_{i}"] = {
            **params[f"blocks_{i}"],
            "attn": change(params[f"blocks_{i}"]["attn"]),
        }
    logits, _ = apply({**variables, "params": params}, reference["images"])
    assert relative_error(logits, reference["logits"]) > 1e-2


def test_the_layer_scales_are_timms():
    _, variables = nets_factory.load_pretrained(
        "cait_xxs24_224", FIXTURES / "parity" / CASE, **SMALL
    )
    state = load_file(FIXTURES / "parity" / CASE / "model.safetensors")
    params = variables["params"]
    for ours, theirs in (("blocks_1", "blocks.1"), ("blocks_token_only_1", "blocks_token_only.1")):
        np.testing.assert_array_equal(params[ours]["ls1"]["gamma"], state[f"{theirs}.gamma_1"])
        np.testing.assert_array_equal(params[ours]["ls2"]["gamma"], state[f"{theirs}.gamma_2"])
    np.testing.assert_array_equal(params["cls_token"], state["cls_token"])

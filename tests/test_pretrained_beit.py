"""load_pretrained for timm's BEiT: parity on fixtures timm produced (tools/fixtures_beit.py), at
the tables' own size and at another (tables resized as timm's loading resizes them), and the
conventions that parity needs: the class token's rows of the index, timm's resize positions."""

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file

import nets_factory
from nets import beit
from tests.test_pretrained import FIXTURES, expected, relative_error

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

# The fixtures' small timm networks, as `load_pretrained` keyword arguments: 4x4 patches of 8
# pixels, tables of 7 * 7 + 3 rows.
SMALL = {"patch_size": 8, "embed_dim": 32, "depth": 2, "num_heads": 2, "img_size": 32}
CASES = ("beit_config", "beit_resized_32x48")  # 32x32 images; 32x48, tables resized to 4x6


def error(case: str) -> float:
    network_fn, variables = nets_factory.load_pretrained(
        "beit_base_patch16_224", FIXTURES / "parity" / case, **SMALL
    )
    reference = expected(case)
    logits, _ = jax.jit(network_fn.apply)(variables, reference["images"])
    return relative_error(logits, reference["logits"])


@pytest.mark.parametrize("case", CASES)
def test_logits_are_the_references(case):
    assert error(case) <= 1e-4


def test_the_layer_scales_and_biases_are_timms():
    case = FIXTURES / "parity" / "beit_config"
    _, variables = nets_factory.load_pretrained("beit_base_patch16_224", case, **SMALL)
    block, state = variables["params"]["blocks_1"], load_file(case / "model.safetensors")
    np.testing.assert_array_equal(block["ls1"]["gamma"], state["blocks.1.gamma_1"])
    np.testing.assert_array_equal(block["ls2"]["gamma"], state["blocks.1.gamma_2"])
    np.testing.assert_array_equal(block["attn"]["q_bias"], state["blocks.1.attn.q_bias"])
    np.testing.assert_array_equal(block["attn"]["v_bias"], state["blocks.1.attn.v_bias"])


def test_the_class_tokens_rows_matter(monkeypatch):
    # The class token's query to the patches and the patches' queries to it swapped: 1.8e-1.
    index = beit.relative_position_index

    def swapped(window):
        out = index(window).copy()
        out[0, 1:], out[1:, 0] = index(window)[1:, 0], index(window)[0, 1:]
        return out

    monkeypatch.setattr(beit, "relative_position_index", swapped)
    assert error("beit_config") > 1e-2


@pytest.mark.parametrize("same_length_only", [False, True])
def test_timms_resize_positions_matter(monkeypatch, same_length_only):
    # Unit-spaced positions (plain linear interpolation) on both axes: 5.8e-2; on the axis whose
    # length stays only (timm moves that one too): 1.3e-3.
    geometric = beit.table_positions

    def unit(source, target):
        if same_length_only and source != target:
            return geometric(source, target)
        return np.arange(-(source // 2), source // 2 + 1, dtype=np.float32)

    monkeypatch.setattr(beit, "table_positions", unit)
    beit.resize_weights.cache_clear()
    try:
        assert error("beit_resized_32x48") > 5e-4
    finally:
        beit.resize_weights.cache_clear()

"""load_pretrained for timm's EVA-02: parity on fixtures timm produced (tools/fixtures_eva.py),
one for each layout of the block (Ti's and S's fused projections; B's and L's separate ones and
the MLP's LayerNorm), the second at another size than its position embeddings'."""

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file

import nets_factory
from tests.test_pretrained import FIXTURES, expected, relative_error

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

# The fixtures' small timm networks, as `load_pretrained` keyword arguments (the rotary
# embedding's reference grid is 2x2 and 3x3 there, 16x16 in timm's networks).
SMALL = {"patch_size": 8, "embed_dim": 32, "depth": 2, "num_heads": 2, "img_size": 32}
PARITY = {
    "eva02_fused_config": ("eva02_tiny_patch14_336", {**SMALL, "ref_feat_shape": 2}),
    # 4x4 position embeddings resampled to 5x5, RoPE for the 5x5 grid.
    "eva02_scale_mlp_resampled_40": ("eva02_base_patch14_448", {**SMALL, "ref_feat_shape": 3}),
}


@pytest.mark.parametrize("case", sorted(PARITY))
def test_logits_are_the_references(case):
    name, kwargs = PARITY[case]
    network_fn, variables = nets_factory.load_pretrained(name, FIXTURES / "parity" / case, **kwargs)
    reference = expected(case)
    logits, _ = jax.jit(network_fn.apply)(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) <= 1e-4


def test_the_attention_biases_are_timms():
    case = FIXTURES / "parity" / "eva02_fused_config"
    name, kwargs = PARITY["eva02_fused_config"]
    _, variables = nets_factory.load_pretrained(name, case, **kwargs)
    attn, state = variables["params"]["blocks_1"]["attn"], load_file(case / "model.safetensors")
    np.testing.assert_array_equal(attn["q_bias"], state["blocks.1.attn.q_bias"])
    np.testing.assert_array_equal(attn["v_bias"], state["blocks.1.attn.v_bias"])
    np.testing.assert_array_equal(attn["qkv"]["kernel"], state["blocks.1.attn.qkv.weight"].T)

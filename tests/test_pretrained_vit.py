"""load_pretrained for timm's ViT and DeiT: parity on fixtures timm produced
(tools/fixtures_vit.py), at the position embeddings' size and at two others, which timm's
`dynamic_img_size=True` resamples to."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file

import nets_factory
from tests.test_pretrained import FIXTURES, expected, relative_error

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

# The fixtures' small timm networks, as `load_pretrained` keyword arguments.
SMALL = {"patch_size": 8, "embed_dim": 32, "depth": 2, "num_heads": 2, "img_size": 32}
PARITY = {
    "vit_small_config": "vit_tiny_patch16_224",
    "vit_resampled_48": "vit_tiny_patch16_224",  # 4x4 position embeddings at 6x6
    "deit_distilled_resampled_24": "deit_tiny_distilled_patch16_224",  # at 3x3
}


@pytest.mark.parametrize("case", sorted(PARITY))
def test_logits_are_the_references(case):
    network_fn, variables = nets_factory.load_pretrained(
        PARITY[case], FIXTURES / "parity" / case, **SMALL
    )
    reference = expected(case)
    logits, _ = jax.jit(network_fn.apply)(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) <= 1e-4


def test_the_tokens_and_qkv_are_timms():
    case = FIXTURES / "parity" / "deit_distilled_resampled_24"
    _, variables = nets_factory.load_pretrained("deit_tiny_distilled_patch16_224", case, **SMALL)
    params, state = variables["params"], load_file(case / "model.safetensors")
    for name in ("cls_token", "dist_token", "pos_embed"):
        np.testing.assert_array_equal(params[name], state[name])
    np.testing.assert_array_equal(
        params["blocks_1"]["attn"]["qkv"]["kernel"], state["blocks.1.attn.qkv.weight"].T
    )
    np.testing.assert_array_equal(
        params["patch_embed"]["kernel"], state["patch_embed.proj.weight"].transpose(2, 3, 1, 0)
    )


def test_distilled_heads_are_both_replaced_for_other_classes():
    case = FIXTURES / "parity" / "deit_distilled_resampled_24"
    network_fn, variables = nets_factory.load_pretrained(
        "deit_tiny_distilled_patch16_224", case, num_classes=5, **SMALL
    )
    params = variables["params"]
    assert params["head"]["kernel"].shape == params["head_dist"]["kernel"].shape == (32, 5)
    logits, _ = jax.jit(network_fn.apply)(variables, jnp.ones((1, 32, 32, 3)))
    assert logits.shape == (1, 5)
    features_fn, features = nets_factory.load_pretrained(
        "deit_tiny_distilled_patch16_224", case, num_classes=0, **SMALL
    )
    assert "head" not in features["params"] and "head_dist" not in features["params"]

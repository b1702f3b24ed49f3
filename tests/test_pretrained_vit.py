"""load_pretrained for timm's ViT and DeiT: parity on fixtures timm produced
(tools/fixtures_vit.py), at the position embeddings' size and at two others, which timm's
`dynamic_img_size=True` resamples to."""

import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file

import nets_factory
from nets_weights import WeightFileError, published
from tests.test_pretrained import FIXTURES, expected, relative_error

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

# The fixtures' small timm networks, as `load_pretrained` keyword arguments.
SMALL = {"patch_size": 8, "embed_dim": 32, "depth": 2, "num_heads": 2, "img_size": 32}
DINOV2_SMALL = {**SMALL, "patch_size": 7, "img_size": 28}  # 4x4 position embeddings
PARITY = {
    "vit_small_config": ("vit_tiny_patch16_224", SMALL),
    "vit_resampled_48": ("vit_tiny_patch16_224", SMALL),  # 4x4 position embeddings at 6x6
    "deit_distilled_resampled_24": ("deit_tiny_distilled_patch16_224", SMALL),  # at 3x3
    "deit3_config": ("deit3_small_patch16_224", SMALL),
    "clip_quickgelu_config": ("vit_base_patch16_clip_quickgelu_224", SMALL),
    # Without a classifier: the class token's features, resampled from 4x4 to 6x6.
    "dinov2_reg_features_42": ("vit_small_patch14_reg4_dinov2", DINOV2_SMALL),
    # Without a class token or a classifier: the tokens pooled by attention.
    "siglip_features_config": ("vit_base_patch16_siglip_224", SMALL),
    # Averaged patches, then `fc_norm` (timm's rule for 'avg' pooling).
    "vit_avg_fc_norm_config": ("vit_tiny_patch16_224", {**SMALL, "global_pool": "avg"}),
}


@pytest.mark.parametrize("case", sorted(PARITY))
def test_logits_are_the_references(case):
    name, kwargs = PARITY[case]
    network_fn, variables = nets_factory.load_pretrained(name, FIXTURES / "parity" / case, **kwargs)
    reference = expected(case)
    logits, _ = jax.jit(network_fn.apply)(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) <= 1e-4


def test_clip_weights_need_quick_gelu():
    # The same weights under exact GELU (timm's `vit_base_patch16_clip_224`, which OpenAI's
    # weights are published under too) compute another function: the parity above sees the
    # activation; loading refuses it, and so does the network with the loaded variables.
    case = FIXTURES / "parity" / "clip_quickgelu_config"
    _, variables = nets_factory.load_pretrained(
        "vit_base_patch16_clip_quickgelu_224", case, **SMALL
    )
    gelu_fn = nets_factory.get_network_fn("vit_base_patch16_clip_224", 10, **SMALL)
    reference = expected("clip_quickgelu_config")
    with pytest.raises(ValueError, match=r"trained with act_layer='quick_gelu'; this vit_base"):
        gelu_fn.apply(variables, reference["images"])
    logits, _ = jax.jit(gelu_fn.apply)(published.without_mark(variables), reference["images"])
    assert relative_error(logits, reference["logits"]) > 1e-3
    with pytest.raises(ValueError, match=r"act_layer='quick_gelu'; act_layer='gelu' would"):
        nets_factory.load_pretrained(
            "vit_base_patch16_clip_quickgelu_224", case, act_layer="gelu", **SMALL
        )


def test_openai_weights_published_under_the_plain_tower_load_with_quick_gelu(tmp_path):
    # timm publishes OpenAI's and MetaCLIP's towers as `vit_base_patch16_clip_224.openai`, ...:
    # their config's architecture and tag choose QuickGELU, which they were trained with.
    folder = tmp_path / "openai"
    shutil.copytree(FIXTURES / "parity" / "clip_quickgelu_config", folder)
    config = {"architecture": "vit_base_patch16_clip_224", "pretrained_cfg": {"tag": "openai"}}
    (folder / "config.json").write_text(json.dumps(config))
    network_fn, variables = nets_factory.load_pretrained(folder, **SMALL)
    assert network_fn.name == "vit_base_patch16_clip_quickgelu_224"
    assert network_fn.pretrained.source == "vit_base_patch16_clip_224.openai"
    reference = expected("clip_quickgelu_config")
    logits, _ = jax.jit(network_fn.apply)(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) <= 1e-4
    with pytest.raises(WeightFileError, match=r"224.openai', not 'vit_base_patch16_clip_224' \("):
        nets_factory.load_pretrained("vit_base_patch16_clip_224", folder, **SMALL)


def test_features_only_weights_load_as_features_or_under_a_new_classifier():
    case = FIXTURES / "parity" / "dinov2_reg_features_42"
    images = expected("dinov2_reg_features_42")["images"]
    features_fn, features = nets_factory.load_pretrained(
        "vit_small_patch14_reg4_dinov2", case, **DINOV2_SMALL
    )
    assert "head" not in features["params"] and features_fn.pretrained.class_names == ()
    assert features["params"]["reg_token"].shape == (1, 4, 32)
    classifier_fn, variables = nets_factory.load_pretrained(
        "vit_small_patch14_reg4_dinov2", case, num_classes=5, **DINOV2_SMALL
    )
    assert variables["params"]["head"]["kernel"].shape == (32, 5)
    _, end_points = jax.jit(classifier_fn.apply)(variables, images)
    pooled, _ = jax.jit(features_fn.apply)(features, images)
    np.testing.assert_array_equal(end_points["pre_logits"], pooled)


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

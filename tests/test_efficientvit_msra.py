"""MSRA's EfficientViT: timm's parameter counts and MACs, the contract's end points and features,
the windows; parity with timm on the fixture made by tools/fixtures_efficientvit_msra.py, its
conventions shown to matter, and timm's key layout."""

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file

import nets_factory
import nets_summary as summary
from nets_weights import architectures
from tests.test_efficientvit_mit import abstract
from tests.test_pretrained import FIXTURES, expected, parity_error, relative_error

# timm's counts at 1000 classes (`sum(p.numel() for p in m.parameters())` of
# `timm.create_model(name)`) and the MACs torch's FlopCounterMode counts for it at 224 px
# (FLOPs / 2; the attention's products included), as tests/test_efficientnet.py.
TIMM = {
    "efficientvit_m0": (224, 2_349_436, 79_193_600),
    "efficientvit_m1": (224, 2_980_560, 167_051_840),
    "efficientvit_m2": (224, 4_187_554, 201_035_712),
    "efficientvit_m3": (224, 6_900_722, 262_662_208),
    "efficientvit_m4": (224, 8_804_228, 299_308_544),
    "efficientvit_m5": (224, 12_473_772, 521_583_104),
}


@pytest.mark.parametrize("name", sorted(TIMM))
def test_timm_parameter_counts_and_macs(name):
    # The sizes `python -m nets_factory` lists, measured by the registry tests.
    assert summary.recorded_sizes()[name] == TIMM[name]


def test_m0_parameters_add_up_windows_end_points_and_features():
    fn, ((_, end_points), variables) = abstract("efficientvit_m0")
    params = variables["params"]
    count = lambda tree: sum(x.size for x in jax.tree.leaves(tree))  # noqa: E731
    # The first block's attention: 4 heads, each a 1x1 16 -> 16 + 16 + 16 with BatchNorm and a
    # 5x5 depthwise 16 with BatchNorm, the projection 64 -> 64 with BatchNorm, 4 x 49 biases.
    attn = params["stages_0_blocks_0_mixer"]["attn"]
    assert count(attn) == 4 * (16 * 48 + 96 + 25 * 16 + 32) + 64 * 64 + 128 + 4 * 49
    # The 224 px maps' windows: 14x14 in windows of 7, 7x7, and 4x4 (the window shrunk to it).
    assert params["stages_1_blocks_0_mixer"]["attn"]["attention_biases"].shape == (4, 49)
    assert params["stages_2_blocks_0_mixer"]["attn"]["attention_biases"].shape == (4, 16)
    # The head: BatchNorm and the dense layer over 192 features.
    assert count(params["head"]) == 2 * 192 + 192 * 1000 + 1000
    assert count(params) == 2_349_436
    shapes = {name: x.shape[1:] for name, x in end_points.items()}
    assert shapes == {
        "stem": (14, 14, 64),
        "stages_0": (14, 14, 64),
        "stages_1": (7, 7, 128),
        "stages_2": (4, 4, 192),
        "pre_logits": (192,),
        "logits": (1000,),
        "predictions": (1000,),
    }
    # timm's feature_info: the three stages.
    assert fn.module.feature_strides() == {"stages_0": 16, "stages_1": 32, "stages_2": 64}


# The parity fixture's small timm network (tools/fixtures_efficientvit_msra.py), as
# `load_pretrained` keyword arguments; its windows are those of 48 px maps.
CASE = "efficientvit_msra_small"
SMALL = {
    "embed_dims": (8, 12, 16),
    "key_dim": 4,
    "depths": (1, 1, 1),
    "num_heads": (2, 3, 2),
    "window_size": 2,
    "kernels": (5, 3, 3, 3),
    "default_image_size": 48,
}


@pytest.mark.slow  # parity: compiles a thinned reference network
def test_logits_are_the_references():
    network_fn, variables = nets_factory.load_pretrained(
        "efficientvit_m1", FIXTURES / "parity" / CASE, **SMALL
    )
    reference = expected(CASE)
    logits, end_points = jax.jit(network_fn.apply)(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) <= 1e-4
    assert "predictions" in end_points
    # The biases and the cascade's 1x1 kernels as timm holds them.
    state = load_file(FIXTURES / "parity" / CASE / "model.safetensors")
    attn, key = variables["params"]["stages_1_blocks_0_mixer"]["attn"], "stages.1.blocks.0.mixer"
    np.testing.assert_array_equal(attn["attention_biases"], state[f"{key}.m.attn.attention_biases"])
    kernel = state[f"{key}.m.attn.qkvs.2.conv.weight"].transpose(2, 3, 1, 0)
    np.testing.assert_array_equal(attn["qkvs_2"]["conv"]["kernel"], kernel)
    # 'SAME' padding misses the logits (by 0.84).
    assert parity_error("efficientvit_m1", SMALL, CASE, padding="SAME") > 1e-4


LAYOUT = {
    ("patch_embed_conv1", "conv"): "patch_embed.conv1.conv",
    ("stages_1_downsample_res1_0", "bn"): "stages.1.downsample.res1.0.m.bn",
    ("stages_1_downsample_res2_1_pw2", "conv"): "stages.1.downsample.res2.1.m.pw2.conv",
    ("stages_2_downsample_patchmerge", "se", "fc1"): "stages.2.downsample.patchmerge.se.fc1",
    ("stages_0_blocks_0_dw1", "conv"): "stages.0.blocks.0.dw1.m.conv",
    ("stages_2_blocks_3_ffn0_pw1", "bn"): "stages.2.blocks.3.ffn0.m.pw1.bn",
    ("stages_0_blocks_0_mixer", "attn"): "stages.0.blocks.0.mixer.m.attn",
    ("stages_0_blocks_0_mixer", "attn", "dws_2", "conv"): (
        "stages.0.blocks.0.mixer.m.attn.dws.2.conv"
    ),
    ("stages_0_blocks_0_mixer", "attn", "proj_1", "bn"): "stages.0.blocks.0.mixer.m.attn.proj.1.bn",
    ("head", "bn"): "head.bn",
    ("head", "linear"): "head.linear",
}


def test_layout_is_timms():
    arch = architectures.ARCHITECTURES["efficientvit_m5"]
    layout = arch.layout(nets_factory.get_network_fn("efficientvit_m5", 10).module)
    assert {path: layout(path) for path in LAYOUT} == LAYOUT
    assert arch.head_hidden == ("head.bn",)

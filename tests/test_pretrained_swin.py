"""load_pretrained for timm's and torchvision's Swin Transformer: parity on fixtures timm (and
torchvision's modules, rebuilt) produced (tools/fixtures_swin.py), at the windows' own size and at
one whose maps are not window multiples (timm's `dynamic_img_size=True`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file

import nets_factory
from tests.test_pretrained import FIXTURES, expected, relative_error

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

# The fixtures' small networks, as `load_pretrained` keyword arguments: windows of 4 set for
# 64 px (timm's), windows of 2 (torchvision's, where its function is timm's).
SMALL = {"img_size": 64, "embed_dim": 8, "depths": (2, 2, 1, 1), "num_heads": (1, 2, 2, 4)}
TIMM_SMALL = {**SMALL, "window_size": 4}
TV_SMALL = {**SMALL, "window_size": 2}
# Each fixture: the name it loads under, its fields, its image size and last stage's map.
PARITY = {
    "swin": ("swin_tiny_patch4_window7_224", TIMM_SMALL, 64, 2),
    "swin_padded_88": ("swin_tiny_patch4_window7_224", TIMM_SMALL, 88, 3),  # maps 22, 11, 6, 3
    "tv_swin": ("swin_t", TV_SMALL, 64, 2),
}


def load(case, **kw):
    name, fields, _, _ = PARITY[case]
    return nets_factory.load_pretrained(name, FIXTURES / "parity" / case, **fields, **kw)


@pytest.mark.parametrize("case", sorted(PARITY))
def test_logits_are_the_references(case):
    network_fn, variables = load(case)
    reference = expected(case)
    assert reference["images"].shape[1] == PARITY[case][2]
    logits, end_points = jax.jit(network_fn.apply)(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) <= 1e-4
    assert end_points["stage4"].shape[1:3] == (PARITY[case][3],) * 2


def test_tables_are_the_files_and_index_buffers_are_skipped():
    _, variables = load("tv_swin")
    tv = load_file(FIXTURES / "parity" / "tv_swin" / "model.safetensors")
    assert "features.3.1.attn.relative_position_index" in tv  # torchvision saves its buffers
    block = variables["params"]["layers_1"]["blocks_1"]
    np.testing.assert_array_equal(
        block["attn"]["relative_position_bias_table"],
        tv["features.3.1.attn.relative_position_bias_table"],
    )
    np.testing.assert_array_equal(block["mlp"]["fc2"]["kernel"], tv["features.3.1.mlp.3.weight"].T)
    merging = variables["params"]["layers_2"]["downsample"]["reduction"]["kernel"]
    np.testing.assert_array_equal(merging, tv["features.4.reduction.weight"].T)

    _, variables = load("swin")
    timm = load_file(FIXTURES / "parity" / "swin" / "model.safetensors")
    np.testing.assert_array_equal(
        variables["params"]["layers_3"]["blocks_0"]["attn"]["relative_position_bias_table"],
        timm["layers.3.blocks.0.attn.relative_position_bias_table"],
    )


def test_a_timm_folder_loads_under_torchvision_name():
    """`swin_t` is `swin_tiny_patch4_window7_224`'s network: a timm folder loads under either
    name, with timm's layout and conventions (the file's config.json says whose it is)."""
    network_fn, variables = nets_factory.load_pretrained(
        "swin_t", FIXTURES / "parity" / "swin", **TIMM_SMALL
    )
    reference = expected("swin")
    logits, _ = jax.jit(network_fn.apply)(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) <= 1e-4
    assert network_fn.pretrained.crop_fraction == pytest.approx(0.9)  # timm's, not torchvision's


def test_preprocessing_of_files_without_a_config():
    network_fn, _ = load("tv_swin")  # its config.json names the architecture only
    assert network_fn.pretrained.interpolation == "bicubic"
    assert network_fn.pretrained.crop_fraction == pytest.approx(224 / 232)
    network_fn, _ = load("swin")
    assert network_fn.pretrained.crop_fraction == pytest.approx(0.9)


def test_features_mode():
    network_fn, variables = load("swin", num_classes=0)
    assert "head" not in variables["params"]
    features, _ = jax.eval_shape(network_fn.apply, variables, jnp.ones((2, 64, 64, 3)))
    assert features.shape == (2, 64)


def test_a_file_of_other_windows_is_refused_in_one_line():
    with pytest.raises(
        ValueError,
        match=r"'layers.0.blocks.0.attn.relative_position_bias_table' has shape \(49, 1\); "
        r".* needs \(9, 1\)",
    ):
        nets_factory.load_pretrained(
            "swin_tiny_patch4_window7_224", FIXTURES / "parity" / "swin", **TV_SMALL
        )

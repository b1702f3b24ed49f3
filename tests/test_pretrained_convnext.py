"""load_pretrained for timm's and torchvision's ConvNeXt: parity on fixtures timm (and
torchvision's modules, rebuilt) produced (tools/fixtures_convnext.py), with their layer scales."""

import shutil

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import nets_factory
from tests.helpers import XLA_CONVS, assert_dilated_parity
from tests.test_pretrained import FIXTURES, expected, relative_error

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

SMALL = {"depths": (1, 1, 2, 1), "widths": (16, 32, 48, 64)}
# Each fixture: the name it loads under, and its image size (not a multiple of 32 for
# convnext_odd: the 'VALID' stem and downsamplings drop the remainder, as PyTorch's do).
PARITY = {
    "convnext": ("convnext_tiny", 72),
    "convnext_odd": ("convnext_base", 83),
    "tv_convnext": ("convnext_tiny", 64),
    # ConvNeXt V2 (GRN, no layer scale), its MLP as timm's small sizes keep it: 1x1 convolutions.
    "convnextv2_conv_mlp": ("convnextv2_atto", 64),
}


def load(case, **kw):
    name = PARITY[case][0]
    return nets_factory.load_pretrained(name, FIXTURES / "parity" / case, **SMALL, **kw)


@pytest.mark.parametrize("case", sorted(PARITY))
def test_logits_are_the_references(case):
    network_fn, variables = load(case)
    reference = expected(case)
    assert reference["images"].shape[1] == PARITY[case][1]
    logits, end_points = jax.jit(network_fn.apply)(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) <= 1e-4
    assert end_points["stage4"].shape[1] == PARITY[case][1] // 32


def test_output_stride_is_timms():
    """The last two stages keep the map at 8: their 2x2 downsampling at stride 1 ('SAME'-padded as
    timm's `Conv2dSame`), their 7x7s dilated."""
    assert_dilated_parity("convnext_tiny", "convnext", {**SMALL, **XLA_CONVS})


def test_layer_scales_are_the_files_in_both_layouts():
    _, timm_variables = load("convnext")
    timm = load_file(FIXTURES / "parity" / "convnext" / "model.safetensors")
    block = timm_variables["params"]["stages_2"]["blocks_1"]
    np.testing.assert_array_equal(block["gamma"], timm["stages.2.blocks.1.gamma"])
    assert not np.allclose(block["gamma"], 1e-6)  # the fixture's are ~U(0.5, 1.5)

    network_fn, tv_variables = load("tv_convnext")
    tv = load_file(FIXTURES / "parity" / "tv_convnext" / "model.safetensors")
    block = tv_variables["params"]["stages_2"]["blocks_1"]
    np.testing.assert_array_equal(block["gamma"], tv["features.5.1.layer_scale"][:, 0, 0])
    np.testing.assert_array_equal(
        block["conv_dw"]["kernel"], tv["features.5.1.block.0.weight"].transpose(2, 3, 1, 0)
    )
    np.testing.assert_array_equal(block["fc1"]["kernel"], tv["features.5.1.block.3.weight"].T)
    # torchvision's preprocessing, not timm's, for a file without a pretrained_cfg.
    assert network_fn.pretrained.interpolation == "bilinear"
    assert network_fn.pretrained.crop_fraction == pytest.approx(224 / 236)


def test_features_mode_keeps_the_head_norm():
    network_fn, variables = load("convnext", num_classes=0)
    images = expected("convnext")["images"]
    features, end_points = jax.jit(network_fn.apply)(variables, images)
    assert features.shape == (2, 64) and "head" not in variables["params"]
    full_fn, full = load("convnext")
    _, full_points = jax.jit(full_fn.apply)(full, images)
    # Two programs, fused differently: float32 rounding of features of size ~3 (atol 1e-7).
    np.testing.assert_allclose(features, full_points["pre_logits"], rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(
        variables["params"]["head_norm"]["scale"], full["params"]["head_norm"]["scale"]
    )


def test_a_file_of_other_widths_is_refused_in_one_line():
    with pytest.raises(
        ValueError,
        match=r"'head.fc.weight' has shape \(10, 64\); params/head/kernel needs \(768, 10\)",
    ):
        nets_factory.load_pretrained("convnext_tiny", FIXTURES / "parity" / "convnext")


def test_fcmae_features_without_head_norm_load_as_timm_leaves_them(tmp_path):
    # ConvNeXt V2's FCMAE files (`convnextv2_atto.fcmae`) hold the encoder alone: no classifier,
    # no `head.norm`. timm loads them non-strict, its head norm left at ones and zeros.
    folder = tmp_path / "fcmae"
    shutil.copytree(FIXTURES / "parity" / "convnextv2_conv_mlp", folder)
    tensors = load_file(folder / "model.safetensors")
    save_file(
        {k: v for k, v in tensors.items() if not k.startswith("head.")},
        folder / "model.safetensors",
    )
    network_fn, variables = nets_factory.load_pretrained("convnextv2_atto", folder, **SMALL)
    assert network_fn.module.num_classes == 0 and "head" not in variables["params"]
    head_norm = variables["params"].pop("head_norm")
    np.testing.assert_array_equal(head_norm["scale"], np.ones(64))
    np.testing.assert_array_equal(head_norm["bias"], np.zeros(64))
    _, full = load("convnextv2_conv_mlp")
    grn = full["params"]["stages_3"]["blocks_0"]["grn"]["scale"]
    np.testing.assert_array_equal(grn, tensors["stages.3.blocks.0.mlp.grn.weight"])
    for key in ("head", "head_norm"):
        full["params"].pop(key)
    jax.tree.map(np.testing.assert_array_equal, variables, full)

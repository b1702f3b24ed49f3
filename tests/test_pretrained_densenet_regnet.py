"""load_pretrained for DenseNet and RegNet: parity with timm on fixtures it produced
(tools/fixtures_densenet.py, tools/fixtures_regnet.py), in timm's and torchvision's key layouts
(torchvision's old `.pth` spelling of DenseNet's keys too), and features mode."""

import re

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import nets_factory
from nets_weights.architectures import ARCHITECTURES
from tests.helpers import XLA_CONVS, assert_dilated_parity
from tests.test_pretrained import FIXTURES, expected, relative_error

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

SMALL_REGNET = {"w0": 8, "wa": 8.0, "wm": 2.0, "depth": 6, "group_width": 8, "stem_width": 8}
# Each fixture: the name to load it under, and its small timm network as keyword arguments.
PARITY = {
    "densenet": ("densenet121", {"block_config": (1, 2), "growth_rate": 8}),
    "regnet_x": ("regnet_x_800mf", SMALL_REGNET),
    "regnet_y": ("regnety_016", SMALL_REGNET),  # timm's name for regnet_y_1_6gf
    "tv_regnet_y": ("regnet_y_1_6gf", SMALL_REGNET),  # the same tensors under torchvision's keys
}


def load(case, folder=None, **kw):
    name, kwargs = PARITY[case]
    return nets_factory.load_pretrained(name, folder or FIXTURES / "parity" / case, **kwargs, **kw)


def logits_error(network_fn, variables, case):
    reference = expected(case)
    logits, end_points = jax.jit(network_fn.apply)(variables, reference["images"])
    assert "predictions" in end_points
    return relative_error(logits, reference["logits"])


@pytest.mark.parametrize("case", sorted(PARITY))
def test_logits_are_the_references(case):
    network_fn, variables = load(case)
    assert logits_error(network_fn, variables, case) <= 1e-4


def test_regnet_output_stride_is_timms():
    """The last two stages keep the map at 8, each's first block at the dilation before."""
    name, kwargs = PARITY["regnet_y"]
    assert_dilated_parity(name, "regnet_y", {**kwargs, **XLA_CONVS})


def test_features_mode_returns_the_pooled_features():
    network_fn, variables = load("regnet_y", num_classes=0)
    assert "head" not in variables["params"]
    pooled, end_points = jax.jit(network_fn.apply)(variables, expected("regnet_y")["images"])
    assert pooled.shape == (2, 64) and "logits" not in end_points


def test_the_layouts_name_the_same_variables():
    _, timm_variables = load("regnet_y")
    _, tv_variables = load("tv_regnet_y")
    jax.tree.map(np.testing.assert_array_equal, timm_variables, tv_variables)
    assert timm_variables["params"]["s3"]["b1"]["se"]["fc1"]["kernel"].shape == (1, 1, 32, 4)


def test_torchvisions_old_densenet_keys_load(tmp_path):
    """torchvision's .pth files spell `denselayer1.norm1.weight` as `norm.1.weight`."""
    folder = tmp_path / "densenet"
    folder.mkdir()
    tensors = load_file(FIXTURES / "parity" / "densenet" / "model.safetensors")
    old = {
        re.sub(r"(denselayer\d+\.(?:norm|conv))([12])\.", r"\1.\2.", k): v
        for k, v in tensors.items()
        if not k.endswith("num_batches_tracked")
    }
    assert "features.denseblock2.denselayer2.norm.2.running_var" in old
    save_file(old, folder / "model.safetensors")
    (folder / "config.json").write_bytes(
        (FIXTURES / "parity" / "densenet" / "config.json").read_bytes()
    )
    network_fn, variables = load("densenet", folder)
    assert logits_error(network_fn, variables, "densenet") <= 1e-4


def test_pycls_and_torchvision_widths_are_other_networks():
    """timm's `regnetx_004` holds pycls's weights (its last stage 384 wide), `regnetx_004_tv`
    torchvision's (400 wide): each goes to our network of its widths."""
    table = ARCHITECTURES
    assert table["regnetx_004"].network == "regnetx_004"
    assert table["regnetx_004_tv"].network == "regnet_x_400mf"
    assert nets_factory.get_network_fn("regnetx_004", 10).module.stages[-1].width == 384
    assert nets_factory.get_network_fn("regnet_x_400mf", 10).module.stages[-1].width == 400

"""load_pretrained for EfficientNet: parity with timm's `efficientnet_b0`, `tf_efficientnet_b0`,
`efficientnetv2_s` and `tf_efficientnetv2_s` classes and torchvision's B5 and V2-S on fixtures
made by tools/fixtures_efficientnet.py, each convention shown to matter, and timm's and
torchvision's layouts of every block kind; timm's `output_stride` 8 and 16 on the same weights."""

import functools

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file

import nets_factory
from nets_weights import WeightFileError, architectures, convert
from tests.helpers import XLA_CONVS, assert_dilated_parity
from tests.test_pretrained import FIXTURES, expected, relative_error
from tests.test_pretrained_mobilenet import assert_each_convention_matters

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

# timm's `_gen_efficientnet(..., channel_multiplier=0.25, depth_multiplier=0.5)`, and
# `_gen_efficientnetv2_s(..., channel_multiplier=0.125, depth_multiplier=0.34)` for V2.
SMALL = {"width_multiplier": 0.25, "depth_multiplier": 0.5}
V2_SMALL = {"width_multiplier": 0.125, "depth_multiplier": 0.34}
# torchvision's (`tv_efficientnet`) loads into B5, whose torchvision files have epsilon 1e-3.
PARITY = {
    "efficientnet": "efficientnet_b0",
    "efficientnet_tf": "tf_efficientnet_b0",
    "tv_efficientnet": "efficientnet_b5",
    "efficientnetv2": "efficientnetv2_s",
    "efficientnetv2_tf": "tf_efficientnetv2_s",
    "tv_efficientnet_v2": "efficientnet_v2_s",
}


def scale(case):
    return V2_SMALL if case.endswith(("v2", "v2_tf")) else SMALL


def load(case, **kw):
    folder = FIXTURES / "parity" / case
    return nets_factory.load_pretrained(PARITY[case], folder, **{**scale(case), **kw})


@functools.cache  # read-only: the parity test and the tests of conventions share each load
def loaded(case):
    return load(case)


@pytest.mark.parametrize("case", sorted(PARITY))
def test_logits_are_the_references(case):
    network_fn, variables = loaded(case)
    reference = expected(case)
    logits, end_points = jax.jit(network_fn.apply)(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) <= 1e-4
    assert "predictions" in end_points and network_fn.pretrained.source == PARITY[case]

    # Each convention matters: under the other padding, or the other epsilon alone, the same
    # weights compute another function. Once from each value of each field (as
    # test_pretrained_mobilenet.py): V1's efficientnet flips PyTorch's ('SYMMETRIC', 1e-5) and
    # efficientnet_tf Slim's ('SAME', 1e-3), between them torchvision's B5 ('SYMMETRIC', 1e-3),
    # whose pair test_torchvision_files_carry_their_conventions pins; V2's blocks, on the TF
    # port (two more compilations per case cost more than they tell once V1's show it).
    if case in ("efficientnetv2", "tv_efficientnet_v2", "tv_efficientnet"):
        return
    tensors = load_file(FIXTURES / "parity" / case / "model.safetensors")
    arch = convert.for_keys(architectures.ARCHITECTURES[PARITY[case]], tensors)
    assert_each_convention_matters(arch, scale(case), variables, reference)


# timm's logits at output strides 8 and 16 (tools/fixtures_efficientnet.py output_stride): the
# small V2's MBConv stages (16 and 32, a stride-1 stage between) dilate under TensorFlow's 'SAME'
# padding; its fused stages, at strides 2-8, do not (test_efficientnet.py's fused block test
# dilates one). The MobileNets' cases dilate the same blocks under PyTorch's symmetric padding.
def test_output_stride_is_timms():
    """timm's builder at 8, block by block: a block past the stride keeps the dilation before it,
    the next ones take the new one ('SAME' padding, all XLA convolutions: less to compile)."""
    case = "efficientnetv2_tf"
    assert_dilated_parity(PARITY[case], case, {**scale(case), **XLA_CONVS})


def test_the_architecture_sets_the_conventions():
    tf_fn, _ = loaded("efficientnet_tf")
    assert (tf_fn.module.padding, tf_fn.module.bn_epsilon) == ("SAME", 1e-3)
    # A tf_ file under timm's own name would compute another function: its config.json says so.
    message = r"is for 'tf_efficientnet_b0', not 'efficientnet_b0'"
    with pytest.raises(WeightFileError, match=message):
        nets_factory.load_pretrained(
            "efficientnet_b0", FIXTURES / "parity" / "efficientnet_tf", **SMALL
        )
    with pytest.raises(ValueError, match=r"trained with padding='SYMMETRIC'; padding='SAME'"):
        load("efficientnet", padding="SAME")


def test_torchvision_files_carry_their_conventions():
    network_fn, _ = loaded("tv_efficientnet")
    assert (network_fn.module.padding, network_fn.module.bn_epsilon) == ("SYMMETRIC", 1e-3)
    assert network_fn.pretrained.image_size == 456 and network_fn.pretrained.crop_fraction == 1
    b0 = architectures.ARCHITECTURES["efficientnet_b0"].alternatives[0]
    assert b0.convention == {"padding": "SYMMETRIC", "bn_epsilon": 1e-5}
    assert b0.preprocessing["crop_fraction"] == 224 / 256


def test_preprocessing_without_a_config_is_timms_default():
    arch = architectures.ARCHITECTURES["tf_efficientnet_b3"]
    assert arch.preprocessing == {
        "image_size": 300,
        "crop_fraction": 0.904,
        "interpolation": "bicubic",
    }
    # V2's TF ports (default tag in21k_ft_in1k) take inputs in [-1, 1] at timm's train size.
    v2 = architectures.ARCHITECTURES["tf_efficientnetv2_s"].preprocessing
    assert v2 == {
        "image_size": 300,
        "crop_fraction": 1.0,
        "interpolation": "bicubic",
        "mean": (0.5,) * 3,
        "std": (0.5,) * 3,
    }


def test_v2_names_load_their_sources_files():
    # torchvision's V2 files load under torchvision's names, with its conventions and inputs.
    network_fn, _ = loaded("tv_efficientnet_v2")
    assert (network_fn.module.padding, network_fn.module.bn_epsilon) == ("SYMMETRIC", 1e-3)
    assert network_fn.pretrained.image_size == 384 and network_fn.pretrained.crop_fraction == 1
    large = architectures.ARCHITECTURES["efficientnet_v2_l"].preprocessing
    assert large["mean"] == (0.5,) * 3 and large["interpolation"] == "bicubic"
    # The TF port's file under timm's own name would compute another function.
    message = r"is for 'tf_efficientnetv2_s', not 'efficientnetv2_s'"
    with pytest.raises(WeightFileError, match=message):
        nets_factory.load_pretrained(
            "efficientnetv2_s", FIXTURES / "parity" / "efficientnetv2_tf", **V2_SMALL
        )


# Our module path -> timm's prefix: the first stage's depthwise-separable blocks (conv_dw, bn1,
# se, conv_pw, bn2), the inverted residuals (conv_pw, bn1, conv_dw, bn2, se, conv_pwl, bn3).
LAYOUT = {
    ("stem", "conv"): "conv_stem",
    ("stem", "bn"): "bn1",
    ("blocks_0_1", "depthwise", "bn"): "blocks.0.1.bn1",
    ("blocks_0_1", "project", "conv"): "blocks.0.1.conv_pw",
    ("blocks_0_0", "squeeze_excite", "Conv"): "blocks.0.0.se.conv_reduce",
    ("blocks_3_4", "expand", "conv"): "blocks.3.4.conv_pw",
    ("blocks_3_4", "depthwise", "bn"): "blocks.3.4.bn2",
    ("blocks_5_5", "squeeze_excite", "Conv_1"): "blocks.5.5.se.conv_expand",
    ("blocks_6_1", "project", "bn"): "blocks.6.1.bn3",
    ("head", "conv"): "conv_head",
    ("head", "bn"): "bn2",
    ("classifier",): "classifier",
}


# torchvision numbers each block's layers: the first stage has no expansion, so its
# squeeze-excite is layer 1 and its projection layer 2; B3's head is `features.8`.
TORCHVISION_LAYOUT = {
    ("stem", "bn"): "features.0.1",
    ("blocks_0_1", "depthwise", "conv"): "features.1.1.block.0.0",
    ("blocks_0_1", "squeeze_excite", "Conv_1"): "features.1.1.block.1.fc2",
    ("blocks_0_1", "project", "bn"): "features.1.1.block.2.1",
    ("blocks_3_4", "expand", "bn"): "features.4.4.block.0.1",
    ("blocks_3_4", "squeeze_excite", "Conv"): "features.4.4.block.2.fc1",
    ("blocks_6_1", "project", "conv"): "features.7.1.block.3.0",
    ("head", "conv"): "features.8.0",
    ("classifier",): "classifier.1",
}


# V2-S: timm's `ConvBnAct` (conv, bn1) and `EdgeResidual` (conv_exp, bn1, conv_pwl, bn2) first,
# then its inverted residuals; torchvision numbers a fused block's expansion 0 and projection 1
# (no squeeze-excite), the unexpanded one's convolution 0; its head is `features.7`.
V2_LAYOUT = {
    ("stem", "conv"): "conv_stem",
    ("blocks_0_1", "conv", "conv"): "blocks.0.1.conv",
    ("blocks_0_1", "conv", "bn"): "blocks.0.1.bn1",
    ("blocks_2_3", "expand", "conv"): "blocks.2.3.conv_exp",
    ("blocks_2_3", "expand", "bn"): "blocks.2.3.bn1",
    ("blocks_1_0", "project", "conv"): "blocks.1.0.conv_pwl",
    ("blocks_1_0", "project", "bn"): "blocks.1.0.bn2",
    ("blocks_3_5", "expand", "bn"): "blocks.3.5.bn1",
    ("blocks_5_14", "squeeze_excite", "Conv_1"): "blocks.5.14.se.conv_expand",
    ("blocks_5_14", "project", "bn"): "blocks.5.14.bn3",
    ("head", "bn"): "bn2",
}
V2_TORCHVISION_LAYOUT = {
    ("stem", "conv"): "features.0.0",
    ("blocks_0_1", "conv", "bn"): "features.1.1.block.0.1",
    ("blocks_2_3", "expand", "conv"): "features.3.3.block.0.0",
    ("blocks_1_0", "project", "bn"): "features.2.0.block.1.1",
    ("blocks_3_5", "depthwise", "conv"): "features.4.5.block.1.0",
    ("blocks_5_14", "squeeze_excite", "Conv"): "features.6.14.block.2.fc1",
    ("blocks_5_14", "project", "conv"): "features.6.14.block.3.0",
    ("head", "bn"): "features.7.1",
    ("classifier",): "classifier.1",
}


@pytest.mark.parametrize(
    ("name", "alternative", "keys"),
    [
        ("tf_efficientnet_b3", False, LAYOUT),
        ("efficientnet_b3", True, TORCHVISION_LAYOUT),
        ("tf_efficientnetv2_s", False, V2_LAYOUT),
        ("efficientnet_v2_s", False, V2_TORCHVISION_LAYOUT),
    ],
)
def test_layouts_name_every_block_kind_and_the_head(name, alternative, keys):
    module = nets_factory.get_network_fn(name, 1000).module
    arch = architectures.ARCHITECTURES[name]
    layout = (arch.alternatives[0] if alternative else arch).layout(module)
    assert {path: layout(path) for path in keys} == keys


def test_a_file_of_another_scale_names_the_tensor_that_does_not_fit():
    message = (
        r"'blocks.0.0.bn1.running_mean' has shape \(8,\); "
        r"batch_stats/blocks_0_0/depthwise/bn/mean needs \(16,\)"
    )
    with pytest.raises(WeightFileError, match=message):
        load("efficientnet", width_multiplier=0.5)
    depth = r"another depth \(blocks in the file vs this network: blocks.1 1 vs 2, blocks.2 1 vs 2,"
    with pytest.raises(WeightFileError, match=depth):
        load("efficientnet", depth_multiplier=1.0)


def test_pretrained_weights_fine_tune_with_a_new_head():
    network_fn, variables = load("efficientnet", num_classes=3, is_training=True)
    assert variables["params"]["classifier"]["kernel"].shape == (320, 3)
    tensors = load_file(FIXTURES / "parity" / "efficientnet" / "model.safetensors")
    kernel = np.asarray(variables["params"]["blocks_1_0"]["depthwise"]["conv"]["kernel"])
    np.testing.assert_array_equal(
        kernel, tensors["blocks.1.0.conv_dw.weight"].astype(np.float32).transpose(2, 3, 1, 0)
    )

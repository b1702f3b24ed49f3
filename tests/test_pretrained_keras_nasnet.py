"""load_pretrained on Keras Applications' NASNet files: parity with Keras's NASNet on fixtures it
produced (tools/fixtures_keras_nasnet.py), Keras's pool convention, and its key layout."""

import functools

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file

import nets_factory
import nets_weights
from nets.layers import Conv
from nets_weights import WeightFileError, architectures, convert
from tests.test_pretrained import FIXTURES, relative_error, state_dict_index

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

h5py = pytest.importorskip("h5py")

# Each fixture (Keras's `NASNet(penultimate_filters=192, num_blocks=1, stem_block_filters=12)`,
# 10 classes) under a name that loads it, with the small network's fields. Mobile's
# `skip_reduction=False` (at 66 px: even maps) and Large's True (at 72 px: odd maps too) are the
# registry networks' own `skip_reduction_layer_input`.
SMALL = {"num_cells": 3, "num_conv_filters": 8, "stem_multiplier": 0.375}
CASES = {"keras_nasnet_mobile": "keras_nasnet_mobile", "keras_nasnet_large": "nasnet_large"}
KERAS = {"use_aux_head": False, "strided_pool_padding": "ZEROS", "bn_epsilon": 1e-3}


def path(case):
    return FIXTURES / "parity" / case / "model.h5"


@functools.cache
def loaded(case):
    # XLA's own convolutions, as tests/test_pretrained_nasnet.py (why: there).
    xla = functools.partial(Conv, impl="xla")
    return nets_factory.load_pretrained(CASES[case], path(case), conv=xla, **SMALL)


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_are_kerass(case):
    network_fn, variables = loaded(case)
    reference = load_file(FIXTURES / "parity" / case / "expected.safetensors")
    logits, _ = jax.jit(network_fn.apply)(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) <= 1e-4
    assert {key: getattr(network_fn.module, key) for key in KERAS} == KERAS
    assert not any(k.startswith("aux_") for k in variables["params"])
    info = network_fn.pretrained
    assert info.source == CASES[case]
    assert info.mean == info.std == (0.5,) * 3 and info.class_names == ()  # 10 classes
    assert info.image_size == (224 if "mobile" in case else 331)


def test_tensorflows_pools_are_refused():
    # Under TensorFlow's 'SAME' pools (Slim's, our default) the 66 px fixture's logits move by 10%
    # (relative; 3.6e-7 under Keras's zero padding): nets/nasnet_cells.STRIDED_POOL_PADDINGS.
    refused = r"trained with strided_pool_padding='ZEROS'; strided_pool_padding='SAME' would"
    with pytest.raises(ValueError, match=refused):
        nets_factory.load_pretrained(
            "nasnet_mobile", path("keras_nasnet_mobile"), strided_pool_padding="SAME", **SMALL
        )


def test_separable_layers_fill_our_depthwise_and_pointwise_modules():
    _, variables = loaded("keras_nasnet_large")
    params = variables["params"]
    with h5py.File(path("keras_nasnet_large")) as f:

        def keras(layer, leaf):
            return np.asarray(f[f"{layer}/{layer}/{leaf}:0"], np.float32)

        # The reduction cell after 1 normal cell is `reduce_1`; its last separable branch is
        # Keras's `reduction_left4` (not `left5`).
        cell = params["reduction_cell_0"]["comb_iter_4_left"]
        depthwise = keras("separable_conv_2_reduction_left4_reduce_1", "depthwise_kernel")
        assert depthwise.shape == (3, 3, 16, 1)  # [kh, kw, channels, multiplier]
        np.testing.assert_array_equal(
            cell["separable_3x3_2_depthwise"]["kernel"], depthwise.reshape(3, 3, 1, 16)
        )
        np.testing.assert_array_equal(
            cell["separable_3x3_2_pointwise"]["kernel"],
            keras("separable_conv_2_reduction_left4_reduce_1", "pointwise_kernel"),
        )
        # Normal cells after the first reduction are numbered one on: our cell_1 is Keras's `2`,
        # reading the older input through a factorized reduction (`adjust_conv_{1,2}`).
        np.testing.assert_array_equal(
            params["cell_1"]["prev_reduction"]["path2_conv"]["kernel"],
            keras("adjust_conv_2_2", "kernel"),
        )
        np.testing.assert_array_equal(
            params["final_layer"]["kernel"], keras("predictions", "kernel")
        )


def test_nasnet_large_takes_timms_files_and_kerass():
    index = state_dict_index()
    large = architectures.ARCHITECTURES["nasnet_large"]
    assert convert.for_keys(large, index["nasnetalarge"]) is large  # timm's, the first layout
    keras_large = convert.for_keys(large, index["keras_nasnet_large"])
    assert keras_large is architectures.ARCHITECTURES["keras_nasnet_large"]
    assert keras_large.framework is convert.KERAS
    # Fine-tuning (`train.py`) builds the network from the conventions of the file's layout.
    fields = nets_weights.conventions(
        "nasnet_large", path("keras_nasnet_large"), {}, nets_factory.networks_map
    )
    assert fields["strided_pool_padding"] == "ZEROS"


def test_another_configurations_file_says_so_in_one_line():
    # The fixture's 8 filters per state into a network of 16.
    with pytest.raises(WeightFileError, match=r"'normal_bn_1_0/moving_mean:0' has shape \(8,\);"):
        nets_factory.load_pretrained(
            "nasnet_mobile", path("keras_nasnet_mobile"), **(SMALL | {"num_conv_filters": 16})
        )

"""load_pretrained for the Inception family: timm's Inception v3 (torchvision's weights, and
timm's ports of Slim's, `tf_in1k`) and torchvision's GoogLeNet, on fixtures of thinned reference
networks (tools/fixtures_inception.py)."""

import functools
import json
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file

import nets_factory
import nets_weights
from nets_weights import published

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

PARITY = Path(__file__).with_name("fixtures") / "parity"
V3 = {"depth_multiplier": 0.1, "min_depth": 8}
# Each fixture: our registry name, its thinning, the architecture the file is found to be, and
# the convention that is not the weights' (None: GoogLeNet's defaults are torchvision's).
CASES = {
    "inception_v3": (
        "inception_v3",
        V3,
        "inception_v3",
        {"batch_norm_scale": True, "count_include_pad": False},
    ),
    "inception_v3_tf": (
        "inception_v3",
        V3,
        "inception_v3.tf_in1k",
        {"batch_norm_scale": True, "count_include_pad": True},
    ),
    "googlenet": ("googlenet", {"depth_multiplier": 1 / 16, "min_depth": 8}, "googlenet", None),
}


def relative_error(logits, reference):
    return float(np.max(np.abs(np.asarray(logits) - reference)) / np.max(np.abs(reference)))


@functools.cache  # read-only: the parity test and the tests of the loaded network share each load
def loaded(case):
    name, kwargs, _, _ = CASES[case]
    return nets_factory.load_pretrained(name, PARITY / case, **kwargs)


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_are_the_references(case):
    name, kwargs, source, wrong = CASES[case]
    network_fn, variables = loaded(case)
    assert network_fn.pretrained.source == source
    reference = load_file(PARITY / case / "expected.safetensors")
    logits, _ = jax.jit(network_fn.apply)(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) <= 1e-4
    if wrong is None:
        return
    # The average pools' convention matters (the BatchNorm scale is a variable: it stays). The
    # relative error is 1.8 (torchvision's weights) and 0.94 (Slim's, where it is also what timm
    # computes with them) on these fixtures. Once from each value: every Slim Inception's pools
    # are `inception_utils.AvgPool`, so inception_v3_tf's case shows it for Slim's weights in
    # Inception v4, Inception-ResNet-v2 and Keras's files too (their tests pin the convention).
    other = nets_factory.get_network_fn(name, 10, create_aux_logits=False, **wrong, **kwargs)
    unmarked = published.without_mark(variables)  # the mark would refuse `other`
    wrong_logits, _ = jax.jit(other.apply)(unmarked, reference["images"])
    assert relative_error(wrong_logits, reference["logits"]) > 0.1


def test_torchvision_weights_load_with_their_conventions_and_without_aux_heads():
    network_fn, variables = loaded("inception_v3")
    info = network_fn.pretrained  # a file without a config: the architecture's inputs
    assert (info.image_size, info.mean, info.std) == (299, (0.5,) * 3, (0.5,) * 3)
    module = network_fn.module
    assert (module.batch_norm_scale, module.count_include_pad, module.create_aux_logits) == (
        True,
        True,
        False,
    )
    tensors = load_file(PARITY / "inception_v3" / "model.safetensors")
    assert any(k.startswith("AuxLogits.") for k in tensors)  # in the file, left out here
    params = variables["params"]
    assert "AuxLogits" not in params
    # Names pair up by position; the Linear classifier becomes the 1x1 convolution.
    np.testing.assert_array_equal(
        params["Mixed_5c"]["Branch_1"]["Conv_1_0c_5x5"]["conv"]["kernel"],
        tensors["Mixed_5c.branch5x5_2.conv.weight"].transpose(2, 3, 1, 0),
    )
    np.testing.assert_array_equal(
        params["Mixed_7b"]["Branch_2"]["Conv2d_0d_3x1"]["BatchNorm"]["scale"],
        tensors["Mixed_7b.branch3x3dbl_3b.bn.weight"],
    )
    np.testing.assert_array_equal(
        params["Logits"]["Conv2d_1c_1x1"]["kernel"], tensors["fc.weight"].T[None, None]
    )
    # Fine-tuning to 3 classes: only the classifier is left to initialise.
    kwargs = nets_weights.conventions(
        "inception_v3", PARITY / "inception_v3", dict(V3), nets_factory.networks_map
    )
    network_fn = nets_factory.get_network_fn("inception_v3", 3, is_training=True, **kwargs)
    images = jax.ShapeDtypeStruct((1, 107, 107, 3), jnp.float32)
    abstract = jax.eval_shape(network_fn.init, jax.random.key(0), images)
    _, kept, _ = nets_weights.fill(
        "inception_v3", PARITY / "inception_v3", network_fn, abstract, nets_factory.networks_map
    )
    assert sorted(kept) == [
        "params/Logits/Conv2d_1c_1x1/bias",
        "params/Logits/Conv2d_1c_1x1/kernel",
    ]
    with pytest.raises(ValueError, match=r"create_aux_logits=False; create_aux_logits=True"):
        nets_factory.load_pretrained(
            "inception_v3", PARITY / "inception_v3", create_aux_logits=True, **V3
        )


def test_the_tag_or_the_name_picks_slims_conventions(tmp_path):
    tf = PARITY / "inception_v3_tf"

    def pools_count_padding(name, path):
        return nets_weights.conventions(name, path, {}, nets_factory.networks_map)[
            "count_include_pad"
        ]

    assert pools_count_padding("inception_v3", tf) is False  # timm's tag in config.json
    bare = tmp_path / "model.safetensors"  # no config.json: the name decides
    shutil.copy(tf / "model.safetensors", bare)
    assert pools_count_padding("inception_v3", bare) is True
    assert pools_count_padding("inception_v3.tf_in1k", bare) is False
    untagged = tmp_path / "untagged"  # a config without timm's tag: a tagged name decides
    shutil.copytree(tf, untagged)
    (untagged / "config.json").write_text(json.dumps({"architecture": "inception_v3"}))
    assert pools_count_padding("inception_v3.tf_in1k", untagged) is False
    assert pools_count_padding("inception_v3", untagged) is True
    with pytest.raises(nets_weights.WeightFileError, match=r"config.json is for 'googlenet'"):
        nets_weights.conventions(
            "inception_v3.tf_in1k", PARITY / "googlenet", {}, nets_factory.networks_map
        )


def test_googlenet_aux_heads_load_when_asked_for_and_fine_tuning_replaces_the_head():
    kwargs = CASES["googlenet"][1]
    tensors = load_file(PARITY / "googlenet" / "model.safetensors")
    assert any(k.startswith(("aux1.", "aux2.")) for k in tensors)
    network_fn, variables = loaded("googlenet")
    info = network_fn.pretrained  # torchvision's transform_input, as preprocessing
    assert (info.image_size, info.mean, info.std) == (224, (0.5,) * 3, (0.5,) * 3)
    assert "aux1" not in variables["params"] and "aux2" not in variables["params"]
    network_fn = nets_factory.get_network_fn("googlenet", 10, aux_logits=True, **kwargs)
    images = jax.ShapeDtypeStruct((1, 224, 224, 3), jnp.float32)
    abstract = jax.eval_shape(network_fn.init, jax.random.key(0), images)
    filled, kept, _ = nets_weights.fill(
        "googlenet", PARITY / "googlenet", network_fn, abstract, nets_factory.networks_map
    )
    assert kept == []
    np.testing.assert_array_equal(
        filled["params"]["aux2"]["fc1"]["kernel"], tensors["aux2.fc1.weight"].T
    )
    # A new class count: the classifier (and GoogLeNet's auxiliary ones, left out) are dropped.
    network_fn = nets_factory.get_network_fn("googlenet", 3, **kwargs)
    abstract = jax.eval_shape(network_fn.init, jax.random.key(0), images)
    _, kept, _ = nets_weights.fill(
        "googlenet", PARITY / "googlenet", network_fn, abstract, nets_factory.networks_map
    )
    assert sorted(kept) == ["params/fc/bias", "params/fc/kernel"]

"""load_pretrained for timm's Inception v4 and Inception-ResNet-v2 (its ports of Slim's
checkpoints), on fixtures of thinned reference networks (tools/fixtures_inception_v4.py)."""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file

import nets_factory
import nets_weights

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

PARITY = Path(__file__).with_name("fixtures") / "parity"
# Each fixture's thinning (tools/fixtures_inception_v4.py), as load_pretrained arguments.
THIN = {
    "inception_v4": {"depth_multiplier": 0.1, "min_depth": 8},
    "inception_resnet_v2": {"depth_multiplier": 1 / 16, "min_depth": 8},
}


def relative_error(logits, reference):
    return float(np.max(np.abs(np.asarray(logits) - reference)) / np.max(np.abs(reference)))


@pytest.mark.parametrize("name", sorted(THIN))
def test_logits_are_the_references(name):
    network_fn, variables = nets_factory.load_pretrained(name, PARITY / name, **THIN[name])
    assert network_fn.pretrained.source == name  # the config's `tf_in1k` tag needs no entry
    reference = load_file(PARITY / name / "expected.safetensors")
    logits, _ = jax.jit(network_fn.apply)(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) <= 1e-4
    # That PyTorch's average pools (counting the padding) compute another function of Slim's
    # weights (0.58 for v4, 0.32 for Inception-ResNet-v2 on these fixtures) is shown once for
    # every Slim Inception, whose pools are one layer (`inception_utils.AvgPool`, its field from
    # the shared builder): test_pretrained_inception.py's inception_v3_tf case, where the other
    # network compiles in a fraction of these (Inception-ResNet-v2's: ~5 s of CPU).
    # test_names_pair_up_and_the_conventions_are_timms pins the convention here.


# Our variables (module path and leaf) and the timm keys that fill them, paired by position.
PAIRS = {
    "inception_v4": {
        "Conv2d_2b_3x3/conv/kernel": "features.2.conv.weight",
        "Mixed_3a/Branch_1/Conv2d_0a_3x3/BatchNorm/scale": "features.3.conv.bn.weight",
        "Mixed_4a/Branch_1/Conv2d_0c_7x1/conv/kernel": "features.4.branch1.2.conv.weight",
        "Mixed_5a/Branch_0/Conv2d_1a_3x3/conv/kernel": "features.5.conv.conv.weight",
        "Mixed_5e/Branch_3/Conv2d_0b_1x1/BatchNorm/bias": "features.9.branch3.1.bn.bias",
        "Mixed_6h/Branch_0/Conv2d_0a_1x1/conv/kernel": "features.17.branch0.conv.weight",
        "Mixed_7a/Branch_1/Conv2d_0c_7x1/conv/kernel": "features.18.branch1.2.conv.weight",
        "Mixed_7d/Branch_1/Conv2d_0c_3x1/conv/kernel": "features.21.branch1_1b.conv.weight",
        "Mixed_7d/Branch_2/Conv2d_0d_1x3/conv/kernel": "features.21.branch2_3a.conv.weight",
        "Logits/Logits/kernel": "last_linear.weight",
    },
    "inception_resnet_v2": {
        "Conv2d_4a_3x3/conv/kernel": "conv2d_4a.conv.weight",
        "Mixed_5b/Branch_3/Conv2d_0b_1x1/conv/kernel": "mixed_5b.branch3.1.conv.weight",
        "Repeat/block35_10/Branch_2/Conv2d_0c_3x3/BatchNorm/scale": "repeat.9.branch2.2.bn.weight",
        "Mixed_6a/Branch_0/Conv2d_1a_3x3/conv/kernel": "mixed_6a.branch0.conv.weight",
        "Repeat_1/block17_20/Conv2d_1x1/kernel": "repeat_1.19.conv2d.weight",
        "Mixed_7a/Branch_2/Conv2d_1a_3x3/conv/kernel": "mixed_7a.branch2.2.conv.weight",
        "Repeat_2/block8_1/Conv2d_1x1/bias": "repeat_2.0.conv2d.bias",
        "Block8/Branch_1/Conv2d_0c_3x1/conv/kernel": "block8.branch1.2.conv.weight",
        "Conv2d_7b_1x1/BatchNorm/bias": "conv2d_7b.bn.bias",
        "Logits/Logits/kernel": "classif.weight",
    },
}


def torch_to_ours(tensor):
    """OIHW -> HWIO, [out, in] -> [in, out]."""
    return tensor.transpose(2, 3, 1, 0) if tensor.ndim == 4 else tensor.T


@pytest.mark.parametrize("name", sorted(THIN))
def test_names_pair_up_and_the_conventions_are_timms(name):
    path = PARITY / name
    kwargs = nets_weights.conventions(name, path, dict(THIN[name]), nets_factory.networks_map)
    assert {k: kwargs[k] for k in ("batch_norm_scale", "count_include_pad")} == {
        "batch_norm_scale": True,  # the port's BatchNorm scale (ones in the published files)
        "count_include_pad": False,  # TensorFlow's pools, which timm's write out
    }
    assert kwargs["create_aux_logits"] is False  # timm did not port Slim's AuxLogits
    network_fn = nets_factory.get_network_fn(name, 10, **kwargs)
    images = jax.ShapeDtypeStruct((1, 75, 75, 3), jnp.float32)
    abstract = jax.eval_shape(network_fn.init, jax.random.key(0), images)
    filled, kept, info = nets_weights.fill(
        name, path, network_fn, abstract, nets_factory.networks_map
    )
    assert kept == [] and info.class_names == ()  # 10 classes: no ImageNet names
    crop = {"inception_v4": 0.875, "inception_resnet_v2": 0.8975}[name]
    assert (info.image_size, info.crop_fraction, info.interpolation) == (299, crop, "bicubic")
    assert info.mean == info.std == (0.5,) * 3
    tensors = load_file(path / "model.safetensors")
    for ours, key in PAIRS[name].items():
        leaf = filled["params"]
        for part in ours.split("/"):
            leaf = leaf[part]
        theirs = torch_to_ours(tensors[key]) if ours.endswith("kernel") else tensors[key]
        np.testing.assert_array_equal(leaf, theirs, err_msg=f"{ours} <- {key}")
    # Fine-tuning to 3 classes: only the classifier is left to initialise. (Its variables are
    # these but the classifier's, 3 wide: no second trace.)
    network_fn = nets_factory.get_network_fn(name, 3, is_training=True, **kwargs)
    logits = abstract["params"]["Logits"]
    logits["Logits"] = {
        leaf: jax.ShapeDtypeStruct((*shape.shape[:-1], 3), shape.dtype)
        for leaf, shape in logits["Logits"].items()
    }
    _, kept, _ = nets_weights.fill(name, path, network_fn, abstract, nets_factory.networks_map)
    assert sorted(kept) == ["params/Logits/Logits/bias", "params/Logits/Logits/kernel"]
    with pytest.raises(ValueError, match=r"count_include_pad=False; count_include_pad=True"):
        nets_factory.load_pretrained(name, path, count_include_pad=True, **THIN[name])

"""load_pretrained on Keras Applications' InceptionV3 and InceptionResNetV2 HDF5 files: parity on
thinned networks Keras built (tools/fixtures_keras_inception.py), the layers paired by the order
Keras built them whatever their numbers, and the conventions."""

import functools
import re

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file

import nets_factory
import nets_weights
from nets_weights import architectures
from nets_weights.keras_inception import renumber
from tests.test_pretrained import FIXTURES, relative_error, state_dict_index

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

h5py = pytest.importorskip("h5py")

# Each fixture's thinning (tools/fixtures_keras_inception.py), as load_pretrained arguments.
THIN = {
    "keras_inception_v3": {"depth_multiplier": 0.1, "min_depth": 8},
    "keras_inception_resnet_v2": {"depth_multiplier": 1 / 16, "min_depth": 8},
}
# Each fixture under its Keras name and our registry name (whose timm entry takes Keras's files
# by their `predictions` classifier).
NAMES = {
    "keras_inception_v3": "inception_v3",
    "keras_inception_resnet_v2": "inception_resnet_v2",
}
PARITY = FIXTURES / "parity"
SLIM = {"batch_norm_scale": False, "count_include_pad": False, "create_aux_logits": False}


def fixture(case):
    return PARITY / case / "model.h5"


@functools.cache
def load(case):
    """`load_pretrained` of a fixture under its Keras name, once per test process."""
    return nets_factory.load_pretrained(case, fixture(case), **THIN[case])


def text(name):
    return name.decode() if isinstance(name, bytes) else str(name)


@pytest.mark.parametrize("case", sorted(THIN))
def test_logits_are_kerass_under_either_name(case):
    network_fn, variables = load(case)
    reference = load_file(PARITY / case / "expected.safetensors")
    logits, _ = jax.jit(network_fn.apply)(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) <= 1e-4
    assert {key: getattr(network_fn.module, key) for key in SLIM} == SLIM
    info = network_fn.pretrained
    assert (info.image_size, info.mean, info.std) == (299, (0.5,) * 3, (0.5,) * 3)
    assert info.class_names == ()  # 10 classes
    ours_fn, ours = nets_factory.load_pretrained(NAMES[case], fixture(case), **THIN[case])
    assert ours_fn.name == NAMES[case] and ours_fn.pretrained.source == NAMES[case]
    jax.tree.map(np.testing.assert_array_equal, ours, variables)


def test_renumber_ranks_each_kind_of_automatic_name():
    keys = ["conv2d_10/kernel:0", "conv2d/kernel:0", "batch_normalization_7/beta:0"]
    keys += ["conv2d_2/kernel:0", "block35_1_conv/bias:0", "conv_7b_bn/beta:0", "mixed_5b/x:0"]
    assert renumber(keys) == {
        "conv2d_10/kernel:0": "conv2d_3/kernel:0",  # by number, not as text
        "conv2d/kernel:0": "conv2d_1/kernel:0",  # Keras 3's first
        "batch_normalization_7/beta:0": "batch_normalization_1/beta:0",
        "conv2d_2/kernel:0": "conv2d_2/kernel:0",
        "block35_1_conv/bias:0": "block35_1_conv/bias:0",  # named layers stay
        "conv_7b_bn/beta:0": "conv_7b_bn/beta:0",
        "mixed_5b/x:0": "mixed_5b/x:0",
    }


# Layers of the published files, numbered as other ports of them name them (InceptionV3's
# `conv2d_94` is its last block's 192-channel pool convolution; InceptionResNetV2's the 128-channel
# 1x1 convolution that begins block17_5's second branch), with their kernels in the full-size
# index.
PUBLISHED = {
    "keras_inception_v3": {
        ("Mixed_5b", "Branch_2", "Conv2d_0a_1x1", "conv"): ("conv2d_9", (1, 1, 192, 64)),
        ("Mixed_7c", "Branch_3", "Conv2d_0b_1x1", "BatchNorm"): ("batch_normalization_94", None),
        ("Mixed_7c", "Branch_3", "Conv2d_0b_1x1", "conv"): ("conv2d_94", (1, 1, 2048, 192)),
    },
    "keras_inception_resnet_v2": {
        ("Mixed_5b", "Branch_0", "Conv2d_1x1", "conv"): ("conv2d_6", (1, 1, 192, 96)),
        ("Repeat", "block35_1", "Branch_0", "Conv2d_1x1", "conv"): ("conv2d_13", (1, 1, 320, 32)),
        ("Repeat_1", "block17_5", "Branch_1", "Conv2d_0a_1x1", "conv"): (
            "conv2d_94",
            (1, 1, 1088, 128),
        ),
        ("Repeat_2", "block8_3", "Conv2d_1x1"): ("block8_3_conv", (1, 1, 448, 2080)),
        ("Block8", "Conv2d_1x1"): ("block8_10_conv", (1, 1, 448, 2080)),
        ("Conv2d_7b_1x1", "BatchNorm"): ("conv_7b_bn", None),
        ("Block8", "Branch_1", "Conv2d_0c_3x1", "conv"): ("conv2d_203", (3, 1, 224, 256)),
    },
}


@pytest.mark.parametrize("case", sorted(PUBLISHED))
def test_our_layers_take_the_published_files_names(case):
    layout = architectures.ARCHITECTURES[case].layout(None)
    index = state_dict_index()[case]
    for path, (name, shape) in PUBLISHED[case].items():
        assert layout(path) == name, path
        if shape:
            assert index[f"{name}/kernel:0"] == shape


def rewrite(source, target, rename, reorder=lambda layers: layers):
    """A copy of the Keras file `source` with each layer named `rename(name)` and the root's
    `layer_names` in the order `reorder` gives."""
    with h5py.File(source) as f, h5py.File(target, "w") as out:
        layers = [text(name) for name in f.attrs["layer_names"]]
        out.attrs["layer_names"] = [rename(name).encode() for name in reorder(layers)]
        for layer in layers:
            group = out.create_group(rename(layer))
            leaves = [text(name).partition("/")[2] for name in f[layer].attrs["weight_names"]]
            names = [f"{rename(layer)}/{leaf}" for leaf in leaves]
            group.attrs["weight_names"] = [name.encode() for name in names]
            for leaf, name in zip(leaves, names, strict=True):
                group.create_dataset(name, data=f[layer][f"{layer}/{leaf}"][()])


def renumbered(offset):
    """Keras 2's automatic names numbered from `1 + offset` instead of 1 (`conv2d` for 0)."""

    def rename(name):
        automatic = re.fullmatch(r"(conv2d|batch_normalization)_(\d+)", name)
        if not automatic:
            return name
        number = int(automatic[2]) + offset
        return f"{automatic[1]}_{number}" if number else automatic[1]

    return rename


def test_the_files_layer_order_is_not_the_build_order():
    # Keras lists a model's layers by their depth in the graph: Mixed_5b's longest branch's first
    # layer (`conv2d_9`) comes first, its first branch's (`conv2d_6`) after its second's.
    with h5py.File(fixture("keras_inception_v3")) as f:
        layers = [text(name) for name in f.attrs["layer_names"]]
    assert layers.index("conv2d_9") < layers.index("conv2d_7") < layers.index("conv2d_6")


@pytest.mark.parametrize(
    "offset, reorder",
    [(-1, lambda layers: layers), (93, lambda layers: layers[::-1])],
    ids=["keras3_from_0", "second_model_of_a_session_reversed"],
)
def test_any_numbering_and_layer_order_loads_the_same(tmp_path, offset, reorder):
    case = "keras_inception_resnet_v2"
    rewrite(fixture(case), tmp_path / "model.h5", renumbered(offset), reorder)
    with h5py.File(tmp_path / "model.h5") as f:
        assert ("conv2d" in f) == (offset == -1) and ("conv2d_296" in f) == (offset == 93)
    _, theirs = nets_factory.load_pretrained(case, tmp_path / "model.h5", **THIN[case])
    jax.tree.map(np.testing.assert_array_equal, theirs, load(case)[1])


def test_dense_predictions_fill_our_1x1_logits_convolution():
    case = "keras_inception_v3"
    _, variables = load(case)
    with h5py.File(fixture(case)) as f:
        kernel = np.asarray(f["predictions/predictions/kernel:0"], np.float32)
    ours = np.asarray(variables["params"]["Logits"]["Conv2d_1c_1x1"]["kernel"])
    assert kernel.shape == (203, 10)  # Mixed_7c's thinned 32 + 2 * 38 + 2 * 38 + 19 channels
    np.testing.assert_array_equal(ours, kernel[None, None])


def test_timm_and_torchvision_conventions_raise():
    case = "keras_inception_v3"
    # The registry name reads the file's keys: Keras's conventions, not timm's.
    assert (
        nets_weights.conventions("inception_v3", fixture(case), {}, nets_factory.networks_map)
        == SLIM
    )
    for change in ({"batch_norm_scale": True}, {"count_include_pad": True}):
        key, value = next(iter(change.items()))
        with pytest.raises(ValueError, match=rf"trained with {key}=False; {key}={value}"):
            nets_factory.load_pretrained("inception_v3", fixture(case), **change, **THIN[case])
    # That PyTorch's average pools (counting the padding) compute another function of Slim's
    # weights (26% on this fixture) is shown once for all Slim Inceptions, whose pools are one
    # layer: test_pretrained_inception.py's inception_v3_tf case.

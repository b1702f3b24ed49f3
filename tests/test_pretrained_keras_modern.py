"""load_pretrained on Keras Applications' EfficientNet (V1, V2), DenseNet, ConvNeXt and RegNet
files: parity with Keras's builders on fixtures they produced (tools/fixtures_keras_modern.py;
RegNet's by Keras 2, tools/fixtures_keras_regnet.py), the inputs Keras's own pipeline feeds them,
their conventions, and one-line errors for files under the wrong name."""

import functools
import shutil

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file

import nets_factory
from nets_weights import WeightFileError, published
from nets_weights.architectures import ARCHITECTURES, IMAGENET_MEAN, IMAGENET_STD
from tests.test_pretrained import FIXTURES, relative_error

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

h5py = pytest.importorskip("h5py")

# Keras's `EfficientNet(width_coefficient=0.1, depth_coefficient=0.5)`, `DenseNet([1, 1, 1, 1])`
# and `ConvNeXt((1, 1, 2, 1), (8, 16, 24, 32), name="convnext_tiny")`, 10 classes, at 72 px (even
# and odd maps), as our networks' fields.
EFFICIENTNET = {"width_multiplier": 0.1, "depth_multiplier": 0.5}
DENSENET = {"block_config": (1, 1, 1, 1)}
CONVNEXT = {"depths": (1, 1, 2, 1), "widths": (8, 16, 24, 32)}
B0 = ("keras_efficientnet_b0", "keras_efficientnet")
# Keras's `EfficientNetV2(0.125, 0.3, name="efficientnetv2-s")`: V2-S's table, 8-32 channels.
EFFICIENTNETV2 = {"width_multiplier": 0.125, "depth_multiplier": 0.3}
SMALL = {"keras_efficientnet": EFFICIENTNET, "keras_densenet": DENSENET, "keras_convnext": CONVNEXT}
# Keras's `RegNet((1, 1, 2, 2), (8, 16, 32, 64), 8, ...)`: the stages of these parameters.
REGNET = {"w0": 8, "wa": 10, "wm": 2, "depth": 6, "group_width": 8}
SMALL |= {"keras_efficientnetv2": EFFICIENTNETV2, "keras_regnetx": REGNET, "keras_regnety": REGNET}
V2_S = ("keras_efficientnetv2_s", "keras_efficientnetv2")


def path(case):
    return FIXTURES / "parity" / case / "model.h5"


def expected(case):
    return load_file(FIXTURES / "parity" / case / "expected.safetensors")


@functools.cache
def loaded(name, case):
    return nets_factory.load_pretrained(name, path(case), **SMALL[case])


@functools.cache
def jitted(network_fn):
    return jax.jit(network_fn.apply)


def logits(network_fn, variables, images):
    return jitted(network_fn)(variables, np.asarray(images, np.float32))[0]


def test_efficientnet_logits_are_kerass_from_its_0_255_inputs():
    # Keras's model rescales and normalizes inside; ours takes what the `Pretrained` record says.
    network_fn, variables = loaded(*B0)
    reference = expected("keras_efficientnet")
    info = network_fn.pretrained
    assert (info.mean, info.std) == (IMAGENET_MEAN, IMAGENET_STD)
    assert (info.image_size, info.crop_fraction, info.interpolation) == (224, 0.875, "bicubic")
    assert info.source == "keras_efficientnet_b0" and info.class_names == ()  # 10 classes
    images = (reference["images"] / 255 - np.array(info.mean)) / np.array(info.std)
    ours = logits(network_fn, variables, images.astype(np.float32))
    assert relative_error(ours, reference["logits"]) <= 1e-4  # 3.8e-7
    module = network_fn.module
    assert (module.padding, module.bn_epsilon) == ("SAME", 1e-3)  # the `tf_` conventions
    # The Normalization's std-as-variance read as a variance (Keras given the file's path, not
    # `weights='imagenet'`) is another function: 7e-3 away.
    quirk = (reference["images"] / 255 - np.array(info.mean)) / np.sqrt(np.array(info.std))
    assert relative_error(logits(network_fn, variables, quirk), reference["logits"]) > 1e-3


def test_tf_efficientnet_takes_kerass_files_and_torchs_conventions_are_refused():
    network_fn, variables = loaded("tf_efficientnet_b0", "keras_efficientnet")
    keras_fn, keras_variables = loaded(*B0)
    assert network_fn.pretrained.source == "tf_efficientnet_b0"
    assert network_fn.module == keras_fn.module
    jax.tree.map(np.testing.assert_array_equal, variables, keras_variables)
    # timm's PyTorch padding moves the 72 px fixture's logits by 9e-3.
    with pytest.raises(ValueError, match=r"trained with padding='SAME'; padding='SYMMETRIC' would"):
        nets_factory.load_pretrained(
            "keras_efficientnet_b0", path("keras_efficientnet"), padding="SYMMETRIC", **EFFICIENTNET
        )
    with pytest.raises(
        WeightFileError,
        match=r"no classifier 'classifier.weight': not a efficientnet_b0 file \(files with its "
        r"classifier key load as keras_efficientnet_b0, tf_efficientnet_b0\)$",
    ):
        nets_factory.load_pretrained("efficientnet_b0", path("keras_efficientnet"), **EFFICIENTNET)


def test_an_efficientnet_file_with_other_normalization_is_refused(tmp_path):
    # The layer's name is Keras's session counter's: `normalization_3` is the same layer.
    shutil.copy(path("keras_efficientnet"), tmp_path / "model.h5")
    with h5py.File(tmp_path / "model.h5", "r+") as f:
        f.move("normalization", "normalization_3")
        f.attrs["layer_names"] = [
            "normalization_3" if name == "normalization" else name
            for name in f.attrs["layer_names"]
        ]
        group = f["normalization_3"]
        for leaf in ("mean", "variance", "count"):
            group.move(f"normalization/{leaf}:0", f"normalization_3/{leaf}:0")
        group.attrs["weight_names"] = [
            f"normalization_3/{leaf}:0" for leaf in ("mean", "variance", "count")
        ]
    _, variables = nets_factory.load_pretrained(
        "keras_efficientnet_b0", tmp_path / "model.h5", **EFFICIENTNET
    )
    jax.tree.map(np.testing.assert_array_equal, variables, loaded(*B0)[1])
    # A file whose Normalization holds the squared std (an adapted layer, or Keras's layer given
    # the right variance) computes `(x / 255 - mean) / std` only without Keras's extra rescaling.
    with h5py.File(tmp_path / "model.h5", "r+") as f:
        f["normalization_3/normalization_3/variance:0"][...] = np.square(IMAGENET_STD)
    with pytest.raises(
        WeightFileError,
        match=r"input normalization 'normalization/variance:0' is \[0.052441, 0.050176, 0.050625"
        r"\], not the published \[0.229, 0.224, 0.225\]: its inputs would need other",
    ):
        nets_factory.load_pretrained("keras_efficientnet_b0", tmp_path / "model.h5", **EFFICIENTNET)


def test_densenet_logits_are_kerass():
    network_fn, variables = loaded("keras_densenet121", "keras_densenet")
    reference = expected("keras_densenet")
    ours = logits(network_fn, variables, reference["images"])
    assert relative_error(ours, reference["logits"]) <= 1e-4  # 2.5e-7
    assert network_fn.module.bn_epsilon == 1.001e-5
    info = network_fn.pretrained  # `densenet.preprocess_input`: mode 'torch'
    assert (info.mean, info.std) == (IMAGENET_MEAN, IMAGENET_STD)


@pytest.mark.parametrize(
    ("name", "keras", "case"),
    [
        ("densenet121", "keras_densenet121", "keras_densenet"),
        ("convnext_tiny", "keras_convnext_tiny", "keras_convnext"),
        ("tf_efficientnetv2_s", "keras_efficientnetv2_s", "keras_efficientnetv2"),
    ],
)
def test_registry_names_take_kerass_files(name, keras, case):
    # The file's classifier (`predictions`, `convnext_tiny_head_dense`) tells Keras's layout.
    network_fn, variables = loaded(name, case)
    keras_fn, keras_variables = loaded(keras, case)
    assert network_fn.pretrained.source == name and network_fn.module == keras_fn.module
    jax.tree.map(np.testing.assert_array_equal, variables, keras_variables)


def test_densenet_epsilon_is_kerass_and_other_spellings_load(tmp_path):
    # With every running variance 0, BatchNorm divides by sqrt(epsilon): Keras's 1.001e-5 and
    # PyTorch's 1e-5 give logits 5e-4 apart.
    network_fn, variables = loaded("keras_densenet121", "keras_densenet")
    zeroed = {**variables, "batch_stats": jax.tree.map(np.zeros_like, variables["batch_stats"])}
    images = expected("keras_densenet")["images"]
    torch_like = nets_factory.get_network_fn("densenet121", 10, **DENSENET)
    keras = logits(network_fn, zeroed, images)
    torch_logits = logits(torch_like, published.without_mark(zeroed), images)
    assert relative_error(torch_logits, np.asarray(keras)) > 1e-4
    with pytest.raises(ValueError, match=r"trained with bn_epsilon=1.001e-05; bn_epsilon=1e-05"):
        nets_factory.load_pretrained(
            "keras_densenet121", path("keras_densenet"), bn_epsilon=1e-5, **DENSENET
        )
    # Keras 3's `conv1_conv` and keras-applications' `fc1000` are the same layers.
    with h5py.File(path("keras_densenet")) as f, h5py.File(tmp_path / "model.h5", "w") as out:
        names = {"conv1/conv": "conv1_conv", "conv1/bn": "conv1_bn", "predictions": "fc1000"}
        layers = [names.get(layer, layer) for layer in f.attrs["layer_names"]]
        out.attrs["layer_names"] = layers
        for old, new in zip(f.attrs["layer_names"], layers, strict=True):
            group = out.create_group(new)
            leaves = [w.rpartition("/")[2] for w in f[old].attrs["weight_names"]]
            group.attrs["weight_names"] = [f"{new}/{leaf}" for leaf in leaves]
            for leaf in leaves:
                group[f"{new}/{leaf}"] = f[old][f"{old}/{leaf}"][...]
    _, renamed = nets_factory.load_pretrained("densenet121", tmp_path / "model.h5", **DENSENET)
    jax.tree.map(np.testing.assert_array_equal, renamed, variables)


def test_convnext_logits_are_kerass_from_its_0_255_inputs():
    network_fn, variables = loaded("keras_convnext_tiny", "keras_convnext")
    reference = expected("keras_convnext")
    info = network_fn.pretrained  # Keras's in-model Normalization: ImageNet's, of [0, 255]
    assert (info.mean, info.std, info.interpolation) == (IMAGENET_MEAN, IMAGENET_STD, "bicubic")
    images = (reference["images"] / 255 - np.array(info.mean)) / np.array(info.std)
    ours = logits(network_fn, variables, images.astype(np.float32))
    assert relative_error(ours, reference["logits"]) <= 1e-4  # 3.5e-7


def test_convnext_sequential_layers_fill_our_stem_and_downsampling():
    # Keras's stem and downsampling layers are `Sequential`s: their weights are keyed by the inner
    # layer (a LayerNorm's `beta:0` beside a convolution's `bias:0` in one group).
    _, variables = loaded("keras_convnext_tiny", "keras_convnext")
    params = variables["params"]
    with h5py.File(path("keras_convnext")) as f:
        stem = f["convnext_tiny_stem"]
        np.testing.assert_array_equal(
            params["stem_norm"]["bias"], stem["convnext_tiny_stem_layernorm/beta:0"][...]
        )
        np.testing.assert_array_equal(
            params["stem_conv"]["bias"], stem["convnext_tiny_stem_conv/bias:0"][...]
        )
        down = f["convnext_tiny_downsampling_block_2"]
        np.testing.assert_array_equal(
            params["stages_3"]["downsample_conv"]["kernel"],
            down["convnext_tiny_downsampling_conv_2/kernel:0"][...],
        )
        scale = f["convnext_tiny_stage_2_block_1_layer_scale"]
        np.testing.assert_array_equal(
            params["stages_2"]["blocks_1"]["gamma"],
            scale["convnext_tiny_stage_2_block_1_layer_scale/gamma:0"][...],
        )


def test_efficientnetv2_logits_are_kerass_from_its_0_255_inputs():
    # Keras's V2-S/M/L rescale inside, `x / 128 - 1`: the `Pretrained` record's mean and std.
    network_fn, variables = loaded(*V2_S)
    reference = expected("keras_efficientnetv2")
    info = network_fn.pretrained
    assert info.mean == info.std == (128 / 255,) * 3
    assert (info.image_size, info.crop_fraction, info.interpolation) == (384, 1.0, "bicubic")
    assert info.source == "keras_efficientnetv2_s" and info.class_names == ()
    images = (reference["images"] / 255 - np.array(info.mean)) / np.array(info.std)
    ours = logits(network_fn, variables, images.astype(np.float32))
    assert relative_error(ours, reference["logits"]) <= 1e-4  # 3.9e-7
    module = network_fn.module
    assert (module.padding, module.bn_epsilon) == ("SAME", 1e-3)  # the `tf_` conventions
    # timm's [-1, 1] (`x / 127.5 - 1`) is another function: 7e-4 away.
    timms = reference["images"] / 127.5 - 1
    assert relative_error(logits(network_fn, variables, timms), reference["logits"]) > 1e-4


def test_efficientnetv2_first_blocks_are_our_conv_and_timms_own_name_refuses_the_file():
    _, variables = loaded(*V2_S)
    # Keras's unexpanded Fused-MBConv (`block1a_project_conv`, kxk) is our `conv`.
    with h5py.File(path("keras_efficientnetv2")) as f:
        kernel = f["block1a_project_conv/block1a_project_conv/kernel:0"][...]
    np.testing.assert_array_equal(
        variables["params"]["blocks_0_0"]["conv"]["conv"]["kernel"], kernel
    )
    with pytest.raises(
        WeightFileError,
        match=r"no classifier 'classifier.weight': not a efficientnetv2_s file \(files with its "
        r"classifier key load as keras_efficientnetv2_s, tf_efficientnetv2_s\)$",
    ):
        nets_factory.load_pretrained(
            "efficientnetv2_s", path("keras_efficientnetv2"), **EFFICIENTNETV2
        )


@pytest.mark.parametrize(
    ("name", "case"),
    [("keras_regnetx_004", "keras_regnetx"), ("keras_regnety_008", "keras_regnety")],
)
def test_regnet_logits_are_kerass_from_its_0_255_inputs(name, case):
    network_fn, variables = loaded(name, case)
    reference = expected(case)
    stages = network_fn.module.stages  # Keras's widths and depths
    assert [(s.width, s.depth, s.group_width) for s in stages][1:3] == [(16, 1, 8), (32, 2, 8)]
    info = network_fn.pretrained  # Keras's in-model `Rescaling(1 / 255)`, nothing else
    assert (info.mean, info.std) == ((0.0,) * 3, (1.0,) * 3)
    images = reference["images"] / 255
    ours = logits(network_fn, variables, images)
    assert relative_error(ours, reference["logits"]) <= 1e-4  # 3.4e-7 (X), 4.0e-7 (Y)


def test_regnet_registry_names_take_kerass_files_with_their_padding():
    # The classifier, `2head_dense` (Keras's session counter), tells Keras's layout.
    network_fn, variables = loaded("regnety_008", "keras_regnety")
    keras_fn, keras_variables = loaded("keras_regnety_008", "keras_regnety")
    assert network_fn.pretrained.source == "regnety_008" and network_fn.module == keras_fn.module
    jax.tree.map(np.testing.assert_array_equal, variables, keras_variables)
    with h5py.File(path("keras_regnety")) as f:
        kernel = f["2head_dense/2head_dense/kernel:0"][...]
    np.testing.assert_array_equal(variables["params"]["head"]["fc"]["kernel"], kernel)
    # Keras pads the stem and the strided 3x3 convolutions 'SAME': timm's symmetric padding is
    # 15% away on the fixture's 72, 36 and 18 pixel maps.
    assert network_fn.module.padding == "SAME"
    symmetric = nets_factory.get_network_fn("regnety_008", 10, **REGNET)
    assert symmetric.module.padding == "SYMMETRIC"
    reference = expected("keras_regnety")
    unmarked = published.without_mark(variables)  # the mark would refuse `symmetric`
    symmetric_logits = logits(symmetric, unmarked, reference["images"] / 255)
    assert relative_error(symmetric_logits, reference["logits"]) > 1e-2
    with pytest.raises(ValueError, match=r"trained with padding='SAME'; padding='SYMMETRIC' would"):
        nets_factory.load_pretrained(
            "regnety_008", path("keras_regnety"), padding="SYMMETRIC", **REGNET
        )


# Keras 2's RegNets that load: `regnet.MODEL_CONFIGS`' depths and widths, and the groups of each
# stage's 3x3 convolutions as Keras builds them (`filters // group_width`; X080's first stage,
# 80 channels of group width 120, gets one group, as ours).
KERAS_REGNETS = {
    "regnetx004": ((1, 2, 7, 12), (32, 64, 160, 384), (2, 4, 10, 24)),
    "regnetx008": ((1, 3, 7, 5), (64, 128, 288, 672), (4, 8, 18, 42)),
    "regnetx016": ((2, 4, 10, 2), (72, 168, 408, 912), (3, 7, 17, 38)),
    "regnetx032": ((2, 6, 15, 2), (96, 192, 432, 1008), (2, 4, 9, 21)),
    "regnetx080": ((2, 5, 15, 1), (80, 240, 720, 1920), (1, 2, 6, 16)),
    "regnetx160": ((2, 6, 13, 1), (256, 512, 896, 2048), (2, 4, 7, 16)),
    "regnety004": ((1, 3, 6, 6), (48, 104, 208, 440), (6, 13, 26, 55)),
    "regnety008": ((1, 3, 8, 2), (64, 128, 320, 768), (4, 8, 20, 48)),
    "regnety016": ((2, 6, 17, 2), (48, 120, 336, 888), (2, 5, 14, 37)),
    "regnety032": ((2, 5, 13, 1), (72, 216, 576, 1512), (3, 9, 24, 63)),
    "regnety080": ((2, 4, 10, 1), (168, 448, 896, 2016), (3, 8, 16, 36)),
    "regnety160": ((2, 4, 11, 1), (224, 448, 1232, 3024), (2, 4, 11, 27)),
}


def test_kerass_regnets_are_our_networks():
    keras = {n.removeprefix("keras_"): a for n, a in ARCHITECTURES.items() if "keras_regnet" in n}
    assert sorted(keras) == sorted(f"{m[:7]}_{m[7:]}" for m in KERAS_REGNETS)
    for model, stages in KERAS_REGNETS.items():
        arch = keras[f"{model[:7]}_{model[7:]}"]
        module = nets_factory.get_network_fn(arch.network, 1000, **arch.convention).module
        ours = [(s.depth, s.width, s.width // s.group_width) for s in module.stages]
        assert ours == list(zip(*stages, strict=True)), model
        assert module.se_ratio == (0.25 if model.startswith("regnety") else 0)
        assert (module.stem_width, module.bottleneck_ratio) == (32, 1.0)

"""load_pretrained for VGG and AlexNet: parity with timm's VGG and torchvision's VGG and AlexNet
(tools/fixtures_vgg.py), both key layouts of VGG's head, and the dense-as-convolution views."""

import shutil

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import nets_factory
import nets_weights
from nets_weights import WeightFileError, architectures, convert, published
from tests.test_pretrained import FIXTURES, expected, relative_error

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

WIDTHS = (8, 16, 16, 24, 24)
ALEXNET = {"widths": (8, 16, 24, 16, 16), "fc_width": 32}

# Each fixture's small reference network, as `load_pretrained` keyword arguments.
PARITY = {
    "vgg_timm": ("vgg11", {"stage_widths": WIDTHS, "fc_width": 32}),
    "vgg_bn_timm": ("vgg16_bn", {"stage_widths": WIDTHS, "fc_width": 32}),
    "vgg_timm_large": (
        "vgg11",
        {"stage_sizes": (1, 1, 2), "stage_widths": WIDTHS[:3], "fc_width": 32},
    ),
    "vgg_bn_torchvision": (
        "vgg11_bn",
        {"stage_sizes": (1, 1, 2), "stage_widths": WIDTHS[:3], "fc_width": 32},
    ),
    "alexnet": ("alexnet", ALEXNET),
    "alexnet_odd": ("alexnet", ALEXNET),
}


def load(case, path=None, **kw):
    name, kwargs = PARITY[case]
    return nets_factory.load_pretrained(name, path or FIXTURES / "parity" / case, **kwargs, **kw)


def logits_of(network_fn, variables, case):
    return jax.jit(network_fn.apply)(variables, expected(case)["images"])[0]


@pytest.mark.parametrize("case", sorted(PARITY))
def test_logits_are_the_references(case):
    network_fn, variables = load(case)
    assert relative_error(logits_of(network_fn, variables, case), expected(case)["logits"]) <= 1e-4
    assert network_fn.pretrained.class_names == ()  # 10 classes


@pytest.mark.parametrize(
    ("case", "larger_maps", "other"),
    [("vgg_timm_large", "slide", "pool"), ("vgg_bn_torchvision", "pool", "slide")],
)
def test_maps_larger_than_7x7_follow_the_files_library(case, larger_maps, other):
    # timm slides fc6 over a 10x10 map and averages; torchvision pools a 9x9 map to 7x7 first.
    path = FIXTURES / "parity" / case
    name, kwargs = PARITY[case]
    assert (
        nets_weights.conventions(name, path, {}, nets_factory.networks_map).get(
            "larger_maps", "pool"
        )
        == larger_maps
    )
    network_fn, variables = load(case)
    assert network_fn.module.larger_maps == larger_maps
    wrong_fn = nets_factory.get_network_fn(name, 10, larger_maps=other, **kwargs)
    wrong_logits = logits_of(wrong_fn, published.without_mark(variables), case)
    error = relative_error(wrong_logits, expected(case)["logits"])
    assert error > 0.01


@pytest.mark.parametrize(
    ("case", "key"),
    [("vgg_bn_torchvision", "classifier.0.weight"), ("alexnet_odd", "classifier.1.weight")],
)
def test_dense_fc6_is_viewed_channel_major(case, key):
    # torchvision's Linear reads the NCHW map flattened channel-major: viewing its weight as
    # (height, width, channels), as an NHWC flatten would, computes another function.
    network_fn, variables = load(case)
    weight = load_file(FIXTURES / "parity" / case / "model.safetensors")[key].astype(np.float32)
    kh, kw, c, out = variables["params"]["fc6"]["kernel"].shape
    wrong = weight.reshape(out, kh, kw, c).transpose(1, 2, 3, 0)
    variables = jax.tree.map(lambda x: x, variables)
    variables["params"]["fc6"]["kernel"] = wrong
    error = relative_error(logits_of(network_fn, variables, case), expected(case)["logits"])
    assert error > 0.05


def to_torchvision_layout(tensors):
    """timm's VGG state dict in torchvision's layout: timm's `checkpoint_filter_fn` inverted."""
    names = {"pre_logits.fc1": "classifier.0", "pre_logits.fc2": "classifier.3"}
    names["head.fc"] = "classifier.6"
    out = {}
    for key, value in tensors.items():
        prefix, leaf = key.rsplit(".", 1)
        if prefix in names and leaf == "weight":
            value = value.reshape(value.shape[0], -1)
        out[f"{names.get(prefix, prefix)}.{leaf}"] = value
    return out


def test_both_key_layouts_of_a_vgg_file_load_the_same_network(tmp_path):
    case = "vgg_bn_timm"
    timm_file = load_file(FIXTURES / "parity" / case / "model.safetensors")
    save_file(to_torchvision_layout(timm_file), tmp_path / "vgg16_bn.safetensors")
    network_fn, variables = load(case, tmp_path / "vgg16_bn.safetensors")
    assert relative_error(logits_of(network_fn, variables, case), expected(case)["logits"]) <= 1e-4
    # A file with neither classifier is read as timm's, and says which key it lacks.
    del timm_file["head.fc.weight"], timm_file["head.fc.bias"]
    save_file(timm_file, tmp_path / "headless.safetensors")
    with pytest.raises(WeightFileError, match=r"no classifier 'head.fc.weight'"):
        load(case, tmp_path / "headless.safetensors")


def test_fine_tuning_replaces_fc8_and_keeps_the_rest(tmp_path):
    _, reference = load("vgg_bn_torchvision")
    network_fn, variables = load("vgg_bn_torchvision", num_classes=3, is_training=True)
    assert network_fn.is_training and variables["params"]["fc8"]["kernel"].shape == (1, 1, 32, 3)
    for part in ("params", "batch_stats"):
        ours = {k: v for k, v in variables[part].items() if k != "fc8"}
        theirs = {k: v for k, v in reference[part].items() if k != "fc8"}
        jax.tree.map(np.testing.assert_array_equal, ours, theirs)
    features_fn, features = load("alexnet", num_classes=0)
    assert "fc8" not in features["params"]
    assert logits_of(features_fn, features, "alexnet").shape == (2, 32)  # fc7's features


def test_a_vgg_file_does_not_load_into_the_other_depth(tmp_path):
    shutil.copy(FIXTURES / "parity" / "vgg_timm" / "model.safetensors", tmp_path / "v.safetensors")
    with pytest.raises(WeightFileError, match=r"no tensor 'features.2.bias' for params/conv1_2"):
        nets_factory.load_pretrained("vgg13", tmp_path / "v.safetensors", **PARITY["vgg_timm"][1])
    with pytest.raises(WeightFileError, match=r"no tensor 'features.1.running_mean'"):
        nets_factory.load_pretrained(
            "vgg11_bn", tmp_path / "v.safetensors", **PARITY["vgg_timm"][1]
        )


def test_alternative_layouts_are_the_same_network():
    for name, arch in architectures.ARCHITECTURES.items():
        for other in arch.alternatives:
            assert other.network == arch.network and other.source_head != arch.source_head, name


def test_views_between_dense_and_convolution_kernels():
    dense = {("params", "fc", "kernel"): (6, 4), ("params", "fc", "bias"): (4,)}
    layout = lambda path: "head.fc"  # noqa: E731
    ok = convert.plan({"head.fc.weight": (4, 6, 1, 1), "head.fc.bias": (4,)}, dense, layout)
    assert ok[0].view == (4, 6) and ok[0].permutation == (1, 0)
    conv = np.arange(24.0).reshape(4, 6, 1, 1)
    tensors = {"head.fc.weight": conv, "head.fc.bias": np.zeros(4)}
    filled = convert.apply(ok, tensors, {"params": {"fc": {}}})
    np.testing.assert_array_equal(filled["params"]["fc"]["kernel"], conv[:, :, 0, 0].T)
    # A 3x3 convolution is no dense layer, even with as many values.
    with pytest.raises(WeightFileError, match=r"has shape \(4, 6, 3, 3\); .* needs \(54, 4\)"):
        dense_54 = {("params", "fc", "kernel"): (54, 4), ("params", "fc", "bias"): (4,)}
        convert.plan({"head.fc.weight": (4, 6, 3, 3), "head.fc.bias": (4,)}, dense_54, layout)

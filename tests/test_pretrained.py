"""load_pretrained: parity with the reference implementation on fixtures timm produced
(tools/fixtures_<family>.py), full-size state dicts converted abstractly, and every bad file
answered with one line."""

import json
import shutil
from functools import cache, partial
from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest
from flax import serialization
from safetensors.numpy import load_file, save_file

import nets_factory
import nets_nnx
import nets_weights
from nets.resnet import BottleneckResNetBlock
from nets_weights import WeightFileError, architectures, convert, published
from tests import variable_trees
from tests.helpers import XLA_CONVS, assert_dilated_parity, auxiliary

FIXTURES = Path(__file__).with_name("fixtures")

# Each fixture's small timm network, as `load_pretrained` keyword arguments.
PARITY = {
    "resnet_basic": ("resnet18", {"stage_sizes": (2, 1, 1, 1), "num_filters": 8}),
    "resnet_bottleneck": ("resnet50", {"stage_sizes": (2, 1, 1, 1), "num_filters": 8}),
    "resnext": (
        "resnext50_32x4d",
        {
            "stage_sizes": (1, 1, 1, 1),
            "num_filters": 8,
            "block_cls": partial(BottleneckResNetBlock, groups=4, width_per_group=16),
        },
    ),
    "resnet_d": (
        "resnet18d",
        {"stage_sizes": (2, 1, 1, 1), "num_filters": 8, "stem_widths": (4, 4)},
    ),
    "seresnext_d": (
        "seresnext26d_32x4d",
        {
            "stage_sizes": (1, 1, 1, 1),
            "num_filters": 8,
            "stem_widths": (4, 4),
            "block_cls": partial(
                BottleneckResNetBlock, groups=4, width_per_group=16, attention="se"
            ),
        },
    ),
    "ecaresnet_t": (
        "ecaresnet26t",
        {"stage_sizes": (2, 1, 1, 1), "num_filters": 8, "stem_widths": (3, 4)},
    ),
}


def expected(case):
    return load_file(FIXTURES / "parity" / case / "expected.safetensors")


def relative_error(logits, reference):
    return float(np.max(np.abs(np.asarray(logits) - reference)) / np.max(np.abs(reference)))


def parity_error(name, kwargs, case, **changes):
    """The relative error of fixture `case` loaded as `name` with `kwargs`; with `changes`, of
    the same variables in a network with those fields changed (a convention turned off)."""
    network_fn, variables = nets_factory.load_pretrained(name, FIXTURES / "parity" / case, **kwargs)
    reference = expected(case)
    if changes:
        network_fn = nets_factory.get_network_fn(name, 10, **{**kwargs, **changes}, **XLA_CONVS)
        variables = published.without_mark(variables)
    logits, _ = jax.jit(network_fn.apply)(variables, reference["images"])
    return relative_error(logits, reference["logits"])


@cache  # read-only: the parity test and the tests of its network and variables share each load
def loaded(case):
    name, kwargs = PARITY[case]
    return nets_factory.load_pretrained(name, FIXTURES / "parity" / case, **kwargs)


@pytest.mark.parametrize("case", sorted(PARITY))
def test_logits_are_the_references(case):
    name, kwargs = PARITY[case]
    network_fn, variables = loaded(case)
    reference = expected(case)
    logits, end_points = jax.jit(network_fn.apply)(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) <= 1e-4
    assert network_fn.is_training is False and "predictions" in end_points
    # The convention matters: the same weights under TensorFlow's SAME padding compute another
    # function (the relative error is 0.5-0.9 on these fixtures), once their mark is gone. Once
    # per block: resnext's is resnet_bottleneck's code (`BottleneckResNetBlock`, grouped), and
    # the gated ResNet-Ds' are resnet_d's stem and resnet_bottleneck's blocks. On XLA's
    # convolutions: the padding is the layer's whichever kernels run (tests/helpers.py).
    if case in ("resnext", "seresnext_d", "ecaresnet_t"):
        return
    same = nets_factory.get_network_fn(name, 10, **kwargs, **XLA_CONVS)
    wrong, _ = jax.jit(same.apply)(published.without_mark(variables), reference["images"])
    assert relative_error(wrong, reference["logits"]) > 0.05


@pytest.mark.parametrize("case", ["resnet_d", "ecaresnet_t"])
def test_dilated_networks_compute_timms(case):
    """`output_stride` 8 and 16 (the last stages dilated, not strided; timm's `AvgPool2dSame`
    on ResNet-D's shortcuts there) give timm's logits for the same weights."""
    name, kwargs = PARITY[case]
    assert_dilated_parity(name, case, kwargs)


def test_pretrained_says_what_the_weights_expect():
    network_fn, _ = loaded("resnet_basic")
    info = network_fn.pretrained
    assert info.source == "resnet18" and info.file.endswith("model.safetensors")
    assert (info.image_size, info.crop_fraction, info.interpolation) == (224, 0.875, "bilinear")
    assert info.crop_mode == "center"
    assert info.mean == architectures.IMAGENET_MEAN and info.class_names == ()  # 10 classes
    assert network_fn.module.padding == "SYMMETRIC"


def test_hub_config_sets_the_preprocessing(tmp_path):
    folder = copy_fixture(tmp_path, "resnet_basic")
    config = json.loads((folder / "config.json").read_text())
    config["pretrained_cfg"] = {
        "input_size": [3, 160, 160],
        "crop_pct": 0.95,
        "crop_mode": "squash",
        "interpolation": "bicubic",
        "mean": [0.5] * 3,
        "std": [0.25] * 3,
    }
    (folder / "config.json").write_text(json.dumps(config))
    network_fn, _ = nets_factory.load_pretrained("resnet18", folder, **PARITY["resnet_basic"][1])
    info = network_fn.pretrained
    assert (info.image_size, info.crop_fraction, info.interpolation) == (160, 0.95, "bicubic")
    assert info.crop_mode == "squash"
    assert info.mean == (0.5,) * 3 and info.std == (0.25,) * 3


def test_imagenet_class_names():
    slims = architectures.imagenet_class_names(1001)  # background first, as Slim's checkpoints
    assert slims[0] == "background" and slims[1:] == architectures.imagenet_class_names()
    assert architectures.imagenet_class_names(10) == ()
    names = architectures.imagenet_class_names()
    assert len(names) == 1000 and len(set(names)) > 990
    assert (names[0], names[1], names[999]) == ("tench", "goldfish", "toilet tissue")


def test_fine_tuning_replaces_the_head_and_keeps_the_rest():
    case = FIXTURES / "parity" / "resnet_bottleneck"
    kwargs = PARITY["resnet_bottleneck"][1]
    _, reference = loaded("resnet_bottleneck")
    network_fn, variables = nets_factory.load_pretrained(
        "resnet50", case, num_classes=3, is_training=True, rng=jax.random.key(7), **kwargs
    )
    assert network_fn.is_training and variables["params"]["Dense_0"]["kernel"].shape == (256, 3)
    assert not np.any(np.asarray(variables["params"]["Dense_0"]["bias"]))  # zeros, as init makes
    for part in ("params", "batch_stats"):
        ours = {k: v for k, v in variables[part].items() if k != "Dense_0"}
        theirs = {k: v for k, v in reference[part].items() if k != "Dense_0"}
        jax.tree.map(np.testing.assert_array_equal, ours, theirs)
    features_fn, features = nets_factory.load_pretrained("resnet50", case, num_classes=0, **kwargs)
    assert "Dense_0" not in features["params"]
    pooled, _ = jax.eval_shape(features_fn.apply, features, expected("resnet_bottleneck")["images"])
    assert pooled.shape == (2, 256)


def test_a_contradicting_convention_is_refused():
    with pytest.raises(ValueError, match=r"trained with padding='SYMMETRIC'; padding='SAME'"):
        nets_factory.load_pretrained(
            "resnet18", FIXTURES / "parity" / "resnet_basic", padding="SAME", num_filters=8
        )


def test_published_variables_refuse_a_network_of_other_conventions(tmp_path):
    """The README tour's trap: `load_pretrained`'s variables paired with a `get_network_fn`
    network of our default padding ('SAME' where timm's weights need 'SYMMETRIC') would compute
    another function, silently; run eagerly or jitted, turned into NNX, filled, or copied as JAX
    code copies variables (tree maps, serialization, orbax), they say so instead, in one line."""
    case, kwargs = FIXTURES / "parity" / "resnet_bottleneck", PARITY["resnet_bottleneck"][1]
    network_fn, variables = loaded("resnet_bottleneck")
    assert variables["conventions"] == {"padding='SYMMETRIC'": {}}  # in the tree, no leaves
    images = np.zeros((1, 32, 32, 3), np.float32)  # eager runs: small
    other_fn = nets_factory.get_network_fn("resnet50", 10, **kwargs)
    refusal = (
        r"^these published variables \(their 'conventions' collection\) were trained with "
        r"padding='SYMMETRIC'; this resnet50 network has padding='SAME' and would compute another "
        r"function with them: use the network_fn load_pretrained returned, or "
        r"get_network_fn\('resnet50', \.\.\., padding='SYMMETRIC'\)"
    )
    copies = {  # how JAX code passes and copies variables: each keeps the tree's structure
        "as given": variables,
        "jax.tree.map(jnp.asarray)": jax.tree.map(jnp.asarray, variables),
        "jax.tree.map(np.asarray)": jax.tree.map(np.asarray, variables),
        "serialized": serialization.from_bytes(variables, serialization.to_bytes(variables)),
        "msgpack, no target": serialization.msgpack_restore(serialization.to_bytes(variables)),
    }
    with ocp.StandardCheckpointer() as checkpointer:
        checkpointer.save(tmp_path / "variables", variables)
    with ocp.StandardCheckpointer() as checkpointer:
        copies["orbax"] = checkpointer.restore(tmp_path / "variables")
    same_fn = nets_factory.get_network_fn("resnet50", 10, padding="SYMMETRIC", **kwargs)
    refused = (
        other_fn.apply,
        other_fn.features,
        jax.jit(other_fn.features),
        jax.jit(other_fn.apply),
    )
    # Networks of the weights' conventions take them, jitted once each: the check is Python's,
    # the same eagerly, and an eager forward compiles each of its ~120 operations (3.5 s).
    taking = [jax.jit(fn.features) for fn in (network_fn, same_fn)]
    expected_maps = taking[0](variables, images)
    for copy in copies.values():
        for run in refused:  # jitted: refused while tracing, the structure is static
            with pytest.raises(ValueError, match=refusal):
                run(copy, images)
        with pytest.raises(ValueError, match=refusal):
            nets_factory.to_nnx(other_fn, copy)
        for features in taking:
            maps = features(copy, images)
            jax.tree.map(
                partial(np.testing.assert_allclose, rtol=1e-5, atol=1e-5), maps, expected_maps
            )
    with pytest.raises(ValueError, match="resnet50's published weights were trained with"):
        nets_weights.fill("resnet50", case, other_fn, variables, nets_factory.networks_map)

    # The mark has no leaves: optimizers and tree maps never see it; NNX gives it back.
    assert jax.tree.leaves(variables) == jax.tree.leaves(published.without_mark(variables))
    back = nets_nnx.to_linen_variables(nets_factory.to_nnx(network_fn, variables))
    assert back["conventions"] == variables["conventions"]
    with pytest.raises(ValueError, match=refusal):
        other_fn.apply(back, images)
    # Without the mark (a user's own variables, old checkpoints), nothing is checked: a trace
    # is where the check runs (refused above), so it needs no compile.
    unmarked = jax.eval_shape(other_fn.apply, published.without_mark(variables), images)
    assert unmarked[0].shape == (1, 10)


def test_networks_without_published_weights_and_misspelt_names_say_the_closest_that_have_them():
    folder = FIXTURES / "parity" / "resnet_basic"
    for name, said in [
        ("lenet", "'lenet' (a network without published weights yet); docs/pretrained.md lists"),
        ("resnet5O", "'resnet5O' (unknown: did you mean 'resnet56' or 'resnet50' or 'resnet50d'?)"),
    ]:
        with pytest.raises(ValueError) as error:
            nets_factory.load_pretrained(name, folder)
        assert str(error.value).startswith(f"no published weights load into {said}")
        assert len(str(error.value)) < 300  # not the 587 names
    # Weights by a name that is no file, offline: the catalogued names closest to it.
    for name, close in [
        ("resnet5O.a1_in1k", "resnet50.a1_in1k, resnet50d.a1_in1k, resnet50.a1h_in1k"),
        ("resnet50", "resnet50.a1_in1k, resnet50.a1h_in1k, resnet50.a2_in1k"),  # a network's
    ]:
        with pytest.raises(WeightFileError) as error:
            nets_factory.load_pretrained(name, local_files_only=True)
        assert str(error.value) == (
            f"no such weight file or folder: {name}; catalogued weights close to it: {close}"
        )


@cache  # read-only: parsing 2 MB of indexes for each of ~120 tests cost ~10 s
def state_dict_index():
    """`{architecture: {key: shape}}` of every family's index in fixtures/state_dicts/."""
    index, name = {}, None
    for path in sorted((FIXTURES / "state_dicts").glob("*.txt")):
        for line in path.read_text().splitlines():
            if line.startswith("["):
                name = line[1:-1]
                index[name] = {}
            elif name and line and not line.startswith("#"):
                key, shape = line.split(" ")
                index[name][key] = tuple(int(n) for n in shape.split(",") if n)
    return index


# Constructor fields that change no variable's shape: a network built with them has the variable
# tree of the registry's, which tests/variable_trees.txt holds (test_nets_factory checks it
# against a live trace).
SHAPE_NEUTRAL = {"padding", "bn_epsilon", "count_include_pad", "downsample_padding"}
SHAPE_NEUTRAL |= {"strided_pool_padding", "larger_maps"}
# Conventions whose tree follows from the registry's: no auxiliary head drops its subtree (a
# top-level module named aux*, `helpers.auxiliary`); a BatchNorm scale is a `scale` beside each
# BatchNorm's bias, shaped as its running mean. Other conventions are traced.
WITHOUT_AUX = {"create_aux_logits": False, "use_aux_head": False}
WITH_BN_SCALE = {"batch_norm_scale": True}


def variable_shapes(network, convention):
    """`convert.leaf_shapes` of `network`'s variables at 1000 classes, built with `convention`."""
    module = nets_factory.get_network_fn(network, 1000).module
    shaping = {
        key: value
        for key, value in convention.items()
        if key not in SHAPE_NEUTRAL and getattr(module, key) != value
    }
    if not shaping.items() <= {**WITHOUT_AUX, **WITH_BN_SCALE}.items():
        return dict(traced_shapes(network, tuple(sorted(shaping.items()))))
    shapes = variable_trees.leaf_shapes(variable_trees.section(network))
    if shaping.keys() & WITHOUT_AUX.keys():
        shapes = {path: shape for path, shape in shapes.items() if not auxiliary(path[1:])}
    if shaping.keys() & WITH_BN_SCALE.keys():
        scales = {
            ("params", *path[1:-1], "scale"): shape
            for path, shape in shapes.items()
            if path[0] == "batch_stats" and path[-1] == "mean"
        }
        assert not scales.keys() & shapes.keys(), "a BatchNorm already has a scale"
        shapes |= scales
    return shapes


@cache  # the ResNet v2s without a bias beside their BatchNorms: one trace each
def traced_shapes(network, shaping):
    fields = {**dict(shaping), **XLA_CONVS}  # shapes only (tests/helpers.py)
    network_fn = nets_factory.get_network_fn(network, 1000, **fields)
    images = jax.ShapeDtypeStruct((1, 224, 224, 3), jnp.float32)
    return convert.leaf_shapes(jax.eval_shape(network_fn.init, jax.random.key(0), images))


@pytest.mark.slow  # a trace of the networks whose conventions change their variables
@pytest.mark.parametrize("architecture", sorted(state_dict_index()))
def test_full_size_state_dicts_fill_every_variable_with_every_tensor(architecture):
    # `[name layout]`: another key layout of `name`'s files (torchvision's VGG, after timm's).
    index = state_dict_index()[architecture]
    arch = convert.for_keys(architectures.ARCHITECTURES[architecture.split(" ")[0]], index)
    tensors = arch.stable(index)  # Keras's automatic names, renumbered
    network_fn = nets_factory.get_network_fn(arch.network, 1000, **arch.convention)
    shapes = variable_shapes(arch.network, arch.convention)
    if arch.headless and arch.head_kernel not in tensors:  # DINOv2's: features only
        shapes = {path: shape for path, shape in shapes.items() if path not in arch.heads(shapes)}
    layout = arch.layout(network_fn.module)
    steps = convert.plan(tensors, shapes, layout, skip_sources=arch.drops, framework=arch.framework)
    assert {s.target for s in steps} == set(shapes)  # and plan raised on any unused tensor


# Bad files: one line each, through the public API.


def copy_fixture(tmp_path, case="resnet_basic"):
    folder = tmp_path / case
    shutil.copytree(FIXTURES / "parity" / case, folder)
    return folder


def load_basic(path, **kw):
    return nets_factory.load_pretrained("resnet18", path, **PARITY["resnet_basic"][1], **kw)


def test_a_second_load_of_a_network_traces_nothing():
    # The variables' shapes come from one trace per network and image size: two checkpoints of one
    # network (or one file under two names) load without tracing it again.
    calls = []

    def record(next_fun, args, kwargs, context):
        calls.append(context.module)
        return next_fun(*args, **kwargs)

    _, first = load_basic(FIXTURES / "parity" / "resnet_basic")
    with nn.intercept_methods(record):
        _, second = load_basic(FIXTURES / "parity" / "resnet_basic")
    assert not calls
    jax.tree.map(np.testing.assert_array_equal, first, second)


def edit_tensors(folder, change):
    tensors = load_file(folder / "model.safetensors")
    change(tensors)
    save_file(tensors, folder / "model.safetensors")


def test_missing_tensor(tmp_path):
    folder = copy_fixture(tmp_path)
    edit_tensors(folder, lambda t: t.pop("layer2.0.conv1.weight"))
    with pytest.raises(WeightFileError, match=r"no tensor 'layer2.0.conv1.weight' for params/"):
        load_basic(folder)


def test_shape_mismatch_names_both_shapes(tmp_path):
    folder = copy_fixture(tmp_path)
    edit_tensors(folder, lambda t: t.update({"bn1.weight": np.ones(9, np.float16)}))
    with pytest.raises(WeightFileError, match=r"'bn1.weight' has shape \(9,\); .* needs \(8,\)"):
        load_basic(folder)


def test_unused_tensor(tmp_path):
    folder = copy_fixture(tmp_path)
    edit_tensors(folder, lambda t: t.update({"layer5.0.conv1.weight": np.ones((2, 2, 1, 1))}))
    with pytest.raises(WeightFileError, match=r"1 tensor\(s\) .* fill no variable.*'layer5"):
        load_basic(folder)


def test_a_file_for_another_architecture(tmp_path):
    folder = copy_fixture(tmp_path)
    (folder / "config.json").write_text(json.dumps({"architecture": "vit_base_patch16_224"}))
    with pytest.raises(WeightFileError, match=r"config.json is for 'vit_base_patch16_224'"):
        load_basic(folder)
    with pytest.raises(WeightFileError, match=r"config.json is for 'resnet18', not 'resnet50'"):
        nets_factory.load_pretrained("resnet50", FIXTURES / "parity" / "resnet_basic")
    # Without a config, the tensors tell: a BasicBlock file has no third convolution.
    shutil.copy(
        FIXTURES / "parity" / "resnet_basic" / "model.safetensors", tmp_path / "r.safetensors"
    )
    with pytest.raises(
        WeightFileError, match=r"no tensor 'layer1.0.bn3.running_mean' for batch_stats/Bottleneck"
    ):
        nets_factory.load_pretrained("resnet50", tmp_path / "r.safetensors", num_filters=8)


def test_unreadable_and_unknown_files(tmp_path):
    with pytest.raises(WeightFileError, match=r"no such weight file or folder"):
        load_basic(tmp_path / "nothing.safetensors")
    (tmp_path / "w.npz").write_bytes(b"PK")
    with pytest.raises(WeightFileError, match=r"unknown weight format .npz; expected .safetensors"):
        load_basic(tmp_path / "w.npz")
    (tmp_path / "bad.safetensors").write_bytes(b"\x00" * 16)
    with pytest.raises(WeightFileError, match=r"not a readable safetensors file"):
        load_basic(tmp_path / "bad.safetensors")
    (tmp_path / "empty").mkdir()
    with pytest.raises(WeightFileError, match=r"holds none of model.safetensors"):
        load_basic(tmp_path / "empty")
    (tmp_path / "w.h5").write_bytes(b"")
    with pytest.raises(WeightFileError, match=r"not a readable Keras HDF5 file"):
        load_basic(tmp_path / "w.h5")


def test_numpy_weights_run_in_the_converted_layout():
    # A converted kernel is HWIO: the first output channel of the stem equals a hand convolution.
    _, variables = loaded("resnet_basic")
    torch_weight = load_file(FIXTURES / "parity" / "resnet_basic" / "model.safetensors")
    kernel = np.asarray(variables["params"]["conv_init"]["kernel"])
    np.testing.assert_array_equal(kernel, torch_weight["conv1.weight"].transpose(2, 3, 1, 0))

"""The contract every network in `networks_map` keeps, checked through the public API."""

import contextlib
import dataclasses
import difflib
import functools
import math
import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nets_factory
import nets_summary as summary
from nets import efficientnet, resnet, resnetv2
from nets.hrnet import StageDef
from nets.layers import Conv
from tests import variable_trees
from tests.helpers import (
    TIMM_FEATURE_INFO,
    XLA_CONVS,
    auxiliary,
    numpy_variables,
    replayed_calls,
    shapes_only_draws,
)

# Slim's aliases (resnet_v1_50, vgg_16, ...) are the very same partials as the names they alias,
# so each distinct constructor is traced once, under its first name in sorted order (its section
# of the variable-tree snapshot).
ALIASES = {}  # a distinct network -> its registry names
for _name in sorted(nets_factory.networks_map):
    ALIASES.setdefault(variable_trees.section(_name), []).append(_name)
ALL_NETWORKS = sorted(ALIASES)


def abstract_images(fn, batch=2):
    size = fn.default_image_size
    return jax.ShapeDtypeStruct((batch, size, size, 3), jnp.float32)


def test_aliases_are_the_same_partials():
    aliases = {"resnet_v1_50": "resnet50", "resnet_v1_200": "resnet200", "vgg_a": "vgg11"}
    for alias, name in aliases.items():
        assert nets_factory.networks_map[alias] is nets_factory.networks_map[name]
    assert len(ALL_NETWORKS) < len(nets_factory.networks_map)


def test_registry_is_partials_of_linen_modules():
    for name, ctor in nets_factory.networks_map.items():
        assert isinstance(ctor, functools.partial), name
        assert issubclass(ctor.func, nn.Module), name
        assert isinstance(ctor.func.default_image_size, int), name


# timm's TF ports of EfficientNet (V1 and V2) and torchvision's V2 are their twins under other
# padding and BatchNorm settings, the QuickGELU CLIP towers the GELU ones, and BEiT v2's base
# BEiT's but for its layer scales' start: settings that change no shape, so each is traced
# once, under the twin's name (test_twins_*).
TWINS = {
    **{f"tf_efficientnet_b{i}": f"efficientnet_b{i}" for i in range(8)},
    **{f"tf_efficientnetv2_{v}": f"efficientnetv2_{v}" for v in "sml"},
    **{f"efficientnet_v2_{v}": f"efficientnetv2_{v}" for v in "sml"},
    **{
        f"vit_{size}_clip_quickgelu_224": f"vit_{size}_clip_224"
        for size in ("base_patch32", "base_patch16", "large_patch14")
    },
    "beitv2_base_patch16_224": "beit_base_patch16_224",  # layer scales started at 1e-5
}
TRACED = [name for name in ALL_NETWORKS if name not in TWINS]


def fewest_macs(groups):
    """Each group's network of fewest MACs: its cheapest trace."""
    return {min(names, key=lambda n: summary.recorded_sizes()[n].macs) for names in groups}


def structure(name):
    """`name`'s module class and constructor fields but the numbers (widths, depths,
    multipliers, sizes): block types, layer tables, switches. Numbers change no code path."""

    def number(value):
        if isinstance(value, tuple):
            return all(map(number, value))
        return isinstance(value, int | float) and not isinstance(value, bool)

    ctor = nets_factory.networks_map[name]
    fields = sorted((k, repr(v)) for k, v in ctor.keywords.items() if not number(v))
    return ctor.func, tuple(fields)


# Evaluation (no rng, no mutable collection, no auxiliary logits) is one code path per structure:
# traced for the structure's network of fewest MACs (45 of 101). Every network's training trace
# has evaluation's end points and MACs, plus its auxiliary heads'. Where that network is also
# its file's in FEATURES_TRACED, its evaluation is traced in the feature mode.
_BY_STRUCTURE = {}
for _name in TRACED:
    _BY_STRUCTURE.setdefault(structure(_name), []).append(_name)
EVALUATION_TRACED = fewest_macs(_BY_STRUCTURE.values())
# The feature mode (num_classes=0) is one code path per family's file (its modules share their
# head): traced for the file's network of fewest MACs (which is also its structure's), in
# evaluation, and in training too where it has auxiliary heads to leave out.
_BY_FILE = {}
for _name in TRACED:
    _BY_FILE.setdefault(nets_factory.networks_map[_name].func.__module__, []).append(_name)
FEATURES_TRACED = fewest_macs(_BY_FILE.values())


CONV_FIELDS = [f.name for f in dataclasses.fields(Conv) if f.name not in ("parent", "name")]


def traced_init(fn, images, replay=True):
    """`(variables, end points {name: shape}, MACs but the auxiliary heads', convolutions)` of
    one abstract trace of `fn.init`, the training graph; `convolutions` holds each distinct
    `Conv` called (its fields and input) and its output. `replay`: repeated submodule calls
    replayed (`helpers.replayed_calls`); the snapshots are written without."""
    outputs, convolutions = [], {}

    def network_output(next_fun, args, kwargs, context):
        out = next_fun(*args, **kwargs)
        if context.method_name != "__call__":
            return out
        if not isinstance(context.module.parent, nn.Module):
            outputs.append({name: tuple(x.shape) for name, x in out[1].items()})
        if isinstance(context.module, Conv):
            fields = {f: getattr(context.module, f) for f in CONV_FIELDS}
            x, y = (jax.ShapeDtypeStruct(a.shape, a.dtype) for a in (args[0], out))
            convolutions[repr((fields, x))] = (fields, x, y)
        return out

    with (
        replayed_calls(auxiliary) if replay else contextlib.nullcontext([]) as side_effects,
        summary.counting_macs(exclude=auxiliary) as macs,
        nn.intercept_methods(network_output),
    ):
        side_effects.append(macs)
        variables = jax.eval_shape(fn.init, jax.random.key(0), images)
    (end_points,) = outputs
    return variables, end_points, sum(macs), list(convolutions.values())


# The convolutions' formulations already traced on the CPU path in this process: networks share
# most of theirs (ResNet-101's are ResNet-50's), each traced once.
CPU_PATH_TRACED = set()
FORMULATION_FREE_FIELDS = (
    "features",
    "feature_group_count",
    "kernel_init",
    "bias_init",
    "kernel_transform",
)


def formulation(fields, x):
    """What the CPU path's formulation and output shape depend on (`nets.layers.cpu.conv.
    _method`): the maps, the kernel, strides, padding, and whether the convolution is ordinary,
    depthwise or grouped (then its groups); not the channel counts otherwise, nor initialisers
    or kernel transforms. ResNet-50's 3x3 convolutions at 56, 28, 14 and 7 px are four."""
    groups, channels = fields["feature_group_count"], x.shape[-1]
    kind = "ordinary" if groups == 1 else "depthwise" if groups == channels else (groups, channels)
    shaping = {f: v for f, v in fields.items() if f not in FORMULATION_FREE_FIELDS}
    return repr((shaping, kind, x.shape[:3], x.dtype))


def assert_the_cpu_path_gives_each_output(convolutions):
    """Each convolution, traced alone on the CPU path (`nets.layers.cpu.conv`, `Conv`'s default
    on CPU), gives the output that XLA's gave it in the network."""
    for fields, x, y in convolutions:
        key = formulation(fields, x)
        if key in CPU_PATH_TRACED:
            continue
        CPU_PATH_TRACED.add(key)
        conv = Conv(**{**fields, "impl": "cpu_fast"})
        out, _ = jax.eval_shape(functools.partial(conv.init_with_output, jax.random.key(0)), x)
        assert (out.shape, out.dtype) == (y.shape, y.dtype), (fields, x)


@pytest.mark.slow  # one or two traces of each of ~100 networks at full size
@pytest.mark.parametrize("name", TRACED)
@shapes_only_draws()  # its traces read shapes
def test_shapes_and_end_points(name):
    # Slim's nets_factory_test: a batch of 5 at the default size. `init` traces the training
    # graph, auxiliary heads included. Its convolutions are XLA's, and each distinct one is
    # traced again alone on the CPU path: the same layers at the same maps, in 40% less CPU than
    # the whole network on it (its formulations are many operations, repeated block after block).
    fn = nets_factory.get_network_fn(name, num_classes=1000, is_training=True, **XLA_CONVS)
    images = abstract_images(fn, batch=5)
    variables, end_points, macs, convolutions = traced_init(fn, images)
    assert_the_cpu_path_gives_each_output(convolutions)
    assert "params" in variables
    assert_tree_is_the_snapshots(name, variables)
    # The end points, in order, are those committed, which the families' tests read.
    committed = variable_trees.end_points(name, train=True)
    assert list(end_points.items()) == [(p, (5, *s[1:])) for p, s in committed.items()]
    params = parameters(variables)

    # An auxiliary head gives logits in training; the other end points are evaluation's.
    aux = {point: end_points.pop(point) for point in list(end_points) if point.startswith("aux")}
    assert set(aux.values()) <= {(5, 1000)}, aux
    assert bool(aux) == any(auxiliary((module,)) for module in variables["params"])
    assert {"stem", "pre_logits", "logits", "predictions"} <= set(end_points), sorted(end_points)
    assert len(end_points) >= 6, sorted(end_points)  # and one entry per stage at least
    assert end_points["logits"] == (5, 1000)
    assert len(end_points["pre_logits"]) == 2
    size = fn.default_image_size
    assert_pyramid_agrees(name, fn.module.feature_strides(), end_points, size)
    # Size, parameters and MACs per image are those `python -m nets_factory` lists
    # (nets/sizes.tsv, which it measures in evaluation).
    assert macs % 5 == 0
    for alias in ALIASES[name]:
        assert summary.recorded_sizes()[alias] == (size, params, macs // 5), alias

    if name in EVALUATION_TRACED or name in FEATURES_TRACED:
        fields = {**XLA_CONVS, **SHORTER_TWINS.get(name, {})}
        if name in SHORTER_TWINS:  # the same code paths, traced on the twin
            fn = nets_factory.get_network_fn(name, num_classes=1000, is_training=True, **fields)
            variables, end_points, macs, _ = traced_init(fn, images)
            end_points = {p: s for p, s in end_points.items() if not p.startswith("aux")}
        assert_evaluation_and_features(name, fields, variables, end_points, macs // 5)


def traced_apply(fn, variables, images, **kwargs):
    """`(outputs, MACs, end point names in the network's order)` of one abstract trace of
    `fn.apply` (whose outputs' dicts come back sorted), repeated submodule calls replayed
    (`helpers.replayed_calls`)."""
    order = []

    def forward(variables, images):
        out = fn.apply(variables, images, **kwargs)
        order.extend((out[0] if "mutable" in kwargs else out)[1])
        return out

    with replayed_calls(auxiliary) as side_effects, summary.counting_macs() as macs:
        side_effects.append(macs)
        out = jax.eval_shape(forward, variables, images)
    return out, sum(macs), order


def parameters(variables):
    """Those published tables count: not the auxiliary heads', which training alone runs."""
    return summary.parameter_counts(variables["params"])[0]


# The NASNets' and PNASNets' 3-cell twins: the same cells, reductions and heads, and the same
# minimum sizes (the head follows the first reduction), in a fraction of the trace. Their
# evaluation and feature-mode traces here (one code path per structure, as above) are the twins'
# (8 of these five networks' 40 CPU s in this test), and so are the size and momentum tests'.
SHORTER_TWINS = {
    name: {"num_cells": 3}
    for name in ("nasnet_cifar", "nasnet_mobile", "nasnet_large", "pnasnet_mobile", "pnasnet_large")
}
# The only network of its structure (a squeeze-and-excite ResNet-D), 152 layers deep: its
# evaluation and feature-mode traces are those of a block a stage.
SHORTER_TWINS["seresnet152d"] = {"stage_sizes": (1, 1, 1, 1)}


def assert_evaluation_and_features(name, fields, variables, end_points, macs):
    """Evaluation (and, for one network of each family's file, the feature mode) of network
    `name` built with `fields` (the training graph's convolutions at the same maps: the CPU path's
    choice of formulation reads the maps and the kernel, not the batch), against its training
    trace: `variables`, `end_points` without the auxiliary heads' and `macs` per image."""
    size = nets_factory.get_network_fn(name, num_classes=1000).default_image_size
    if name not in FEATURES_TRACED:
        # Evaluation needs no mutable collection and no rng, and makes no auxiliary logits: the
        # end points and MACs of training, which `python -m nets_factory` lists.
        eval_fn = nets_factory.get_network_fn(name, num_classes=1000, **fields)
        images = jax.ShapeDtypeStruct((1, size, size, 3), jnp.float32)
        (_, eval_points), eval_macs, order = traced_apply(eval_fn, variables, images)
        assert [(p, tuple(eval_points[p].shape)) for p in order] == [
            (point, (1, *shape[1:])) for point, shape in end_points.items()
        ]
        assert eval_macs == macs
        return

    # The feature mode (num_classes=0) in evaluation: the same, less the logits layer (its end
    # points and its MACs); the output is the pooled feature vector. (The variables carry a head
    # that this network ignores; test_features_mode_* checks its init.)
    width = end_points["pre_logits"][1]
    feat_fn = nets_factory.get_network_fn(name, num_classes=0, **fields)
    images = jax.ShapeDtypeStruct((1, size, size, 3), jnp.float32)
    (feats, feat_points), feature_macs, _ = traced_apply(feat_fn, variables, images)
    # Distilled networks (LeViT's) classify twice: `cls_logits` and `dist_logits` go too.
    head = {"logits", "predictions", "cls_logits", "dist_logits"}
    classifiers = 2 if "dist_logits" in end_points else 1
    assert {p: tuple(s.shape) for p, s in feat_points.items()} == {
        point: (1, *shape[1:]) for point, shape in end_points.items() if point not in head
    }
    assert feats.shape == (1, width) and feature_macs == macs - classifiers * width * 1000
    if not any(auxiliary((module,)) for module in variables["params"]):
        return
    # ... and in training, where it makes no auxiliary logits either.
    feat_fn = nets_factory.get_network_fn(name, num_classes=0, is_training=True, **fields)
    kw = {"rngs": {"dropout": jax.random.key(1)}, "mutable": ["batch_stats"]}
    ((feats, feat_points), _), _, _ = traced_apply(feat_fn, variables, images, **kw)
    assert feats.shape == (1, width) and not {"logits", "aux_logits"} & feat_points.keys()


def test_twins_are_one_network_under_settings_that_change_no_shape():
    snapshot, sizes = variable_trees.load(), summary.recorded_sizes()
    conventions = {
        "tf_efficientnet_": efficientnet.TF_CONVENTIONS,
        "tf_efficientnetv2_": efficientnet.TF_V2_CONVENTIONS,
        "efficientnet_v2_": efficientnet.TORCHVISION_V2_CONVENTIONS,
        "_clip_quickgelu_": {"act_layer": "quick_gelu"},
        "beitv2_": {"init_values": 1e-5},
    }
    for port, twin in TWINS.items():
        ported, own = nets_factory.networks_map[port], nets_factory.networks_map[twin]
        (convention,) = [c for part, c in conventions.items() if part in port]
        assert ported.func is own.func
        assert ported.keywords == {**own.keywords, **convention}
        assert snapshot[port] == snapshot[twin] and sizes[port] == sizes[twin]
    assert set(efficientnet.TF_CONVENTIONS) == {"padding", "bn_epsilon", "bn_momentum"}
    assert efficientnet.TF_V2_CONVENTIONS == {"padding": "SAME", "bn_epsilon": 1e-3}
    assert efficientnet.TORCHVISION_V2_CONVENTIONS == {"bn_epsilon": 1e-3}


def assert_pyramid_agrees(name, strides, shapes, size):
    """The feature pyramid's declared strides fit the traced maps at the default `size` ('SAME'
    layers: `ceil(size / stride)` pixels; 'VALID' ones a few less, never half), and levels and
    channels are timm's `feature_info` wherever timm builds the network (the TF ports' too)."""
    assert len(strides) >= 3, strides
    assert list(strides.values()) == sorted(strides.values()), strides
    for level, stride in strides.items():
        shape = shapes[level]
        if len(shape) == 3:  # a transformer's tokens: class/distillation/register tokens,
            # then the patch grid
            assert 0 <= shape[1] - (size // stride) ** 2 <= 5, (level, stride, shape)
        else:
            assert len(shape) == 4, (level, shape)
            for side in shape[1:3]:
                assert size / (2 * stride) < side <= math.ceil(size / stride), (
                    level,
                    stride,
                    shape,
                )
    levels = [[stride, shapes[level][-1]] for level, stride in strides.items()]
    twins = [*ALIASES[name], *(port for port, twin in TWINS.items() if twin == name)]
    for alias in twins:
        if alias in TIMM_FEATURE_INFO:
            assert levels == TIMM_FEATURE_INFO[alias]["levels"], (alias, strides)


def assert_tree_is_the_snapshots(name, variables):
    """Paths and shapes exactly as committed in tests/variable_trees.txt: checkpoints restore."""
    expected = variable_trees.load()[name]
    actual = variable_trees.tree_lines(variables)
    if actual != expected:
        diff = difflib.unified_diff(expected, actual, "snapshot", "now", n=1, lineterm="")
        pytest.fail(f"{name}'s variable tree changed:\n" + "\n".join(list(diff)[:40]))


def test_snapshot_covers_every_distinct_network():
    assert sorted(variable_trees.load()) == ALL_NETWORKS


def test_unknown_network_names_close_matches():
    with pytest.raises(ValueError) as error:
        nets_factory.get_network_fn("resnet5O", num_classes=10)
    assert str(error.value) == (
        "Unknown network 'resnet5O': did you mean 'resnet56' or 'resnet50' or 'resnet50d'? "
        f"`python -m nets_factory` lists all {len(nets_factory.networks_map)} "
        "(nets_factory.networks_map)"
    )
    with pytest.raises(ValueError, match=r"^Unknown network 'zzz': `python -m nets_factory` "):
        nets_factory.get_network_fn("zzz", num_classes=10)
    with pytest.raises(ValueError, match="'vit_tiny_patch16_224' or 'vit_tiny_patch16_384'?"):
        nets_factory.get_network_fn("vit_tiny", num_classes=10)  # a name's beginning


def test_a_size_where_two_maps_disagree_names_the_network_and_size():
    # DLA's convolutions round an odd map up where its pooled shortcuts floor it (timm's too)
    fn = nets_factory.get_network_fn("dla34", 10)
    images = jax.ShapeDtypeStruct((1, 112, 112, 3), jnp.float32)
    with pytest.raises(nets_factory.ImageSizeError) as error:
        jax.eval_shape(fn.init, jax.random.key(0), images)
    assert str(error.value) == (
        "dla34 does not run on 112x112 images, where two of its maps disagree (add got "
        "incompatible shapes for broadcasting: (1, 4, 4, 512), (1, 3, 3, 512)); its default size "
        "is 224x224; multiples of 32, its deepest stride, keep every map whole"
    )


def test_unknown_keyword_names_network_keyword_and_fields():
    with pytest.raises(
        TypeError, match=r"resnet18.*'num_filtres'.*did you mean 'num_filters'.*: stage_sizes, "
    ):
        nets_factory.get_network_fn("resnet18", num_classes=10, num_filtres=32)


def test_wrong_image_rank_names_expected_shape():
    fn = nets_factory.get_network_fn("resnet18", num_classes=10)
    with pytest.raises(
        ValueError, match=r"\[batch, height, width, channels\].*224, 224, 3.*\(224, 224, 3\)"
    ):
        fn.init(jax.random.key(0), jnp.ones((224, 224, 3)))
    # PyTorch's layout, into init or into apply (flax would say a kernel's shape is wrong).
    channels_first = jax.ShapeDtypeStruct((2, 3, 32, 32), jnp.float32)
    for call in (fn.init, fn.apply):
        with pytest.raises(ValueError, match=r"got shape \(2, 3, 32, 32\), which looks channels-"):
            call({}, channels_first)


def test_variables_of_another_network_or_class_count_say_what_they_likely_are():
    images = jax.ShapeDtypeStruct((1, 32, 32, 3), jnp.float32)
    resnet18 = jax.eval_shape(
        nets_factory.get_network_fn("resnet18", 10).init, jax.random.key(0), images
    )
    for name, classes, said in [
        ("resnet18", 5, r'"/Dense_0", .* shape \(512, 5\), .* has shape \(512, 10\)\.$'),
        ("vgg11", 10, r'Could not find parameter named "kernel" in scope "/conv1_1"\.$'),
    ]:
        fn = nets_factory.get_network_fn(name, classes)
        with pytest.raises(ValueError) as error:
            jax.eval_shape(fn.apply, resnet18, images)
        assert str(error.value).startswith(
            f"variables that are not {name}'s as built here (num_classes={classes}): made by "
            "another network, or with another num_classes or fields? "
        )
        assert re.search(said, str(error.value)), str(error.value)
    # Variables of 1-channel images (load_pretrained's in_chans=1) fed RGB: the channels said.
    gray = jax.eval_shape(
        nets_factory.get_network_fn("resnet18", 10).init,
        jax.random.key(0),
        jax.ShapeDtypeStruct((1, 32, 32, 1), jnp.float32),
    )
    with pytest.raises(ValueError, match=r"^these variables take 1-channel images \(.*\(7, 7, 1"):
        jax.eval_shape(nets_factory.get_network_fn("resnet18", 10).apply, gray, images)


def test_kwargs_reach_the_constructor():
    fn = nets_factory.get_network_fn("resnet18", num_classes=10, stage_sizes=(1, 1), num_filters=8)
    profile = summary.profile(fn, image_size=32)
    assert [k for k in profile.end_points if k.startswith("block")] == ["block1", "block2"]
    assert profile.end_points["pre_logits"] == (1, 16)


def small_resnet(**kw):
    return nets_factory.get_network_fn("resnet18", num_classes=10, num_filters=8, **kw)


def test_is_training_updates_batch_stats_and_eval_does_not():
    images = jax.random.normal(jax.random.key(1), (4, 32, 32, 3))
    train_fn = small_resnet(is_training=True)
    variables = numpy_variables(jax.eval_shape(train_fn.init, jax.random.key(0), images))
    _, updates = jax.jit(lambda v, x: train_fn.apply(v, x, mutable=["batch_stats"]))(
        variables, images
    )
    changed = jax.tree.map(
        lambda a, b: not np.allclose(a, b), variables["batch_stats"], updates["batch_stats"]
    )
    assert all(jax.tree.leaves(changed))

    eval_fn = small_resnet(is_training=False)
    _, same = jax.jit(lambda v, x: eval_fn.apply(v, x, mutable=["batch_stats"]))(variables, images)
    jax.tree.map(np.testing.assert_array_equal, variables["batch_stats"], same["batch_stats"])


def test_eval_uses_running_statistics():
    images = jax.random.normal(jax.random.key(1), (4, 32, 32, 3))
    eval_fn = small_resnet(is_training=False)
    variables = numpy_variables(jax.eval_shape(eval_fn.init, jax.random.key(0), images))
    one, _ = jax.jit(eval_fn.apply)(variables, images[:1])
    batch, _ = jax.jit(eval_fn.apply)(variables, images)
    np.testing.assert_allclose(one[0], batch[0], rtol=1e-5, atol=1e-5)  # no batch dependence


def test_regularization_loss_is_slims_l2_on_kernels_only():
    images = jnp.ones((1, 32, 32, 3))
    fn = small_resnet(weight_decay=1e-4)
    params = numpy_variables(jax.eval_shape(fn.init, jax.random.key(0), images))["params"]
    by_hand = 0.0
    for path, leaf in jax.tree_util.tree_leaves_with_path(params):
        if path[-1].key == "kernel":
            by_hand += float(np.sum(np.square(np.asarray(leaf, np.float64))))
    # Biases and BatchNorm scales are left out: setting them all to 7 changes nothing.
    biases_changed = jax.tree_util.tree_map_with_path(
        lambda path, x: x if path[-1].key == "kernel" else jnp.full_like(x, 7.0), params
    )
    np.testing.assert_allclose(fn.regularization_loss(params), 1e-4 * 0.5 * by_hand, rtol=1e-5)
    np.testing.assert_allclose(
        fn.regularization_loss(biases_changed), 1e-4 * 0.5 * by_hand, rtol=1e-5
    )
    assert small_resnet().regularization_loss(params) == 0.0


def test_bfloat16_computes_in_bfloat16_with_float32_params():
    fn = small_resnet(dtype=jnp.bfloat16)
    images = jnp.ones((2, 32, 32, 3))
    variables = numpy_variables(jax.eval_shape(fn.init, jax.random.key(0), images))
    assert {leaf.dtype for leaf in jax.tree.leaves(variables["params"])} == {jnp.dtype("float32")}
    logits, end_points = jax.jit(fn.apply)(variables, images)
    assert logits.dtype == jnp.bfloat16 and end_points["block4"].dtype == jnp.bfloat16
    reference, _ = jax.jit(small_resnet().apply)(variables, images)
    np.testing.assert_allclose(np.float32(logits), reference, atol=0.1, rtol=0.1)


GRADIENT_CASES = {
    "resnet20": {},
    "resnet18": {"num_filters": 8},
    "resnet_v2_50": {"num_filters": 8, "stage_sizes": (1, 2)},
    # ResNeXt's grouped bottleneck, ResNet-D's stem and shortcuts, squeeze-and-excite's and
    # ECA's gates
    "seresnext26d_32x4d": {"num_filters": 16, "stage_sizes": (1, 2), "stem_widths": (8, 8)},
    "ecaresnet26t": {"num_filters": 8, "stage_sizes": (1, 2), "stem_widths": (6, 8)},
    # Res2Net's splits (ResNeSt's split attention: tests/test_resnest.py, a bias of which
    # BatchNorm cancels in training)
    "res2net50d": {"num_filters": 8, "stage_sizes": (1, 1), "stem_widths": (4, 4)},
    # RepVGG's three branches (identity BatchNorms, grouped blocks) and d2se's gates
    "repvgg_d2se": {
        "depths": (1, 3, 1, 1),
        "width_factors": (0.125,) * 4,
        "stem_width": 8,
        "groups": 4,
    },
    # RepViT's token mixers (a BatchNorm after the sum), gated blocks, downsampling, both heads
    "repvit_m0_9": {"embed_dims": (8, 16), "depths": (2, 1)},
    # pre-activation basic blocks with averaging shortcuts, EvoNorm-S0's `v` (timm's ResNetV2)
    "resnetv2_50d_evos": {
        "block_cls": resnet.PreActBasicBlock,
        "num_filters": 8,
        "stage_sizes": (1, 2),
        "stem_widths": (4, 4),
        "norm": functools.partial(resnetv2.EvoNormS0, groups=2),
    },
    # basic blocks under shortcut roots; trees whose roots read their pooled inputs
    "dla34": {
        "levels": (1, 1, 1, 1, 1, 1),
        "channels": (4, 4, 8, 8, 16, 16),
        "shortcut_root": True,
    },
    # CSPNet's cross stages of gated, grouped bottlenecks (both halves, both transitions)
    "cs3sedarknet_xdw": {
        "depths": (1, 1),
        "widths": (8, 16),
        "stem_widths": (4,),
        "groups": (1, 2),
    },
    # MIT's EfficientViT, L's layout (the stem's ConvBlock, fused blocks, MBConvs with biases;
    # B's blocks are those layers again): the linear attention's aggregation and projection,
    # the head's dense layers and LayerNorm
    "efficientvit_l2": {
        "widths": (4, 4, 8, 8, 16),
        "depths": (1,) * 5,
        "head_dim": 8,
        "head_widths": (16, 24),
    },
    # MSRA's EfficientViT: the cascade through each head, the windows' biases, the subsampling's
    # squeeze-excite
    "efficientvit_m1": {
        "embed_dims": (8, 12),
        "key_dim": 4,
        "depths": (1, 1),
        "num_heads": (2, 3),
        "window_size": 2,
        "kernels": (5, 3, 3),
    },
    # HRNet's fusion (a strided path, upsampling), transition and head, the SSLD one's
    "hrnet_w18_ssld": {
        "stem_width": 4,
        "layer1": StageDef(1, (1,), (2,), "BOTTLENECK"),
        "stages": (StageDef(1, (1, 1), (2, 4)),),
        "head_widths": (2, 2),
        "num_features": 8,
    },
}
# Image sides other than 32: MSRA's EfficientViT at 48 px has 3x3 maps in 2x2 windows, then a
# 2x2 one (at 32 px the last would hold one key, whose softmax is constant).
GRADIENT_IMAGE_SIZES = {"efficientvit_m1": 48}
# Cases whose backward pass compiles for seconds: in the slow tier.
SLOW_GRADIENT_CASES = ("efficientvit_l2", "efficientvit_m1")


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.slow) if n in SLOW_GRADIENT_CASES else n
        for n in GRADIENT_CASES
    ],
)
def test_gradient_reaches_every_parameter(name):
    small = GRADIENT_CASES[name]
    fn = nets_factory.get_network_fn(name, num_classes=10, is_training=True, **small)
    size = GRADIENT_IMAGE_SIZES.get(name, 32)
    images = jax.random.normal(jax.random.key(1), (2, size, size, 3))
    variables = numpy_variables(jax.eval_shape(fn.init, jax.random.key(0), images))
    params = variables["params"]  # numpy's: BatchNorm scales 1, where init would give zeros

    def loss(params):
        (logits, _), _ = fn.apply({**variables, "params": params}, images, mutable=["batch_stats"])
        return jnp.sum(jax.nn.log_softmax(logits)[:, 0])

    grads = jax.jit(jax.grad(loss))(params)
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
        assert np.any(np.asarray(g) != 0), jax.tree_util.keystr(path)


def test_features_mode_returns_pooled_vector():
    fn = nets_factory.get_network_fn("resnet50", num_classes=0)
    images = jax.ShapeDtypeStruct((8, 224, 224, 3), jnp.float32)
    variables = jax.eval_shape(fn.init, jax.random.key(0), images)
    features, _ = jax.eval_shape(fn.apply, variables, images)
    assert features.shape == (8, 2048)
    assert "Dense_0" not in variables["params"]


def test_network_fn_exposes_name_module_and_size():
    fn = nets_factory.get_network_fn(
        "resnet50", num_classes=1000, weight_decay=1e-4, is_training=True
    )
    assert fn.name == "resnet50" and fn.default_image_size == 224
    assert isinstance(fn.module, nn.Module) and fn.module.num_classes == 1000


def test_sizes_cover_the_registry():
    assert sorted(summary.recorded_sizes()) == sorted(nets_factory.networks_map)


def test_listing_reads_recorded_sizes_and_aligns_long_names(monkeypatch):
    monkeypatch.setattr(summary, "measure", lambda name: pytest.fail(f"{name} was traced"))
    lines = summary.table(sorted(nets_factory.networks_map)).splitlines()
    assert len(lines) == 1 + len(nets_factory.networks_map)
    columns = {re.match(r"\S+ +\S+", line).end() for line in lines}  # where sizes end
    assert len(columns) == 1, columns
    assert " 25,557,032 " in next(line for line in lines if line.startswith("resnet50 "))


def test_describe_and_table_run_without_allocating():
    text = summary.describe("resnet50")
    assert "stage_sizes = (3, 4, 6, 3)" in text and "block4" in text and "(1, 7, 7, 2048)" in text
    live = summary.table(["resnet50"], live=True)
    assert "25,557,032" in live and live.splitlines()[1].endswith("  resnet50")  # its weights
    assert "published weights (nets_factory.load_pretrained): resnet50" in text
    assert "feature pyramid (NetworkFn.feature_info): conv_init /2 64, block1 /4 256," in text
    named = text.split("weights by name (")[1].splitlines()[1:]  # one a line, downloadable
    assert "  resnet50.a1_in1k" in named
    assert "  https://download.pytorch.org/models/resnet50-11ad3fa6.pth" in named


def runs_at(fn, size):
    """Whether the module itself (past `NetworkFn`'s check) builds and runs in `fn`'s mode on
    `size` pixels, every map keeping at least one pixel."""
    images = jax.ShapeDtypeStruct((1, size, size, 3), jnp.float32)
    try:
        # `init` runs the mode's forward (in training with flax's BatchNorm, whose forward ours
        # repeats exactly): one trace answers both questions. A repeated block's call on the
        # same map is the first one's: replayed.
        with replayed_calls():
            out, _ = jax.eval_shape(
                lambda x: fn.module.init_with_output(jax.random.key(0), x, train=fn.is_training),
                images,
            )
    except (TypeError, ValueError, ZeroDivisionError):  # what JAX and flax raise on such maps
        return False
    _, end_points = out
    return all(0 not in leaf.shape for leaf in end_points.values())


# Every network whose layers need more than one pixel (the others run on 1x1 images), the
# configurations whose convention changes it, and three that need no more.
MIN_SIZES = {
    "alexnet": 63,
    "alexnet_v2": 67,
    "overfeat": 71,
    "vgg11": 32,
    "vgg19_bn": 32,
    "lenet": 4,
    "cifarnet": 4,
    "googlenet": 15,
    "inception_v3": 75,  # v4 and Inception-ResNet-v2 too: the same stem and auxiliary head
    "nasnet_cifar": 1,
    "nasnet_mobile": 3,  # and the other ImageNet NASNets and PNASNets
    "resnet50": 1,
    "mobilenet_v2": 1,
    "inception_v1": 1,
    "convnext_tiny": 32,  # the 4x4/4 stem and three 2x2/2 downsamplings, 'VALID'
    "densenet121": 29,  # the stem's 7x7/2 and 3x3/2, then three 2x2/2 'VALID' transition pools
    "regnet_y_400mf": 1,
    "vit_base_patch32_224": 32,  # one patch (16 for the /16 ViTs and DeiTs)
    "poolformer_s12": 3,  # the 7x7/4 stem, padding 2 (every MetaFormer)
}
# With an auxiliary head, which `init` always builds and training runs.
MIN_TRAIN_SIZES = {"inception_v3": 107, "nasnet_cifar": 9, "nasnet_mobile": 67}
NO_AUX = {"create_aux_logits": False, "use_aux_head": False}
# NASNet's thousands of depthwise taps take half of each of its traces on the CPU path: its size
# traces take XLA's convolutions, which run at the same sizes (tests/helpers.py).
FEWER_TAPS = {name: {**cells, **XLA_CONVS} for name, cells in SHORTER_TWINS.items()}
CONVENTIONS = {
    "vgg11": ({"stage_sizes": (1, 1, 2), "stage_widths": (8, 16, 32)}, 8),
    "mobilenet_v1": ({"downsample_padding": ((0, 1), (0, 1))}, 31),  # Keras's
}


@pytest.mark.slow  # two to eight traces of each network
@pytest.mark.parametrize("name", sorted(MIN_SIZES))
@shapes_only_draws()  # its traces read shapes
def test_min_image_size_is_the_smallest_that_runs(name):
    fewer = FEWER_TAPS.get(name, {})
    train = nets_factory.get_network_fn(name, 10, is_training=True, **fewer)
    size = MIN_TRAIN_SIZES.get(name, MIN_SIZES[name])
    assert train.min_image_size == size
    assert runs_at(train, size) and (size == 1 or not runs_at(train, size - 1))
    fields = {k: v for k, v in NO_AUX.items() if k in nets_factory.constructor_fields(name)}
    evaluate = nets_factory.get_network_fn(name, 10, **fields, **fewer)
    assert nets_factory.get_network_fn(name, 10).min_image_size == MIN_SIZES[name]
    if name in MIN_TRAIN_SIZES:  # without the head, evaluation needs less
        size = MIN_SIZES[name]
        assert evaluate.min_image_size == size and runs_at(evaluate, size)
        assert size == 1 or not runs_at(evaluate, size - 1)


@pytest.mark.parametrize("name", sorted(CONVENTIONS))
@shapes_only_draws()  # its traces read shapes
def test_min_image_size_follows_the_fields_that_change_it(name):
    fields, size = CONVENTIONS[name]
    fn = nets_factory.get_network_fn(name, 10, is_training=True, **fields)
    assert fn.min_image_size == size and runs_at(fn, size) and not runs_at(fn, size - 1)


def test_too_small_images_are_refused_before_tracing():
    fn = nets_factory.get_network_fn("vgg16", 10)
    with pytest.raises(
        nets_factory.ImageSizeError, match=r"^vgg16 needs images of at least 32x32 pixels; got 8x8"
    ):
        fn.init(jax.random.key(0), jnp.ones((1, 8, 8, 3)))
    fn = nets_factory.get_network_fn("inception_v3", 10)
    with pytest.raises(ValueError, match=r"107x107 .*auxiliary head \(75 without it.*got 80x80"):
        fn.init(jax.random.key(0), jnp.ones((1, 80, 80, 3)))
    with pytest.raises(ValueError, match=r"at least 75x75 pixels; got 74x74"):
        fn.apply({}, jnp.ones((1, 74, 74, 3)))


# Networks whose layers are made for one size (MLP-Mixers' token mixing, EfficientFormers'
# attention biases): the range of sizes that give their maps.
ONE_SIZE = {
    "mixer_s32_224": (224, 255),  # 7x7 patches of 32, the remainder left out
    "efficientformer_l1": (193, 224),  # a 7x7 last map, each 3x3/2 keeping ceil(n / 2)
    "efficientformerv2_s0": (209, 224),  # 14x14 and 7x7 maps at strides 16 and 32
}


@pytest.mark.parametrize("name", sorted(ONE_SIZE))
@shapes_only_draws()  # its traces read shapes
def test_one_size_networks_refuse_larger_images_too_and_say_what_they_take(name):
    smallest, largest = ONE_SIZE[name]
    fn = nets_factory.get_network_fn(name, 10, is_training=True)
    assert (fn.min_image_size, fn.max_image_size) == (smallest, largest)
    assert nets_factory.get_network_fn("resnet50", 10).max_image_size is None
    assert runs_at(fn, largest) and not runs_at(fn, largest + 1)
    big = largest + 1
    with pytest.raises(
        nets_factory.ImageSizeError,  # a ValueError
        match=rf"^{name} takes images of {smallest} to {largest} pixels a side, the size its "
        rf"layers are made for; got {big}x{big}\. To train at another size, build it with "
        r"another (default_image_size|attention_resolution) \(published weights fit its default",
    ):
        fn.init(jax.random.key(0), jnp.ones((1, big, big, 3)))


@pytest.mark.parametrize(
    "arguments, error, message",
    [
        ({"is_training": "False"}, TypeError, r"is_training must be True or False, got str"),
        ({"num_classes": True}, TypeError, r"num_classes must be an int .* got bool True"),
        ({"num_classes": "10"}, TypeError, r"num_classes must be an int .* got str '10'"),
        ({"num_classes": 2.5}, TypeError, r"got float 2.5"),
        ({"num_classes": -1}, ValueError, r"num_classes must be >= 0 .* got -1"),
        ({"weight_decay": -1}, ValueError, r"weight_decay must be a finite number >= 0, got -1"),
        ({"weight_decay": float("nan")}, ValueError, r"got nan"),
        ({"weight_decay": "1e-4"}, TypeError, r"weight_decay must be a float, got str '1e-4'"),
    ],
)
def test_shared_arguments_are_validated(arguments, error, message):
    kwargs = {"num_classes": 10, **arguments}
    with pytest.raises(error, match=message):
        nets_factory.get_network_fn("resnet18", **kwargs)


def test_numpy_scalars_are_accepted_as_shared_arguments():
    fn = nets_factory.get_network_fn(
        "resnet18", np.int64(10), weight_decay=np.float32(1e-4), is_training=np.bool_(True)
    )
    assert fn.module.num_classes == 10 and type(fn.module.num_classes) is int
    assert fn.is_training is True and fn.weight_decay == pytest.approx(1e-4)


@pytest.mark.parametrize(
    "name", ["mobilenet_v1_025", "mobilenet_v2_035", "inception_v3", "nasnet_mobile"]
)
@shapes_only_draws()  # its trace reads fields
def test_bn_momentum_reaches_every_batch_norm(name):
    momenta = []

    def record(next_fun, args, kwargs, context):
        if isinstance(context.module, nn.BatchNorm):
            momenta.append(context.module.momentum)
        return next_fun(*args, **kwargs)

    # NASNet's cells repeat: three build every kind of layer of its twelve. XLA's convolutions:
    # the trace reads fields (tests/helpers.py).
    fewer = {**SHORTER_TWINS.get(name, {}), **XLA_CONVS}
    fn = nets_factory.get_network_fn(name, 10, is_training=True, bn_momentum=0.9, **fewer)
    # A BatchNorm of other fields than an earlier one's is traced, not replayed.
    with replayed_calls(), nn.intercept_methods(record):
        jax.eval_shape(fn.init, jax.random.key(0), abstract_images(fn, batch=1))
    assert momenta and set(momenta) == {0.9}


def test_a_run_too_short_for_the_batch_norm_decay_says_what_to_set(caplog):
    from nets_training import loop

    fn = nets_factory.get_network_fn("mobilenet_v1_025", 10, is_training=True)
    loop.check_batch_norm_decay(fn, 450)
    assert "(bn_momentum=0.9997) span about 3333 steps, too many for a run of 450" in caplog.text
    assert "set model.kwargs.bn_momentum=0.9" in caplog.text
    # Shorter runs than PyTorch's decay fits: a decay that fits, or none does.
    torch_decay = nets_factory.get_network_fn("mobilenet_v1_025", 10, bn_momentum=0.9)
    for steps, advice in [
        (40, "set model.kwargs.bn_momentum=0.75 or less, or train longer"),
        (1, "train for 100 steps or more (with model.kwargs.bn_momentum=0.9, PyTorch's)"),
    ]:
        caplog.clear()
        loop.check_batch_norm_decay(torch_decay, steps)
        assert caplog.text.rstrip().endswith(f"evaluation would see stale statistics; {advice}")
    caplog.clear()
    loop.check_batch_norm_decay(fn, 40_000)
    loop.check_batch_norm_decay(nets_factory.get_network_fn("resnet20", 10), 10)  # no such field
    assert not caplog.text

"""Feature pyramids through the public API: `NetworkFn.feature_info` and `NetworkFn.features`.

Every network's levels are checked against its traced shapes, and against timm's
`feature_info`, in tests/test_nets_factory.py's registry test; here, what users call.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nets_factory
from nets_factory import constructor_fields
from tests.helpers import TIMM_FEATURE_INFO, TIMM_OUTPUT_STRIDES, numpy_variables

TINY_RESNET = {"stage_sizes": [1, 1, 1], "num_filters": 4}
TINY_VIT = {"patch_size": 4, "embed_dim": 16, "depth": 2, "num_heads": 2, "img_size": 16}


def real_variables(fn, size):
    images = jax.ShapeDtypeStruct((2, size, size, 3), jnp.float32)
    return numpy_variables(jax.eval_shape(fn.init, jax.random.key(0), images))


def test_timms_reference_names_are_registry_names():
    assert set(TIMM_FEATURE_INFO) <= set(nets_factory.networks_map)


def test_feature_info_is_timms_for_resnet50():
    fn = nets_factory.get_network_fn("resnet50", num_classes=0)
    info = fn.feature_info
    assert [f.name for f in info] == ["conv_init", "block1", "block2", "block3", "block4"]
    assert [[f.stride, f.channels] for f in info] == TIMM_FEATURE_INFO["resnet50"]["levels"]
    assert fn.feature_info is info  # traced once


def test_a_dilated_pyramid_stops_at_its_output_stride():
    """`resnet50` at 8: timm's `feature_info.reduction()`, and the maps `features` makes (traced,
    not run; the parity tests run dilated networks of every family)."""
    fn = nets_factory.get_network_fn("resnet50", num_classes=0, output_stride=8)
    timms = TIMM_OUTPUT_STRIDES["resnet50"]["8"]
    assert [f.stride for f in fn.feature_info] == timms
    images = jax.ShapeDtypeStruct((1, 224, 224, 3), jnp.float32)
    variables = jax.eval_shape(fn.init, jax.random.key(0), images)
    maps = jax.eval_shape(fn.features, variables, images)
    assert [maps[f.name].shape[1] for f in fn.feature_info] == [224 // s for s in timms]


@pytest.mark.parametrize(
    ("name", "bad", "taken"),
    [
        ("resnet50", 12, "8, 16, 32"),
        ("resnet20", 8, "2, 4"),  # the CIFAR ResNets' own strides
        ("efficientnet_b0", 12, "4, 8, 16, 32"),  # timm's builder takes 4
        ("darknet53", 4, "8, 16, 32"),  # timm's assert (its stages reach 2 and 4 too)
        ("xception41", 4, "8, 16, 32"),
        ("mobilenet_v1", 4, "8, 16, 32"),  # Slim's check
    ],
)
def test_an_output_stride_the_network_does_not_take_names_those_it_does(name, bad, taken):
    message = rf"^{name}: output_stride={bad}: expected one of {taken} \(the last: no dilation\)$"
    with pytest.raises(ValueError, match=message):
        nets_factory.get_network_fn(name, 10, output_stride=bad)


def test_every_network_taking_an_output_stride_refuses_one_it_does_not_reach():
    """Refused by `get_network_fn` (not at a first trace), in one line naming the network."""
    dilated = [n for n in nets_factory.networks_map if "output_stride" in constructor_fields(n)]
    assert len(dilated) == 225
    for name in dilated:
        with pytest.raises(ValueError, match=f"^{name}: output_stride=12: expected one of "):
            nets_factory.get_network_fn(name, 10, output_stride=12)


@pytest.mark.parametrize("output_stride", [8, 16])
def test_every_network_timm_dilates_takes_an_output_stride_with_timms_strides(output_stride):
    """Every network of ours that timm dilates (tools/fixtures_feature_info.py's table: timm
    1.0.31's `feature_info.reduction()` at 8 and 16), with the same pyramid strides; read from
    `feature_strides()`, nothing traced (the parity tests run the dilated maps)."""
    for name, timms in TIMM_OUTPUT_STRIDES.items():
        fn = nets_factory.get_network_fn(name, 0, output_stride=output_stride)
        assert list(fn.module.feature_strides().values()) == timms[str(output_stride)], name


def test_features_are_the_pyramids_end_points():
    fn = nets_factory.get_network_fn("resnet20", num_classes=0, **TINY_RESNET)
    variables = real_variables(fn, 16)
    images = jnp.asarray(np.random.default_rng(0).normal(size=(2, 16, 16, 3)), jnp.float32)
    maps = jax.jit(fn.features)(variables, images)
    _, end_points = fn.apply(variables, images)
    assert list(maps) == [f.name for f in fn.feature_info] == ["block1", "block2", "block3"]
    for info in fn.feature_info:
        assert maps[info.name].shape == (2, 16 // info.stride, 16 // info.stride, info.channels)
        np.testing.assert_allclose(maps[info.name], end_points[info.name], rtol=1e-6, atol=1e-6)

    chosen = fn.features(variables, images, names=["block3"])
    assert list(chosen) == ["block3"]
    assert list(fn.features(variables, images, names="block3")) == ["block3"]  # one, unlisted


def test_features_in_training_return_the_updated_statistics():
    fn = nets_factory.get_network_fn("resnet20", 0, is_training=True, **TINY_RESNET)
    variables = real_variables(fn, 8)
    features = jax.jit(functools.partial(fn.features, mutable=["batch_stats"]))
    maps, updates = features(variables, jnp.ones((2, 8, 8, 3)))
    assert list(maps) == ["block1", "block2", "block3"] and "batch_stats" in updates


def test_unknown_level_names_the_levels():
    fn = nets_factory.get_network_fn("resnet20", num_classes=0, **TINY_RESNET)
    with pytest.raises(ValueError, match="'logits' is not a level .* block1, block2, block3"):
        fn.features(real_variables(fn, 8), jnp.ones((1, 8, 8, 3)), names=["logits"])


def test_transformer_tokens_become_maps_on_the_patch_grid():
    # A distilled ViT on a 16x24 image: 4x6 patches after the class and distillation tokens.
    fn = nets_factory.get_network_fn("deit_tiny_distilled_patch16_224", num_classes=0, **TINY_VIT)
    variables = real_variables(fn, 16)
    images = jnp.asarray(np.random.default_rng(1).normal(size=(1, 16, 24, 3)), jnp.float32)
    maps = fn.features(variables, images)
    _, end_points = fn.apply(variables, images)
    assert [(f.name, f.stride, f.channels) for f in fn.feature_info] == [
        ("block1", 4, 16),
        ("block2", 4, 16),
    ]
    tokens = end_points["block2"]
    assert tokens.shape == (1, 2 + 4 * 6, 16) and maps["block2"].shape == (1, 4, 6, 16)
    np.testing.assert_array_equal(maps["block2"][0, 2, 5], tokens[0, 2 + 2 * 6 + 5])

"""The Inception family: parameter counts, auxiliary logits, Slim's names, block numerics."""

import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nets_factory
import nets_summary
from nets import inception_resnet_v2, inception_utils, inception_v2
from nets.layers import Conv
from tests import variable_trees
from tests.helpers import numpy_variables

# Trainable parameters at 1000 classes, as `init` creates them (auxiliary heads included).
#
# Inception v1, from Slim's layer widths: every convolution is bias-free with a BatchNorm `beta`
# (no scale) per output channel. A mixed block on c channels with widths (w0, w1a, w1b, w2a, w2b,
# w3) has c*(w0 + w1a + w2a + w3) + 9*(w1a*w1b + w2a*w2b) weights plus w0+w1a+w1b+w2a+w2b+w3 betas:
#   stem  7*7*3*64 + 64 + 64*64 + 64 + 3*3*64*192 + 192                       =   124,416
#   Mixed_3b 155,504 + 3c 339,584 + 4b 363,888 + 4c 424,584 + 4d 485,528
#     + 4e 572,608 + 4f 802,816 + 5b 977,920 + 5c 1,345,776                 = 5,468,208
#   Logits/Conv2d_0c_1x1  1024*1000 + 1000                                   = 1,025,000
#   total                                                                      6,617,624
# torchvision's googlenet is the same network with a BatchNorm scale per channel as well: the
# 7,280 channels above (320 in the stem, 6,960 in the blocks) give 6,624,904, torchvision's count.
#
# The auxiliary head (v3, v4, Inception-ResNet-v2) on a c-channel 17x17 map:
#   c*128 + 128 + 5*5*128*768 + 768 + 768*1000 + 1000 = 128c + 3,227,368:
#   v3 (c=768) 3,325,800; v4 (c=1024) 3,358,568; Inception-ResNet-v2 (c=1088) 3,366,760.
# Without it, v3, v4 and Inception-ResNet-v2 have exactly the trainable counts Keras publishes for
# its ports of Slim's checkpoints: 23,817,352 (InceptionV3), 42,648,232 (Inception-v4) and
# 55,813,192 (InceptionResNetV2). At Slim's 1001 classes the no-aux counts are 6.62M (v1), 11.18M
# (v2), 23.82M (v3), 42.65M (v4) and 55.81M (Inception-ResNet-v2): Slim's 6.6M, 11.2M, 23.8M,
# 42.7M, 55.8M. (23.8M is v3 without its auxiliary head; with it, 27.1M.)
PARAMETER_COUNTS = {
    "inception_v1": 6_617_624,
    "inception_v2": 11_178_336,
    "inception_v3": 23_817_352 + 3_325_800,
    "inception_v4": 42_648_232 + 3_358_568,
    "inception_resnet_v2": 55_813_192 + 3_366_760,
    "googlenet": 6_624_904,
}
WITHOUT_AUX = {
    "inception_v3": 23_817_352,
    "inception_v4": 42_648_232,
    "inception_resnet_v2": 55_813_192,
}
AUX_NETWORKS = sorted(WITHOUT_AUX)


def network(name, train=False, **kwargs):
    kwargs.setdefault("num_classes", 1000)
    return nets_factory.get_network_fn(name, is_training=train, **kwargs)


def abstract_images(name):
    size = network(name).default_image_size
    return jax.ShapeDtypeStruct((2, size, size, 3), jnp.float32)


# Tracing these networks costs seconds, so the abstract runs most tests read are cached. `init`
# is always in training mode, so one run of it serves both modes.
@functools.cache
def abstract_variables(name, **kwargs):
    if not kwargs:  # the registry's network: its committed variable tree, no trace
        return variable_trees.abstract(name)
    return jax.eval_shape(network(name, **kwargs).init, jax.random.key(0), abstract_images(name))


@functools.cache
def abstract_end_points(name, train=False, **kwargs):
    """The end points, in the network's order, of an abstract `apply` in mode `train`."""
    if not kwargs:  # the registry's network: its committed end points, no trace
        points = variable_trees.end_points(name, train)
        return {point: jax.ShapeDtypeStruct(shape, jnp.float32) for point, shape in points.items()}
    fn = network(name, train, **kwargs)
    kw = {"rngs": {"dropout": jax.random.key(1)}, "mutable": ["batch_stats"]} if train else {}
    order = []

    def forward(variables, images):
        out = fn.apply(variables, images, **kw)
        end_points = (out[0] if train else out)[1]
        order.extend(end_points)
        return end_points

    variables = abstract_variables(name, **{k: v for k, v in kwargs.items() if k != "dtype"})
    end_points = jax.eval_shape(forward, variables, abstract_images(name))
    return {name: end_points[name] for name in order}


def count(tree):
    return sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(tree))


def params_of(name, **kwargs):
    return count(abstract_variables(name, **kwargs)["params"])


@pytest.mark.parametrize("name", sorted(PARAMETER_COUNTS))
def test_parameter_counts(name):
    assert params_of(name) == PARAMETER_COUNTS[name]


@pytest.mark.parametrize("name", AUX_NETWORKS)
def test_parameter_counts_without_aux_logits(name):
    aux = abstract_variables(name)["params"]["AuxLogits"]
    assert params_of(name) - count(aux) == WITHOUT_AUX[name]


def test_the_listed_count_is_the_published_one_and_says_the_auxiliary_heads_apart():
    # `python -m nets_factory`'s figures (nets_summary): Keras's and timm's count, not 27.1M.
    fn = network("inception_v3")
    profile = nets_summary.profile(fn, variables=abstract_variables("inception_v3"))
    assert (profile.params, profile.auxiliary_params) == (23_817_352, 3_325_800)


def test_googlenet_with_torchvision_aux_heads():
    # torchvision: aux1 (on 512 channels) 512*128 + 2*128 + 2048*1024 + 1024 + 1024*1000 + 1000
    # = 3,188,968; aux2 (on 528) 3,191,016; with both heads googlenet has 13,004,888.
    assert params_of("googlenet", aux_logits=True) == 13_004_888


def test_aux_logits_switch_off_and_go_with_the_logits():
    # Without its variables the head cannot run, so their absence is the whole story.
    assert "AuxLogits" not in abstract_variables("inception_v3", create_aux_logits=False)["params"]
    assert "AuxLogits" not in abstract_variables("inception_v3", num_classes=0)["params"]


def test_aux_parameters_exist_whatever_the_init_mode():
    # The factory initialises in training mode; a module initialised directly in eval mode must
    # still create the head, so that the same variables serve training and evaluation.
    module = nets_factory.networks_map["inception_v3"](num_classes=1000)
    images = jax.ShapeDtypeStruct((1, 299, 299, 3), jnp.float32)
    init = jax.eval_shape(lambda x: module.init(jax.random.key(0), x, train=False), images)
    assert jax.tree.structure(init) == jax.tree.structure(abstract_variables("inception_v3"))


def test_googlenet_aux_logits_follow_torchvision():
    assert {"aux1", "aux2"} <= set(abstract_variables("googlenet", aux_logits=True)["params"])
    points = abstract_end_points("googlenet", train=True, aux_logits=True)
    assert points["aux_logits1"].shape == points["aux_logits2"].shape == (2, 1000)
    eval_points = abstract_end_points("googlenet", aux_logits=True)
    assert not {"aux_logits1", "aux_logits2"} & set(eval_points)
    assert "aux1" not in abstract_variables("googlenet")["params"]


# Slim's `final_endpoint` choices, in order (inception_resnet_v2 registers only these).
SLIM_END_POINTS = {
    "inception_v1": "Conv2d_1a_7x7 MaxPool_2a_3x3 Conv2d_2b_1x1 Conv2d_2c_3x3 MaxPool_3a_3x3 "
    "Mixed_3b Mixed_3c MaxPool_4a_3x3 Mixed_4b Mixed_4c Mixed_4d Mixed_4e Mixed_4f "
    "MaxPool_5a_2x2 Mixed_5b Mixed_5c",
    "inception_v2": "Conv2d_1a_7x7 MaxPool_2a_3x3 Conv2d_2b_1x1 Conv2d_2c_3x3 MaxPool_3a_3x3 "
    "Mixed_3b Mixed_3c Mixed_4a Mixed_4b Mixed_4c Mixed_4d Mixed_4e Mixed_5a Mixed_5b Mixed_5c",
    "inception_v3": "Conv2d_1a_3x3 Conv2d_2a_3x3 Conv2d_2b_3x3 MaxPool_3a_3x3 Conv2d_3b_1x1 "
    "Conv2d_4a_3x3 MaxPool_5a_3x3 Mixed_5b Mixed_5c Mixed_5d Mixed_6a Mixed_6b Mixed_6c "
    "Mixed_6d Mixed_6e Mixed_7a Mixed_7b Mixed_7c",
    "inception_v4": "Conv2d_1a_3x3 Conv2d_2a_3x3 Conv2d_2b_3x3 Mixed_3a Mixed_4a Mixed_5a "
    "Mixed_5b Mixed_5c Mixed_5d Mixed_5e Mixed_6a Mixed_6b Mixed_6c Mixed_6d Mixed_6e Mixed_6f "
    "Mixed_6g Mixed_6h Mixed_7a Mixed_7b Mixed_7c Mixed_7d",
    "inception_resnet_v2": "Conv2d_1a_3x3 Conv2d_2a_3x3 Conv2d_2b_3x3 MaxPool_3a_3x3 "
    "Conv2d_3b_1x1 Conv2d_4a_3x3 MaxPool_5a_3x3 Mixed_5b Mixed_6a PreAuxLogits Mixed_7a "
    "Conv2d_7b_1x1",
}
# End points that are not Slim's: the feature pyramid's levels Slim does not record
# (`Repeat`, the 35x35 grid's last map after the ten residual blocks, timm's stride-8 level).
PYRAMID_ONLY = {"inception_resnet_v2": ["Repeat"]}
STEMS = {
    "inception_v1": "MaxPool_3a_3x3",
    "inception_v2": "MaxPool_3a_3x3",
    "inception_v3": "MaxPool_5a_3x3",
    "inception_v4": "Mixed_5a",
    "inception_resnet_v2": "MaxPool_5a_3x3",
}
CONTRACT = ["pre_logits", "logits", "predictions"]


@pytest.mark.parametrize("name", sorted(SLIM_END_POINTS))
def test_slim_end_points_in_order(name):
    end_points = abstract_end_points(name)
    added = PYRAMID_ONLY.get(name, [])
    names = [n for n in end_points if n != "stem" and n not in added]
    assert names == SLIM_END_POINTS[name].split() + CONTRACT
    assert all(n in end_points for n in added)
    assert end_points["stem"].shape == end_points[STEMS[name]].shape


def test_slim_shapes_at_default_size():
    # The sizes Slim's comments give, e.g. inception_v3.py's "# mixed_8: 8 x 8 x 1280."
    shapes = {
        "inception_v2": {"Mixed_4a": (14, 14, 576), "Mixed_5c": (7, 7, 1024)},
        "inception_v3": {"Mixed_5b": (35, 35, 256), "Mixed_6a": (17, 17, 768)},
        "inception_v4": {"Mixed_5a": (35, 35, 384), "Mixed_7d": (8, 8, 1536)},
        "inception_resnet_v2": {"Mixed_6a": (17, 17, 1088), "Mixed_7a": (8, 8, 2080)},
    }
    for name, expected in shapes.items():
        points = abstract_end_points(name)
        assert {k: points[k].shape[1:] for k in expected} == expected, name


def test_slim_scope_names_typos_included():
    v1 = abstract_variables("inception_v1")["params"]
    assert v1["Mixed_5b"]["Branch_2"]["Conv2d_0a_3x3"]["conv"]["kernel"].shape == (3, 3, 32, 128)
    assert v1["Logits"]["Conv2d_0c_1x1"]["kernel"].shape == (1, 1, 1024, 1000)
    v3 = abstract_variables("inception_v3")
    branch = v3["params"]["Mixed_5c"]["Branch_1"]
    assert set(branch) == {"Conv2d_0b_1x1", "Conv_1_0c_5x5"}
    assert set(branch["Conv_1_0c_5x5"]) == {"conv", "BatchNorm"}
    assert set(branch["Conv_1_0c_5x5"]["BatchNorm"]) == {"bias"}  # beta only: no scale
    assert set(v3["batch_stats"]["Mixed_5c"]["Branch_1"]["Conv_1_0c_5x5"]["BatchNorm"]) == {
        "mean",
        "var",
    }
    mixed_6a = v3["params"]["Mixed_6a"]["Branch_0"]
    assert mixed_6a["Conv2d_1a_1x1"]["conv"]["kernel"].shape == (3, 3, 288, 384)  # a 3x3
    assert set(v3["params"]["Mixed_7b"]["Branch_1"]) == {
        "Conv2d_0a_1x1",
        "Conv2d_0b_1x3",
        "Conv2d_0b_3x1",
    }
    assert set(v3["params"]["AuxLogits"]) == {"Conv2d_1b_1x1", "Conv2d_2a_5x5", "Conv2d_2b_1x1"}
    v4 = abstract_variables("inception_v4")["params"]
    assert set(v4["AuxLogits"]) == {"Conv2d_1b_1x1", "Conv2d_2a", "Aux_logits"}
    assert v4["Logits"]["Logits"]["kernel"].shape == (1536, 1000)


def test_inception_resnet_v2_repeat_scopes():
    params = abstract_variables("inception_resnet_v2")["params"]
    assert sorted(params["Repeat"]) == sorted(f"block35_{i}" for i in range(1, 11))
    assert len(params["Repeat_1"]) == 20 and len(params["Repeat_2"]) == 9
    block = params["Repeat_1"]["block17_20"]
    # The projection back to the input width has a bias and no BatchNorm.
    assert set(block["Conv2d_1x1"]) == {"kernel", "bias"}
    assert block["Conv2d_1x1"]["kernel"].shape == (1, 1, 384, 1088)
    assert block["Branch_0"]["Conv2d_1x1"]["conv"]["kernel"].shape == (1, 1, 1088, 192)
    assert params["Block8"]["Conv2d_1x1"]["kernel"].shape == (1, 1, 448, 2080)


def test_inception_v2_first_layer():
    separable = abstract_variables("inception_v2")
    layer = separable["params"]["Conv2d_1a_7x7"]
    # Slim's depthwise_weights [7, 7, 3, 8] and pointwise_weights [1, 1, 24, 64], with biases.
    assert layer["depthwise"]["kernel"].shape == (7, 7, 1, 24)
    assert layer["pointwise"]["kernel"].shape == (1, 1, 24, 64)
    assert layer["pointwise"]["bias"].shape == (64,)
    assert "Conv2d_1a_7x7" not in separable["batch_stats"]
    plain = abstract_variables("inception_v2", use_separable_conv=False)
    assert plain["params"]["Conv2d_1a_7x7"]["conv"]["kernel"].shape == (7, 7, 3, 64)
    assert "BatchNorm" in plain["batch_stats"]["Conv2d_1a_7x7"]


def test_googlenet_names_follow_torchvision():
    params = abstract_variables("googlenet")["params"]
    assert set(params["conv1"]) == {"conv", "bn"}
    assert set(params["conv1"]["bn"]) == {"scale", "bias"}
    block = params["inception3a"]
    assert set(block) == {"branch1", "branch2", "branch3", "branch4"}
    assert set(block["branch4"]) == {"1"}  # branch4.0 is the max pool
    assert block["branch3"]["1"]["conv"]["kernel"].shape == (3, 3, 16, 32)  # the "5x5" is 3x3
    assert params["fc"]["kernel"].shape == (1024, 1000)


def test_depth_multiplier_thins_every_convolution():
    params = abstract_variables("inception_v3", depth_multiplier=0.5)["params"]
    # Mixed_7b's 2048 channels and Mixed_7c's 320-wide first branch, halved:
    branch_0 = params["Mixed_7c"]["Branch_0"]
    assert branch_0["Conv2d_0a_1x1"]["conv"]["kernel"].shape == (1, 1, 1024, 160)
    assert params["Logits"]["Conv2d_1c_1x1"]["kernel"].shape == (1, 1, 1024, 1000)
    aux = params["AuxLogits"]
    assert aux["Conv2d_2a_5x5"]["conv"]["kernel"].shape == (5, 5, 64, 384)
    # min_depth floors the thinnest layers: a 32-wide layer stays 16 wide at 0.1.
    tiny = inception_utils.depth_fn(0.1, 16)
    assert (tiny(32), tiny(384)) == (16, 38)
    with pytest.raises(ValueError, match="depth_multiplier"):
        inception_utils.depth_fn(0.0, 16)


def test_bfloat16_computes_in_bfloat16():
    # The float32 variables of the float32 network serve: parameters stay float32.
    points = abstract_end_points("inception_v3", train=True, dtype=jnp.bfloat16)
    assert points["Mixed_7a"].dtype == points["logits"].dtype == jnp.bfloat16
    assert points["aux_logits"].dtype == jnp.bfloat16


# Real computation, on thinned networks and blocks at tiny sizes only: compiling the whole of even
# a thinned Inception for a backward pass takes half a minute on CPU, and compiling `init` (its
# random initialisers) as long as the forward pass, so these tests draw their variables in numpy.


def test_small_inception_v1_runs_in_eval_mode():
    fn = nets_factory.get_network_fn("inception_v1", num_classes=5, depth_multiplier=0.1)
    images = jax.random.normal(jax.random.key(1), (3, 32, 32, 3))
    variables = numpy_variables(jax.eval_shape(fn.init, jax.random.key(0), images[:2]))
    apply = jax.jit(fn.apply)
    logits, points = apply(variables, images[:2])
    other, _ = apply(variables, images[::2])
    assert points["Mixed_5c"].shape == (2, 1, 1, 38 + 38 + 16 + 16)  # 384, 384, 128, 128 thinned
    np.testing.assert_allclose(other[0], logits[0], rtol=1e-5, atol=1e-5)  # running statistics
    assert np.all(np.isfinite(logits)) and not np.allclose(logits[0], logits[1])
    np.testing.assert_allclose(np.sum(points["predictions"], axis=-1), 1.0, rtol=1e-5)


class ThinBlocks(nn.Module):
    """Inception-ResNet-v2's block35 and block8, thinned."""

    @nn.compact
    def __call__(self, x, train: bool):
        depth = inception_utils.depth_fn(1 / 16, 2)
        builder = inception_utils.slim_builder(Conv, jnp.float32, train, depth)
        x = inception_resnet_v2.ResidualBlock(inception_resnet_v2._BLOCK35, builder, 0.17)(x)
        return inception_resnet_v2.ResidualBlock(inception_resnet_v2._BLOCK8, builder, 0.2)(x)


def test_gradient_reaches_every_parameter_of_the_blocks():
    blocks = ThinBlocks()
    x = jax.random.normal(jax.random.key(1), (2, 4, 4, 8))
    init = functools.partial(blocks.init, train=True)
    variables = numpy_variables(jax.eval_shape(init, jax.random.key(0), x))
    weights = jax.random.normal(jax.random.key(2), x.shape)

    def loss(params):
        y, updates = blocks.apply(
            {**variables, "params": params}, x, train=True, mutable=["batch_stats"]
        )
        return jnp.sum(y * weights), updates

    grads, updates = jax.jit(jax.grad(loss, has_aux=True))(variables["params"])
    assert set(grads) == {"ResidualBlock_0", "ResidualBlock_1"}
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
        assert np.any(np.asarray(g) != 0), jax.tree_util.keystr(path)
    moved = jax.tree.map(
        lambda a, b: not np.array_equal(a, b), variables["batch_stats"], updates["batch_stats"]
    )
    assert all(jax.tree.leaves(moved))


# Building blocks, exactly, on tiny inputs.


def test_separable_depthwise_kernel_is_slims_reshaped():
    # Our depthwise kernel [kh, kw, 1, channels * multiplier] reshaped to [kh, kw, channels,
    # multiplier] is Slim's `depthwise_weights`: output channel c * multiplier + m filters input
    # channel c with slice [:, :, c, m].
    layer = inception_v2.SeparableConv(6, (3, 3), multiplier=2, strides=1, conv=Conv)
    x = np.random.default_rng(0).normal(size=(1, 5, 5, 3)).astype(np.float32)
    params = jax.jit(layer.init)(jax.random.key(0), x)["params"]
    params["pointwise"] = {"kernel": jnp.eye(6)[None, None], "bias": jnp.zeros(6)}  # identity
    ours = np.asarray(jax.jit(layer.apply)({"params": params}, x))
    slim = np.asarray(params["depthwise"]["kernel"]).reshape(3, 3, 3, 2)
    padded = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    windows = np.stack([padded[0, i : i + 5, j : j + 5] for i in range(3) for j in range(3)])
    reference = np.einsum("khwc,kcm->hwcm", windows, slim.reshape(9, 3, 2)).reshape(5, 5, 6)
    np.testing.assert_allclose(ours[0], np.maximum(reference, 0), rtol=1e-5, atol=1e-5)

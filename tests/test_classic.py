"""LeNet, CifarNet, AlexNet, OverFeat and VGG: counts, Slim's names, layers, training behaviour."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nets_factory
import nets_summary as summary
from nets import cifarnet
from nets.layers import adaptive_avg_pool
from tests import variable_trees
from tests.helpers import numpy_variables

# torchvision's published counts at 1000 classes. VGG-16, for instance:
#   convolutions 3*3*(3*64 + 64*64 + 64*128 + 128*128 + 128*256 + 2*256*256 + 256*512
#     + 5*512*512) = 14,710,464 weights + 4,224 biases                  =  14,714,688
#   fc6 (7*7*512) * 4096 + 4096                                          = 102,764,544
#   fc7 4096 * 4096 + 4096                                               =  16,781,312
#   fc8 4096 * 1000 + 1000                                               =   4,097,000
#   total                                                                  138,357,544
# and vgg16_bn adds a BatchNorm scale and bias per conv channel: 2 * 4,224 = 8,448 more.
PUBLISHED_COUNTS = {
    "alexnet": 61_100_840,
    "vgg11": 132_863_336,
    "vgg13": 133_047_848,
    "vgg16": 138_357_544,
    "vgg19": 143_667_240,
    "vgg11_bn": 132_868_840,
    "vgg13_bn": 133_053_736,
    "vgg16_bn": 138_365_992,
    "vgg19_bn": 143_678_248,
}

# Slim publishes no counts; these are its layers' arithmetic.
#   alexnet_v2: conv1 11*11*3*64+64 = 23,296; conv2 5*5*64*192+192 = 307,392;
#     conv3 3*3*192*384+384 = 663,936; conv4 3*3*384*384+384 = 1,327,488;
#     conv5 3*3*384*256+256 = 884,992; fc6 5*5*256*4096+4096 = 26,218,496;
#     fc7 4096*4096+4096 = 16,781,312; fc8 4096*1000+1000 = 4,097,000.
#   overfeat (the paper's Table 4 gives "145M" for the fast model): conv1 23,296;
#     conv2 5*5*64*256+256 = 409,856; conv3 3*3*256*512+512 = 1,180,160;
#     conv4 3*3*512*1024+1024 = 4,719,616; conv5 3*3*1024*1024+1024 = 9,438,208;
#     fc6 6*6*1024*3072+3072 = 113,249,280; fc7 3072*4096+4096 = 12,587,008; fc8 4,097,000.
#   lenet (3-channel input, 10 classes): conv1 5*5*3*32+32 = 2,432; conv2 5*5*32*64+64 = 51,264;
#     fc3 7*7*64*1024+1024 = 3,212,288; fc4 1024*10+10 = 10,250.
#   cifarnet (10 classes): conv1 5*5*3*64+64 = 4,864; conv2 5*5*64*64+64 = 102,464;
#     fc3 8*8*64*384+384 = 1,573,248; fc4 384*192+192 = 73,920; logits 192*10+10 = 1,930.
SLIM_COUNTS = {
    ("alexnet_v2", 1000): 50_303_912,
    ("overfeat", 1000): 145_704_424,
    ("lenet", 10): 3_276_234,
    ("cifarnet", 10): 1_756_426,
}

SLIM_IS_TORCHVISION = {"vgg_a": "vgg11", "vgg_16": "vgg16", "vgg_19": "vgg19"}


def abstract_params(name, num_classes=1000, size=None):
    fn = nets_factory.get_network_fn(name, num_classes=num_classes)
    size = size or fn.default_image_size
    images = jax.ShapeDtypeStruct((1, size, size, 3), jnp.float32)
    return jax.eval_shape(fn.init, jax.random.key(0), images)["params"]


# The recorded counts (nets/sizes.tsv), which test_nets_factory compares with a trace of every
# network; so are the committed end points (tests/end_points.txt) read below.
@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_published_parameter_counts(name):
    assert summary.recorded_sizes()[name].params == PUBLISHED_COUNTS[name]


@pytest.mark.parametrize(("name", "num_classes"), sorted(SLIM_COUNTS))
def test_slim_parameter_counts(name, num_classes):
    fn = nets_factory.get_network_fn(name, num_classes=num_classes)
    assert summary.profile(fn).params == SLIM_COUNTS[name, num_classes]


@pytest.mark.parametrize("slim_name", sorted(SLIM_IS_TORCHVISION))
def test_slim_vgg_is_torchvision_vgg(slim_name):
    slim = abstract_params(slim_name)
    torchvision = abstract_params(SLIM_IS_TORCHVISION[slim_name])
    assert jax.tree.map(lambda p: p.shape, slim) == jax.tree.map(lambda p: p.shape, torchvision)
    assert slim["fc6"]["kernel"].shape == (7, 7, 512, 4096)  # Slim's fc6 variable
    assert slim["fc8"]["kernel"].shape == (1, 1, 4096, 1000)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("lenet", ["conv1", "pool1", "conv2", "pool2", "Flatten", "fc3"]),
        ("cifarnet", ["conv1", "pool1", "conv2", "pool2", "Flatten", "fc3", "fc4"]),
        ("alexnet_v2", ["conv1", "pool1", "conv2", "pool2", "conv3", "conv4", "conv5", "pool5"]),
        ("overfeat", ["conv1", "pool1", "conv2", "pool2", "conv3", "conv4", "conv5", "pool5"]),
        ("vgg_16", [f"conv{i}" for i in range(1, 6)] + [f"pool{i}" for i in range(1, 6)]),
    ],
)
def test_slim_end_point_names(name, expected):
    points = variable_trees.end_points(name)
    head = ["fc6", "fc7"] if name not in ("lenet", "cifarnet") else []
    assert set(expected + head + ["stem", "pre_logits", "logits", "predictions"]) <= set(points)
    assert points["stem"] == points["pool1"]


def test_vgg_layers_and_slim_variable_names():
    params = abstract_params("vgg_16")
    convs = [
        f"conv{i}_{j}" for i, n in enumerate((2, 2, 3, 3, 3), start=1) for j in range(1, n + 1)
    ]
    assert set(params) == {*convs, "fc6", "fc7", "fc8"}
    assert params["conv3_3"]["kernel"].shape == (3, 3, 256, 256)
    bn = abstract_params("vgg11_bn")
    assert "bn1_1" in bn and set(bn["bn1_1"]) == {"scale", "bias"} and "bias" in bn["conv1_1"]


@pytest.mark.parametrize(
    ("name", "first", "pooled"), [("alexnet_v2", 54, 5), ("alexnet", 55, 6), ("overfeat", 56, 6)]
)
def test_alexnet_and_overfeat_shapes_at_default_size(name, first, pooled):
    points = variable_trees.end_points(name)
    assert points["conv1"][1] == first and points["pool5"][1] == pooled
    assert points["fc6"][1:3] == (1, 1)


@pytest.mark.parametrize("name", ["alexnet_v2", "alexnet", "overfeat", "vgg11", "vgg11_bn"])
def test_fully_connected_heads_run_at_other_image_sizes(name):
    fn = nets_factory.get_network_fn(name, num_classes=10)
    params = abstract_params(name, num_classes=10)
    for size in (96, 320):
        other = abstract_params(name, num_classes=10, size=size)
        assert jax.tree.map(lambda p: p.shape, other) == jax.tree.map(lambda p: p.shape, params)
        points = summary.profile(fn, image_size=size).end_points
        assert points["logits"] == (1, 10) and points["pre_logits"] == (1, 4096)


def test_vgg_larger_maps():
    # 'slide' (timm) keeps fc7's map on images over 224 and averages it; 'pool' (torchvision)
    # pools every map to 7x7. Up to 224 both are the same network; anything else is refused.
    for size, fc7 in ((224, (1, 1, 1, 4096)), (320, (1, 4, 4, 4096))):
        fn = nets_factory.get_network_fn("vgg11", num_classes=10, larger_maps="slide")
        points = summary.profile(fn, image_size=size).end_points
        assert points["fc7"] == fc7 and points["pre_logits"] == (1, 4096)
    bad = nets_factory.get_network_fn("vgg11", num_classes=10, larger_maps="crop")
    with pytest.raises(ValueError, match="larger_maps must be 'pool' or 'slide', got 'crop'"):
        summary.profile(bad)


def test_adaptive_avg_pool_is_torchs():
    rng = np.random.default_rng(0)  # numpy inputs: nothing to compile
    x = jnp.asarray(rng.normal(size=(2, 5, 9, 3)), jnp.float32)
    assert adaptive_avg_pool(x, (5, 9)) is x
    out = adaptive_avg_pool(x, (3, 4))
    expected = np.zeros((2, 3, 4, 3), np.float32)
    for i in range(3):
        for j in range(4):
            rows = slice(i * 5 // 3, -(-(i + 1) * 5 // 3))
            cols = slice(j * 9 // 4, -(-(j + 1) * 9 // 4))
            expected[:, i, j] = np.asarray(x)[:, rows, cols].mean(axis=(1, 2))
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    # A 1x1 map (VGG at 32 pixels) is repeated; divisible sizes are plain average pooling.
    one = adaptive_avg_pool(x[:, :1, :1], (7, 7))
    np.testing.assert_allclose(one, np.broadcast_to(x[:, :1, :1], (2, 7, 7, 3)), rtol=1e-6)
    y = jnp.asarray(rng.normal(size=(1, 14, 14, 2)), jnp.float32)
    np.testing.assert_allclose(
        adaptive_avg_pool(y, (7, 7)),
        jax.lax.reduce_window(y, 0.0, jax.lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") / 4,
        rtol=1e-5,
        atol=1e-6,
    )


def test_local_response_normalization_is_tensorflows():
    x = jnp.asarray(np.random.default_rng(0).normal(size=(2, 3, 3, 12)) * 10.0, jnp.float32)
    out = cifarnet.local_response_normalization(x)
    xs = np.asarray(x, np.float64)
    expected = np.empty_like(xs)
    for d in range(12):  # tf.nn.lrn's definition, depth_radius 4, window clipped at the edges
        window = xs[..., max(0, d - 4) : d + 5]
        expected[..., d] = xs[..., d] / (1.0 + 0.001 / 9.0 * np.sum(window**2, -1)) ** 0.75
    np.testing.assert_allclose(out, expected, rtol=1e-5)


def test_alexnet_dropout_inputs_must_name_head_layers():
    fn = nets_factory.get_network_fn("alexnet", num_classes=10, dropout_inputs=("fc9",))
    images = jax.ShapeDtypeStruct((1, 224, 224, 3), jnp.float32)
    with pytest.raises(ValueError, match="dropout_inputs.*fc9"):
        jax.eval_shape(fn.init, jax.random.key(0), images)


@pytest.mark.parametrize("name", ["lenet", "cifarnet"])
def test_train_step_and_dropout(name):
    """Jitted forward and backward at the default size: every parameter gets a gradient, and
    dropout acts in training only."""
    train_fn = nets_factory.get_network_fn(name, num_classes=10, is_training=True)
    eval_fn = nets_factory.get_network_fn(name, num_classes=10)
    size = train_fn.default_image_size
    images = jnp.asarray(np.random.default_rng(1).normal(size=(2, size, size, 3)), jnp.float32)
    variables = numpy_variables(jax.eval_shape(train_fn.init, jax.random.key(0), images))
    assert set(variables) == {"params"}  # no BatchNorm in Slim's small nets

    @jax.jit
    def loss_and_grads(params, key):
        def loss(params):
            logits, _ = train_fn.apply({"params": params}, images, rngs={"dropout": key})
            return jnp.mean(jax.nn.log_softmax(logits)[:, 0]), logits

        return jax.value_and_grad(loss, has_aux=True)(params)

    (_, logits_a), grads = loss_and_grads(variables["params"], jax.random.key(2))
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
        assert np.any(np.asarray(g) != 0), jax.tree_util.keystr(path)
    (_, logits_b), _ = loss_and_grads(variables["params"], jax.random.key(3))
    assert not np.allclose(logits_a, logits_b)  # a different dropout mask

    @jax.jit
    def evaluate(variables):
        logits, _ = eval_fn.apply(variables, images)  # no 'dropout' rng needed
        again, _ = eval_fn.apply(variables, images, rngs={"dropout": jax.random.key(4)})
        return logits, again

    eval_logits, again = evaluate(variables)
    np.testing.assert_array_equal(eval_logits, again)
    assert not np.allclose(eval_logits, logits_a)

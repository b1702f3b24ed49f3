"""NASNet-A and PNASNet-5: published sizes, Slim's end points, the auxiliary head, drop-path."""

import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nets_factory
from nets import nasnet, nasnet_cells
from nets.layers import Conv
from tests import variable_trees
from tests.helpers import XLA_CONVS, numpy_variables

# Parameters of the inference graph (auxiliary head excluded), in millions: Zoph et al. Tables 1-3
# (also Slim's nasnet README) and Liu et al.'s ImageNet tables. Checked at Slim's 1001
# classes (10 for CIFAR); 1000 classes round the same.
PUBLISHED_MILLIONS = {
    "nasnet_cifar": 3.3,
    "nasnet_mobile": 5.3,
    "pnasnet_mobile": 5.1,
    "pnasnet_large": 86.1,
}
# Keras' NASNetMobile / NASNetLarge load Slim's checkpoints (1000 classes, no auxiliary head), so
# their exact counts pin the layer widths: (trainable, BatchNorm moving statistics). The paper's
# "88.9M" for NASNet-A Large is Keras' total, 88,949,818, moving statistics included; its
# trainable parameters are 88.75M.
KERAS_COUNTS = {
    "nasnet_mobile": (5_289_978, 36_738),
    "nasnet_large": (88_753_150, 196_668),
}
# One cell by hand: nasnet_mobile's Cell_2 (F = 44 filters per state) reads Cell_1 and Cell_0,
# both 28x28x264 (6 states of 44 concatenated).
#   conv_1x1 on Cell_1:         264 * 44 + BN 2 * 44                          = 11,704
#   prev_1x1 on Cell_0:         264 * 44 + BN 2 * 44                          = 11,704
#   separable 5x5, twice:      2 * (5*5*44 depthwise + 44*44 pointwise + 88)  =  6,248
#   separable 3x3, twice:      2 * (3*3*44 + 44*44 + 88)                      =  4,840
#   combinations: 5x5 + 3x3, 5x5 + 3x3, pool + identity, pool + pool, 3x3 + identity
#                = 2 * (6,248 + 4,840) + 4,840                                = 27,016
#   total                                                                       50,424
MOBILE_CELL_2_PARAMS = 50_424


def count(tree):
    return sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(tree))


def without_aux(tree):
    return {k: v for k, v in tree.items() if not k.startswith("aux_")}


# The counts read each network's variables at 1000 classes from the committed tree, without a
# trace (tests/test_nets_factory.py checks the tree against a live one).


def inference_params(name, num_classes):
    """Parameters without the auxiliary head at `num_classes`: the logits layer holds
    `width + 1` per class (a kernel column and a bias)."""
    params = variable_trees.abstract(name)["params"]
    width = params["final_layer"]["kernel"].shape[0]
    return count(without_aux(params)) + (width + 1) * (num_classes - 1000)


@pytest.mark.parametrize("name", sorted(PUBLISHED_MILLIONS))
def test_published_parameter_counts(name):
    # Slim's 1001st class is a background class: one more logit.
    params = inference_params(name, 10 if name == "nasnet_cifar" else 1001)
    assert round(params / 1e6, 1) == PUBLISHED_MILLIONS[name], params


@pytest.mark.parametrize("name", sorted(KERAS_COUNTS))
def test_exact_counts_of_slims_checkpoints(name):
    variables = variable_trees.abstract(name)
    trainable, statistics = KERAS_COUNTS[name]
    assert count(without_aux(variables["params"])) == trainable
    assert count(without_aux(variables["batch_stats"])) == statistics
    if name == "nasnet_mobile":
        assert count(variables["params"]["cell_2"]) == MOBILE_CELL_2_PARAMS


def test_pnasnet_builds_only_the_layers_it_needs():
    params = variable_trees.abstract("pnasnet_large")["params"]  # as Slim's pnasnet_test
    assert "conv_1x1" in params["cell_stem_0"]  # Slim's cell_stem_0/1x1
    # The stem's first cell reads the 96-channel conv0 directly, so its max-pool needs a 1x1 to
    # reach 54 filters; the second reads a factorized reduction that already has 108.
    assert "conv_1x1" in params["cell_stem_0"]["comb_iter_0_right"]
    assert "comb_iter_0_right" not in params["cell_stem_1"]


def test_slim_end_points_of_nasnet_mobile():
    # As Slim's nasnet_test: the training graph's end points at the default size (committed;
    # test_nets_factory traces them).
    end_points = variable_trees.end_points("nasnet_mobile", train=True)
    expected = {"Stem": (28, 28, 88), "Reduction_Cell_0": (14, 14, 352)}
    expected |= {"Reduction_Cell_1": (7, 7, 704), "global_pool": (1056,)}
    expected |= {f"Cell_{i}": (28 >> (i // 4), 28 >> (i // 4), 264 << (i // 4)) for i in range(12)}
    expected |= {"aux_logits": (1000,), "logits": (1000,), "predictions": (1000,)}
    for name, shape in expected.items():
        assert end_points[name] == (1, *shape), name
    # Not Slim's: the feature pyramid's stride-2 and stride-4 maps (nets.features).
    assert end_points["conv0"] == (1, 111, 111, 32)
    assert end_points["cell_stem_0"] == (1, 56, 56, 44)
    assert set(end_points) == set(expected) | {"stem", "pre_logits", "conv0", "cell_stem_0"}


def tiny(name, **kw):
    """Few cells and filters; the variant's drop-path (keep 0.6 for nasnet_cifar) stays on."""
    return nets_factory.networks_map[name](
        num_cells=kw.pop("num_cells", 2), num_conv_filters=8, **kw
    )


def abstract_init(module, train=True, batch=2):
    """`((logits, end_points), variables)` of one abstract trace of `init_with_output`."""
    size = module.default_image_size
    images = jax.ShapeDtypeStruct((batch, size, size, 3), jnp.float32)
    rngs = {"params": jax.random.key(0), "dropout": jax.random.key(1)}
    return jax.eval_shape(lambda x: module.init_with_output(rngs, x, train=train), images)


def test_aux_logits_only_in_training_and_switchable():
    # The traces read shapes: XLA's convolutions (tests/helpers.py).
    (_, end_points), variables = abstract_init(tiny("nasnet_cifar", **XLA_CONVS))
    # Two cells reduce before cell 0 and cell 1: the head reads Cell_0 (16x16 -> 4x4 pooled).
    assert end_points["aux_logits"].shape == (2, 10)
    assert variables["params"]["aux_0"]["conv"]["kernel"].shape == (4, 4, 128, 768)
    (_, end_points), _ = abstract_init(tiny("nasnet_cifar", **XLA_CONVS), train=False)
    assert "aux_logits" not in end_points
    no_head = tiny("nasnet_cifar", use_aux_head=False, **XLA_CONVS)
    (_, end_points), variables = abstract_init(no_head)
    assert "aux_logits" not in end_points and "aux_0" not in variables["params"]
    (_, end_points), _ = abstract_init(tiny("nasnet_cifar", num_classes=0, **XLA_CONVS))
    assert "aux_logits" not in end_points  # no classes, no auxiliary classifier (as Slim)


# Slim counts the stem and reduction cells too: 7 cells in all for NASNet, 5 for PNASNet.
@pytest.mark.parametrize(
    "name, cells",
    [
        (
            "nasnet_large",
            ["cell_stem_0", "cell_stem_1", "cell_0", "reduction_cell_0", "cell_1"]
            + ["reduction_cell_1", "cell_2"],
        ),
        ("pnasnet_large", ["cell_stem_0", "cell_stem_1", "cell_0", "cell_1", "cell_2"]),
    ],
)
def test_drop_path_rate_scales_with_depth(name, cells):
    rate = {}

    def record(next_fun, args, kwargs, context):
        if isinstance(context.module, nasnet_cells.Cell):
            rate[context.module.name] = context.module.drop_path_rate
        return next_fun(*args, **kwargs)

    module = tiny(name, num_cells=3, use_aux_head=False, **XLA_CONVS)  # reads fields
    with nn.intercept_methods(record):
        abstract_init(module, batch=1)
    p = nets_factory.networks_map[name].keywords["drop_path_rate"]
    assert p == {"nasnet_large": 0.3, "pnasnet_large": 0.4}[name]  # 1 - Slim's keep_prob
    assert list(rate) == cells
    for position, cell in enumerate(rate):
        assert rate[cell] == pytest.approx((position + 1) / len(rate) * p)


def test_factorized_reduction_reads_even_and_odd_pixels():
    x = jnp.arange(25.0).reshape(1, 5, 5, 1)
    module = nasnet_cells.FactorizedReduction(
        3,
        2,
        functools.partial(nn.Conv, use_bias=False, kernel_init=nn.initializers.ones),
        functools.partial(nn.BatchNorm, use_running_average=True, epsilon=0.0),
    )
    y, _ = module.init_with_output(jax.random.key(0), x)
    assert y.shape == (1, 3, 3, 3)  # 3 features: 1 from the even path, 2 from the odd one
    odd = jnp.pad(x, ((0, 0), (0, 1), (0, 1), (0, 0)))[:, 1::2, 1::2, 0]
    np.testing.assert_array_equal(y[..., 0], x[:, ::2, ::2, 0])
    np.testing.assert_array_equal(y[..., 1], odd)
    np.testing.assert_array_equal(y[..., 2], odd)
    np.testing.assert_array_equal(y[0, :, 2, 1], [0.0, 0.0, 0.0])  # the zero padding


@pytest.mark.parametrize("padding", ["SAME", "ZEROS"])
def test_strided_pools_pad_as_tensorflow_or_as_keras(padding):
    # On a 4x4 map a 3x3/2 pool's padding is one row and column at the bottom/right (SAME's).
    # TensorFlow's pools ignore it; Keras's NASNet pads zeros, which win a max of negative
    # values and count in the average.
    def pool(operation, x):
        module = nasnet_cells.Operation(operation, 1, 2, None, None, padding)
        return np.asarray(module.apply({}, x)[0, ..., 0])

    zeros = padding == "ZEROS"
    edge = [[-1.0, 0.0], [0.0, 0.0]] if zeros else -np.ones((2, 2))
    np.testing.assert_array_equal(pool("max_pool_3x3", -jnp.ones((1, 4, 4, 1))), edge)
    mean = [[1.0, 6 / 9], [6 / 9, 4 / 9]] if zeros else np.ones((2, 2))
    np.testing.assert_allclose(pool("avg_pool_3x3", jnp.ones((1, 4, 4, 1))), mean, rtol=1e-6)
    # At stride 1 (the normal cells' pools) Keras pools as TensorFlow does.
    stride_1 = nasnet_cells.Operation("max_pool_3x3", 1, 1, None, None, padding)
    np.testing.assert_array_equal(stride_1.apply({}, -jnp.ones((1, 4, 4, 1))), -1.0)


def test_strided_pool_padding_is_checked():
    module = nets_factory.get_network_fn("nasnet_mobile", 10, strided_pool_padding="zeros").module
    images = jax.ShapeDtypeStruct((1, 64, 64, 3), jnp.float32)
    with pytest.raises(ValueError, match=r"strided_pool_padding must be one of .*got 'zeros'"):
        jax.eval_shape(module.init, jax.random.key(0), images)


def test_registry_variants_follow_slims_configs_and_arg_scopes():
    sizes = {"nasnet_cifar": 32, "nasnet_mobile": 224, "nasnet_large": 331}
    sizes |= {"pnasnet_mobile": 224, "pnasnet_large": 331}
    for name, size in sizes.items():
        module = nets_factory.networks_map[name]()
        assert type(module).default_image_size == size
        cifar = name == "nasnet_cifar"
        assert (module.bn_momentum, module.bn_epsilon) == ((0.9, 1e-5) if cifar else (0.9997, 1e-3))
        assert module.dense_dropout_keep_prob == (1.0 if cifar else 0.5)
        assert module.reduction_cell == (None if "pnas" in name else nasnet.NASNET_A_REDUCTION)


def test_bfloat16_computes_in_bfloat16_with_float32_params():
    (logits, end_points), variables = abstract_init(tiny("nasnet_cifar", dtype=jnp.bfloat16))
    assert {leaf.dtype for leaf in jax.tree.leaves(variables["params"])} == {jnp.dtype("float32")}
    for name in ("Stem", "Reduction_Cell_0", "Cell_1", "aux_logits", "logits"):
        assert end_points[name].dtype == jnp.bfloat16, name


@pytest.mark.cpu_only("compiled at XLA's optimisation level 0, which its GPU backend refuses")
def test_tiny_nasnet_cifar_trains_with_drop_path_from_the_dropout_stream():
    images = jax.random.normal(jax.random.key(1), (2, 16, 16, 3))  # its auxiliary head needs 9 px

    def network(**fields):
        return nets_factory.get_network_fn(
            "nasnet_cifar", 10, is_training=True, num_cells=2, num_conv_filters=8, **fields
        )

    variables = numpy_variables(jax.eval_shape(network().init, jax.random.key(0), images))

    def gradient(fn):
        @functools.partial(jax.grad, has_aux=True)
        def loss(params, dropout_rng, progress):
            (logits, end_points), _ = fn.apply(
                {**variables, "params": params},
                images,
                rngs={"dropout": dropout_rng},
                mutable=["batch_stats"],
                drop_path_progress=progress,
            )
            aux = jax.nn.log_softmax(end_points["aux_logits"])[:, 0]
            return jnp.sum(jax.nn.log_softmax(logits)[:, 0] + 0.4 * aux), logits

        return loss

    # XLA's own convolutions: the default CPU ones' thousands of depthwise taps compile in ~12 s,
    # XLA's in ~2 s. The properties below are the network's, whichever convolution computes them
    # (tests/test_conv.py checks the CPU one's values and gradients against XLA's on each kind of
    # shape, NASNet's depthwise ones included).
    xla_convolutions = network(conv=functools.partial(Conv, impl="xla"))
    # XLA's unoptimised CPU code compiles in half the time and is fast enough here.
    grads = (
        jax.jit(gradient(xla_convolutions))
        .lower(variables["params"], jax.random.key(2), 0.0)
        .compile(compiler_options={"xla_backend_optimization_level": 0})
    )
    # Progress 0 (Slim's global step 0): no path is dropped and every parameter learns.
    g, logits_a = grads(variables["params"], jax.random.key(2), 0.0)
    _, logits_b = grads(variables["params"], jax.random.key(3), 0.0)
    np.testing.assert_array_equal(logits_a, logits_b)
    assert jax.tree.map(np.shape, g) == jax.tree.map(np.shape, variables["params"])
    for path, leaf in jax.tree_util.tree_leaves_with_path(g):
        assert np.all(np.isfinite(leaf)) and np.any(leaf != 0), jax.tree_util.keystr(path)
    # Fully scheduled drop-path (rate 0.4 at the top) depends on the 'dropout' key.
    _, logits_c = grads(variables["params"], jax.random.key(2), 1.0)
    _, logits_d = grads(variables["params"], jax.random.key(3), 1.0)
    assert not np.allclose(logits_c, logits_d)

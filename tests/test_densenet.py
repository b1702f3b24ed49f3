"""DenseNet: torchvision's published parameter counts and GMACs, the dense connectivity, and a
tiny network trained one step."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nets_factory
import nets_summary as summary
from tests.helpers import numpy_variables

# torchvision's published counts at 1000 classes (timm's are the same). DenseNet-121 (k=32):
#   stem 7*7*3*64 + 2*64; a dense layer on c channels: 2c (BatchNorm) + 128c (1x1 to 4k)
#   + 2*128 + 9*128*32 (3x3 to k); transitions 2c + c*c/2; blocks of 6, 12, 24, 16 layers from
#   64, 128, 256, 512 channels; norm5 2*1024; the classifier 1024*1000 + 1000.
PUBLISHED_COUNTS = {
    "densenet121": 7_978_856,
    "densenet161": 28_681_000,
    "densenet169": 14_149_480,
    "densenet201": 20_013_928,
}
# torchvision's published GFLOPS (multiply-adds, as ours): 2.83, 7.73, 3.36, 4.29.
PUBLISHED_GMACS = {
    "densenet121": 2.83,
    "densenet161": 7.73,
    "densenet169": 3.36,
    "densenet201": 4.29,
}
TINY = {"block_config": (1, 2), "growth_rate": 8}


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_published_parameter_counts_and_gmacs(name):
    # The recorded figures, which the registry tests compare with a trace of the network.
    size = summary.recorded_sizes()[name]
    assert size.params == PUBLISHED_COUNTS[name]
    assert round(size.macs / 1e9, 2) == PUBLISHED_GMACS[name]


def test_each_layer_adds_growth_rate_channels_and_transitions_halve_them():
    fn = nets_factory.get_network_fn("densenet121", 10, block_config=(2, 3, 1), growth_rate=4)
    images = jax.ShapeDtypeStruct((1, 64, 64, 3), jnp.float32)
    variables = jax.eval_shape(fn.init, jax.random.key(0), images)
    _, end_points = jax.eval_shape(fn.apply, variables, images)
    # stem 8 channels at 16x16; block 1: 8 + 2*4; transition: 8 at 8x8; block 2: 8 + 3*4 = 20;
    # transition: 10 at 4x4; block 3: 14.
    shapes = {k: v.shape for k, v in end_points.items()}
    assert shapes["stem"] == (1, 16, 16, 8)
    assert shapes["denseblock1"] == (1, 16, 16, 16)
    assert shapes["denseblock2"] == (1, 8, 8, 20)
    assert shapes["denseblock3"] == (1, 4, 4, 14)
    assert shapes["pre_logits"] == (1, 14)
    params = variables["params"]
    assert params["denseblock2"]["denselayer3"]["conv1"]["kernel"].shape == (1, 1, 16, 16)
    assert params["transition2"]["conv"]["kernel"].shape == (1, 1, 20, 10)
    assert "bias" not in params["conv0"] and set(params["classifier"]) == {"kernel", "bias"}


def test_a_tiny_densenet_trains_and_its_gradient_reaches_every_parameter():
    fn = nets_factory.get_network_fn("densenet121", 10, is_training=True, **TINY)
    images = jax.random.normal(jax.random.key(1), (2, 32, 32, 3))
    variables = numpy_variables(jax.eval_shape(fn.init, jax.random.key(0), images))

    def loss(params):
        (logits, _), _ = fn.apply({**variables, "params": params}, images, mutable=["batch_stats"])
        return jnp.mean(logits**2)

    grads = jax.jit(jax.grad(loss))(variables["params"])
    assert all(float(jnp.abs(g).max()) > 0 for g in jax.tree.leaves(grads))
    assert fn.min_image_size == 5  # the stem, then a 2x2 pool: 5 -> 3 -> 2 -> 1
    assert nets_factory.get_network_fn("densenet121", 10).min_image_size == 29


def test_bfloat16_features_mode():
    fn = nets_factory.get_network_fn("densenet121", 0, dtype=jnp.bfloat16, **TINY)
    images = jnp.ones((1, 32, 32, 3))
    variables = numpy_variables(jax.eval_shape(fn.init, jax.random.key(0), images))
    features, end_points = jax.jit(fn.apply)(variables, images)
    assert features.shape == (1, 28) and features.dtype == jnp.bfloat16  # 16 + 8, 12 + 2 * 8
    assert "logits" not in end_points
    assert {np.dtype(v.dtype) for v in jax.tree.leaves(variables)} == {np.dtype("float32")}

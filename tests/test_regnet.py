"""RegNet: the widths generated from the paper's parameters, torchvision's published parameter
counts and GMACs, and a tiny RegNet-Y trained one step."""

import jax
import jax.numpy as jnp
import pytest

import nets_factory
import nets_summary as summary
from nets import regnet
from tests.helpers import numpy_variables

# torchvision's published counts and GFLOPS (multiply-adds, as ours) at 1000 classes; timm's
# `regnetx_004`, `regnety_008` and `regnety_080` (pycls's widths) counted by timm.
PUBLISHED = {
    "regnet_x_400mf": (5_495_976, 0.41),
    "regnet_x_800mf": (7_259_656, 0.80),
    "regnet_x_1_6gf": (9_190_136, 1.60),
    "regnet_x_3_2gf": (15_296_552, 3.18),
    "regnet_x_8gf": (39_572_648, 8.00),
    "regnet_x_16gf": (54_278_536, 15.94),
    "regnet_y_400mf": (4_344_144, 0.40),
    "regnet_y_800mf": (6_432_512, 0.83),
    "regnet_y_1_6gf": (11_202_430, 1.61),
    "regnet_y_3_2gf": (19_436_338, 3.18),
    "regnet_y_8gf": (39_381_472, 8.47),
    "regnet_y_16gf": (83_590_140, 15.91),
    "regnetx_004": (5_157_512, None),
    "regnety_008": (6_263_168, None),
    "regnety_080": (39_180_068, None),
}
# Each stage's (width, blocks, groups of the 3x3 convolution), as timm builds them (printed from
# its modules): what `regnet.widths` must generate from the six parameters.
TIMM_STAGES = {
    "regnet_x_400mf": ((32, 64, 160, 400), (1, 2, 7, 12), (2, 4, 10, 25)),
    "regnetx_004": ((32, 64, 160, 384), (1, 2, 7, 12), (2, 4, 10, 24)),
    "regnet_x_800mf": ((64, 128, 288, 672), (1, 3, 7, 5), (4, 8, 18, 42)),
    "regnet_x_1_6gf": ((72, 168, 408, 912), (2, 4, 10, 2), (3, 7, 17, 38)),
    "regnet_x_3_2gf": ((96, 192, 432, 1008), (2, 6, 15, 2), (2, 4, 9, 21)),
    "regnet_x_8gf": ((80, 240, 720, 1920), (2, 5, 15, 1), (1, 2, 6, 16)),
    "regnet_x_16gf": ((256, 512, 896, 2048), (2, 6, 13, 1), (2, 4, 7, 16)),
    "regnet_y_400mf": ((48, 104, 208, 440), (1, 3, 6, 6), (6, 13, 26, 55)),
    "regnet_y_800mf": ((64, 144, 320, 784), (1, 3, 8, 2), (4, 9, 20, 49)),
    "regnety_008": ((64, 128, 320, 768), (1, 3, 8, 2), (4, 8, 20, 48)),
    "regnet_y_1_6gf": ((48, 120, 336, 888), (2, 6, 17, 2), (2, 5, 14, 37)),
    "regnet_y_3_2gf": ((72, 216, 576, 1512), (2, 5, 13, 1), (3, 9, 24, 63)),
    "regnet_y_8gf": ((224, 448, 896, 2016), (2, 4, 10, 1), (4, 8, 16, 36)),
    "regnety_080": ((168, 448, 896, 2016), (2, 4, 10, 1), (3, 8, 16, 36)),
    "regnet_y_16gf": ((224, 448, 1232, 3024), (2, 4, 11, 1), (2, 4, 11, 27)),
}
TINY = {"w0": 8, "wa": 8.0, "wm": 2.0, "depth": 6, "group_width": 8, "stem_width": 8}


@pytest.mark.parametrize("name", sorted(TIMM_STAGES))
def test_the_paper_parameters_generate_the_stages(name):
    stages = nets_factory.get_network_fn(name, 10).module.stages
    widths, depths, groups = TIMM_STAGES[name]
    assert tuple(s.width for s in stages) == widths
    assert tuple(s.depth for s in stages) == depths
    assert tuple(s.width // s.group_width for s in stages) == groups


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_parameter_counts_and_gmacs(name):
    # The recorded figures, which the registry tests compare with a trace of the network.
    count, gmacs = PUBLISHED[name]
    size = summary.recorded_sizes()[name]
    assert size.params == count
    assert gmacs is None or round(size.macs / 1e9, 2) == gmacs


def test_bad_parameters_are_refused_in_one_line():
    with pytest.raises(ValueError, match=r"^width_rounding must be one of .*got 'up'$"):
        regnet.widths(24, 24.48, 2.54, 22, 16, width_rounding="up")
    with pytest.raises(ValueError, match=r"w0 > 0 a multiple of 8; got w0=20, wa=24.48, wm=2.54"):
        regnet.widths(20, 24.48, 2.54, 22, 16)


def test_a_tiny_regnet_y_trains_and_its_gradient_reaches_every_parameter():
    fn = nets_factory.get_network_fn("regnet_y_400mf", 10, is_training=True, **TINY)
    # 64 pixels: on a 1x1 map, training BatchNorm cancels a shift of the BatchNorm before it.
    images = jax.random.normal(jax.random.key(1), (2, 64, 64, 3))
    variables = numpy_variables(jax.eval_shape(fn.init, jax.random.key(0), images))
    # Stages 8, 16, 32, 64 wide; the squeeze is a quarter of each block's input width.
    se = variables["params"]["s3"]["b2"]["se"]
    assert (
        se["fc1"]["kernel"].shape == (1, 1, 32, 8)
        and "downsample" not in variables["params"]["s3"]["b2"]
    )

    # At initialisation the squeezed means are nearly equal across channels, so a squeeze unit
    # whose kernel sums below zero is dead for every image (s1/b1 has two): start them live.
    params = jax.tree_util.tree_map_with_path(
        lambda path, x: x + 1.0 if "'fc1']['bias'" in jax.tree_util.keystr(path) else x,
        variables["params"],
    )

    def loss(params):
        (logits, _), _ = fn.apply({**variables, "params": params}, images, mutable=["batch_stats"])
        return jnp.mean(logits**2)

    grads = jax.jit(jax.grad(loss))(params)
    zero = [jax.tree_util.keystr(p) for p, g in jax.tree_util.tree_leaves_with_path(grads)]
    zero = [p for p, g in zip(zero, jax.tree.leaves(grads), strict=True) if not jnp.any(g)]
    assert not zero


def test_end_points_and_bfloat16_features():
    fn = nets_factory.get_network_fn("regnet_x_400mf", 0, dtype=jnp.bfloat16, **TINY)
    images = jnp.ones((1, 64, 64, 3))
    variables = numpy_variables(jax.eval_shape(fn.init, jax.random.key(0), images))
    features, end_points = jax.jit(fn.apply)(variables, images)
    assert features.shape == (1, 64) and features.dtype == jnp.bfloat16
    shapes = {k: v.shape for k, v in end_points.items()}
    assert shapes == {
        "stem": (1, 32, 32, 8),
        "s1": (1, 16, 16, 8),
        "s2": (1, 8, 8, 16),
        "s3": (1, 4, 4, 32),
        "s4": (1, 2, 2, 64),
        "pre_logits": (1, 64),
    }

"""load_pretrained for timm's Dual Path Networks: parity on fixtures timm produced
(tools/fixtures_dpn.py), one per kind of network (the small "b" networks' 3x3 stem, split last
convolutions and SiLU; the wide ones' 7x7 stem), and the conventions they need."""

import flax.linen as nn
import jax
import pytest

import nets_factory
from tests.test_pretrained import FIXTURES, expected, parity_error

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

_TINY = {"inner_width": 16, "groups": 4, "stem_features": 8}
PARITY = {
    "dpn_small_b": ("dpn48b", {**_TINY, "depths": (1, 2), "increments": (8, 8)}),
    "dpn_wide": ("dpn92", {**_TINY, "depths": (2,), "increments": (8,)}),
}


def _error(case, **changes):
    return parity_error(*PARITY[case], case, **changes)


@pytest.mark.parametrize("case", sorted(PARITY))
def test_logits_are_the_references(case):
    assert _error(case) <= 1e-4


def test_the_padding_and_epsilon_are_timms():
    """TensorFlow's SAME padding shifts the strided windows by a pixel; PyTorch's default
    epsilon (1e-5) is not the weights' 1e-3: other functions with these weights."""
    for case in PARITY:
        assert _error(case, padding="SAME") > 1e-2
        assert _error(case, bn_epsilon=1e-5) > 1e-2


def test_dpn48bs_silu_is_only_in_the_stem_and_the_last_batchnorm():
    """timm's blocks keep ReLU whatever `act_layer` (their BatchNorms' default)."""
    assert _error("dpn_small_b", block_act=nn.silu) > 1e-2
    assert _error("dpn_small_b", act=nn.relu) > 1e-2


def test_features_mode_gives_timms_feature_maps():
    # timm's feature_info of the fixture's network: the stem convolution's map, then each
    # stage's output (both paths, before the last BatchNorm); 32 px maps of 16, 8 and 4.
    name, kwargs = PARITY["dpn_small_b"]
    folder = FIXTURES / "parity" / "dpn_small_b"
    network_fn, variables = nets_factory.load_pretrained(name, folder, num_classes=0, **kwargs)
    maps = jax.jit(network_fn.features)(variables, expected("dpn_small_b")["images"])
    assert "classifier" not in variables["params"]
    assert {f.name: (f.stride, f.channels) for f in network_fn.feature_info} == {
        "conv1_1": (2, 8),
        "conv2": (4, 88),
        "conv3": (8, 160),
    }
    shapes = {"conv1_1": (2, 16, 16, 8), "conv2": (2, 8, 8, 88), "conv3": (2, 4, 4, 160)}
    assert {name: m.shape for name, m in maps.items()} == shapes

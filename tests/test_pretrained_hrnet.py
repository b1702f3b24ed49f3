"""load_pretrained for timm's HRNet: parity on fixtures timm produced (tools/fixtures_hrnet.py)
from its own classes with a narrow head, with the classification head's biases and without (the
SSLD files'), and the conventions they need."""

import jax
import pytest

import nets_factory
from nets_weights import published
from tests.helpers import XLA_CONVS
from tests.test_hrnet import TINY
from tests.test_pretrained import FIXTURES, expected, parity_error, relative_error

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

PARITY = {"hrnet_tiny": ("hrnet_w18", TINY), "hrnet_tiny_ssld": ("hrnet_w18_ssld", TINY)}


def _error(case, **changes):
    return parity_error(*PARITY[case], case, **changes)


@pytest.mark.parametrize("case", sorted(PARITY))
def test_logits_are_the_references(case):
    assert _error(case) <= 1e-4


def test_the_padding_is_timms():
    """TensorFlow's SAME padding shifts the strided 3x3 windows by a pixel: another function with
    these weights."""
    assert _error("hrnet_tiny", padding="SAME") > 1e-2


def test_the_head_biases_are_the_files():
    """timm's own files bias the head's downsampling and final convolutions (the SSLD files do
    not): dropping those biases computes another function with the other weights."""
    network_fn, variables = nets_factory.load_pretrained(
        "hrnet_w18", FIXTURES / "parity" / "hrnet_tiny", **TINY
    )
    params = dict(published.without_mark(variables)["params"])
    for name in ("downsamp_modules_0", "downsamp_modules_1", "downsamp_modules_2", "final_layer"):
        params[name] = {**params[name], "layers_0": {"kernel": params[name]["layers_0"]["kernel"]}}
    unbiased = nets_factory.get_network_fn("hrnet_w18_ssld", 10, **TINY, **XLA_CONVS)
    reference = expected("hrnet_tiny")
    logits, _ = jax.jit(unbiased.apply)({**variables, "params": params}, reference["images"])
    assert relative_error(logits, reference["logits"]) > 1e-2


def test_features_mode_gives_timms_feature_maps():
    name, kwargs = PARITY["hrnet_tiny"]
    network_fn, variables = nets_factory.load_pretrained(
        name, FIXTURES / "parity" / "hrnet_tiny", num_classes=0, **kwargs
    )
    assert "classifier" not in variables["params"]
    info = network_fn.feature_info
    # timm's feature_info: the stem's conv1 (timm says 64 channels whatever `stem_width`: its
    # full-size networks' width), then the incre bottlenecks' outputs.
    assert [(f.name, f.stride, f.channels) for f in info] == [
        ("stem", 2, 8),
        ("incre0", 4, 8),
        ("incre1", 8, 8),
        ("incre2", 16, 16),
        ("incre3", 32, 16),
    ]

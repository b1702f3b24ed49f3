"""load_pretrained for timm's DLA: parity on fixtures timm produced (tools/fixtures_dla.py), one
of basic blocks and one of grouped bottlenecks under shortcut roots and a three-level tree, and
the conventions they need."""

import pytest

import nets_factory
from nets.dla import DlaBasic
from tests.test_pretrained import FIXTURES, parity_error

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

PARITY = {
    "dla_basic": (
        "dla34",
        {"levels": (1, 1, 1, 2, 2, 1), "channels": (4, 4, 8, 8, 16, 16), "block": DlaBasic},
    ),
    "dla_x_root": (
        "dla102x",
        {
            "levels": (1, 2, 1, 3, 2, 1),
            "channels": (4, 8, 16, 16, 32, 32),
            "cardinality": 2,
            "base_width": 32,
        },
    ),
}


def _error(case, **changes):
    return parity_error(*PARITY[case], case, **changes)


@pytest.mark.parametrize("case", sorted(PARITY))
def test_logits_are_the_references(case):
    assert _error(case) <= 1e-4


def test_the_padding_is_timms():
    """TensorFlow's SAME padding shifts the strided 3x3 windows by a pixel: another function with
    these weights."""
    assert _error("dla_basic", padding="SAME") > 1e-2


def test_the_roots_shortcut_matters():
    """DLA-102/169's roots add their first child back; without it the weights compute another
    function."""
    assert _error("dla_x_root", shortcut_root=False) > 1e-2


def test_features_mode_gives_timms_feature_maps():
    name, kwargs = PARITY["dla_x_root"]
    network_fn, variables = nets_factory.load_pretrained(
        name, FIXTURES / "parity" / "dla_x_root", num_classes=0, **kwargs
    )
    assert "fc" not in variables["params"]
    info = network_fn.feature_info
    assert [(f.name, f.stride, f.channels) for f in info] == [
        ("level1", 2, 8),
        ("level2", 4, 16),
        ("level3", 8, 16),
        ("level4", 16, 32),
        ("level5", 32, 32),
    ]

"""load_pretrained for timm's CSPNet family: parity on fixtures timm produced
(tools/fixtures_cspnet.py), one per stage and block kind (cross stages of gated grouped
bottlenecks and of DarkNet blocks, DarkNet's stages with average-pool downsampling, CS3's stages of
gated edge blocks after the focus stem), CSPResNet's dilated (`output_stride`), and the
conventions they need."""

import jax
import pytest

import nets_factory
from nets.cspnet import EdgeBlock
from tests.helpers import assert_dilated_parity
from tests.test_pretrained import FIXTURES, expected, parity_error

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

_SMALL = {"depths": (1, 2, 1), "widths": (16, 32, 32), "stem_widths": (8,)}
PARITY = {
    "cspresnet_se": (
        "cspresnet50d",
        {
            "depths": (2, 1, 1),
            "widths": (16, 32, 32),
            "strides": (1, 2, 2),
            "stem_widths": (4, 8),
            "groups": 2,
            "se_ratio": 0.25,
        },
    ),
    "cspdarknet": (
        "cspdarknet53",
        {
            **_SMALL,
            "expand_ratio": (2.0, 1.0, 1.0),
            "bottle_ratio": (0.5, 1.0, 1.0),
            "block_ratio": (1.0, 0.5, 0.5),
        },
    ),
    "darknetaa_se": ("darknetaa53", {**_SMALL, "widths": (16, 16, 32), "se_ratio": 1 / 16}),
    "cs3_focus_se_edge": (
        "cs3darknet_focus_l",
        {**_SMALL, "block": EdgeBlock, "bottle_ratio": 1.5, "se_ratio": 0.25},
    ),
}


def _error(case, **changes):
    return parity_error(*PARITY[case], case, **changes)


@pytest.mark.parametrize("case", sorted(PARITY))
def test_logits_are_the_references(case):
    assert _error(case) <= 1e-4


def test_the_padding_is_timms():
    """TensorFlow's SAME padding shifts the strided windows by a pixel (and pads the focus
    stem's 6x6 otherwise): another function with these weights."""
    assert _error("cspdarknet", padding="SAME") > 1e-2
    assert _error("cs3_focus_se_edge", padding="SAME") > 1e-2


def test_cspresnets_expansion_is_linear():
    """CSPResNet's expansion has no activation (timm's `cross_linear`)."""
    assert _error("cspresnet_se", cross_linear=False) > 1e-2


def test_features_mode_gives_timms_feature_maps():
    # timm's feature_info of the fixture's network: the stem's last convolution before its
    # pool, then the stages (the first at the pool's stride); 36 px maps of 18, 9, 5 and 3.
    name, kwargs = PARITY["cspresnet_se"]
    folder = FIXTURES / "parity" / "cspresnet_se"
    network_fn, variables = nets_factory.load_pretrained(name, folder, num_classes=0, **kwargs)
    maps = jax.jit(network_fn.features)(variables, expected("cspresnet_se")["images"])
    assert "head" not in variables["params"]
    assert {f.name: (f.stride, f.channels) for f in network_fn.feature_info} == {
        "stem_conv": (2, 8),
        "stages_0": (4, 16),
        "stages_1": (8, 32),
        "stages_2": (16, 32),
    }
    assert {name: m.shape for name, m in maps.items()} == {
        "stem_conv": (2, 18, 18, 8),
        "stages_0": (2, 9, 9, 16),
        "stages_1": (2, 5, 5, 32),
        "stages_2": (2, 3, 3, 32),
    }


def test_output_stride_is_timms():
    """`cspresnet_se`'s network with a fourth stage (stride 32; the other cases' stop at 16 or 8)
    at 8: the third stage strides by 1 (its downsampling convolution kept, at timm's
    `first_dilation` 1) and dilates its blocks by 2; the last's downsampling at 2, blocks at 4."""
    kwargs = {**PARITY["cspresnet_se"][1], "depths": (1,) * 4, "widths": (16, 32, 32, 40)}
    assert_dilated_parity("cspresnet50d", "cspresnet_dilated", {**kwargs, "strides": (1, 2, 2, 2)})

"""ReXNet: timm's parameter counts and MACs, the linear channel schedule, the partial residual,
the squeeze-excite's BatchNorm, and the contract's end points and feature levels."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nets_summary as summary
from nets import rexnet
from tests.helpers import XLA_CONVS
from tests.test_pretrained_rexnet import SMALL

# timm's counts at 1000 classes (`sum(p.numel() for p in timm.create_model(name).parameters())`)
# and the MACs torch's FlopCounterMode counts for it at 224 px (FLOPs / 2). rexnet_100: the stem
# 3 * 3 * 3 * 32 + 64, sixteen bottlenecks (16 ... 185 wide), the 185 -> 1280 convolution with
# its BatchNorm (236,800 + 2,560), the classifier 1280 * 1000 + 1000 = 1,281,000: 4,796,873.
TIMM = {
    "rexnet_100": (224, 4_796_873, 398_370_392),
    "rexnet_130": (224, 7_557_091, 662_229_098),
    "rexnet_150": (224, 9_728_593, 875_828_154),
    "rexnet_200": (224, 16_366_620, 1_528_850_782),
    "rexnet_300": (224, 34_708_792, 3_395_980_620),
    "rexnetr_100": (224, 4_883_304, 418_899_408),
    "rexnetr_130": (224, 7_608_080, 661_005_776),
    "rexnetr_150": (224, 9_782_256, 872_390_256),
    "rexnetr_200": (224, 16_522_432, 1_559_353_712),
    "rexnetr_300": (224, 34_810_008, 3_343_674_720),
}


@pytest.mark.parametrize("name", sorted(TIMM))
def test_timm_parameter_counts_and_macs(name):
    # The sizes `python -m nets_factory` lists, measured by the registry tests.
    assert summary.recorded_sizes()[name] == TIMM[name]


def test_widths_grow_linearly_as_timms():
    # timm's `_block_cfg` widths: 180 / 16 = 11.25 more per block from 16 (rounded half to
    # even: 38.5 -> 38); rexnetr_300's multiples of 16.
    widths = [b.filters for b in rexnet.rexnet_100().blocks()]
    assert widths == [16, 27, 38, 50, 61, 72, 84, 95, 106, 117, 128, 140, 151, 162, 174, 185]
    widths = [b.filters for b in rexnet.rexnetr_300().blocks()]
    assert widths[:6] == [48, 80, 112, 144, 176, 224] and widths[-1] == 560
    blocks = rexnet.rexnet_100().blocks()
    assert [b.expansion for b in blocks[:2]] == [1, 6.0]
    assert [b.se_ratio > 0 for b in blocks[2:4]] == [False, True]  # from the third stage


def test_residual_adds_to_the_first_channels():
    # 3 -> 5 channels at stride 1: the input is added to the first 3, the last 2 pass on.
    # Biased convolutions without BatchNorm (norm=None) and identity activations keep it exact;
    # XLA's convolutions run this one call in a third of the CPU path's time.
    identity = {"act": lambda x: x, "dw_act": lambda x: x}
    block = rexnet.LinearBottleneck(
        rexnet.BlockDef(5, 1, 1, 0.0), XLA_CONVS["conv"], None, **identity
    )
    x = jax.random.normal(jax.random.key(1), (1, 4, 4, 3))
    variables = jax.eval_shape(block.init, jax.random.key(0), x)
    assert variables["params"]["conv_pwl"]["conv"]["kernel"].shape == (1, 1, 3, 5)
    # A branch of zeros: the output is the input, then zeros.
    out = block.apply(jax.tree.map(lambda v: jnp.zeros(v.shape), variables), x)
    assert out.shape == (1, 4, 4, 5)
    np.testing.assert_array_equal(out[..., :3], x)
    np.testing.assert_array_equal(out[..., 3:], 0.0)


def test_feature_levels_are_timms():
    # timm's feature_info: the deepest block at each stride, not the last 1x1 convolution.
    levels = rexnet.ReXNet().feature_strides()
    expected = {"features_0": 2, "features_2": 4, "features_4": 8, "features_10": 16}
    assert levels == {**expected, "features_15": 32}


@pytest.mark.slow  # traces the fixture's network abstractly (1 s)
def test_end_points_and_squeeze_excite_of_the_fixtures_network():
    module = rexnet.ReXNet(num_classes=10, **SMALL["rexnet"])
    images = jax.ShapeDtypeStruct((1, 40, 40, 3), jnp.float32)
    init = partial(module.init_with_output, train=False)
    (_, end_points), variables = jax.eval_shape(init, jax.random.key(0), images)
    shapes = {k: v.shape for k, v in end_points.items()}
    assert shapes["stem"] == (1, 20, 20, 32) and shapes["features_0"] == (1, 20, 20, 8)
    assert shapes["features_1"] == (1, 10, 10, 9) and shapes["features_8"] == (1, 2, 2, 13)
    assert shapes["features_9"] == (1, 2, 2, 24) and shapes["global_pool"] == (1, 1, 1, 24)
    # ReXNet's gate from the third stage: fc1 -> BatchNorm `bn` -> ReLU -> fc2 -> sigmoid, to
    # a twelfth of the inner width (54 -> 4).
    params = variables["params"]
    se = params["features_3"]["se"]
    assert sorted(se) == ["bn", "fc1", "fc2"] and se["fc1"]["kernel"].shape == (1, 1, 54, 4)
    assert "se" not in params["features_1"]

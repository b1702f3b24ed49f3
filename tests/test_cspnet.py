"""CSPNet, DarkNet and CS3: timm's parameter counts and MACs, the stems' strides and the feature
pyramids they give, dilated too (`output_stride`), the smallest images, and stochastic depth
(their numerics: the parity fixtures, tests/test_pretrained_cspnet.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nets_factory
import nets_summary as summary
from nets import cspnet
from tests.test_nets_factory import runs_at
from tests.test_stochastic_depth import blocks_built

# timm 1.0's counts at 1000 classes (sum of `numel` of `timm.create_model(name).parameters()`).
# DarkNet-53: the stem 3*3*3*32 + 2*32; each stage a strided 3x3 to its width c (9*c_in*c +
# 2*c) and blocks of a 1x1 to c/2 and a 3x3 back (c*c/2 + 9*c*c/2 + 3*c); the head 1024*1000 +
# 1000. In all: 41,609,928.
PUBLISHED_COUNTS = {
    "cspresnet50": 21_616_168,
    "cspresnet50d": 21_635_400,
    "cspresnet50w": 28_118_216,
    "cspresnext50": 20_569_896,
    "cspdarknet53": 27_642_184,
    "darknet17": 14_304_840,
    "darknet21": 20_863_048,
    "sedarknet21": 20_950_432,
    "darknet53": 41_609_928,
    "darknetaa53": 36_022_984,
    "cs3darknet_s": 3_276_344,
    "cs3darknet_m": 9_310_240,
    "cs3darknet_l": 21_164_168,
    "cs3darknet_x": 35_046_320,
    "cs3darknet_focus_s": 3_274_728,
    "cs3darknet_focus_m": 9_304_360,
    "cs3darknet_focus_l": 21_151_720,
    "cs3darknet_focus_x": 35_025_000,
    "cs3sedarknet_l": 21_913_592,
    "cs3sedarknet_x": 35_397_904,
    "cs3sedarknet_xdw": 21_601_488,
    "cs3edgenet_x": 47_821_120,
    "cs3se_edgenet_x": 50_721_584,
}

# MACs at timm's 256 px, batch 1: PyTorch's `FlopCounterMode` on timm's networks, halved (the
# convolutions', the gates' and the head's; pools count nothing in either). Every network of the
# family agrees; these are one of each stem, stage and block.
TORCH_MACS = {
    "cspresnet50": 4_517_240_832,
    "cspresnext50": 4_014_948_352,
    "cspdarknet53": 6_533_652_480,
    "darknetaa53": 7_942_938_624,
    "cs3darknet_focus_l": 4_644_118_528,
    "cs3sedarknet_xdw": 5_933_825_024,
    "cs3se_edgenet_x": 11_503_769_600,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_recorded_sizes_are_timms(name):
    # nets/sizes.tsv, which the registry tests compare with a trace of each network.
    size = summary.recorded_sizes()[name]
    assert size.params == PUBLISHED_COUNTS[name] and size.image_size == 256
    assert name not in TORCH_MACS or size.macs == TORCH_MACS[name]


def _module(name, **fields):
    return nets_factory.networks_map[name](**fields)


def test_the_stems_strides_give_timms_pyramids():
    # CSPResNet: the 7x7/2 (or the deep stem's first 3x3) and the max pool; the first stage
    # keeps the pool's stride, so the stem's own map is not a level.
    for name in ("cspresnet50", "cspresnet50d"):
        assert _module(name).stem_conv_strides() in ([2], [2, 1, 1])
        assert _module(name).feature_strides() == {
            "stem_conv": 2,
            **{f"stages_{i}": 4 * 2**i for i in range(4)},
        }
    # timm's rule at stride 4 without a pool: the last convolution strides too.
    assert _module("cspresnet50d", stem_pool=False).stem_conv_strides() == [2, 1, 2]
    # DarkNet's stride-1 stem is a level, as timm's out_indices (0..5) have it.
    assert _module("darknet53").feature_strides() == {
        "stem": 1,
        **{f"stages_{i}": 2 ** (i + 1) for i in range(5)},
    }
    assert list(_module("cs3darknet_focus_s").feature_strides().values()) == [2, 4, 8, 16, 32]


def test_the_smallest_images():
    # Symmetric padding rounds every strided window up, but the focus stem's 6x6/2 (padding 2)
    # and DarkNet-AA's 2x2 average pools, which floor: 2 pixels, and 2**5.
    sizes = {"cspresnet50": 1, "darknet53": 1, "cs3darknet_focus_l": 2, "darknetaa53": 32}
    for name, size in sizes.items():
        assert nets_factory.get_network_fn(name, 10).min_image_size == size


@pytest.mark.slow  # four abstract traces
def test_the_smallest_images_are_the_smallest_that_run():
    # On thinned networks of the same windows.
    thin = {"depths": (1,) * 5, "widths": (8,) * 5, "stem_widths": (8,)}
    for name, size in [("darknetaa53", 32), ("cs3darknet_focus_l", 2)]:
        fields = thin if name == "darknetaa53" else {k: v[:4] for k, v in thin.items()}
        fn = nets_factory.get_network_fn(name, 10, **fields)
        assert runs_at(fn, size) and not runs_at(fn, size - 1)


def test_per_stage_fields_need_one_value_a_stage():
    fn = nets_factory.get_network_fn("darknet21", 10, groups=(1, 2))
    with pytest.raises(ValueError, match="groups has 2 entries for 5 stages"):
        jax.eval_shape(
            fn.init, jax.random.key(0), jax.ShapeDtypeStruct((1, 32, 32, 3), jnp.float32)
        )


def test_drop_path_rates_grow_over_all_blocks():
    # timm's: linspace(0, rate, blocks) over every stage's blocks (its `stagewise` lists).
    tiny = {"depths": (2, 3), "widths": (8, 16), "stem_widths": (4,), "drop_path_rate": 0.4}
    built = blocks_built("darknet21", (cspnet.DarkBlock,), True, **tiny)
    np.testing.assert_allclose([b.drop_path_rate for b in built], [0.0, 0.1, 0.2, 0.3, 0.4])
    assert all(not b.deterministic for b in built)

"""GhostNet and GhostNetV2: timm's parameter counts and MACs, the Ghost module's widths, the
upsampling of V2's attention gate, and the contract's end points and feature levels."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nets_summary as summary
from nets import ghostnet
from nets.layers import Conv
from tests.test_pretrained_ghostnet import SMALL

# timm's counts at 1000 classes (`sum(p.numel() for p in timm.create_model(name).parameters())`)
# and the MACs torch's FlopCounterMode counts for it at 224 px (FLOPs / 2). ghostnet_100: the
# stem 3 * 3 * 3 * 16 + 32, the sixteen bottlenecks and the 160 -> 960 convolution with its
# BatchNorm (154,560 + 1,920), the head 960 * 1280 + 1280 = 1,230,080, the classifier
# 1280 * 1000 + 1000 = 1,281,000: 5,182,508.
TIMM = {
    "ghostnet_100": (224, 5_182_508, 141_150_512),
    "ghostnetv2_100": (224, 6_156_908, 167_048_288),
    "ghostnetv2_130": (224, 8_960_404, 269_322_976),
    "ghostnetv2_160": (224, 12_392_698, 398_607_224),
}


@pytest.mark.parametrize("name", sorted(TIMM))
def test_timm_parameter_counts_and_macs(name):
    # The sizes `python -m nets_factory` lists, measured by the registry tests.
    assert summary.recorded_sizes()[name] == TIMM[name]


def test_ghost_module_is_primary_then_cheap_features_cut_to_width():
    # 9 channels: ceil(9 / 2) = 5 from the 1x1 convolution, 5 from those by a depthwise 3x3,
    # the last one cut. Biased convolutions without BatchNorm (norm=None) keep the check exact.
    module = ghostnet.GhostModule(9, conv=Conv, norm=None, act=None)
    x = jax.random.normal(jax.random.key(1), (1, 4, 4, 3))
    params = module.init(jax.random.key(0), x)["params"]
    primary = params["primary_conv"]["conv"]
    assert primary["kernel"].shape == (1, 1, 3, 5)
    assert params["cheap_operation"]["conv"]["kernel"].shape == (3, 3, 1, 5)
    out = module.apply({"params": params}, x)
    assert out.shape == (1, 4, 4, 9)
    expected = jnp.einsum("nhwc,cd->nhwd", x, primary["kernel"][0, 0]) + primary["bias"]
    np.testing.assert_allclose(out[..., :5], expected, rtol=1e-5, atol=1e-6)


def test_upsampling_reads_floor_of_the_scaled_index():
    # PyTorch's interpolate(mode='nearest') from 6 to 13: floor(i * 6 / 13).
    x = jnp.arange(6.0).reshape(1, 6, 1, 1) * jnp.ones((1, 1, 6, 1))
    up = ghostnet.upsample_nearest(x, (13, 13))
    np.testing.assert_array_equal(up[0, :, 0, 0], [0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5])


def test_feature_levels_are_timms():
    # The stages that end in a stride-2 block, not the deepest at each stride.
    levels = ghostnet.GhostNet().feature_strides()
    assert levels == {"stem": 2, "blocks_1": 4, "blocks_3": 8, "blocks_5": 16, "blocks_7": 32}


@pytest.mark.slow  # traces V2 abstractly (1 s); the fast tier has its remat test
def test_end_points_and_attention_placement():
    # The parity fixtures' table (tests/test_pretrained_ghostnet.py) as V2, traced abstractly.
    module = ghostnet.GhostNet(num_classes=10, attention=True, **SMALL)
    images = jax.ShapeDtypeStruct((1, 52, 52, 3), jnp.float32)
    init = partial(module.init_with_output, train=False)
    (_, end_points), variables = jax.eval_shape(init, jax.random.key(0), images)
    shapes = {k: v.shape for k, v in end_points.items()}
    assert shapes["stem"] == (1, 26, 26, 8) and shapes["blocks_1"] == (1, 13, 13, 8)
    assert shapes["blocks_3"] == (1, 7, 7, 16) and shapes["conv_final"] == (1, 7, 7, 24)
    assert shapes["global_pool"] == (1, 1, 1, 24) and shapes["head"] == (1, 1, 1, 16)
    # Attention in the expanding Ghost module of every bottleneck from the third.
    params = variables["params"]
    assert "short_conv_0" not in params["blocks_1_0"]["ghost1"]
    assert "short_conv_0" in params["blocks_2_0"]["ghost1"]
    assert "short_conv_0" not in params["blocks_2_0"]["ghost2"]

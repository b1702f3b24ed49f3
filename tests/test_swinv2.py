"""Swin Transformer V2: timm's parameter counts and MACs, the log-spaced coordinates of the
continuous position bias, residual post-normalisation starting as the identity, refused
configurations (the clamp of the logit scale is shown in tests/test_pretrained_swinv2.py).
Full-size networks through the recorded sizes; real compute on one block."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nets_factory
import nets_summary as summary
from nets import swin, swinv2

# timm 1.0's counts at 1000 classes (sum of `numel` of `timm.create_model(name,
# num_classes=1000).parameters()`; the 192-px ImageNet-22k networks default to 21,841 classes
# there: 109,280,841 and 228,772,549). Against Swin V1's block (12c^2 + 13c + 169h at window 7),
# V2's has no key bias and no table, but `logit_scale` (h) and `cpb_mlp` (2*512 + 512 + 512h):
# 12c^2 + 12c + 513h + 1536, whatever the window; patch merging's LayerNorm is over 2c, not 4c.
PUBLISHED_COUNTS = {
    "swinv2_tiny_window8_256": 28_347_154,
    "swinv2_tiny_window16_256": 28_347_154,
    "swinv2_small_window8_256": 49_728_418,
    "swinv2_small_window16_256": 49_728_418,
    "swinv2_base_window8_256": 87_918_816,
    "swinv2_base_window16_256": 87_918_816,
    "swinv2_base_window12_192": 87_918_816,
    "swinv2_base_window12to16_192to256": 87_918_816,
    "swinv2_base_window12to24_192to384": 87_918_816,
    "swinv2_large_window12_192": 196_739_932,
    "swinv2_large_window12to16_192to256": 196_739_932,
    "swinv2_large_window12to24_192to384": 196_739_932,
}
# MACs at the default size, batch 1: PyTorch's `FlopCounterMode` on timm's networks, halved (the
# attention products included, as here), less the position bias MLP's, which runs once per call
# on constant coordinates whatever the batch (`nets.swinv2.ImageFreeDense`; `cpb_macs`).
TORCH_MACS = {
    "swinv2_tiny_window8_256": 5_939_690_496,
    "swinv2_base_window12_192": 11_856_261_120,
    "swinv2_base_window12to24_192to384": 55_148_310_528,
}
# Two stages: a shifted block (4x4 map, windows of 2) and a stage whose map is one window.
TINY = {
    "img_size": 16,
    "embed_dim": 8,
    "depths": (2, 1),
    "num_heads": (1, 2),
    "window_size": 2,
    "pretrained_window_sizes": (0, 0),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_published_parameter_counts(name):
    # The registry tests check nets/sizes.tsv against a trace of every network.
    assert summary.recorded_sizes()[name].params == PUBLISHED_COUNTS[name]


def cpb_macs(name: str) -> int:
    """The position bias MLP's MACs: `(2w - 1)^2` coordinates through 2 -> 512 -> heads, in each
    block, with each stage's window (`w`, shrunk to small maps)."""
    config = nets_factory.networks_map[name].keywords
    grid = config["img_size"] // 4
    windows = swin.stage_windows(grid, 4, config["window_size"])
    return sum(
        depth * (2 * window[0] - 1) ** 2 * (2 * swinv2.CPB_HIDDEN + swinv2.CPB_HIDDEN * heads)
        for depth, heads, (window, _) in zip(
            config["depths"], config["num_heads"], windows, strict=True
        )
    )


def test_macs_and_image_sizes_are_torchs_and_timms():
    sizes = summary.recorded_sizes()
    assert cpb_macs("swinv2_tiny_window8_256") == 18_662_400
    for name, macs in TORCH_MACS.items():
        assert sizes[name].macs == macs - cpb_macs(name)
    assert {sizes[name].image_size for name in PUBLISHED_COUNTS if "to384" in name} == {384}
    assert sizes["swinv2_large_window12_192"].image_size == 192
    assert sizes["swinv2_tiny_window16_256"].image_size == 256


def test_log_spaced_coordinates():
    # Offsets -1, 0, 1 of a 2-wide window: 8 * d / (2 - 1), then sign * log2(1 + |x|) / 3.
    far = math.log2(9) / 3
    coords = swinv2.log_spaced_coordinates((2, 3))
    assert coords.shape == (3, 5, 2) and coords.dtype == np.float32
    np.testing.assert_allclose(coords[:, 0, 0], [-far, 0, far], rtol=1e-6)
    # Along the 3-wide axis, offsets -2 .. 2 over 3 - 1: 8 d / 2 = -8, -4, 0, 4, 8.
    expected = [np.sign(x) * math.log2(1 + abs(x)) / 3 for x in (-8, -4, 0, 4, 8)]
    np.testing.assert_allclose(coords[0, :, 1], expected, rtol=1e-6)
    # Weights trained with windows of 3 scale a window of 5's offsets by 3 - 1 (beyond +-8).
    wider = swinv2.log_spaced_coordinates((5, 5), (3, 3))
    np.testing.assert_allclose(wider[0, 0], [-math.log2(17) / 3] * 2, rtol=1e-6)
    # A window of one: the offset 0 alone, no division by zero.
    np.testing.assert_array_equal(swinv2.log_spaced_coordinates((1, 1)), np.zeros((1, 1, 2)))


def tiny_fn(num_classes=10, **kwargs):
    return nets_factory.get_network_fn("swinv2_tiny_window8_256", num_classes, **{**TINY, **kwargs})


def test_blocks_start_as_the_identity():
    # timm's `_init_respostnorm`: the post-norms' scales and biases zero, so a block passes its
    # input through; `logit_scale` starts at log(10).
    block = swinv2.SwinV2Block(num_heads=2, window=(2, 2), shift=(1, 1))
    x = jax.random.normal(jax.random.key(1), (2, 4, 4, 8))
    variables = jax.jit(block.init, static_argnums=2)(jax.random.key(0), x, False)
    params = variables["params"]
    assert not np.any(params["norm1"]["scale"]) and not np.any(params["norm2"]["scale"])
    np.testing.assert_allclose(params["attn"]["logit_scale"], np.full((2, 1, 1), math.log(10)))
    np.testing.assert_array_equal(jax.jit(block.apply, static_argnums=2)(variables, x, False), x)


def test_bad_configurations_are_one_line():
    x = jnp.ones((1, 16, 16, 3))
    cases = (
        ({"num_heads": (3, 2)}, r"^width 8 does not split into 3 heads"),
        ({"pretrained_window_sizes": (0, 0, 0, 0)}, r"^Swin V2 needs one pretrained window size"),
        ({"num_heads": (1,)}, r"^Swin needs one head count per stage"),
    )
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            jax.eval_shape(tiny_fn(**kwargs).init, jax.random.key(0), x)

"""DLA: timm's parameter counts and MACs, the trees' wiring, and a tiny network trained one step
(its numerics: the parity fixtures, tests/test_pretrained_dla.py)."""

import jax
import jax.numpy as jnp
import pytest

import nets_factory
import nets_summary as summary

# timm 1.0's counts at 1000 classes (sum of `numel` of `timm.create_model(name).parameters()`).
# DLA-34: the 7x7 stem 7*7*3*16 + 2*16, level0 9*16*16 + 2*16, level1 9*16*32 + 2*32; a basic
# block c -> w: 9*c*w + 9*w*w + 4*w; a one-level tree two blocks, a root 1x1 over its children
# and BatchNorm, a 1x1 projection where the width changes (level2: 32 -> 64); level3 and level4
# two-level trees whose roots also read the pooled input; the head 512*1000 + 1000. In all:
# 15,742,104.
PUBLISHED_COUNTS = {
    "dla34": 15_742_104,
    "dla46_c": 1_301_400,
    "dla46x_c": 1_068_440,
    "dla60": 22_036_632,
    "dla60x": 17_352_344,
    "dla60x_c": 1_319_832,
    "dla102": 33_268_888,
    "dla102x": 26_309_272,
    "dla102x2": 41_282_200,
    "dla169": 53_389_720,
}

# MACs at 224 px, batch 1: PyTorch's `FlopCounterMode` on timm's networks, halved (the
# convolutions' and the head's; pools count nothing in either).
TORCH_MACS = {
    "dla34": 3_060_043_776,
    "dla46x_c": 532_723_712,
    "dla60": 4_235_878_400,
    "dla102x": 5_847_932_928,
}

TINY = {
    "levels": (1, 1, 1, 3, 1, 1),
    "channels": (4, 4, 8, 8, 16, 16),
    "cardinality": 2,
    "base_width": 64,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_recorded_sizes_are_timms(name):
    # nets/sizes.tsv, which the registry tests compare with a trace of each network.
    size = summary.recorded_sizes()[name]
    assert size.params == PUBLISHED_COUNTS[name]
    assert name not in TORCH_MACS or size.macs == TORCH_MACS[name]


def test_the_trees_aggregate_their_children():
    fn = nets_factory.get_network_fn("dla102", 10, **TINY)
    images = jax.ShapeDtypeStruct((1, 32, 32, 3), jnp.float32)
    params = jax.eval_shape(fn.init, jax.random.key(0), images)["params"]
    # level3, a three-level tree (8 wide) whose input is a child of its deepest root: that root
    # reads its two blocks, the two subtrees' outputs above it and the pooled input (5 * 8).
    level3 = params["level3"]
    assert level3["tree2"]["tree2"]["root"]["conv"]["kernel"].shape == (1, 1, 40, 8)
    assert level3["tree1"]["tree1"]["root"]["conv"]["kernel"].shape == (1, 1, 16, 8)
    assert "project" not in level3["tree1"]["tree1"]  # 8 -> 8: the pooled input as it is
    assert params["level2"]["project"]["layers_0"]["kernel"].shape == (1, 1, 4, 8)
    # The bottleneck: half of floor(8 * 64 / 64) * 2 groups, wide 8 in 2 groups of 4.
    assert params["level2"]["tree1"]["conv2"]["kernel"].shape == (3, 3, 4, 8)
    assert fn.min_image_size == 31

"""Xception: timm's parameter counts and MACs, the flows' shapes and a shorter middle flow, the
aligned ones' dilation (`output_stride`)."""

import jax
import jax.numpy as jnp
import pytest

import nets_factory
import nets_summary as summary
from nets import xception

# timm 1.0's counts at 1000 classes. legacy_xception: stem 3*3*3*32 + 2*32 + 3*3*32*64 + 2*64
# = 19,424; a separable convolution from c to d is 9c + cd, its BatchNorm 2d; block 1 (64 ->
# 128, two): 576 + 8,192 + 256 + 1,152 + 16,384 + 256, shortcut 64*128 + 256 = 35,072; blocks 2
# and 3 likewise 136,448 and 1,096,712 (with 728); the eight middle blocks 3 * (6,552 + 529,984
# + 1,456) = 1,613,976 each; block 12 (728, 728 then 1024) 1,515,528 + shortcut 747,520; conv3
# 9,216 + 1,572,864 + 3,072; conv4 13,824 + 3,145,728 + 4,096; fc 2048*1000 + 1000: 22,855,952.
# xception41: stem 3*3*3*32 + 64 + 3*3*32*64 + 128; a separable convolution from c to d 9c + 2c
# (BatchNorm) + cd + 2d; blocks of three, the strided ones with a 1x1 shortcut and BatchNorm;
# the last (728 -> 1536, 1536, 2048) without shortcut; head 2048*1000 + 1000: 26,969,560. The
# pre-activated ones have a BatchNorm before each block and convolution but the first's, none
# after, a bare second stem convolution and unnormalised shortcuts.
PUBLISHED_COUNTS = {
    "legacy_xception": 22_855_952,
    "xception41": 26_969_560,
    "xception65": 39_916_312,
    "xception71": 42_338_736,
    "xception41p": 26_907_752,
    "xception65p": 39_819_560,
}
# At 299 px, batch 1: PyTorch's `FlopCounterMode` on timm's networks, halved.
TORCH_MACS = {
    "legacy_xception": 8_357_403_496,
    "xception41": 9_204_134_312,
    "xception65": 13_852_682_216,
    "xception71": 17_946_553_928,
    "xception41p": 9_204_134_312,
    "xception65p": 13_852_682_216,
}
TINY = {"widths": (8, 16, 16, 16, 24, 24, 32, 32, 40), "middle_blocks": 2}


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_published_parameter_counts_and_macs(name):
    # The recorded figures (nets/sizes.tsv), which the registry tests compare with a trace.
    size = summary.recorded_sizes()[name]
    assert size.params == PUBLISHED_COUNTS[name]
    assert size.macs == TORCH_MACS[name]


def test_flows_shapes_and_a_shorter_middle_flow():
    fn = nets_factory.get_network_fn("legacy_xception", 10, **TINY)
    images = jax.ShapeDtypeStruct((1, 64, 64, 3), jnp.float32)
    variables = jax.eval_shape(fn.init, jax.random.key(0), images)
    _, end_points = jax.eval_shape(fn.apply, variables, images)
    shapes = {k: v.shape for k, v in end_points.items()}
    # 64 -> 31 (3x3/2 unpadded) -> 29 -> pools 15, 8, 4; then the middle flow's two blocks,
    # the exit block's pool 2.
    assert shapes["stem"] == (1, 29, 29, 16)
    assert shapes["block3"] == (1, 4, 4, 24) and shapes["block5"] == (1, 4, 4, 24)
    assert shapes["block6"] == (1, 2, 2, 32) and "block7" not in shapes
    assert fn.module.feature_strides()["block6_relu"] == 16  # the exit block's ReLU
    params = variables["params"]
    # The exit block grows in its last convolution; the middle flow's keep their width.
    assert params["block6"]["sep1"]["pointwise"]["kernel"].shape == (1, 1, 24, 24)
    assert params["block6"]["sep2"]["pointwise"]["kernel"].shape == (1, 1, 24, 32)
    assert "skip" not in params["block4"] and "bias" not in params["conv3"]["conv1"]
    assert params["block2"]["sep1"]["conv1"]["kernel"].shape == (3, 3, 1, 16)  # depthwise


def test_the_legacy_xception_takes_no_output_stride():
    with pytest.raises(TypeError, match="output_stride"):  # timm's has none
        nets_factory.get_network_fn("legacy_xception", 10, output_stride=16)


def test_a_block_stopped_without_widening_loses_its_shortcut():
    # timm's rule (xception_aligned.py): a block keeps its shortcut where its width or its stride
    # change; stopped at 8, xception71's fifth block (728 -> 728) has none, so its published
    # weights (`blocks.4.shortcut.*`) load into neither timm's network at 8 nor this one.
    # (Its entry flow without the middle one; the others keep theirs: the third strides, the
    # exit block widens.)
    blocks = xception.aligned_blocks(xception._ENTRY_71, 0)
    fn = nets_factory.get_network_fn("xception71", 10, blocks=blocks, output_stride=8)
    images = jax.ShapeDtypeStruct((1, 32, 32, 3), jnp.float32)
    params = jax.eval_shape(fn.init, jax.random.key(0), images)["params"]
    assert [i for i in range(len(blocks)) if "shortcut" in params[f"blocks_{i}"]] == [0, 1, 2, 3, 5]

"""HRNet: timm's parameter counts and MACs, and the branches' wiring (its numerics: the parity
fixtures, tests/test_pretrained_hrnet.py)."""

import jax
import jax.numpy as jnp
import pytest

import nets_factory
import nets_summary as summary
from nets.hrnet import StageDef

# timm 1.0's counts at 1000 classes (sum of `numel` of `timm.create_model(name).parameters()`).
# HRNet-W18-Small: the stem 9*3*64 + 9*64*64 and two BatchNorms; one bottleneck 64 -> 32 -> 128
# with its projection; transitions and stages of basic blocks (16, 32, 64, 128 wide) with their
# fusions; the head's four incre bottlenecks to 128 .. 1024, three strided 3x3 convolutions
# 128 -> 256 -> 512 -> 1024 and the 1x1 to 2048 (biased, with BatchNorm): 9*128*256 + 256 +
# 9*256*512 + 512 + 9*512*1024 + 1024 + 1024*2048 + 2048 and their BatchNorms; the classifier
# 2048*1000 + 1000. In all: 13,187,464. The SSLD networks drop those four biases (3,840).
PUBLISHED_COUNTS = {
    "hrnet_w18_small": 13_187_464,
    "hrnet_w18_small_v2": 15_597_464,
    "hrnet_w18": 21_299_004,
    "hrnet_w30": 37_712_220,
    "hrnet_w32": 41_232_680,
    "hrnet_w40": 57_557_160,
    "hrnet_w44": 67_064_984,
    "hrnet_w48": 77_469_864,
    "hrnet_w64": 128_059_944,
    "hrnet_w18_ssld": 21_295_164,
    "hrnet_w48_ssld": 77_466_024,
}

# MACs at 224 px, batch 1: PyTorch's `FlopCounterMode` on timm's networks, halved (the
# convolutions' and the classifier's; upsampling, sums and pools count nothing in either).
TORCH_MACS = {
    "hrnet_w18_small": 1_601_508_352,
    "hrnet_w18_small_v2": 2_595_712_864,
    "hrnet_w18": 4_283_537_072,
    "hrnet_w18_ssld": 4_283_537_072,
    "hrnet_w48": 17_277_996_032,
}


# A network of every kind of fusion: two modules in stage3, stage4's two- and three-step strided
# paths and 8x upsampling (tools/fixtures_hrnet.py's, with its narrow head).
TINY = {
    "stem_width": 8,
    "layer1": StageDef(1, (1,), (4,), "BOTTLENECK"),
    "stages": (
        StageDef(1, (1, 1), (4, 8)),
        StageDef(2, (1, 1, 1), (4, 8, 8)),
        StageDef(1, (1, 1, 1, 1), (4, 8, 8, 8)),
    ),
    "head_widths": (2, 2, 4, 4),
    "num_features": 16,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_recorded_sizes_are_timms(name):
    # nets/sizes.tsv, which the registry tests compare with a trace of each network.
    size = summary.recorded_sizes()[name]
    assert size.params == PUBLISHED_COUNTS[name]
    assert name not in TORCH_MACS or size.macs == TORCH_MACS[name]


def test_the_branches_fuse_at_every_resolution():
    fn = nets_factory.get_network_fn("hrnet_w18_ssld", 10, **TINY)
    images = jax.ShapeDtypeStruct((1, 64, 64, 3), jnp.float32)
    params = jax.eval_shape(fn.init, jax.random.key(0), images)["params"]
    stage4 = params["stage4_0"]
    # Output 3 (8 wide, stride 32) from branch 0 (4 wide, stride 4): two strided 3x3
    # convolutions keeping 4 channels, then one to 8; from branch 3, a 1x1 to 4 (upsampled 8x).
    assert [stage4[f"fuse_layers_3_0_{k}"]["layers_0"]["kernel"].shape for k in range(3)] == [
        (3, 3, 4, 4),
        (3, 3, 4, 4),
        (3, 3, 4, 8),
    ]
    assert stage4["fuse_layers_0_3"]["layers_0"]["kernel"].shape == (1, 1, 8, 4)
    # The transition: the bottleneck's 16 channels to branch 0's 4, and the new branch of each
    # later stage from the last one.
    assert params["transition1_0"]["layers_0"]["kernel"].shape == (3, 3, 16, 4)
    assert params["transition3_3_0"]["layers_0"]["kernel"].shape == (3, 3, 8, 8)
    assert "transition2_0" not in params  # same width: the branch as it is
    # The SSLD head: no biases on the downsampling and final convolutions.
    assert set(params["final_layer"]["layers_0"]) == {"kernel"}
    assert params["downsamp_modules_1"]["layers_0"]["kernel"].shape == (3, 3, 8, 16)

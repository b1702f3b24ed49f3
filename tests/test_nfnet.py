"""NFNets: timm's parameter counts and MACs, the scaled weight standardisation against its
formula, the blocks' initial identity (skip-init, or the last convolution's gain at zero), and
timm's feature pyramid, dilated too (`output_stride`)."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nets_factory
import nets_summary as summary
from nets import nfnet
from nets.layers import Conv
from nets.nfnet import GAMMA, ScaledStandardization
from nets.resnet import EfficientChannelAttention
from tests import variable_trees

XLA = partial(Conv, impl="xla")

# timm 1.0.31's counts at 1000 classes (sum of `numel` of `timm.create_model(name).parameters()`).
# Each standardised convolution holds its kernel, bias and gain [out]; DeepMind's blocks a
# scalar skip-init gain. dm_nfnet_f0: stem 3*3*(3*16 + 16*32 + 32*64 + 64*128) + 3*(16 + 32 +
# 64 + 128) = 97,776; final_conv 1536*3072 + 2*3072 = 4,724,736; head 3072*1000 + 1000 =
# 3,073,000; twelve blocks 63,593,772: 71,489,284.
PUBLISHED_COUNTS = {
    "dm_nfnet_f0": 71_489_284,
    "dm_nfnet_f1": 132_634_256,
    "dm_nfnet_f2": 193_779_228,
    "dm_nfnet_f3": 254_924_200,
    "dm_nfnet_f4": 316_069_172,
    "dm_nfnet_f5": 377_214_144,
    "dm_nfnet_f6": 438_359_116,
    "nfnet_l0": 35_074_488,
    "eca_nfnet_l0": 24_143_924,
    "eca_nfnet_l1": 41_407_728,
    "eca_nfnet_l2": 56_722_348,
}

# MACs at the default size, batch 1: PyTorch's `FlopCounterMode` on timm's networks, halved
# (ECA's 1-D convolution counted; the kernels' standardisation is not a product of activations).
TORCH_MACS = {
    "dm_nfnet_f0": 6_977_003_520,  # at 192 px
    "nfnet_l0": 4_255_094_784,
    "eca_nfnet_l0": 4_244_258_560,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_published_parameter_counts(name):
    # The recorded figures (nets/sizes.tsv), which the registry tests compare with a trace.
    assert summary.recorded_sizes()[name].params == PUBLISHED_COUNTS[name]


@pytest.mark.parametrize("name", sorted(TORCH_MACS))
def test_macs_are_torchs(name):
    assert summary.recorded_sizes()[name].macs == TORCH_MACS[name]


def test_standardisation_is_the_formula():
    # Per output channel: (w - mean) / sqrt(var + eps) * gain * gamma / sqrt(fan_in), the biased
    # variance over the 3*3*4 taps, epsilon 1e-5; the gain [out] a parameter of the convolution.
    transform = ScaledStandardization(gamma=GAMMA["silu"], epsilon=1e-5, gain_init=0.5)
    conv = XLA(6, (3, 3), kernel_transform=transform)
    x = jnp.asarray(np.random.default_rng(0).normal(size=(1, 5, 5, 4)), jnp.float32)
    variables = conv.init(jax.random.key(0), x)
    assert jax.tree.map(jnp.shape, variables["params"]) == {
        "kernel": (3, 3, 4, 6),
        "bias": (6,),
        "gain": (6,),
    }
    np.testing.assert_array_equal(variables["params"]["gain"], np.full(6, 0.5, np.float32))
    w = np.asarray(variables["params"]["kernel"], np.float64)
    std = (w - w.mean((0, 1, 2))) / np.sqrt(w.var((0, 1, 2)) + 1e-5) * 0.5 * GAMMA["silu"] / 6
    plain = XLA(6, (3, 3))
    expected = plain.apply({"params": {"kernel": std.astype(np.float32), "bias": np.zeros(6)}}, x)
    np.testing.assert_allclose(conv.apply(variables, x), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("skipinit", [True, False])
def test_every_block_starts_as_its_shortcut(skipinit):
    # DeepMind's branches end in a scalar skip-init gain at 0 (the last convolution's gain at 1),
    # timm's own in the last convolution's gain at 0: either way a block is first its shortcut.
    conv = partial(nfnet.scaled_std_conv, XLA, padding="SAME", gamma=1.0, epsilon=1e-5)
    block = nfnet.NormFreeBlock(
        16,
        8,
        1,
        conv,
        jax.nn.silu,
        alpha=0.2,
        beta=0.9,
        attention=EfficientChannelAttention,
        skipinit=skipinit,
    )
    x = jnp.asarray(np.random.default_rng(0).normal(size=(1, 6, 6, 16)), jnp.float32)
    variables = block.init(jax.random.key(0), x, False)
    params = variables["params"]
    np.testing.assert_array_equal(params["conv3"]["gain"], float(skipinit))
    np.testing.assert_array_equal(params["conv1"]["gain"], 1.0)
    assert ("skipinit_gain" in params) == skipinit
    np.testing.assert_array_equal(block.apply(variables, x, False), x)


def test_feature_pyramid_is_timms():
    # timm's `feature_info` of eca_nfnet_l0: stem.conv3 (64, 2), stages.0 .. 2, final_conv; the
    # channels from the committed end points (which the registry tests trace).
    strides = nets_factory.get_network_fn("eca_nfnet_l0", 1000).module.feature_strides()
    shapes = variable_trees.end_points("eca_nfnet_l0")
    levels = [(stride, shapes[name][-1]) for name, stride in strides.items()]
    assert levels == [(2, 64), (4, 256), (8, 512), (16, 1536), (32, 2304)]

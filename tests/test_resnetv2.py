"""timm's ResNetV2 and BiT: timm's parameter counts and MACs, EvoNorm-S0's and weight
standardisation's arithmetic, and the variables each variant's layers give."""

from functools import partial

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nets_factory
import nets_summary as summary
from nets import resnetv2
from nets.layers import Conv
from nets.layers.conv import WeightStandardization, standardize
from tests import variable_trees

# timm 1.0's counts at 1000 classes (sum of `numel` of `timm.create_model(name).parameters()`).
# resnetv2_50: the 7x7 stem 7*7*3*64 = 9,408; per bottleneck of width w and input c, its
# pre-activation BatchNorm 2c, 1x1 c*w, BatchNorm 2w, 3x3 9w^2, BatchNorm 2w, 1x1 4w^2 (no
# biases), a projection c*4w in each stage's first; the final BatchNorm 2*2048 and the head
# 2048*1000 + 1000: 25,549,352, resnet50's 25,557,032 less its stem BatchNorm (128) and the
# projections' BatchNorms (2 * 3,840 = 7,680), plus the final BatchNorm (4,096). BiT's
# GroupNorms have as many parameters as BatchNorm's affine, and resnetv2_50x1_bit as many as
# resnetv2_50; EvoNorm-S0 adds `v`, a third vector per norm.
PUBLISHED_COUNTS = {
    "resnetv2_18": 11_687_720,
    "resnetv2_18d": 11_706_952,
    "resnetv2_34": 21_795_880,
    "resnetv2_34d": 21_815_112,
    "resnetv2_50": 25_549_352,
    "resnetv2_101": 44_541_480,
    "resnetv2_50d_gn": 25_568_584,
    "resnetv2_50d_evos": 25_591_368,
    "resnetv2_50x1_bit": 25_549_352,
    "resnetv2_50x3_bit": 217_319_080,
    "resnetv2_101x1_bit": 44_541_480,
    "resnetv2_101x3_bit": 387_934_888,
    "resnetv2_152x2_bit": 236_335_208,
    "resnetv2_152x4_bit": 936_533_224,
}

# MACs at 224 px, batch 1: PyTorch's `FlopCounterMode` on timm's networks, halved (the
# convolutions and the classifier; the weight standardisation and the norms are not counted).
TORCH_MACS = {
    "resnetv2_18": 1_814_073_344,
    "resnetv2_50": 4_089_184_256,
    "resnetv2_50x1_bit": 4_089_184_256,
    "resnetv2_50d_evos": 4_328_824_832,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_published_parameter_counts(name):
    # The recorded figures (nets/sizes.tsv), which the registry tests compare with a trace.
    assert summary.recorded_sizes()[name].params == PUBLISHED_COUNTS[name]


@pytest.mark.parametrize("name", sorted(TORCH_MACS))
def test_macs_are_torchs(name):
    assert summary.recorded_sizes()[name].macs == TORCH_MACS[name]


def test_evo_norm_s0_is_its_formula():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 3, 5, 8)).astype(np.float32)
    params = {
        "scale": rng.uniform(0.5, 1.5, 8).astype(np.float32),
        "bias": rng.normal(size=8).astype(np.float32),
        "v": rng.uniform(0.5, 1.5, 8).astype(np.float32),
    }
    y = resnetv2.EvoNormS0(groups=2).apply({"params": params}, x)
    # Each example's two groups of four contiguous channels, over their pixels.
    grouped = x.reshape(2, 3, 5, 2, 4)
    std = np.sqrt(grouped.var(axis=(1, 2, 4), keepdims=True) + 1e-5)
    std = np.broadcast_to(std, grouped.shape).reshape(x.shape)
    gate = 1 / (1 + np.exp(-x * params["v"]))
    reference = x * gate / std * params["scale"] + params["bias"]
    np.testing.assert_allclose(y, reference, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="8 channels do not split into 3"):
        resnetv2.EvoNormS0(groups=3).init(jax.random.key(0), x)


def test_weight_standardization_is_per_output_channel():
    kernel = jnp.asarray(np.random.default_rng(0).normal(2.0, 3.0, (3, 3, 4, 5)), jnp.float32)
    w = WeightStandardization(epsilon=1e-8)(None, kernel)
    np.testing.assert_allclose(w.mean(axis=(0, 1, 2)), 0.0, atol=1e-6)
    np.testing.assert_allclose(w.var(axis=(0, 1, 2)), 1.0, rtol=1e-5)
    # Any per-channel scale and shift of the stored kernel is the same convolution.
    np.testing.assert_allclose(WeightStandardization(1e-8)(None, kernel * 7 - 1), w, atol=1e-5)
    assert WeightStandardization().epsilon == 1e-6  # timm's StdConv2d default
    np.testing.assert_array_equal(standardize(kernel, 1e-8), w)


def test_bit_standardises_every_convolution_under_an_injected_conv():
    # The network's `kernel_transform` reaches each of its convolutions, an injected `conv`
    # (tests/helpers.py's XLA_CONVS) too: a trace, through a transform that notes its callers.
    # (That BiT's standardisation matters: tests/test_pretrained_resnetv2.py.)
    fn = nets_factory.get_network_fn("resnetv2_50x1_bit", 4)
    assert fn.module.kernel_transform == WeightStandardization(epsilon=1e-8)
    callers = []

    def noted(module, kernel):
        callers.append(module.name)
        return kernel

    fn = nets_factory.get_network_fn(
        "resnetv2_50x1_bit",
        4,
        stage_sizes=(1,),
        num_filters=8,
        norm=partial(nn.GroupNorm, num_groups=2, epsilon=1e-5),
        conv=partial(Conv, impl="xla"),
        kernel_transform=noted,
    )
    images = jax.ShapeDtypeStruct((1, 16, 16, 3), jnp.float32)
    variables = jax.eval_shape(fn.init, jax.random.key(0), images)
    convolutions = {"conv_init", "shortcut", "Conv_0", "Conv_1", "Conv_2"}
    assert set(callers) == convolutions and "batch_stats" not in variables  # GroupNorm's: none


def test_the_variants_layers_are_timms():
    # The snapshot of the variable trees, which the registry tests compare with a live trace.
    shapes = variable_trees.leaf_shapes("resnetv2_50x3_bit")
    assert shapes["params", "conv_init", "kernel"] == (7, 7, 3, 192)  # timm's stem.conv
    assert shapes["params", "PreActBottleneckBlock_0", "GroupNorm_0", "scale"] == (192,)
    assert shapes["params", "PreActBottleneckBlock_0", "shortcut", "kernel"] == (1, 1, 192, 768)
    assert shapes["params", "postnorm", "bias"] == (6144,)
    assert not any(path[0] == "batch_stats" for path in shapes)
    shapes = variable_trees.leaf_shapes("resnetv2_50d_evos")
    assert shapes["params", "stem_bn_1", "v"] == (32,)  # deep stem: 32, 32, then 64
    assert shapes["params", "conv_init", "kernel"] == (3, 3, 32, 64)
    assert shapes["params", "PreActBottleneckBlock_3", "EvoNormS0_1", "v"] == (128,)
    # The 34d's averaging shortcut of its second stage, after the pool: a 1x1 convolution.
    shapes = variable_trees.leaf_shapes("resnetv2_34d")
    assert shapes["params", "PreActBasicBlock_3", "shortcut", "kernel"] == (1, 1, 64, 128)
    assert ("params", "PreActBasicBlock_0", "shortcut", "kernel") not in shapes  # 64 -> 64
    assert not any(path[-1] == "bias" and "Conv" in path[-2] for path in shapes)  # timm's: none

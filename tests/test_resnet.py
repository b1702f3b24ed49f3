"""The ResNet family: published parameter counts and the Flax ImageNet example's layout."""

import functools
import math

import jax
import jax.numpy as jnp
import pytest

import nets_factory
import nets_summary as summary
from nets import resnet
from tests import variable_trees

# torchvision's published counts at 1000 classes. ResNet-50, for instance:
#   stem 7*7*3*64 + 2*64                                                    =      9,536
#   stage 1 (width 64, out 256): first block 64*64 + 9*64*64 + 64*256 + 64*256 (projection)
#     + BatchNorm 2*(64 + 64 + 256 + 256) = 75,008; two more of 69,632 + 768 = 70,400 each = 215,808
#   stages 2-4 likewise (widths 128, 256, 512)                               = 23,282,688
#   head 2048 * 1000 + 1000                                                  =  2,049,000
#   total                                                                      25,557,032
PUBLISHED_COUNTS = {
    "resnet18": 11_689_512,
    "resnet34": 21_797_672,
    "resnet50": 25_557_032,
    "resnet101": 44_549_160,
    "resnet152": 60_192_808,
    "wide_resnet50_2": 68_883_240,
    "wide_resnet101_2": 126_886_696,
    "resnext50_32x4d": 25_028_904,
    "resnext101_32x8d": 88_791_336,
    # Slim's names are the same networks.
    "resnet_v1_50": 25_557_032,
    "resnet_v1_101": 44_549_160,
    # timm's ResNet-D, squeeze-and-excite and ECA ResNets (`timm.create_model(name)`'s count).
    "resnet18d": 11_708_744,
    "resnet34d": 21_816_904,
    "resnet26d": 16_014_408,
    "resnet26t": 16_011_872,
    "resnet50d": 25_576_264,
    "resnet101d": 44_568_392,
    "resnet152d": 60_212_040,
    "resnet200d": 64_693_064,
    "seresnet50": 28_088_024,
    "seresnet152d": 66_841_080,
    "seresnext26d_32x4d": 16_809_512,
    "seresnext50_32x4d": 27_559_896,
    "seresnext101_32x4d": 48_955_416,
    "seresnext101_32x8d": 93_569_048,
    "seresnext101d_32x8d": 93_588_280,
    "ecaresnet26t": 16_011_916,
    "ecaresnet50d": 25_576_350,
    "ecaresnet101d": 44_568_563,
}

# He et al. 2015, Table 6 (CIFAR-10): 0.27M, 0.46M, 0.66M, 0.85M, 1.7M. ResNet-(6n+2) has
#   stem 3*3*3*16 + 2*16 = 464; stage 1: n blocks of 2*(9*16*16 + 2*16) = 4,672 each;
#   stage 2: 9*16*32 + 9*32*32 + 4*32, then n-1 blocks of 2*(9*32*32 + 2*32); stage 3 likewise
#   with 64; option-A shortcuts have no parameters; head 64*10 + 10 = 650.
#   n=3 (resnet20): 464 + 14,016 + 69,568 + 185,024 + 650 = 269,722.
CIFAR_COUNTS = {
    "resnet20": 0.27e6,
    "resnet32": 0.46e6,
    "resnet44": 0.66e6,
    "resnet56": 0.85e6,
    "resnet110": 1.7e6,
}


@functools.cache
def params_of(name, num_classes):
    fn = nets_factory.get_network_fn(name, num_classes=num_classes)
    images = jax.ShapeDtypeStruct((1, fn.default_image_size, fn.default_image_size, 3), "f4")
    params = jax.eval_shape(fn.init, jax.random.key(0), images)["params"]
    return sum(math.prod(leaf.shape) for leaf in jax.tree.leaves(params))


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_published_parameter_counts(name):
    # The recorded figures (nets/sizes.tsv), which the registry tests compare with a trace of
    # every network (tests/test_nets_factory.py::test_shapes_and_end_points).
    assert summary.recorded_sizes()[name].params == PUBLISHED_COUNTS[name]


@pytest.mark.parametrize("name", sorted(CIFAR_COUNTS))
def test_cifar_parameter_counts_match_the_paper(name):
    count = params_of(name, 10)
    rounded = round(count / 1e4) * 1e4 if count < 1e6 else round(count / 1e5) * 1e5
    assert rounded == CIFAR_COUNTS[name], count
    assert params_of("resnet20", 10) == 269_722


def test_flax_example_usage_and_layout():
    ctor = nets_factory.networks_map["resnet18"]
    assert ctor.keywords["block_cls"] is resnet.ResNetBlock
    assert tuple(ctor.keywords["stage_sizes"]) == (2, 2, 2, 2)
    model = ctor(num_classes=2, dtype=jnp.float32)
    variables = jax.eval_shape(model.init, jax.random.key(0), jnp.ones((1, 64, 64, 3)))
    assert len(variables) == 2 and len(variables["params"]) == 11  # the example's own assertion


def test_module_names_match_the_flax_example():
    fn = nets_factory.get_network_fn("resnet50", num_classes=1000)
    images = jax.ShapeDtypeStruct((1, 224, 224, 3), jnp.float32)
    params = jax.eval_shape(fn.init, jax.random.key(0), images)["params"]
    blocks = [f"BottleneckResNetBlock_{i}" for i in range(16)]
    assert set(params) == {"conv_init", "bn_init", "Dense_0", *blocks}
    assert set(params["BottleneckResNetBlock_0"]) == {
        "Conv_0",
        "Conv_1",
        "Conv_2",
        "BatchNorm_0",
        "BatchNorm_1",
        "BatchNorm_2",
        "conv_proj",
        "norm_proj",
    }
    assert params["conv_init"]["kernel"].shape == (7, 7, 3, 64)
    assert params["BottleneckResNetBlock_3"]["Conv_1"]["kernel"].shape == (3, 3, 128, 128)


def test_last_batchnorm_scale_of_each_block_starts_at_zero():
    fn = nets_factory.get_network_fn("resnet18", num_classes=10, num_filters=4, stage_sizes=(1,))
    params = jax.jit(fn.init)(jax.random.key(0), jnp.ones((1, 8, 8, 3)))["params"]
    assert float(jnp.abs(params["ResNetBlock_0"]["BatchNorm_1"]["scale"]).max()) == 0.0
    assert float(params["ResNetBlock_0"]["BatchNorm_0"]["scale"].min()) == 1.0


def test_v2_is_pre_activation():
    fn = nets_factory.get_network_fn("resnet_v2_50", num_classes=10)
    images = jax.ShapeDtypeStruct((1, 224, 224, 3), jnp.float32)
    params = jax.eval_shape(fn.init, jax.random.key(0), images)["params"]
    assert "bn_init" not in params and "bias" in params["conv_init"] and "postnorm" in params
    assert "preact" in params["PreActBottleneckBlock_0"]


def test_resnet_d_stem_and_gates_are_timms_modules():
    # The snapshot of the variable trees, which the registry tests compare with a live trace.
    shapes = variable_trees.leaf_shapes("seresnext26d_32x4d")
    # timm's conv1.0 / .3 / .6: 3x3s of 32, 32 and 64 filters; a sixteenth of 256 channels
    assert shapes["params", "stem_conv_0", "kernel"] == (3, 3, 3, 32)
    assert shapes["params", "stem_conv_1", "kernel"] == (3, 3, 32, 32)
    assert shapes["params", "conv_init", "kernel"] == (3, 3, 32, 64)
    assert shapes["params", "BottleneckResNetBlock_0", "se", "fc1", "kernel"] == (1, 1, 256, 16)
    shapes = variable_trees.leaf_shapes("ecaresnet50d")
    kernels = [
        shapes["params", f"BottleneckResNetBlock_{i}", "se", "conv", "kernel"]
        for i in (0, 3, 7, 13)
    ]
    assert kernels == [(5, 1, 1)] * 3 + [(7, 1, 1)]  # ECA's k by the channels: 256 ... 2048
    # The stem's kernel size is the deep stem's 3 unless set, and then it is every stem
    # convolution's; the single stem's is 7.
    assert nets_factory.get_network_fn("resnet50d", 10).module.stem_kernel_size is None
    fn = nets_factory.get_network_fn("resnet26d", 10, stem_kernel_size=5, stage_sizes=(1,))
    images = jax.ShapeDtypeStruct((1, 64, 64, 3), jnp.float32)
    params = jax.eval_shape(fn.init, jax.random.key(0), images)["params"]
    assert [params[n]["kernel"].shape[:2] for n in ("stem_conv_0", "conv_init")] == [(5, 5)] * 2
    assert variable_trees.leaf_shapes("resnet50")["params", "conv_init", "kernel"] == (7, 7, 3, 64)


def test_unknown_gate_is_refused():
    # (Pre-activation blocks take `avg_down` too: timm's resnetv2_*d, tests/test_resnetv2.py.)
    images = jnp.ones((1, 32, 32, 3))
    block = functools.partial(resnet.BottleneckResNetBlock, attention="cbam")
    fn = nets_factory.get_network_fn("resnet50", 10, block_cls=block, stage_sizes=(1,))
    with pytest.raises(ValueError, match=r"attention='cbam': expected None, 'se' or 'eca'"):
        jax.eval_shape(fn.init, jax.random.key(0), images)

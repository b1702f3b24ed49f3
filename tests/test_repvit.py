"""RepViT: timm's parameter counts and MACs, its gating rule and two token mixers, and
`reparameterize`'s variables exactly those of the deploy network (shapes only; the fused function
is checked against timm's `fuse()` in tests/test_pretrained_repvit.py)."""

import functools

import jax
import pytest

import nets_factory
import nets_summary as summary
from nets import repvit
from tests.helpers import XLA_CONVS

# timm 1.0's counts at 1000 classes (sum of `numel` of `timm.create_model(name).parameters()`,
# both heads). repvit_m0_9 - repvit_m1 = 4,080: m0_9's token mixers have a biased 1x1 (2c) and a
# BatchNorm after the sum (2c) where M1's 1x1 has a BatchNorm (c + 2c): c less a mixer, over the
# 2 + 2 + 14 + 2 blocks and 3 downsampling blocks (48 * 4 + 96 * 3 + 192 * 15 + 384 * 3 = 4,080).
# The heads: 2 * (2 * 384 + 385 * 1000) = 771,536.
PUBLISHED_COUNTS = {
    "repvit_m0_9": 5_489_328,
    "repvit_m1": 5_485_248,
    "repvit_m1_0": 7_302_796,
    "repvit_m1_1": 8_802_912,
    "repvit_m1_5": 14_644_432,
    "repvit_m2": 8_797_984,
    "repvit_m2_3": 23_688_792,
    "repvit_m3": 10_682_832,
}
# MACs at 224 px, batch 1: PyTorch's `FlopCounterMode` on timm's (training-form) networks,
# halved; a legacy network's equal its twin's (BatchNorm is not counted).
TORCH_MACS = {
    "repvit_m0_9": 817_280_832,
    "repvit_m1": 817_280_832,
    "repvit_m1_0": 1_108_077_600,
    "repvit_m1_1": 1_339_242_240,
    "repvit_m1_5": 2_276_968_192,
    "repvit_m2": 1_339_242_240,
    "repvit_m2_3": 4_521_490_880,
    "repvit_m3": 1_862_184_704,
}
# The parity fixtures' configuration (tools/fixtures_repvit.py).
SMALL = {"embed_dims": (8, 16, 24, 32), "depths": (2, 1, 2, 1)}


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_published_parameter_counts_and_macs(name):
    # The recorded figures (nets/sizes.tsv), which the registry tests compare with a trace.
    sizes = summary.recorded_sizes()[name]
    assert (sizes.params, sizes.macs, sizes.image_size) == (
        PUBLISHED_COUNTS[name],
        TORCH_MACS[name],
        224,
    )


@functools.cache  # abstract, shared by the tests
def _variables(name, deploy=False):
    fn = nets_factory.get_network_fn(name, 10, deploy=deploy, **SMALL, **XLA_CONVS)
    return jax.eval_shape(fn.init, jax.random.key(0), jax.ShapeDtypeStruct((1, 40, 40, 3), "f4"))


def test_even_blocks_are_gated_and_the_mixers_are_timms():
    params = _variables("repvit_m0_9")["params"]
    stage = params["stages_2"]
    assert "se" in stage["blocks_0"] and "se" not in stage["blocks_1"]
    assert "se" not in stage["downsample"]["pre_block"]
    # A quarter of 24 rounded up to 8.
    assert stage["blocks_0"]["se"]["fc1"]["kernel"].shape == (1, 1, 24, 8)
    mixer = stage["blocks_0"]["token_mixer"]
    assert set(mixer) == {"conv", "conv1", "bn"} and set(mixer["conv1"]) == {"kernel", "bias"}
    assert mixer["conv"]["c"]["kernel"].shape == (3, 3, 1, 24)  # depthwise
    legacy = _variables("repvit_m1")["params"]["stages_2"]["blocks_0"]["token_mixer"]
    assert set(legacy) == {"conv", "conv1"} and set(legacy["conv1"]) == {"c", "bn"}


@pytest.mark.parametrize("name", ["repvit_m0_9", "repvit_m1"])
def test_reparameterize_gives_the_deploy_networks_variables(name):
    fused = jax.eval_shape(repvit.reparameterize, _variables(name))
    deploy = _variables(name, deploy=True)
    shapes = lambda tree: jax.tree.map(lambda leaf: leaf.shape, tree)  # noqa: E731
    assert shapes(fused) == shapes(deploy)
    mixer = deploy["params"]["stages_0"]["blocks_0"]["token_mixer"]
    assert mixer["reparam_conv"]["kernel"].shape == (3, 3, 1, 8)
    assert "token_mixer" not in deploy["batch_stats"]["stages_0"]["blocks_0"]

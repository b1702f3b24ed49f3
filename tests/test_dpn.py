"""Dual Path Networks: timm's parameter counts and MACs, the "b" networks' split convolution as
the same function, and the per-stage fields (their numerics: the parity fixtures,
tests/test_pretrained_dpn.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nets_factory
import nets_summary as summary

# timm 1.0's counts at 1000 classes (sum of `numel` of `timm.create_model(name).parameters()`).
# DPN-68's stem 3*3*3*10 + 2*10; a block of stage i (inner width r = 128 * 2**i, residual
# width w = 64 * 2**i, increment d) reading c channels: BatchNorms 2*c + 2*r + 2*r, a 1x1 c*r,
# the grouped 3x3 9*r*r/32, the last 1x1 r*(w + d); a stage's first block projects (2*c +
# c*(w + 2*d)); the last BatchNorm 2*832 and the classifier 832*1000 + 1000. In all: 12,611,602.
PUBLISHED_COUNTS = {
    "dpn48b": 9_126_226,
    "dpn68": 12_611_602,
    "dpn68b": 12_611_602,
    "dpn92": 37_668_392,
    "dpn98": 61_570_728,
    "dpn107": 86_917_800,
    "dpn131": 79_254_504,
}

# MACs at 224 px, batch 1: PyTorch's `FlopCounterMode` on timm's networks, halved (the
# convolutions' and the classifier's; pools count nothing in either). Every network agrees.
TORCH_MACS = {
    "dpn48b": 1_665_044_480,
    "dpn68": 2_326_163_456,
    "dpn68b": 2_326_163_456,
    "dpn92": 6_501_684_224,
    "dpn98": 11_671_217_152,
    "dpn107": 18_298_764_288,
    "dpn131": 16_013_648_896,
}

# A thinned DPN-68 of two stages (the parity fixtures' shape).
TINY = {"depths": (1, 2), "increments": (8, 8), "inner_width": 16, "groups": 4}


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_recorded_sizes_are_timms(name):
    # nets/sizes.tsv, which the registry tests compare with a trace of each network.
    size = summary.recorded_sizes()[name]
    assert size.params == PUBLISHED_COUNTS[name] and size.image_size == 224
    assert size.macs == TORCH_MACS[name]


@pytest.mark.slow  # two small compiles
def test_the_b_networks_split_the_same_convolution():
    """dpn68b's `c1x1_c1` and `c1x1_c2` are dpn68's `c1x1_c` cut in two along its outputs: the
    same function, another checkpoint layout."""
    tiny = {**TINY, "depths": (2,), "increments": (8,)}
    b = nets_factory.get_network_fn("dpn68b", 10, is_training=False, **tiny)
    plain = nets_factory.get_network_fn("dpn68", 10, is_training=False, **tiny)
    images = jax.random.normal(jax.random.key(1), (1, 16, 16, 3))
    variables = b.init(jax.random.key(0), images)
    params = jax.tree.map(lambda x: x, variables["params"])  # a copy to rewrite
    for block in params.values():
        if "c1x1_c1" in block:
            kernel = jnp.concatenate(
                [block.pop("c1x1_c1")["kernel"], block.pop("c1x1_c2")["kernel"]], axis=-1
            )
            block["c1x1_c"]["conv"] = {"kernel": kernel}
    logits_b, _ = jax.jit(b.apply)(variables, images)
    logits, _ = jax.jit(plain.apply)({**variables, "params": params}, images)
    np.testing.assert_allclose(logits, logits_b, rtol=1e-5, atol=1e-5)


def test_per_stage_fields_need_one_value_a_stage():
    fn = nets_factory.get_network_fn("dpn92", 10, **{**TINY, "increments": (8,)})
    with pytest.raises(ValueError, match="increments has 1 entries for 2 stages"):
        jax.eval_shape(
            fn.init, jax.random.key(0), jax.ShapeDtypeStruct((1, 32, 32, 3), jnp.float32)
        )

"""PVT v2: timm's parameter counts and MACs, the stage maps and their pyramid, attention over fewer
keys than queries, the smallest images, and the checks of the per-stage fields. Full-size
networks through the recorded sizes; tiny configurations through `jax.eval_shape` (the parity
tests, tests/test_pretrained_pvt_v2.py, run two)."""

from functools import partial

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nets_factory
import nets_summary as summary
from nets.features import FeatureInfo
from nets.layers import Conv, DotProductAttention
from nets.layers.attention import pads
from tests.test_nets_factory import runs_at

# timm 1.0's counts at 1000 classes (sum of `numel` of `timm.create_model(name).parameters()`).
# B0 (widths 32, 64, 160, 256; MLP ratios 8, 8, 4, 4; reductions 8, 4, 2, 1; two blocks each):
#   patch embedding 7*7*3*32 + 32 + LayerNorm 2*32                                   =      4,800
#   downsampling to c from c': 3*3*c'*c + c + 2c: 64, 160, 256                       =    480,672
#   a block of width c, MLP h = r*c, reduction s: LayerNorms 4c, q c^2 + c, kv 2c^2 + 2c,
#     proj c^2 + c, sr s^2 c^2 + c and its LayerNorm 2c (s > 1), fc1 c h + h, dwconv 9h + h,
#     fc2 h c + c: 2 * (89,216 + 153,856 + 418,560 + 800,000)                         =  2,923,264
#   stage LayerNorms 2 * (32 + 64 + 160 + 256)                                       =      1,024
#   head 256*1000 + 1000                                                             =    257,000
#   total                                                                              3,666,760
PUBLISHED_COUNTS = {
    "pvt_v2_b0": 3_666_760,
    "pvt_v2_b1": 14_009_000,
    "pvt_v2_b2": 25_362_856,
    "pvt_v2_b2_li": 22_553_512,
    "pvt_v2_b3": 45_238_696,
    "pvt_v2_b4": 62_556_072,
    "pvt_v2_b5": 81_956_008,
}

# MACs at 224 px, batch 1: PyTorch's `FlopCounterMode` on timm's networks with the attention's
# `fused_attn` off (so that it sees the two products), halved: the same to the unit for all seven.
TORCH_MACS = {
    "pvt_v2_b0": 566_065_664,
    "pvt_v2_b1": 2_108_355_584,
    "pvt_v2_b2": 4_026_734_592,
    "pvt_v2_b2_li": 3_888_850_944,
    "pvt_v2_b3": 6_897_303_552,
    "pvt_v2_b4": 10_101_116_416,
    "pvt_v2_b5": 11_717_260_288,
}

# Four stages of one block, 8, 16, 16, 24 wide, timm's reductions.
TINY = {
    "depths": (1, 1, 1, 1),
    "embed_dims": (8, 16, 16, 24),
    "num_heads": (1, 2, 2, 3),
    "mlp_ratios": (2.0,) * 4,
}


def tiny_fn(num_classes=10, name="pvt_v2_b0", **kwargs):
    return nets_factory.get_network_fn(name, num_classes, **{**TINY, **kwargs})


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_published_parameter_counts_and_macs(name):
    # The recorded figures (nets/sizes.tsv), which the registry tests compare with a trace.
    assert summary.recorded_sizes()[name].params == PUBLISHED_COUNTS[name]
    assert summary.recorded_sizes()[name].macs == TORCH_MACS[name]


def test_stage_maps_and_their_pyramid():
    # At 60 px the 7x7/4 embedding leaves 15x15 (PyTorch's padding 3: floor((60 + 6 - 7) / 4)
    # + 1), each 3x3/2 one ceil(n / 2).
    fn = tiny_fn()
    images = jax.ShapeDtypeStruct((1, 60, 60, 3), jnp.float32)
    variables = jax.eval_shape(fn.init, jax.random.key(0), images)
    _, end_points = jax.eval_shape(fn.apply, variables, images)
    assert {name: p.shape for name, p in end_points.items()} == {
        "stem": (1, 15, 15, 8),
        "stage1": (1, 15, 15, 8),
        "stage2": (1, 8, 8, 16),
        "stage3": (1, 4, 4, 16),
        "stage4": (1, 2, 2, 24),
        "pre_logits": (1, 24),
        "logits": (1, 10),
        "predictions": (1, 10),
    }
    assert fn.feature_info == (
        FeatureInfo("stage1", 4, 8),
        FeatureInfo("stage2", 8, 16),
        FeatureInfo("stage3", 16, 16),
        FeatureInfo("stage4", 32, 24),
    )
    # The reduction's kernel is sr x sr; the linear variant's a 1x1 after its 7x7 pooling.
    attn = variables["params"]["stages_0"]["blocks_0"]["attn"]
    assert attn["sr"]["kernel"].shape == (8, 8, 8, 8) and set(attn["norm"]) == {"scale", "bias"}
    assert "sr" not in variables["params"]["stages_3"]["blocks_0"]["attn"]
    linear = jax.eval_shape(tiny_fn(name="pvt_v2_b2_li").init, jax.random.key(0), images)
    assert linear["params"]["stages_3"]["blocks_0"]["attn"]["sr"]["kernel"].shape == (1, 1, 24, 24)


def test_keys_fewer_than_queries():
    """The reduced keys and values (49 for 3,136 queries in B0's first stage at 224 px) go through
    `DotProductAttention` as they are: cuDNN's padding is for odd self-attention only."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(2, n, 2, 4)).astype(np.float32) for n in (9, 3, 3))
    out = DotProductAttention("xla").apply({}, q, k, v)
    logits = np.einsum("bqhd,bkhd->bhqk", q, k) / 2.0
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    np.testing.assert_allclose(out, np.einsum("bhqk,bkhd->bqhd", weights, v), atol=1e-5)
    assert not pads(q, k) and not pads(jnp.zeros((1, 3136, 1, 4)), jnp.zeros((1, 49, 1, 4)))
    assert pads(jnp.zeros((1, 49, 8, 4)), jnp.zeros((1, 49, 8, 4)))  # B0's last stage: padded
    # In the network: each stage's keys are its map reduced by sr ('VALID': 15 // 8 = 1 ...).
    assert queries_and_keys(tiny_fn(), 60) == [(225, 1), (64, 4), (16, 4), (4, 4)]


def queries_and_keys(fn, size: int) -> list[tuple[int, int]]:
    """Each attention's numbers of queries and keys on `size` pixels (the module itself, past
    `NetworkFn`'s check of the size)."""
    images = jax.ShapeDtypeStruct((1, size, size, 3), jnp.float32)
    keys = []

    def record(next_fun, args, kwargs, context):
        if isinstance(context.module, DotProductAttention):
            keys.append((args[0].shape[1], args[1].shape[1]))
        return next_fun(*args, **kwargs)

    with nn.intercept_methods(record):
        jax.eval_shape(lambda x: fn.module.init(jax.random.key(0), x, train=False), images)
    return keys


def test_min_image_size_is_the_reductions():
    # The first stage's 8x8/8 'VALID' reduction needs an 8x8 map: 29 px after the 7x7/4
    # embedding (one key; none at 28, where the CPU's convolution refuses the empty map and
    # XLA's gives it); the linear variant pools any map to 7x7.
    fn = tiny_fn(is_training=True)
    assert fn.min_image_size == 29 and runs_at(fn, 29)
    xla_conv = tiny_fn(conv=partial(Conv, impl="xla"))
    assert queries_and_keys(xla_conv, 29)[0] == (64, 1)  # an 8x8 map
    assert queries_and_keys(xla_conv, 28)[0] == (49, 0)  # 7x7
    assert tiny_fn(sr_ratios=(2, 2, 2, 4)).min_image_size == 97  # the last stage's: 4x4 at /32
    linear = tiny_fn(name="pvt_v2_b2_li", is_training=True)
    assert linear.min_image_size == 1 and runs_at(linear, 1)


def test_layer_ids_are_timms_groups_and_fields_are_checked():
    module = nets_factory.get_network_fn("pvt_v2_b0", 10).module
    paths = (("patch_embed", "proj"), ("stages_0", "blocks_1"), ("stages_3", "norm"), ("head",))
    assert [module.layer_id(p) for p in paths] == [0, 1, 4, 5]
    images = jnp.zeros((1, 32, 32, 3))
    with pytest.raises(ValueError, match="one embed_dim, num_heads, sr_ratio and mlp_ratio"):
        jax.eval_shape(tiny_fn(sr_ratios=(8, 4, 2)).init, jax.random.key(0), images)
    with pytest.raises(ValueError, match="embed_dim 16 does not split into 3 heads"):
        jax.eval_shape(tiny_fn(num_heads=(1, 3, 2, 3)).init, jax.random.key(0), images)

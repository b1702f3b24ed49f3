"""PiT: timm's parameter counts and MACs, the maps and class tokens through the stages, float32
parameters under bfloat16, weight decay on kernels only, the gradient and remat."""

from functools import partial

import jax
import jax.numpy as jnp
import pytest

import nets_factory
import nets_summary as summary
from tests.helpers import equations, numpy_variables

# timm 1.0's counts at 1000 classes (sum of `numel` of `timm.create_model(name,
# num_classes=1000).parameters()`). PiT-Ti at 224: patch embedding 16*16*3*64 + 64 = 49,216;
# position embeddings 64*27*27 = 46,656; class token 64; stage 1, 2 ViT blocks of width 64
# (12*64**2 + 13*64 = 49,984 each); stage 2, pooling 9*128 + 128 (depthwise) and 64*128 + 128,
# 6 blocks of width 128 (198,272 each); stage 3, pooling 9*256 + 256 and 128*256 + 256, 4 blocks
# of width 256 (789,760 each); norm 512; head 256*1000 + 1000: 4,847,272.
PUBLISHED_COUNTS = {
    "pit_ti_224": 4_847_272,
    "pit_xs_224": 10_618_888,
    "pit_s_224": 23_461_912,
    "pit_b_224": 73_764_840,
    "pit_ti_distilled_224": 5_104_336,
    "pit_xs_distilled_224": 11_003_984,
    "pit_s_distilled_224": 24_039_056,
    "pit_b_distilled_224": 74_790_096,
}

# MACs at 224 px, batch 1: PyTorch's `FlopCounterMode` on timm's networks with
# `timm.layers.set_fused_attn(False)`, halved (as tests/test_vit.py's TORCH_MACS); the same to
# the unit for all eight.
TORCH_MACS = {"pit_ti_224": 699_059_456, "pit_b_distilled_224": 12_482_355_712}

# A small PiT: 8-pixel patches every 4 pixels (a 7x7 map at 32 px), stages of 1, 2, 1 blocks,
# 2, 4, 8 heads of 4 channels (widths 8, 16, 32): the parity fixtures' configuration.
SMALL = {
    "patch_size": 8,
    "stride": 4,
    "base_dims": (4, 4, 4),
    "depths": (1, 2, 1),
    "heads": (2, 4, 8),
    "img_size": 32,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_published_parameter_counts(name):
    # The recorded figures (nets/sizes.tsv), which the registry tests compare with a trace.
    assert summary.recorded_sizes()[name].params == PUBLISHED_COUNTS[name]


@pytest.mark.parametrize("name", sorted(TORCH_MACS))
def test_macs_are_torchs_with_the_attention_products(name):
    assert summary.recorded_sizes()[name].macs == TORCH_MACS[name]


def test_bfloat16_compute_float32_parameters_and_decay_on_kernels_only():
    fn = nets_factory.get_network_fn(
        "pit_s_distilled_224", 10, weight_decay=1.0, dtype=jnp.bfloat16, **SMALL
    )
    images = jax.ShapeDtypeStruct((2, 32, 32, 3), jnp.float32)
    variables = jax.eval_shape(fn.init, jax.random.key(0), images)
    assert {leaf.dtype for leaf in jax.tree.leaves(variables)} == {jnp.dtype(jnp.float32)}
    assert variables["params"]["pos_embed"].shape == (1, 7, 7, 8)  # (32 - 8) / 4 + 1
    assert variables["params"]["cls_token"].shape == (1, 2, 8)  # class and distillation
    logits, end_points = jax.eval_shape(fn.apply, variables, images)
    assert logits.dtype == jnp.bfloat16
    shapes = {k: end_points[k].shape for k in ("stem", "stage1", "stage2", "stage3", "norm")}
    assert shapes == {
        "stem": (2, 7, 7, 8),
        "stage1": (2, 7, 7, 8),
        "stage2": (2, 4, 4, 16),  # 3x3/2, a pixel of padding
        "stage3": (2, 2, 2, 32),
        "norm": (2, 2, 32),  # the class tokens alone
    }
    params = jax.tree.map(lambda leaf: jnp.ones(leaf.shape, leaf.dtype), variables["params"])
    # Kernels only: patch embedding 8*8*3*8; a block of width w qkv 3w*w, proj w*w, fc1 and fc2
    # 2*4w*w (12 w**2); the poolings' depthwise 3*3*16, 3*3*32 and dense 8*16, 16*32; the two
    # heads 2*32*10. Not LayerNorms, biases, the class tokens or the position embeddings.
    blocks = 12 * (8**2 + 2 * 16**2 + 32**2)
    kernels = 8 * 8 * 3 * 8 + blocks + 9 * (16 + 32) + 8 * 16 + 16 * 32 + 2 * 32 * 10
    assert fn.regularization_loss(params) == pytest.approx(0.5 * kernels)


def test_the_stages_refuse_a_missing_entry():
    fn = nets_factory.get_network_fn("pit_ti_224", 10, **{**SMALL, "heads": (2, 4)})
    images = jax.ShapeDtypeStruct((1, 32, 32, 3), jnp.float32)
    with pytest.raises(ValueError, match="an entry for each stage"):
        jax.eval_shape(fn.init, jax.random.key(0), images)


@pytest.mark.slow  # compiles a small network's gradient
def test_the_gradient_reaches_every_parameter_with_stochastic_depth():
    # Two stages (a pooling) of a block each, both tokens and heads.
    small = {**SMALL, "base_dims": (4, 4), "depths": (1, 1), "heads": (2, 4)}
    fn = nets_factory.get_network_fn(
        "pit_ti_distilled_224", 10, is_training=True, drop_path_rate=0.1, **small
    )
    images = jax.random.normal(jax.random.key(1), (2, 32, 32, 3))
    variables = numpy_variables(jax.eval_shape(fn.init, jax.random.key(0), images))
    rngs = {"dropout": jax.random.key(2)}

    def loss(params):
        logits, _ = fn.apply({"params": params}, images, rngs=rngs)
        return jnp.sum(jax.nn.log_softmax(logits)[:, 0])

    grads = jax.jit(jax.grad(loss))(variables["params"])
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
        assert jnp.any(g != 0), jax.tree_util.keystr(path)
    # timm's feature_info: each stage's map, at 4 and 8 pixels here.
    assert fn.feature_info == (("stage1", 4, 8), ("stage2", 8, 16))
    maps = jax.eval_shape(partial(fn.features, rngs=rngs), variables, images)
    assert maps["stage2"].shape == (2, 4, 4, 16)


def test_remat_recomputes_each_block_under_its_own_names():
    # Abstract traces only: 4 blocks in 3 stages, one checkpoint each.
    images = jax.ShapeDtypeStruct((2, 32, 32, 3), jnp.float32)
    trees = []
    for remat in (False, True):
        fn = nets_factory.get_network_fn("pit_ti_224", 10, remat=remat, **SMALL)
        trees.append(jax.eval_shape(fn.init, jax.random.key(0), images))
    assert jax.tree.map(jnp.shape, trees[0]) == jax.tree.map(jnp.shape, trees[1])
    loss = lambda p, x: jnp.sum(fn.apply({"params": p}, x)[0])  # noqa: E731
    gradient = jax.make_jaxpr(jax.grad(loss))(trees[1]["params"], images)
    assert [e.primitive.name for e in equations(gradient.jaxpr)].count("remat2") == 4

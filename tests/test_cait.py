"""CaiT: timm's parameter counts and MACs, the talking heads' softmax in float32 under bfloat16,
float32 parameters, weight decay on kernels only, and timm's layer-decay depths."""

from functools import partial

import jax
import jax.numpy as jnp
import pytest

import nets_factory
import nets_summary as summary
from nets import cait
from tests.helpers import equations, numpy_variables, softmax_dtypes

# timm 1.0's counts at 1000 classes (sum of `numel` of `timm.create_model(name,
# num_classes=1000).parameters()`). CaiT-XXS24 at 224: patch embedding 16*16*3*192 + 192 =
# 147,648; position embeddings 196*192 = 37,632 (the patches' only); class token 192; 24 blocks
# of 2 LayerNorms (4*192), qkv 192*576 + 576, proj 192*192 + 192, proj_l and proj_w 2*(4*4 + 4),
# 2 layer scales (2*192), fc1 192*768 + 768, fc2 768*192 + 192 = 446,824 each; 2 class-attention
# blocks of 2 LayerNorms, q, k, v and proj 4*(192*192 + 192), 2 layer scales, fc1, fc2 =
# 445,248 each; norm 384; head 192*1000 + 1000: 11,956,264.
PUBLISHED_COUNTS = {
    "cait_xxs24_224": 11_956_264,
    "cait_xxs24_384": 12_029_224,
    "cait_xxs36_224": 17_299_720,
    "cait_xxs36_384": 17_372_680,
    "cait_xs24_384": 26_670_088,
    "cait_s24_224": 46_916_200,
    "cait_s24_384": 47_062_120,
    "cait_s36_384": 68_366_632,
    "cait_m36_384": 271_221_352,
    "cait_m48_448": 356_460_520,
}

# MACs at 224 px, batch 1: PyTorch's `FlopCounterMode` on timm's networks with
# `timm.layers.set_fused_attn(False)`, halved (as tests/test_vit.py's TORCH_MACS): the products
# and the heads' mixing (a 4x4 Linear on every query-key pair, per image 196*196*4*4) included.
TORCH_MACS = {"cait_xxs24_224": 2_523_475_200, "cait_s24_224": 9_327_327_744}

# A small CaiT: 4x4 patches of 8 pixels, 2 self-attention blocks of width 24 in 4 heads.
SMALL = {"patch_size": 8, "embed_dim": 24, "depth": 2, "num_heads": 4, "img_size": 32}


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_published_parameter_counts(name):
    # The recorded figures (nets/sizes.tsv), which the registry tests compare with a trace.
    assert summary.recorded_sizes()[name].params == PUBLISHED_COUNTS[name]


@pytest.mark.parametrize("name", sorted(TORCH_MACS))
def test_macs_are_torchs_with_the_products_and_the_mixing(name):
    assert summary.recorded_sizes()[name].macs == TORCH_MACS[name]


def test_the_talking_heads_softmax_is_float32_under_bfloat16():
    attn = cait.TalkingHeadsAttention(4, dtype=jnp.bfloat16)
    exps, out = softmax_dtypes(attn, jnp.ones((2, 5, 24), jnp.bfloat16))
    assert exps == {jnp.dtype(jnp.float32)}
    assert out.dtype == jnp.bfloat16 and out.shape == (2, 5, 24)


def test_bfloat16_compute_float32_parameters_and_decay_on_kernels_only():
    fn = nets_factory.get_network_fn(
        "cait_xxs24_224", 10, weight_decay=1.0, dtype=jnp.bfloat16, **SMALL
    )
    images = jax.ShapeDtypeStruct((2, 32, 32, 3), jnp.float32)
    variables = jax.eval_shape(fn.init, jax.random.key(0), images)
    assert {leaf.dtype for leaf in jax.tree.leaves(variables)} == {jnp.dtype(jnp.float32)}
    logits, end_points = jax.eval_shape(fn.apply, variables, images)
    assert logits.dtype == jnp.bfloat16
    assert end_points["block2"].shape == (2, 16, 24)  # the patches only
    assert end_points["class_block2"].shape == (2, 1, 24)
    assert end_points["norm"].shape == (2, 17, 24)
    params = jax.tree.map(lambda leaf: jnp.ones(leaf.shape, leaf.dtype), variables["params"])
    # Kernels only: patch embedding 8*8*3*24; per block qkv 24*72, proj 24*24, proj_l and
    # proj_w 2*4*4, fc1 and fc2 2*24*96; per class-attention block q, k, v, proj 4*24*24, fc1
    # and fc2 2*24*96; head 24*10. Not LayerNorms, biases, layer scales, tokens, embeddings.
    blocks = 2 * (24 * 72 + 24 * 24 + 2 * 4 * 4 + 2 * 24 * 96)
    class_blocks = 2 * (4 * 24 * 24 + 2 * 24 * 96)
    kernels = 8 * 8 * 3 * 24 + blocks + class_blocks + 24 * 10
    assert fn.regularization_loss(params) == pytest.approx(0.5 * kernels)


def test_layer_ids_are_timms_group_matcher():
    # timm's: 0 for the embeddings and class token, i + 1 for blocks.i, the class-attention
    # blocks level with the last ones (j + depth - 2 + 1), norm with the last block, the head
    # last.
    module = cait.cait_xxs24_224(**{**SMALL, "depth": 6})
    paths = [(), ("patch_embed",), ("blocks_0",), ("blocks_5", "attn", "proj_l")]
    paths += [("blocks_token_only_0", "mlp"), ("blocks_token_only_1",), ("norm",), ("head",)]
    assert [module.layer_id(path) for path in paths] == [0, 0, 1, 6, 5, 6, 6, 7]


@pytest.mark.slow  # compiles a small network's gradient
def test_the_gradient_reaches_every_parameter_with_stochastic_depth():
    small = {**SMALL, "depth": 1, "depth_token_only": 1}
    fn = nets_factory.get_network_fn(
        "cait_xxs24_224", 10, is_training=True, drop_path_rate=0.1, **small
    )
    images = jax.random.normal(jax.random.key(1), (4, 32, 32, 3))
    variables = numpy_variables(jax.eval_shape(fn.init, jax.random.key(0), images))
    params = jax.tree.map(lambda p: p + 0.1, variables["params"])  # no zero layer scales
    rngs = {"dropout": jax.random.key(2)}

    def loss(params):
        logits, _ = fn.apply({"params": params}, images, rngs=rngs)
        return jnp.sum(jax.nn.log_softmax(logits)[:, 0])

    grads = jax.jit(jax.grad(loss))(params)
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
        assert jnp.any(g != 0), jax.tree_util.keystr(path)
    # The self-attention blocks' tokens as 4x4 maps on the patch grid (no class token there).
    maps = jax.eval_shape(partial(fn.features, rngs=rngs), variables, images)
    assert fn.feature_info == (("block1", 8, 24),) and maps["block1"].shape == (4, 4, 4, 24)


def test_remat_recomputes_each_block_under_its_own_names():
    # Abstract traces only: the 2 self-attention and 2 class-attention blocks, one checkpoint each.
    images = jax.ShapeDtypeStruct((2, 32, 32, 3), jnp.float32)
    trees = []
    for remat in (False, True):
        fn = nets_factory.get_network_fn("cait_xxs24_224", 10, remat=remat, **SMALL)
        trees.append(jax.eval_shape(fn.init, jax.random.key(0), images))
    assert jax.tree.map(jnp.shape, trees[0]) == jax.tree.map(jnp.shape, trees[1])
    loss = lambda p, x: jnp.sum(fn.apply({"params": p}, x)[0])  # noqa: E731
    gradient = jax.make_jaxpr(jax.grad(loss))(trees[1]["params"], images)
    assert [e.primitive.name for e in equations(gradient.jaxpr)].count("remat2") == 4

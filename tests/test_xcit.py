"""XCiT: timm's parameter counts and MACs, the cross-covariance softmax in float32 under bfloat16,
float32 parameters, weight decay on kernels only, timm's layer-decay depths, and the Fourier
encoding's layout."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nets_factory
import nets_summary as summary
from nets import xcit
from tests.helpers import equations, numpy_variables, softmax_dtypes

# timm 1.0's counts at 1000 classes (sum of `numel` of `timm.create_model(name,
# num_classes=1000).parameters()`), the same at 224 and 384 px (nothing depends on the size).
# XCiT-nano-12/16: stem 3x3 convolutions 3*16*9 + 16*32*9 + 32*64*9 + 64*128*9 = 92,592 and
# their BatchNorms 2*(16 + 32 + 64 + 128) = 480; encoding projection 64*128 + 128 = 8,320;
# class token 128; 12 blocks of 3 LayerNorms (6*128), qkv 128*384 + 384, temperature 4,
# proj 128*128 + 128, LPI 2 depthwise 3x3 (2*(9*128 + 128)) and BatchNorm (2*128), fc1
# 128*512 + 512, fc2 512*128 + 128, 3 layer scales (3*128) = 201,092 each; 2 class-attention
# blocks of 2 LayerNorms, q, k, v, proj 4*(128*128 + 128), fc1, fc2, 2 layer scales = 198,272
# each; norm 256; head 128*1000 + 1000: 3,053,224.
PUBLISHED_COUNTS = {
    "xcit_nano_12_p16_224": 3_053_224,
    "xcit_tiny_12_p16_224": 6_716_272,
    "xcit_small_12_p16_224": 26_253_304,
    "xcit_tiny_24_p16_224": 12_116_896,
    "xcit_small_24_p16_224": 47_671_384,
    "xcit_medium_24_p16_224": 84_395_752,
    "xcit_large_24_p16_224": 189_096_136,
    "xcit_nano_12_p8_224": 3_049_016,
    "xcit_tiny_12_p8_224": 6_706_504,
    "xcit_small_12_p8_224": 26_213_032,
    "xcit_tiny_24_p8_224": 12_107_128,
    "xcit_small_24_p8_224": 47_631_112,
    "xcit_medium_24_p8_224": 84_323_624,
    "xcit_large_24_p8_224": 188_932_648,
}

# MACs at each network's size, batch 1: PyTorch's `FlopCounterMode` on timm's networks with
# `timm.layers.set_fused_attn(False)`, halved (as tests/test_vit.py's TORCH_MACS): the
# cross-covariance products, the class attention's and the encoding's projection included.
TORCH_MACS = {
    "xcit_nano_12_p16_224": 550_952_448,
    "xcit_small_12_p8_224": 18_618_819_072,
    "xcit_tiny_24_p16_384": 6_821_949_696,
}

# A small XCiT: 2 blocks of width 24 in 4 heads, 16-pixel patches on 32 px images (2x2).
SMALL = {"embed_dim": 24, "depth": 2, "num_heads": 4}


def test_published_parameter_counts():
    # The recorded figures (nets/sizes.tsv), which the registry tests compare with a trace; the
    # 384-px networks' equal their 224-px namesakes'.
    sizes = summary.recorded_sizes()
    for name, count in PUBLISHED_COUNTS.items():
        assert sizes[name].params == sizes[name.replace("_224", "_384")].params == count, name


@pytest.mark.parametrize("name", sorted(TORCH_MACS))
def test_macs_are_torchs_with_the_cross_covariance_products(name):
    assert summary.recorded_sizes()[name].macs == TORCH_MACS[name]


def test_the_fourier_encoding_is_y_then_x_sines_and_cosines():
    # timm's on a 2x3 grid: channel 0 is sin(2 pi y / (h + 1e-6)), channel 1 cos of the same
    # angle over 10000**(2/32); channels 32 and 33 the same of x.
    encoding = xcit.fourier_encoding(2, 3)
    assert encoding.shape == (2, 3, 64) and encoding.dtype == np.float32
    y, x = np.meshgrid(np.arange(1, 3) / 2, np.arange(1, 4) / 3, indexing="ij")
    for channel, coordinate in ((0, y), (32, x)):
        angle = 2 * np.pi * coordinate
        np.testing.assert_allclose(encoding[..., channel], np.sin(angle), atol=1e-5)
        np.testing.assert_allclose(encoding[..., channel + 1], np.cos(angle), atol=1e-5)
        np.testing.assert_allclose(
            encoding[..., channel + 3], np.cos(angle / 10000 ** (2 / 32)), atol=1e-5
        )


def test_the_cross_covariance_softmax_is_float32_under_bfloat16():
    attn = xcit.XCA(4, dtype=jnp.bfloat16)
    exps, out = softmax_dtypes(attn, jnp.ones((2, 5, 24), jnp.bfloat16))
    assert exps == {jnp.dtype(jnp.float32)}
    assert out.dtype == jnp.bfloat16 and out.shape == (2, 5, 24)


def test_bfloat16_compute_float32_parameters_and_decay_on_kernels_only():
    fn = nets_factory.get_network_fn(
        "xcit_tiny_12_p16_224", 10, weight_decay=1.0, dtype=jnp.bfloat16, **SMALL
    )
    images = jax.ShapeDtypeStruct((2, 32, 48, 3), jnp.float32)
    variables = jax.eval_shape(fn.init, jax.random.key(0), images)
    assert {leaf.dtype for leaf in jax.tree.leaves(variables)} == {jnp.dtype(jnp.float32)}
    logits, end_points = jax.eval_shape(fn.apply, variables, images)
    assert logits.dtype == jnp.bfloat16
    assert end_points["block2"].shape == (2, 6, 24)  # the 2x3 patches only
    assert end_points["class_block2"].shape == end_points["norm"].shape == (2, 7, 24)
    params = jax.tree.map(lambda leaf: jnp.ones(leaf.shape, leaf.dtype), variables["params"])
    # Kernels only: stem 9*(3*3 + 3*6 + 6*12 + 12*24), encoding projection 64*24; per block qkv
    # 24*72, proj 24*24, LPI 2*9*24, fc1 and fc2 2*24*96; per class-attention block q, k, v, proj
    # 4*24*24, fc1 and fc2 2*24*96; head 24*10. Not norms, biases, layer scales, temperatures,
    # the class token.
    stem = 9 * (3 * 3 + 3 * 6 + 6 * 12 + 12 * 24) + 64 * 24
    blocks = 2 * (24 * 72 + 24 * 24 + 2 * 9 * 24 + 2 * 24 * 96)
    class_blocks = 2 * (4 * 24 * 24 + 2 * 24 * 96)
    kernels = stem + blocks + class_blocks + 24 * 10
    assert fn.regularization_loss(params) == pytest.approx(0.5 * kernels)


def test_layer_ids_are_timms_group_matcher():
    # timm's (`group_parameters` of xcit_nano_12_p16_224 with depth 3): 0 for the stem, encoding
    # and class token, i + 1 for blocks.i, 4 and 5 for cls_attn_blocks.0 and .1, norm with the
    # last, the head 6.
    module = xcit.xcit_nano_12_p16_224(depth=3)
    paths = [(), ("patch_embed", "conv1", "bn"), ("pos_embed", "token_projection")]
    paths += [("blocks_0",), ("blocks_2", "local_mp", "conv1"), ("cls_attn_blocks_0", "attn")]
    paths += [("cls_attn_blocks_1",), ("norm",), ("head",)]
    assert [module.layer_id(path) for path in paths] == [0, 0, 0, 1, 3, 4, 5, 5, 6]


def test_patch_sizes_other_than_8_and_16_are_refused():
    fn = nets_factory.get_network_fn("xcit_nano_12_p16_224", 10, patch_size=4)
    with pytest.raises(ValueError, match="patch_size=4"):
        jax.eval_shape(
            fn.init, jax.random.key(0), jax.ShapeDtypeStruct((1, 32, 32, 3), jnp.float32)
        )


@pytest.mark.slow  # compiles a small network's gradient
def test_the_gradient_reaches_every_parameter_with_stochastic_depth():
    small = {**SMALL, "depth": 1, "cls_attn_layers": 1}
    fn = nets_factory.get_network_fn(
        "xcit_tiny_12_p8_224", 10, is_training=True, drop_path_rate=0.1, **small
    )
    images = jax.random.normal(jax.random.key(1), (4, 16, 24, 3))
    variables = numpy_variables(jax.eval_shape(fn.init, jax.random.key(0), images))
    params = jax.tree.map(lambda p: p + 0.1, variables["params"])
    rngs = {"dropout": jax.random.key(2)}

    def loss(params):
        variables_ = {**variables, "params": params}
        (logits, _), _ = fn.apply(variables_, images, rngs=rngs, mutable=["batch_stats"])
        return jnp.sum(jax.nn.log_softmax(logits)[:, 0])

    grads = jax.jit(jax.grad(loss))(params)
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
        assert jnp.any(g != 0), jax.tree_util.keystr(path)
    # The XCA blocks' tokens as 2x3 maps on the patch grid (no class token there).
    fn = nets_factory.get_network_fn("xcit_tiny_12_p8_224", 10, **small)
    maps = jax.eval_shape(fn.features, variables, images)
    assert fn.feature_info == (("block1", 8, 24),) and maps["block1"].shape == (4, 2, 3, 24)


def test_remat_recomputes_each_block_under_its_own_names():
    # Abstract traces only: the stem, 1 XCA block and 1 class-attention block, one checkpoint each.
    small = {**SMALL, "depth": 1, "cls_attn_layers": 1}
    images = jax.ShapeDtypeStruct((2, 32, 32, 3), jnp.float32)
    trees = []
    for remat in (False, True):
        fn = nets_factory.get_network_fn("xcit_tiny_12_p16_224", 10, remat=remat, **small)
        trees.append(jax.eval_shape(fn.init, jax.random.key(0), images))
    assert jax.tree.map(jnp.shape, trees[0]) == jax.tree.map(jnp.shape, trees[1])
    loss = lambda v, x: jnp.sum(fn.apply(v, x)[0])  # noqa: E731
    gradient = jax.make_jaxpr(jax.grad(loss))(trees[1], images)
    assert [e.primitive.name for e in equations(gradient.jaxpr)].count("remat2") == 3

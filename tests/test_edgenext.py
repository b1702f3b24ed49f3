"""EdgeNeXt: timm's parameter counts and MACs, the SDTA block's split into torch.chunk's groups,
bfloat16 compute with float32 parameters, weight decay on kernels only, timm's layer-decay
depths, and edgenext_small_rw's downsampling blocks."""

import jax
import jax.numpy as jnp
import pytest

import nets_factory
import nets_summary as summary
from nets import edgenext
from nets.layers import Conv
from tests.helpers import XLA_CONVS, equations, numpy_variables

# timm 1.0's counts at 1000 classes (sum of `numel` of `timm.create_model(name).parameters()`).
# edgenext_xx_small: stem 4x4 conv 3*24*16 + 24 and LayerNorm 48 = 1,224; stage 1, two 3x3
# ConvNeXt blocks of width 24 (depthwise 9*24 + 24, LayerNorm 48, fc1 24*96 + 96, fc2 96*24 + 24,
# gamma 24) = 5,088 each; stage 2's downsampling (LayerNorm 48, 2x2 conv 4*24*48 + 48) 4,704,
# one 5x5 block 20,448 and an SDTA of width 48 in 2 groups (one depthwise 3x3 on 24 channels,
# 240; encoding projection 64*48 + 48; norm_xca 96, gamma_xca 48, qkv 48*144 + 144, 4
# temperatures, proj 48*48 + 48; norm 96, fc1 48*192 + 192, fc2 192*48 + 48, gamma 48) = 31,432;
# and so on: 1,327,216 with the head's LayerNorm 2*168 and classifier 168*1000 + 1000.
PUBLISHED_COUNTS = {
    "edgenext_xx_small": 1_327_216,
    "edgenext_x_small": 2_336_804,
    "edgenext_small": 5_586_832,
    "edgenext_base": 18_511_292,
    "edgenext_small_rw": 7_826_512,
}

# MACs at 256 px, batch 1: PyTorch's `FlopCounterMode` on timm's networks, halved: the
# cross-covariance products and the encoding's projection included (timm's comments say 260.58M
# for xx_small, counted otherwise).
TORCH_MACS = {
    "edgenext_xx_small": 257_905_088,
    "edgenext_x_small": 533_192_192,
    "edgenext_small": 1_253_234_816,
    "edgenext_base": 3_828_296_384,
    "edgenext_small_rw": 1_568_105_472,
}

# A small EdgeNeXt: one ConvNeXt and one SDTA block a stage (two ConvNeXt in the first).
SMALL = {"depths": (2, 2, 2, 2), "widths": (8, 16, 22, 24), "num_heads": (2, 2, 2, 2)}


def test_published_parameter_counts_and_macs():
    # The recorded figures (nets/sizes.tsv), which the registry tests compare with a trace.
    sizes = summary.recorded_sizes()
    for name, count in PUBLISHED_COUNTS.items():
        assert (sizes[name].params, sizes[name].macs) == (count, TORCH_MACS[name]), name


def _block_params(scales, channels):
    block = edgenext.SplitTransposeBlock(scales, 2, Conv, None)
    x = jax.ShapeDtypeStruct((1, 3, 4, channels), jnp.float32)
    return jax.eval_shape(lambda x: block.init(jax.random.key(0), x, False), x)["params"]


def test_the_split_is_torch_chunks():
    # 22 channels in 3 groups: ceil(22 / 3) = 8, 8 and the 6 left, the last never convolved.
    params = _block_params(3, 22)
    assert sorted(k for k in params if k.startswith("convs_")) == ["convs_0", "convs_1"]
    assert params["convs_1"]["kernel"].shape == (3, 3, 1, 8)
    assert params["xca"]["temperature"].shape == (2,)
    # 5 channels in 4: torch.chunk makes 3 groups of 2, 2, 1, which timm cannot build either.
    with pytest.raises(ValueError, match="5 channels do not split into 4 groups"):
        _block_params(4, 5)


def test_bfloat16_compute_float32_parameters_and_decay_on_kernels_only():
    fn = nets_factory.get_network_fn(
        "edgenext_small", 10, weight_decay=1.0, dtype=jnp.bfloat16, **SMALL
    )
    images = jax.ShapeDtypeStruct((2, 32, 48, 3), jnp.float32)
    variables = jax.eval_shape(fn.init, jax.random.key(0), images)
    assert {leaf.dtype for leaf in jax.tree.leaves(variables)} == {jnp.dtype(jnp.float32)}
    logits, end_points = jax.eval_shape(fn.apply, variables, images)
    assert logits.dtype == jnp.bfloat16 and end_points["stage2"].shape == (2, 4, 6, 16)
    params = jax.tree.map(lambda leaf: jnp.ones(leaf.shape, leaf.dtype), variables["params"])
    # Kernels only: the stem 16*3*8, downsamplings 4*(8*16 + 16*22 + 22*24); ConvNeXt blocks'
    # depthwise k*k*c and MLP 8*c*c; SDTA blocks' split 3x3s 9*(8 + 7 + 2*6), encoding
    # projection 64*16, qkv and proj 4*c*c, MLP 8*c*c; the head 24*10. Not the norms, biases,
    # layer scales or temperatures.
    stem = 16 * 3 * 8 + 4 * (8 * 16 + 16 * 22 + 22 * 24)
    conv_blocks = 2 * (9 * 8 + 8 * 64) + 25 * 16 + 49 * 22 + 81 * 24
    conv_blocks += 8 * (16 * 16 + 22 * 22 + 24 * 24)
    sdta = 9 * (8 + 8 + 8 + 6 + 6 + 6) + 64 * 16 + 12 * (16 * 16 + 22 * 22 + 24 * 24)
    kernels = stem + conv_blocks + sdta + 24 * 10
    assert fn.regularization_loss(params) == pytest.approx(0.5 * kernels)


def test_layer_ids_are_timms_group_matcher():
    # timm's `group_matcher`, ConvNeXt's: 0 for the stem, then each block counted over the
    # stages (a stage's downsampling with its first), the head's norm and classifier last.
    module = edgenext.edgenext_xx_small()
    paths = [("stem_conv",), ("stages_0", "blocks_1"), ("stages_1", "downsample_norm")]
    paths += [("stages_1", "blocks_1", "xca", "qkv"), ("head_norm",), ("head",)]
    assert [module.layer_id(path) for path in paths] == [0, 2, 3, 4, 13, 13]


def test_small_rw_downsamples_in_blocks_that_widen():
    # No 2x2 downsampling: stage 2's first block is a stride-2 5x5 depthwise convolution from 48
    # to 96 channels (two filters a channel), without bias; the stem is 9x9.
    fn = nets_factory.get_network_fn("edgenext_small_rw", 10)
    images = jax.ShapeDtypeStruct((1, 64, 64, 3), jnp.float32)
    params = jax.eval_shape(fn.init, jax.random.key(0), images)["params"]
    assert "downsample_conv" not in params["stages_1"]
    assert params["stem_conv"]["kernel"].shape == (9, 9, 3, 48)
    assert params["stages_1"]["blocks_0"]["conv_dw"] == {
        "kernel": jax.ShapeDtypeStruct((5, 5, 1, 96), jnp.float32)
    }
    assert fn.min_image_size == 1


@pytest.mark.slow  # compiles a small network's gradient
def test_the_gradient_reaches_every_parameter_with_stochastic_depth():
    # Two stages of edgenext_small_rw: the second widened by its first block, then an SDTA block
    # with the position encoding.
    small = {
        "depths": (1, 2),
        "widths": (8, 16),
        "num_heads": (2, 2),
        "kernel_sizes": (3, 5),
        "scales": (2, 2),
        "global_blocks": (0, 1),
        "position_encoding": (False, True),
    }
    fn = nets_factory.get_network_fn(
        "edgenext_small_rw", 10, is_training=True, drop_path_rate=0.1, **small, **XLA_CONVS
    )
    images = jax.random.normal(jax.random.key(1), (2, 16, 16, 3))
    variables = numpy_variables(jax.eval_shape(fn.init, jax.random.key(0), images))
    params = jax.tree.map(lambda p: p + 0.1, variables["params"])
    rngs = {"dropout": jax.random.key(2)}

    def loss(params):
        logits, _ = fn.apply({**variables, "params": params}, images, rngs=rngs)
        return jnp.sum(jax.nn.log_softmax(logits)[:, 0])

    grads = jax.jit(jax.grad(loss))(params)
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
        assert jnp.any(g != 0), jax.tree_util.keystr(path)


def test_remat_recomputes_each_block_under_its_own_names():
    # Abstract traces only: the stem and 4 blocks (one ConvNeXt, three SDTA), one checkpoint each.
    images = jax.ShapeDtypeStruct((1, 32, 32, 3), jnp.float32)
    small = {**SMALL, "depths": (1, 1, 1, 1)}
    trees = []
    for remat in (False, True):
        fn = nets_factory.get_network_fn("edgenext_small", 10, remat=remat, **small)
        trees.append(jax.eval_shape(fn.init, jax.random.key(0), images))
    assert jax.tree.map(jnp.shape, trees[0]) == jax.tree.map(jnp.shape, trees[1])
    loss = lambda v, x: jnp.sum(fn.apply(v, x)[0])  # noqa: E731
    gradient = jax.make_jaxpr(jax.grad(loss))(trees[1], images)
    assert [e.primitive.name for e in equations(gradient.jaxpr)].count("remat2") == 5

"""LeViT: timm's parameter counts and MACs, the attention biases' index of a subsampling
attention and of rectangular maps, refused configurations. Full-size networks
through the recorded sizes; parity (and the heads' mean) in
tests/test_pretrained_levit.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nets_factory
import nets_summary as summary
from nets.tiny_vit import attention_bias_index
from tests.helpers import numpy_variables

# timm 1.0's counts at 1000 classes (sum of `numel` of `timm.create_model(name).parameters()`,
# `LevitDistilled`: both heads). A block of width c, h heads of key width k, values 2k: `qkv`
# c * 4hk + 2 * 4hk (BatchNorm), `proj` 2hk * c + 2c, h * N biases (N the map's tokens), MLP
# 4c^2 + 2 * 2c + 2c; each head 2c + (c + 1) * classes.
PUBLISHED_COUNTS = {
    "levit_128s": 7_777_058,
    "levit_128": 9_213_936,
    "levit_192": 10_947_069,
    "levit_256": 18_893_876,
    "levit_384": 39_128_836,
}
# MACs at 224 px, batch 1: PyTorch's `FlopCounterMode` on timm's networks, halved (the attention
# products included, as here).
TORCH_MACS = {
    "levit_128s": 304_660_832,
    "levit_128": 405_321_728,
    "levit_192": 657_022_080,
    "levit_256": 1_127_257_344,
    "levit_384": 2_351_786_880,
}
SMALL = {"embed_dims": (16, 24), "depths": (1, 1), "num_heads": (2, 3), "key_dim": 8}


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_published_parameter_counts_and_macs(name):
    # The registry tests check nets/sizes.tsv against a trace of every network.
    sizes = summary.recorded_sizes()[name]
    assert (sizes.params, sizes.macs, sizes.image_size) == (
        PUBLISHED_COUNTS[name],
        TORCH_MACS[name],
        224,
    )


def test_attention_bias_index_of_rectangles_and_subsampled_queries():
    # A 2x3 map: tokens (0,0) (0,1) (0,2) (1,0) (1,1) (1,2); offset (|dh|, |dw|) -> |dh| * 3 + |dw|
    # (timm's `attention_bias_idxs` with resolution (2, 3)).
    index = attention_bias_index((2, 3))
    assert index.shape == (6, 6)
    np.testing.assert_array_equal(index[0], [0, 1, 2, 3, 4, 5])
    np.testing.assert_array_equal(index[4], [4, 3, 4, 1, 0, 1])
    # Stride 2 on a 3x3 map keeps queries (0,0), (0,2), (2,0), (2,2) over all nine keys
    # (timm's `AttentionDownsample`).
    index = attention_bias_index((3, 3), 2)
    np.testing.assert_array_equal(index[1], [2, 1, 0, 5, 4, 3, 8, 7, 6])
    np.testing.assert_array_equal(index[3], [8, 7, 6, 5, 4, 3, 2, 1, 0])
    np.testing.assert_array_equal(attention_bias_index(3), attention_bias_index((3, 3), 1))


def test_rectangular_and_odd_maps():
    """40x24 px: maps 3x2, then 2x1 (the odd side's half rounded up); the tables are each
    map's."""
    fn = nets_factory.get_network_fn("levit_128s", 5, is_training=False, **SMALL)
    x = jnp.ones((1, 40, 24, 3))
    variables = jax.eval_shape(fn.init, jax.random.key(0), x)
    params = variables["params"]
    assert params["stages_0"]["blocks_0"]["attn"]["attention_biases"].shape == (2, 6)
    assert params["stages_1"]["downsample"]["attn_downsample"]["attention_biases"].shape == (2, 6)
    assert params["stages_1"]["blocks_0"]["attn"]["attention_biases"].shape == (3, 2)
    (logits, end_points) = jax.eval_shape(fn.apply, variables, x)
    assert end_points["stage2"].shape == (1, 2, 1, 24) and logits.shape == (1, 5)


def test_bad_configurations_are_one_line():
    x = jnp.ones((1, 32, 32, 3))
    cases = (
        ({"num_heads": (2,)}, r"^LeViT needs one width and head count per stage"),
        ({"embed_dims": (20, 24)}, r"^embed_dims \(20, 24\) must be multiples of key_dim 8"),
    )
    for kwargs, message in cases:
        fn = nets_factory.get_network_fn("levit_128s", 10, **{**SMALL, **kwargs})
        with pytest.raises(ValueError, match=message):
            jax.eval_shape(fn.init, jax.random.key(0), x)


@pytest.mark.slow  # compiles a training step (2 s)
def test_gradient_reaches_every_parameter():
    # Training mode (batch statistics over the tokens) on a block at 2x2 tokens and a
    # subsampling attention to 1x1 (one query over four keys; a block there would have one key,
    # whose softmax is constant): the stem, the tables, both attentions, the MLPs and both heads
    # all learn.
    small = {**SMALL, "depths": (1, 0)}
    fn = nets_factory.get_network_fn("levit_128s", 10, is_training=True, **small)
    images = jax.random.normal(jax.random.key(1), (2, 32, 32, 3))
    variables = numpy_variables(jax.eval_shape(fn.init, jax.random.key(0), images))
    params = jax.tree.map(lambda p: p + 0.1, variables["params"])  # no zero tables

    def loss(params):
        (logits, _), _ = fn.apply({**variables, "params": params}, images, mutable=["batch_stats"])
        return jnp.sum(jax.nn.log_softmax(logits)[:, 0])

    grads = jax.jit(jax.grad(loss))(params)
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
        assert np.any(np.asarray(g) != 0), jax.tree_util.keystr(path)

"""TinyViT: timm's parameter counts and MACs, the per-offset attention biases (their index and
the tables' sizes per window), refused configurations. Full-size networks through the recorded
sizes; parity in tests/test_pretrained_tiny_vit.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nets_factory
import nets_summary as summary
from nets import tiny_vit
from tests.helpers import XLA_CONVS
from tests.test_pretrained import state_dict_index

# timm 1.0's counts at 1000 classes (sum of `numel` of `timm.create_model(name,
# num_classes=1000).parameters()`; the 224 px networks default to ImageNet-22k's 21,841 classes
# there: 12,082,725, 20,354,581 and 33,223,825). A TinyViT block of width c, h heads, window w:
# attention 4c^2 + 6c (LayerNorm, qkv, proj) + h w^2, local_conv 9c + 2c, MLP 8c^2 + 7c; the
# 384 and 512 px networks differ from 21M's 224 px one by their tables alone: 21m_384 adds
# (144 - 49) * 2 * 6 + (576 - 196) * 6 * 12 + (144 - 49) * 2 * 18 = 31,920.
PUBLISHED_COUNTS = {
    "tiny_vit_5m_224": 5_392_764,
    "tiny_vit_11m_224": 10_996_972,
    "tiny_vit_21m_224": 21_198_568,
    "tiny_vit_21m_384": 21_230_488,
    "tiny_vit_21m_512": 21_268_120,
}
# MACs at the default size, batch 1: PyTorch's `FlopCounterMode` on timm's networks, halved (the
# attention products included, as here).
TORCH_MACS = {
    "tiny_vit_5m_224": 1_255_174_720,
    "tiny_vit_11m_224": 2_016_046_144,
    "tiny_vit_21m_224": 4_250_329_536,
    "tiny_vit_21m_384": 13_697_865_216,
    "tiny_vit_21m_512": 26_883_623_424,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_published_parameter_counts_and_macs(name):
    # The registry tests check nets/sizes.tsv against a trace of every network.
    sizes = summary.recorded_sizes()[name]
    assert (sizes.params, sizes.macs) == (PUBLISHED_COUNTS[name], TORCH_MACS[name])
    assert sizes.image_size == int(name[-3:])


def test_attention_bias_index_is_timms():
    # A window of 2: tokens (0,0), (0,1), (1,0), (1,1); offsets (|dh|, |dw|) numbered as they
    # first appear from token 0: (0,0) 0, (0,1) 1, (1,0) 2, (1,1) 3.
    np.testing.assert_array_equal(
        tiny_vit.attention_bias_index(2),
        [[0, 1, 2, 3], [1, 0, 3, 2], [2, 3, 0, 1], [3, 2, 1, 0]],
    )
    index = tiny_vit.attention_bias_index(7)
    assert index.shape == (49, 49) and set(index.ravel()) == set(range(49))
    np.testing.assert_array_equal(index, index.T)


def test_bias_tables_are_the_windows():
    """The 384 and 512 px files' tables are larger than the 224 px ones' (windows 12, 24, 12 and
    16, 32, 16 for 7, 14, 7): the full-size index (timm's state dicts) and ours agree."""
    key = "stages.{}.blocks.0.attn.attention_biases"
    index = state_dict_index()
    for name, windows in (
        ("tiny_vit_21m_224", (7, 14, 7)),
        ("tiny_vit_21m_384", (12, 24, 12)),
        ("tiny_vit_21m_512", (16, 32, 16)),
    ):
        for stage, (window, heads) in enumerate(zip(windows, (6, 12, 18), strict=True), 1):
            assert index[name][key.format(stage)] == (heads, window * window)
    fn = nets_factory.get_network_fn("tiny_vit_21m_384", 10, **XLA_CONVS)
    params = jax.eval_shape(fn.init, jax.random.key(0), jnp.ones((1, 384, 384, 3)))["params"]
    assert params["stages_2"]["blocks_0"]["attn"]["attention_biases"].shape == (12, 576)


def test_bad_configurations_are_one_line():
    x = jnp.ones((1, 32, 32, 3))
    small = {"embed_dims": (8, 16), "depths": (1, 1), "num_heads": (1, 2), "window_sizes": (1, 2)}
    cases = (
        ({"num_heads": (1, 3)}, r"^width 16 does not split into 3 heads"),
        ({"window_sizes": (1,)}, r"^TinyViT needs one width, head count and window per stage"),
        ({"window_sizes": (1, 0)}, r"^window_sizes must be at least 1"),
    )
    for kwargs, message in cases:
        fn = nets_factory.get_network_fn("tiny_vit_5m_224", 10, **{**small, **kwargs})
        with pytest.raises(ValueError, match=message):
            jax.eval_shape(fn.init, jax.random.key(0), x)


@pytest.mark.slow  # compiles a training step (2.5 s)
def test_gradient_reaches_every_parameter():
    # Training mode (batch statistics) on an MBConv and a TinyViT block whose 3x3 map pads to a
    # 2x2-window multiple: the offsets' biases, BatchNorms and LayerNorms all learn.
    small = {"embed_dims": (8, 16), "depths": (1, 1), "num_heads": (1, 2), "window_sizes": (1, 2)}
    fn = nets_factory.get_network_fn("tiny_vit_5m_224", 10, is_training=True, **small)
    images = jax.random.normal(jax.random.key(1), (2, 24, 24, 3))
    variables = fn.init(jax.random.key(0), images)
    params = jax.tree.map(lambda p: p + 0.1, variables["params"])  # no zero biases or tables

    def loss(params):
        (logits, _), _ = fn.apply({**variables, "params": params}, images, mutable=["batch_stats"])
        return jnp.sum(jax.nn.log_softmax(logits)[:, 0])

    grads = jax.jit(jax.grad(loss))(params)
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
        assert np.any(np.asarray(g) != 0), jax.tree_util.keystr(path)

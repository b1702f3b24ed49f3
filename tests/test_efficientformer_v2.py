"""EfficientFormerV2: timm's parameter counts and MACs, the strided attention's bias index, the
maps the tables are made for, refused configurations; parity through `load_pretrained` on a
fixture timm produced (tools/fixtures_efficientformer.py), each convention shown to matter."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nets_factory
import nets_summary as summary
from nets import efficientformer_v2, tiny_vit
from nets_weights import published
from tests.helpers import XLA_CONVS
from tests.test_pretrained import FIXTURES, expected, relative_error

# timm 1.0's counts at 1000 classes (sum of `numel` of `timm.create_model(name).parameters()`).
PUBLISHED_COUNTS = {
    "efficientformerv2_s0": 3_600_256,
    "efficientformerv2_s1": 6_185_560,
    "efficientformerv2_s2": 12_710_112,
    "efficientformerv2_l": 26_322_288,
}
# MACs at 224 px, batch 1: PyTorch's `FlopCounterMode` on timm's networks, halved (both heads,
# the talking heads and the attention products counted; the bilinear upsampling is no MAC).
TORCH_MACS = {
    "efficientformerv2_s0": 395_892_544,
    "efficientformerv2_s1": 651_969_640,
    "efficientformerv2_s2": 1_246_863_952,
    "efficientformerv2_l": 2_552_546_880,
}
# The fixture's small timm network (64 px: maps 16, 8, 4, 2), as `load_pretrained` keywords.
SMALL = {
    "embed_dims": (8, 8, 16, 16),
    "depths": (1, 1, 2, 2),
    "mlp_ratios": ((4,), (4,), (4, 3), (3, 4)),
    "num_vit": 1,
    "num_heads": 2,
    "key_dim": 4,
    "downsample_key_dim": 4,
    "default_image_size": 64,
    **XLA_CONVS,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_published_parameter_counts_and_macs(name):
    sizes = summary.recorded_sizes()[name]
    assert (sizes.params, sizes.macs) == (PUBLISHED_COUNTS[name], TORCH_MACS[name])


def test_strided_queries_index_the_offsets_to_every_key():
    # A 4x4 map's queries at stride 2, (0,0), (0,2), (2,0), (2,2), against its 16 keys: the
    # first query's row is the plain index's; the others are the offsets from their positions.
    index = tiny_vit.attention_bias_index(4, stride=2)
    assert index.shape == (4, 16)
    np.testing.assert_array_equal(index[0], tiny_vit.attention_bias_index(4)[0])
    np.testing.assert_array_equal(index[3], tiny_vit.attention_bias_index(4)[10])


def test_images_must_give_the_tables_maps():
    fn = nets_factory.get_network_fn("efficientformerv2_s0", 10, **SMALL)
    # maps of 4 at stride 16, 2 at 32
    assert (fn.min_image_size, fn.module.max_image_size) == (49, 64)
    assert nets_factory.get_network_fn("efficientformerv2_s0", 10).min_image_size == 209
    jax.eval_shape(fn.init, jax.random.key(0), jnp.ones((1, 49, 64, 3)))
    with pytest.raises(ValueError, match=r"^efficientformerv2_s0 takes images of 49 to 64 pixels"):
        jax.eval_shape(fn.init, jax.random.key(0), jnp.ones((1, 96, 96, 3)))
    with pytest.raises(ValueError, match=r"^EfficientFormerV2's .* for a 2x2 map .* got 3x3\n"):
        jax.eval_shape(fn.module.init, jax.random.key(0), jnp.ones((1, 96, 96, 3)))
    with pytest.raises(ValueError, match=r"^mlp_ratios needs one ratio per block"):
        fields = {**SMALL, "mlp_ratios": ((4,), (4,), (4,), (3, 4))}
        fn = nets_factory.get_network_fn("efficientformerv2_s0", 10, **fields)
        jax.eval_shape(fn.init, jax.random.key(0), jnp.ones((1, 64, 64, 3)))


@functools.cache
def loaded():
    folder = FIXTURES / "parity" / "efficientformer_v2"
    return nets_factory.load_pretrained("efficientformerv2_s0", folder, **SMALL)


def logits_of(variables=None):
    variables = published.without_mark(variables or loaded()[1])
    fn = nets_factory.get_network_fn("efficientformerv2_s0", 10, **SMALL)
    return jax.jit(fn.apply)(variables, expected("efficientformer_v2")["images"])[0]


@pytest.mark.slow  # parity: compiles a thinned reference network
def test_logits_are_the_references_and_each_convention_matters(monkeypatch):
    """Parity 4.4e-7; the downsampling's queries indexed as unstrided tokens (2.5e-2 off), the
    talking heads left out (0.18), or the biases zeroed (5.7e-2): the logits are not timm's."""
    network_fn, variables = loaded()
    reference = expected("efficientformer_v2")
    logits, end_points = jax.jit(network_fn.apply)(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) <= 1e-4
    np.testing.assert_allclose(
        logits, (end_points["cls_logits"] + end_points["dist_logits"]) / 2, rtol=1e-6
    )
    assert network_fn.pretrained.crop_fraction == pytest.approx(0.95)
    reference = reference["logits"]
    with monkeypatch.context() as patch:
        index = tiny_vit.attention_bias_index
        patch.setattr(efficientformer_v2, "attention_bias_index", lambda r, stride=1: index(r)[:4])
        assert relative_error(logits_of(), reference) > 1e-2
    with monkeypatch.context() as patch:
        patch.setattr(efficientformer_v2, "over_heads", lambda dense, x: x)
        assert relative_error(logits_of(), reference) > 1e-2
    without = jax.tree_util.tree_map_with_path(
        lambda path, leaf: 0 * leaf if path[-1].key == "attention_biases" else leaf,
        published.without_mark(variables),
    )
    assert relative_error(logits_of(without), reference) > 1e-2

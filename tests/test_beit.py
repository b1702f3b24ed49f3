"""BEiT: timm's parameter counts and MACs, its relative position index and table resize, bfloat16
compute with float32 parameters, and weight decay on kernels only."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file

import nets_factory
import nets_summary as summary
from nets import beit
from tests.test_pretrained import FIXTURES

# timm 1.0's counts at 1000 classes (sum of `numel` of `timm.create_model(name,
# num_classes=1000).parameters()`). BEiT-B at 224: patch embedding 16*16*3*768 + 768 = 590,592;
# class token 768; 12 blocks of 2 LayerNorms (4*768), qkv 768*2304 (no bias), q_bias and v_bias
# 2*768, relative position table (27*27 + 3)*12 = 8,784, proj 768*768 + 768, fc1 768*3072 +
# 3072, fc2 3072*768 + 768, layer scales 2*768 = 7,096,656 each; fc_norm 1,536; head 768*1000 +
# 1000: 86,530,984. At 384 the tables are (47*47 + 3)*12 = 26,544 a block: 86,744,104.
PUBLISHED_COUNTS = {
    "beit_base_patch16_224": 86_530_984,
    "beit_base_patch16_384": 86_744_104,
    "beit_large_patch16_224": 304_430_568,
    "beit_large_patch16_384": 304_998_888,
    "beit_large_patch16_512": 305_674_728,
    "beitv2_base_patch16_224": 86_530_984,
    "beitv2_large_patch16_224": 304_430_568,
}

# MACs at the networks' own sizes, batch 1: PyTorch's `FlopCounterMode` on timm's networks with
# `timm.layers.set_fused_attn(False)`, halved (as tests/test_vit.py's TORCH_MACS); the bias is
# an addition, no multiply-accumulate.
TORCH_MACS = {"beit_base_patch16_224": 17_563_828_224, "beit_large_patch16_512": 361_986_285_568}

TABLES = FIXTURES / "parity" / "beit_resized_32x48" / "tables.safetensors"


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_published_parameter_counts(name):
    # The recorded figures (nets/sizes.tsv), which the registry tests compare with a trace.
    assert summary.recorded_sizes()[name].params == PUBLISHED_COUNTS[name]


@pytest.mark.parametrize("name", sorted(TORCH_MACS))
def test_macs_are_torchs_with_the_attention_products(name):
    assert summary.recorded_sizes()[name].macs == TORCH_MACS[name]


def test_relative_position_index_is_timms():
    index = beit.relative_position_index((4, 6))
    np.testing.assert_array_equal(index, load_file(TABLES)["index_4x6"])
    # 7 * 11 offsets, then the class token's rows: to the patches, from them, to itself.
    assert index[0, 1] == 77 and index[1, 0] == 78 and index[0, 0] == 79
    # A patch to itself: offset (0, 0), row (0 + 3) * 11 + (0 + 5).
    assert index[1, 1] == index[24, 24] == 38


@pytest.mark.parametrize("grid", [(4, 6), (6, 6), (3, 3)])
def test_table_resize_is_timms(grid):
    # timm's `resize_rel_pos_bias_table` of a 4x4 grid's table (2 heads), as its loading does.
    reference = load_file(TABLES)
    table = jnp.asarray(reference["table"])
    bias = beit.relative_position_bias(table, (4, 4), grid)
    expected = reference[f"table_{grid[0]}x{grid[1]}"][beit.relative_position_index(grid)]
    np.testing.assert_allclose(bias[0], expected.transpose(2, 0, 1), rtol=1e-6, atol=1e-6)
    # The class token's three rows are kept as they are.
    np.testing.assert_array_equal(bias[0, :, 0, 0], reference["table"][-1])


def test_geometric_positions_move_an_axis_of_the_same_length():
    # timm resamples an axis whose length stays (its ratio at the floor 1.01), so the rows of a
    # 4x4 table moved to 4x6 are not the 4x4 table's rows.
    positions = beit.table_positions(7, 7)
    assert positions[3] == 0 and not np.allclose(positions, np.arange(-3, 4))
    rows, _ = beit.resize_weights((4, 4), (4, 6))
    assert not np.allclose(rows, np.eye(7)) and np.allclose(rows.sum(1), 1.0)


def test_bfloat16_compute_float32_parameters_and_decay_on_kernels_only():
    small = {"patch_size": 8, "embed_dim": 32, "depth": 2, "num_heads": 2, "img_size": 32}
    fn = nets_factory.get_network_fn(
        "beit_base_patch16_224", 10, weight_decay=1.0, dtype=jnp.bfloat16, **small
    )
    images = jax.ShapeDtypeStruct((2, 32, 48, 3), jnp.float32)  # tables resized to 4x6
    variables = jax.eval_shape(fn.init, jax.random.key(0), images)
    assert {leaf.dtype for leaf in jax.tree.leaves(variables)} == {jnp.dtype(jnp.float32)}
    table = variables["params"]["blocks_0"]["attn"]["relative_position_bias_table"]
    assert table.shape == (7 * 7 + 3, 2)  # made for img_size's 4x4 grid
    logits, end_points = jax.eval_shape(fn.apply, variables, images)
    assert logits.dtype == jnp.bfloat16 and end_points["block2"].shape == (2, 25, 32)
    params = jax.tree.map(lambda leaf: jnp.ones(leaf.shape, leaf.dtype), variables["params"])
    # Kernels only: patch embedding 8*8*3*32, per block qkv 32*96, proj 32*32, fc1 32*128,
    # fc2 128*32, head 32*10; not q_bias, v_bias, tables, layer scales, LayerNorms, biases, token.
    kernels = 8 * 8 * 3 * 32 + 2 * (32 * 96 + 32 * 32 + 32 * 128 + 128 * 32) + 32 * 10
    assert fn.regularization_loss(params) == pytest.approx(0.5 * kernels)
    layer_ids = [fn.module.layer_id(path) for path in (("patch_embed",), (), ("blocks_1",))]
    assert layer_ids + [fn.module.layer_id(("fc_norm",))] == [0, 0, 2, 3]

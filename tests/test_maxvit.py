"""MaxViT: timm's parameter counts and MACs, its relative position bias, window and grid
partitions, the image sizes the windows take, end points and feature pyramid, stochastic depth,
bfloat16 compute and weight decay on kernels only."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file

import nets_factory
import nets_summary as summary
from nets import maxvit, swin
from tests.test_pretrained import FIXTURES
from tests.test_stochastic_depth import blocks_built

# timm 1.0's counts at 1000 classes (`sum(p.numel() for p in timm.create_model(name,
# num_classes=1000).parameters())`). MaxViT-T at 224: stem 3*3*3*64 + 64 + 2*64 (BatchNorm) +
# 3*3*64*64 + 64 = 38,848; stages of 2, 2, 5, 2 blocks, each an MBConv and two attentions (qkv,
# proj, two LayerNorms, the MLP and a table [heads, 13, 13]); the head's LayerNorm 2*512,
# pre-logits 512*512 + 512, classifier 512*1000 + 1000. The windows' tables grow with the size
# (23x23 at 384, 31x31 at 512); the rest is the same.
PUBLISHED_COUNTS = {
    "maxvit_tiny_tf_224": 30_916_528,
    "maxvit_tiny_tf_384": 30_977_008,
    "maxvit_tiny_tf_512": 31_049_584,
    "maxvit_small_tf_224": 68_927_956,
    "maxvit_small_tf_384": 69_018_676,
    "maxvit_small_tf_512": 69_127_540,
    "maxvit_base_tf_224": 119_467_708,
    "maxvit_base_tf_384": 119_653_468,
    "maxvit_base_tf_512": 119_876_380,
    "maxvit_large_tf_224": 211_785_560,
    "maxvit_large_tf_384": 212_033_240,
    "maxvit_large_tf_512": 212_330_456,
    "maxvit_xlarge_tf_224": 474_951_952,  # timm's default, 21,843 classes: 506,987,643
    "maxvit_xlarge_tf_384": 475_323_472,
    "maxvit_xlarge_tf_512": 475_769_296,
}

# PyTorch's `FlopCounterMode` on timm's networks (FLOPs / 2), batch 1 at their size, counts
# timm's lookup of the bias tables too: two one-hot einsums a table of a head, `p^2 (2p - 1)^2`
# and `p^4 (2p - 1)` multiply-adds, over 168 heads' tables in MaxViT-T (2, 4, 8, 16 heads in 4,
# 4, 10, 4 attentions). Ours is a gather, no multiply-add.
TORCH_MACS = {"maxvit_tiny_tf_224": (5_551_836_656, 7), "maxvit_tiny_tf_384": (17_392_660_096, 12)}

# A small MaxViT: two stages of 16 and 24 channels at 24 px, 3x3 windows and grids (the parity
# fixture maxvit_tf_24's configuration).
SMALL = {
    "default_image_size": 24,
    "partition_ratio": 8,
    "embed_dim": (16, 24),
    "depths": (2, 1),
    "stem_width": 16,
    "dim_head": 8,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_published_parameter_counts(name):
    # The recorded figures (nets/sizes.tsv), which the registry tests compare with a trace.
    assert summary.recorded_sizes()[name].params == PUBLISHED_COUNTS[name]


@pytest.mark.parametrize("name", sorted(TORCH_MACS))
def test_macs_are_torchs_but_the_table_lookups(name):
    torch_macs, p = TORCH_MACS[name]
    lookups = 168 * p**2 * (2 * p - 1) * (p**2 + 2 * p - 1)
    assert summary.recorded_sizes()[name].macs == torch_macs - lookups


def test_relative_position_bias_is_timms():
    # timm's RelPosBiasTf.get_bias() for a table arange(30) of 2 heads over 2x3 windows
    # (tools/fixtures_maxvit.py): the key's offset from the query, Swin's index transposed.
    reference = load_file(FIXTURES / "parity" / "maxvit_tf_24" / "rel_pos.safetensors")
    bias = maxvit.relative_position_bias(jnp.asarray(reference["table"]), (2, 3))
    np.testing.assert_array_equal(bias, reference["bias"])
    table = reference["table"]
    # Query (0, 0), key (1, 2): offset (+1, +2), the table's row 1 + 1, column 2 + 2.
    assert bias[1, 0, 1 * 3 + 2] == table[1, 2, 4]
    swin_order = table.reshape(2, -1)[:, swin.relative_position_index((2, 3))]
    assert not np.array_equal(bias, swin_order)
    np.testing.assert_array_equal(bias, swin_order.transpose(0, 2, 1))


def test_grid_partition_gathers_strided_pixels_and_merges_back():
    x = jnp.arange(2 * 6 * 4 * 1, dtype=jnp.float32).reshape(2, 6, 4, 1)
    parts = maxvit.grid_partition(x, (3, 2))  # a 3x2 grid: pixels 2 rows and 2 columns apart
    assert parts.shape == (2 * 2 * 2, 6, 1)
    np.testing.assert_array_equal(parts[1, :, 0], x[0, 0::2, 1::2, 0].reshape(-1))
    np.testing.assert_array_equal(maxvit.grid_merge(parts, (3, 2), (6, 4)), x)
    windows = swin.partition(x, (3, 2))  # the block attention's: neighbours
    np.testing.assert_array_equal(windows[1, :, 0], x[0, 0:3, 2:4, 0].reshape(-1))


def trace(fn, size, train=False, batch=1):
    images = jax.ShapeDtypeStruct((batch, size, size, 3), jnp.float32)
    rngs = {"params": jax.random.key(0), "dropout": jax.random.key(1)}
    return jax.eval_shape(lambda r, x: fn.module.init_with_output(r, x, train=train), rngs, images)


def test_images_must_fit_the_windows_at_every_stage():
    fn = nets_factory.get_network_fn("maxvit_tiny_tf_224", 10, **SMALL)
    # 3x3 windows: stage maps 6 and 3 from 21 to 24 px ('SAME' halvings: ceil).
    assert fn.min_image_size == 21
    assert nets_factory.get_network_fn("maxvit_tiny_tf_224", 10).min_image_size == 221
    (_, end_points), _ = trace(fn, 21)
    assert end_points["stem"].shape == (1, 11, 11, 16) and end_points["stage2"].shape[1:3] == (3, 3)
    # Refused before any layer, as an image size (train.py's one line naming data.image_size),
    # with the sizes near it that fit and the default_image_size that would make it fit.
    with pytest.raises(nets_factory.ImageSizeError) as error:
        trace(fn, 32)
    assert str(error.value) == (
        "MaxViT (default_image_size=24) splits every stage's map into 3x3 windows, which 32x32 "
        "images' maps do not fit; sizes near it that do: 21-24 and 45-48 px, or build it with "
        "default_image_size=32"
    )
    with pytest.raises(ValueError, match=r"at least 21x21 pixels; got 20x20"):
        fn.apply({}, jnp.ones((1, 20, 20, 3)))


def test_end_points_features_and_the_head():
    fn = nets_factory.get_network_fn("maxvit_tiny_tf_224", 0, **SMALL, head_hidden_size=40)
    (features, end_points), variables = trace(fn, 24, batch=2)
    assert features.shape == (2, 40)  # the pre-logits: pooled, LayerNorm, dense, tanh
    assert {k: v.shape[1:] for k, v in end_points.items()} == {
        "stem": (12, 12, 16),
        "stage1": (6, 6, 16),
        "stage2": (3, 3, 24),
        "pre_logits": (40,),
    }
    assert fn.module.feature_strides() == {"stem": 2, "stage1": 4, "stage2": 8}
    params = variables["params"]
    assert set(params) == {"stem", "stages_0", "stages_1", "head_norm", "head_pre_logits"}
    block = params["stages_1"]["blocks_0"]
    # The first stage is as wide as the stem: its strided shortcut is a pool alone.
    assert "shortcut" not in params["stages_0"]["blocks_0"]["conv"]
    assert block["conv"]["shortcut"]["expand"]["kernel"].shape == (1, 1, 16, 24)
    assert block["conv"]["se"]["fc1"]["kernel"].shape == (1, 1, 96, 6)  # a quarter of 24
    rel_pos = block["attn_grid"]["attn"]["rel_pos"]["relative_position_bias_table"]
    assert rel_pos.shape == (3, 5, 5)  # 24 / 8 heads, 3x3 grid


def test_drop_path_rates_grow_over_all_blocks():
    # timm's: linspace(0, rate, blocks), each block's rate for its MBConv and both attentions.
    kwargs = {**SMALL, "default_image_size": 32, "partition_ratio": 16, "depths": (2, 2)}
    kinds = (maxvit.MaxViTBlock,)
    built = blocks_built("maxvit_tiny_tf_224", kinds, True, **kwargs, drop_path_rate=0.3)
    np.testing.assert_allclose([b.drop_path_rate for b in built], [0.0, 0.1, 0.2, 0.3])


def test_bfloat16_compute_float32_parameters_and_decay_on_kernels_only():
    fn = nets_factory.get_network_fn("maxvit_tiny_tf_224", 10, dtype=jnp.bfloat16, **SMALL)
    (logits, end_points), variables = trace(fn, 24)
    assert {leaf.dtype for leaf in jax.tree.leaves(variables)} == {jnp.dtype(jnp.float32)}
    assert logits.dtype == jnp.bfloat16 and end_points["stage2"].dtype == jnp.bfloat16
    # `regularization_loss` takes the leaves named `kernel` (test_nets_factory): the
    # convolutions' and dense layers', not the norms' scales, the biases or the tables (timm's
    # `no_weight_decay()`).
    leaves = jax.tree_util.tree_leaves_with_path(variables["params"])
    names = {path[-1].key for path, _ in leaves}
    assert names == {"kernel", "bias", "scale", "relative_position_bias_table"}
    layer_ids = {fn.module.layer_id(path) for path in (("stem",), ("stages_1",), ("head",))}
    assert layer_ids == {0, 2, 3}  # timm's group_matcher: the stem, a group a stage, the head

"""Swin Transformer: timm's and torchvision's parameter counts and MACs, the windows, shifts and
masks, other image sizes, bfloat16 attention, stochastic depth and weight decay on kernels only.
Full-size networks through `jax.eval_shape`; real compute on a two-stage configuration."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nets_factory
import nets_summary as summary
from nets import swin
from tests.helpers import equations, numpy_variables

# timm 1.0's counts at 1000 classes (sum of `numel` of `timm.create_model(name).parameters()`),
# and torchvision's `num_params` of swin_t / swin_s / swin_b. Swin-T:
#   patch embedding 4*4*3*96 + 96 + LayerNorm 2*96                                =      4,896
#   a block of width c with h heads: LayerNorms 4c, qkv c*3c + 3c, proj c*c + c,
#     table 169h, fc1 c*4c + 4c, fc2 4c*c + c = 12c^2 + 13c + 169h:
#     2 at (96, 3) 224,778; 2 at (192, 6) 891,060; 6 at (384, 12) 10,665,144;
#     2 at (768, 24) 14,178,384                                                    = 25,959,366
#   patch merging of c channels: LayerNorm 2*4c + 4c*2c: c = 96, 192, 384         =  1,557,504
#   final LayerNorm 2*768, head 768*1000 + 1000                                    =    770,536
#   total                                                                            28,288,354
PUBLISHED_COUNTS = {
    "swin_tiny_patch4_window7_224": 28_288_354,
    "swin_small_patch4_window7_224": 49_606_258,
    "swin_base_patch4_window7_224": 87_768_224,
    "swin_t": 28_288_354,
    "swin_s": 49_606_258,
    "swin_b": 87_768_224,
}

# MACs at 224 px, batch 1: PyTorch's `FlopCounterMode` on timm's networks with fused attention
# off (so that it sees the two attention products), halved: the same to the unit, and
# torchvision's published GFLOPS (4.49, 8.74, 15.43). timm's tables (4.51, 8.77, 15.47) come
# from fvcore, which also counts LayerNorm's elementwise work.
TORCH_MACS = {
    "swin_tiny_patch4_window7_224": 4_490_566_656,
    "swin_small_patch4_window7_224": 8_740_875_264,
    "swin_base_patch4_window7_224": 15_430_946_816,
}
TORCHVISION_GFLOPS = {"swin_t": 4.49, "swin_s": 8.74, "swin_b": 15.43}

# Two stages: a shifted block (4x4 map, windows of 2) and a stage whose map is one window.
TINY = {"img_size": 16, "embed_dim": 8, "depths": (2, 1), "num_heads": (1, 2), "window_size": 2}


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_published_parameter_counts(name):
    # The registry tests check nets/sizes.tsv against a trace of every network.
    assert summary.recorded_sizes()[name].params == PUBLISHED_COUNTS[name]


def test_macs_are_torchs_and_torchvisions():
    sizes = summary.recorded_sizes()
    for name, macs in TORCH_MACS.items():
        assert sizes[name].macs == macs
    for name, gflops in TORCHVISION_GFLOPS.items():
        assert round(sizes[name].macs / 1e9, 2) == gflops


def test_end_points_are_nhwc_stage_maps():
    # Four stages of one block at 64 px: strides 4, 4, 8, 16, 32 (Swin-T at 224 px: 56x56x96
    # ... 7x7x768), widths doubling from embed_dim.
    fn = tiny_fn(depths=(1, 1, 1, 1), num_heads=(1, 1, 1, 1), img_size=64)
    images = jax.ShapeDtypeStruct((1, 64, 64, 3), jnp.float32)
    variables = jax.eval_shape(fn.init, jax.random.key(0), images)
    _, end_points = jax.eval_shape(fn.apply, variables, images)
    assert {name: p.shape for name, p in end_points.items()} == {
        "stem": (1, 16, 16, 8),
        "stage1": (1, 16, 16, 8),
        "stage2": (1, 8, 8, 16),
        "stage3": (1, 4, 4, 32),
        "stage4": (1, 2, 2, 64),
        "pre_logits": (1, 64),
        "logits": (1, 10),
        "predictions": (1, 10),
    }


def test_windows_shrink_to_maps_no_larger_without_shift():
    # Swin-T at 224 px: maps 56, 28, 14, 7; the last is one 7x7 window, not shifted.
    assert swin.stage_windows(56, 4, 7) == [((7, 7), (3, 3))] * 3 + [((7, 7), (0, 0))]
    # The fixtures' 64 px with windows of 4: maps 16, 8, 4, 2.
    assert swin.stage_windows(16, 4, 4) == [
        ((4, 4), (2, 2)),
        ((4, 4), (2, 2)),
        ((4, 4), (0, 0)),
        ((2, 2), (0, 0)),
    ]
    assert swin.stage_windows(13, 3, 7) == [((7, 7), (3, 3)), ((7, 7), (0, 0)), ((4, 4), (0, 0))]


def test_relative_position_index_and_shift_mask():
    # A 2x2 window: offsets (dh, dw) in {-1, 0, 1}^2 index a 3x3 table row-major from (-1, -1).
    np.testing.assert_array_equal(
        swin.relative_position_index((2, 2)),
        [[4, 3, 1, 0], [5, 4, 2, 1], [7, 6, 4, 3], [8, 7, 5, 4]],
    )
    # A 4x4 map rolled by 1 in windows of 2: the first window is one region, the one to its
    # right straddles the roll's seam across columns, the last holds four regions.
    mask = swin.shift_mask((4, 4), (2, 2), (1, 1))
    assert mask.shape == (4, 4, 4)
    assert not mask[0].any()
    m = swin.MASKED
    np.testing.assert_array_equal(mask[1], [[0, m, 0, m], [m, 0, m, 0], [0, m, 0, m], [m, 0, m, 0]])
    np.testing.assert_array_equal(mask[3], np.where(np.eye(4), 0, m))


def tiny_fn(num_classes=10, **kwargs):
    return nets_factory.get_network_fn(
        "swin_tiny_patch4_window7_224", num_classes, **{**TINY, **kwargs}
    )


def tiny_variables(fn, seed=0):
    images = jax.ShapeDtypeStruct((2, 16, 16, 3), jnp.float32)
    variables = numpy_variables(jax.eval_shape(fn.init, jax.random.key(0), images), seed)
    rng = np.random.default_rng(seed + 1)  # tables that matter (numpy_variables: zeros)
    return jax.tree_util.tree_map_with_path(
        lambda path, leaf: (
            rng.normal(0, 1, leaf.shape).astype(np.float32)
            if path[-1].key == "relative_position_bias_table"
            else leaf
        ),
        variables,
    )


def test_other_sizes_keep_the_windows_and_pad_the_maps():
    fn = tiny_fn()
    params = jax.eval_shape(fn.init, jax.random.key(0), jnp.ones((1, 16, 16, 3)))
    for shape, stage2 in (
        ((1, 24, 24, 3), (3, 3)),
        ((1, 20, 36, 3), (3, 5)),
        ((1, 4, 4, 3), (1, 1)),
    ):
        logits, points = jax.eval_shape(fn.apply, params, jnp.ones(shape))
        assert logits.shape == (1, 10) and points["stage2"].shape[1:3] == stage2
        # The tables are the windows', whatever the size.
        assert jax.eval_shape(fn.init, jax.random.key(0), jnp.ones(shape)) == params
    with pytest.raises(ValueError, match=r"needs images of at least 4x4 pixels; got 3x3"):
        fn.apply(params, jnp.ones((1, 3, 3, 3)))
    features_fn = tiny_fn(num_classes=0)
    shapes = jax.eval_shape(features_fn.init, jax.random.key(0), jnp.ones((1, 16, 16, 3)))
    features, points = jax.eval_shape(features_fn.apply, shapes, jnp.ones((1, 16, 16, 3)))
    assert features.shape == (1, 16) and "head" not in shapes["params"] and "logits" not in points


@pytest.mark.cpu_only("a GPU runs bfloat16 attention in cuDNN's kernel: no exp in the jaxpr")
def test_bfloat16_attention_keeps_float32_softmax_statistics():
    one_stage = {"depths": (2,), "num_heads": (2,)}  # a plain and a shifted block compile fast
    fn = tiny_fn(dtype=jnp.bfloat16, **one_stage)
    variables = tiny_variables(fn)
    assert {leaf.dtype for leaf in jax.tree.leaves(variables)} == {np.dtype("float32")}
    images = jax.random.normal(jax.random.key(3), (2, 16, 16, 3))
    logits, end_points = jax.jit(fn.apply)(variables, images)
    assert logits.dtype == end_points["stage1"].dtype == jnp.bfloat16
    reference, _ = jax.jit(tiny_fn(**one_stage).apply)(variables, images)
    np.testing.assert_allclose(np.float32(logits), reference, atol=0.1, rtol=0.1)
    # The softmax's exponentials, one per block (2 images x 4 windows x 2 heads x 4 queries x 4
    # keys), in float32 inside the bfloat16 network.
    jaxpr = jax.make_jaxpr(fn.apply)(variables, images)
    exps = [
        (eqn.outvars[0].aval.size, eqn.outvars[0].aval.dtype)
        for eqn in equations(jaxpr.jaxpr)
        if eqn.primitive.name == "exp" and eqn.outvars[0].aval.ndim >= 4
    ]
    assert exps == [(2 * 4 * 2 * 4 * 4, np.float32)] * 2


def test_gradient_reaches_every_parameter_with_stochastic_depth():
    fn = tiny_fn(is_training=True, drop_path_rate=0.5)
    variables = tiny_variables(fn)
    # 8 images: each residual branch is kept for some of them (the last block's at rate 0.5).
    images = jax.random.normal(jax.random.key(3), (8, 16, 16, 3))

    def loss(params, key):
        logits, _ = fn.apply({"params": params}, images, rngs={"dropout": key})
        return jnp.sum(jax.nn.log_softmax(logits)[:, 0])

    step = jax.jit(jax.value_and_grad(loss))
    (first, grads), (second, _) = (
        step(variables["params"], jax.random.key(0)),
        step(variables["params"], jax.random.key(5)),
    )
    assert first != second  # the drop-path masks depend on the rng
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
        assert np.any(np.asarray(g) != 0), jax.tree_util.keystr(path)


def test_weight_decay_covers_kernels_only():
    fn = tiny_fn(weight_decay=0.1)
    params = tiny_variables(fn)["params"]
    grads = jax.jit(jax.grad(fn.regularization_loss))(params)
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
        decayed = path[-1].key == "kernel"
        assert bool(np.any(np.asarray(g) != 0)) == decayed, jax.tree_util.keystr(path)


def test_bad_configurations_are_one_line():
    x = jnp.ones((1, 16, 16, 3))
    cases = (
        ({"num_heads": (3, 2)}, r"^width 8 does not split into 3 heads"),
        ({"num_heads": (1,)}, r"^Swin needs one head count per stage: depths \(2, 1\)"),
        ({"window_size": 0}, r"window_size 0: img_size must be at least patch_size \(4\)"),
        ({"drop_path_rate": 1.0}, r"^drop_path_rate must be in \[0, 1\), got 1.0"),
    )
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            jax.eval_shape(tiny_fn(**kwargs).init, jax.random.key(0), x)

"""ViT and DeiT: timm's parameter counts and MACs, position embeddings at other sizes, the
distilled heads, the later recipes' fields (registers, LayerScale, CLIP's norm and QuickGELU),
bfloat16 attention, and weight decay on kernels only."""

import functools
import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nets_factory
import nets_summary as summary
from nets import vit
from nets.layers import attention, gelu
from nets.layers.attention import DotProductAttention, fused_attention, fused_kernel_applies
from tests import variable_trees
from tests.helpers import equations, numpy_variables

# timm 1.0's counts at 1000 classes (sum of `numel` of `timm.create_model(name).parameters()`).
# ViT-B/16: patch embedding 16*16*3*768 + 768 = 590,592; class token 768; position embeddings
# 197*768 = 151,296; 12 blocks of 2 LayerNorms (4*768), qkv 768*2304 + 2304, proj 768*768 + 768,
# fc1 768*3072 + 3072, fc2 3072*768 + 768 = 7,087,872 each; final LayerNorm 1,536; head
# 768*1000 + 1000: 86,567,656.
PUBLISHED_COUNTS = {
    "vit_tiny_patch16_224": 5_717_416,
    "vit_small_patch16_224": 22_050_664,
    "vit_base_patch16_224": 86_567_656,
    "vit_base_patch32_224": 88_224_232,
    "vit_large_patch16_224": 304_326_632,
    "deit_tiny_patch16_224": 5_717_416,
    "deit_small_patch16_224": 22_050_664,
    "deit_base_patch16_224": 86_567_656,
    "deit_tiny_distilled_patch16_224": 5_910_800,
    "deit_small_distilled_patch16_224": 22_436_432,
    "deit_base_distilled_patch16_224": 87_338_192,
    "vit_tiny_patch16_384": 5_790_376,
    "vit_small_patch16_384": 22_196_584,
    "vit_base_patch16_384": 86_859_496,
    "vit_base_patch32_384": 88_297_192,
    "vit_large_patch16_384": 304_715_752,
    "deit3_small_patch16_224": 22_059_496,
    "deit3_base_patch16_224": 86_585_320,
    "deit3_large_patch16_224": 304_374_760,
    "deit3_small_patch16_384": 22_205_416,
    "deit3_base_patch16_384": 86_877_160,
    "deit3_large_patch16_384": 304_763_880,
    "vit_base_patch32_clip_224": 88_225_000,
    "vit_base_patch16_clip_224": 86_568_424,
    "vit_large_patch14_clip_224": 304_204_776,
    "vit_base_patch32_clip_quickgelu_224": 88_225_000,
    "vit_base_patch16_clip_quickgelu_224": 86_568_424,
    "vit_large_patch14_clip_quickgelu_224": 304_204_776,
    "vit_small_patch14_dinov2": 22_441_192,
    "vit_base_patch14_dinov2": 87_348_712,
    "vit_large_patch14_dinov2": 305_392_616,
    "vit_small_patch14_reg4_dinov2": 22_442_344,
    "vit_base_patch14_reg4_dinov2": 87_351_016,
    "vit_large_patch14_reg4_dinov2": 305_395_688,
    "vit_base_patch16_siglip_224": 93_653_224,
    "vit_base_patch16_siglip_256": 93_699_304,
    "vit_base_patch16_siglip_384": 93_945_064,
    "vit_base_patch16_siglip_512": 94_289_128,
    "vit_large_patch16_siglip_256": 316_981_224,
    "vit_large_patch16_siglip_384": 317_308_904,
    "vit_so400m_patch14_siglip_224": 428_833_704,
    "vit_so400m_patch14_siglip_384": 429_378_600,
    "vit_base_patch16_siglip_gap_224": 86_566_120,
    "vit_so400m_patch14_siglip_gap_224": 413_595_352,
    "vit_so400m_patch14_siglip_gap_384": 414_140_248,
}

# MACs at 224 px, batch 1: PyTorch's `torch.utils.flop_counter.FlopCounterMode` on timm's
# networks with `timm.layers.set_fused_attn(False)` (so that it sees the two attention
# products), halved; the same to the unit. timm's tables: ViT-B/16 17.6 GMACs, which also count
# LayerNorm's elementwise work (fvcore); with fused attention fvcore misses the products (16.9).
TORCH_MACS = {
    "vit_tiny_patch16_224": 1_253_683_200,
    "vit_small_patch16_224": 4_598_882_304,
    "vit_base_patch16_224": 17_563_828_224,
    "vit_base_patch32_224": 4_409_186_304,
    "vit_large_patch16_224": 61_554_712_576,
    "deit_tiny_distilled_patch16_224": 1_261_003_776,
    "deit_base_distilled_patch16_224": 17_656_811_520,
}

# The configuration of the parity fixtures (tools/fixtures_vit.py).
SMALL = {"patch_size": 8, "embed_dim": 32, "depth": 2, "num_heads": 2, "img_size": 32}


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_published_parameter_counts(name):
    # The recorded figures (nets/sizes.tsv), which the registry tests compare with a trace of
    # every network (tests/test_nets_factory.py::test_shapes_and_end_points).
    assert summary.recorded_sizes()[name].params == PUBLISHED_COUNTS[name]


@pytest.mark.parametrize("name", sorted(TORCH_MACS))
def test_macs_are_torchs_with_the_attention_products(name):
    assert summary.recorded_sizes()[name].macs == TORCH_MACS[name]
    assert round(TORCH_MACS["vit_base_patch16_224"] / 1e9, 1) == 17.6


def test_attention_products_are_counted():
    # ViT-B/16: every layer with a kernel (patch embedding, 12 blocks of qkv, proj, fc1, fc2 over
    # 197 tokens, the head), then 12 blocks of 12 heads of q k^T and attention v (197 x 197 x 64).
    kernels = 196 * 16 * 16 * 3 * 768 + 12 * 197 * 768 * (4 * 768 + 2 * 3072) + 768 * 1000
    products = 12 * 12 * 2 * 197 * 197 * 64
    assert summary.recorded_sizes()["vit_base_patch16_224"].macs == kernels + products


def small_fn(name="vit_tiny_patch16_224", num_classes=10, **kwargs):
    return nets_factory.get_network_fn(name, num_classes, **{**SMALL, **kwargs})


def small_variables(fn, size=32):
    images = jax.ShapeDtypeStruct((2, size, size, 3), jnp.float32)
    variables = numpy_variables(jax.eval_shape(fn.init, jax.random.key(0), images))
    rng = np.random.default_rng(1)  # tokens and embeddings that matter (numpy_variables: zeros)
    params = dict(variables["params"])
    for name in ("cls_token", "dist_token", "pos_embed"):
        if name in params:
            params[name] = rng.normal(0, 0.5, params[name].shape).astype(np.float32)
    return {"params": params}


def images(size, batch=2):
    return jax.random.normal(jax.random.key(3), (batch, size, size, 3))


def test_end_points_are_the_token_sequences():
    end_points = variable_trees.end_points("vit_small_patch16_224")  # committed (test_nets_factory)
    names = list(end_points)
    assert names[:2] == ["stem", "block1"] and names[12:] == [
        "block12",
        "norm",
        "pre_logits",
        "logits",
        "predictions",
    ]
    assert end_points["stem"] == end_points["block12"] == (1, 197, 384)
    assert end_points["pre_logits"] == (1, 384)


def test_position_embeddings_are_resampled_at_another_size():
    fn = small_fn()
    variables = small_variables(fn)
    for size, tokens in ((32, 17), (48, 37), (24, 10), (40, 26)):
        logits, end_points = jax.jit(fn.apply)(variables, images(size))
        assert logits.shape == (2, 10) and end_points["stem"].shape == (2, tokens, 32)
    # At its own grid the embeddings are used as they are; resampling a grid to itself is the
    # identity, and to another grid and back is not.
    grid = variables["params"]["pos_embed"][:, 1:].reshape(1, 4, 4, 32)
    assert vit.resample_position_embeddings(grid, (4, 4)) is grid
    there = vit.resample_position_embeddings(grid, (6, 6))
    assert there.shape == (1, 6, 6, 32)
    back = vit.resample_position_embeddings(there, (4, 4))
    assert 0 < float(jnp.max(jnp.abs(back - grid))) < float(jnp.max(jnp.abs(grid)))


def test_non_square_images_and_the_smallest():
    fn = small_fn()
    variables = small_variables(fn)
    logits, end_points = jax.jit(fn.apply)(variables, jnp.ones((1, 16, 40, 3)))
    assert end_points["stem"].shape == (1, 1 + 2 * 5, 32)
    assert (
        fn.min_image_size == 8
        and nets_factory.get_network_fn("vit_base_patch32_224", 10).min_image_size == 32
    )
    with pytest.raises(ValueError, match=r"needs images of at least 8x8 pixels; got 7x7"):
        fn.apply(variables, jnp.ones((1, 7, 7, 3)))


def test_distilled_logits_are_the_mean_of_the_two_heads_in_both_modes():
    for training in (False, True):
        fn = small_fn("deit_tiny_distilled_patch16_224", is_training=training)
        variables = small_variables(fn)
        logits, end_points = jax.jit(fn.apply)(variables, images(32))
        np.testing.assert_allclose(
            logits, (end_points["cls_logits"] + end_points["dist_logits"]) / 2, rtol=1e-6
        )
        assert not np.allclose(end_points["cls_logits"], end_points["dist_logits"], atol=1e-3)
        norm = end_points["norm"]
        np.testing.assert_allclose(end_points["pre_logits"], (norm[:, 0] + norm[:, 1]) / 2)
    features_fn = small_fn("deit_tiny_distilled_patch16_224", num_classes=0)
    features, points = jax.jit(features_fn.apply)(small_variables(features_fn), images(32))
    assert features.shape == (2, 32) and "logits" not in points and "cls_logits" not in points
    shapes = jax.eval_shape(features_fn.init, jax.random.key(0), images(32))["params"]
    assert "head" not in shapes and "head_dist" not in shapes and "dist_token" in shapes


@pytest.mark.cpu_only("a GPU runs bfloat16 attention in cuDNN's kernel: no exp in the jaxpr")
def test_bfloat16_attention_keeps_float32_softmax_statistics():
    fn = small_fn(dtype=jnp.bfloat16)
    variables = small_variables(fn)
    assert {leaf.dtype for leaf in jax.tree.leaves(variables)} == {np.dtype("float32")}
    logits, end_points = jax.jit(fn.apply)(variables, images(32))
    assert logits.dtype == end_points["block2"].dtype == jnp.bfloat16
    reference, _ = jax.jit(small_fn().apply)(variables, images(32))
    np.testing.assert_allclose(np.float32(logits), reference, atol=0.1, rtol=0.1)
    # The attention softmax's exponentials (batch 2 x heads 2 x 17 queries x 17 keys, in
    # JAX's grouped layout: one per block) run in float32 inside the bfloat16 network.
    jaxpr = jax.make_jaxpr(fn.apply)(variables, images(32))
    exps = [
        eqn.outvars[0].aval
        for eqn in equations(jaxpr.jaxpr)
        if eqn.primitive.name == "exp" and eqn.outvars[0].aval.ndim >= 4
    ]
    assert [(aval.size, aval.dtype) for aval in exps] == [(2 * 2 * 17 * 17, np.float32)] * 2


def test_gradient_reaches_every_parameter_with_stochastic_depth():
    fn = small_fn(
        "deit_tiny_distilled_patch16_224", is_training=True, drop_path_rate=0.1, dropout_rate=0.1
    )
    variables = small_variables(fn)

    def loss(params):
        logits, _ = fn.apply({"params": params}, images(32), rngs={"dropout": jax.random.key(2)})
        return jnp.sum(jax.nn.log_softmax(logits)[:, 0])

    grads = jax.jit(jax.grad(loss))(variables["params"])
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
        assert np.any(np.asarray(g) != 0), jax.tree_util.keystr(path)


def test_weight_decay_covers_kernels_only():
    fn = small_fn("deit_tiny_distilled_patch16_224", weight_decay=0.1)
    params = small_variables(fn)["params"]
    grads = jax.grad(fn.regularization_loss)(params)
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
        decayed = path[-1].key == "kernel"
        assert bool(np.any(np.asarray(g) != 0)) == decayed, jax.tree_util.keystr(path)


def test_registers_layer_scale_and_position_embeddings_of_the_patches_only():
    def params(name, **kwargs):
        fn = small_fn(name, **kwargs)
        shapes = jax.eval_shape(fn.init, jax.random.key(0), jnp.ones((1, 32, 32, 3)))
        return fn, shapes["params"]

    fn, reg4 = params("vit_small_patch14_reg4_dinov2")  # 4x4 patches of 8 pixels
    assert reg4["reg_token"].shape == (1, 4, 32) and reg4["pos_embed"].shape == (1, 16, 32)
    assert reg4["blocks_1"]["ls2"]["gamma"].shape == (32,)
    _, end_points = jax.eval_shape(fn.apply, {"params": reg4}, jnp.ones((1, 48, 48, 3)))
    assert end_points["stem"].shape == (1, 1 + 4 + 36, 32)  # the grid resampled to 6x6
    scale = vit.LayerScale(1e-5).init(jax.random.key(0), jnp.ones((1, 32)))["params"]["gamma"]
    np.testing.assert_array_equal(scale, np.full(32, 1e-5, np.float32))
    assert params("vit_small_patch14_dinov2")[1]["pos_embed"].shape == (1, 17, 32)
    _, deit3 = params("deit3_small_patch16_224")
    assert deit3["pos_embed"].shape == (1, 16, 32) and "reg_token" not in deit3
    assert "ls1" not in params("vit_tiny_patch16_224")[1]["blocks_0"]
    _, clip = params("vit_base_patch16_clip_224")
    assert "bias" not in clip["patch_embed"] and clip["norm_pre"]["scale"].shape == (32,)
    assert fn.module.layer_id(("norm_pre",)) == fn.module.layer_id(()) == 0  # timm's groups
    registry = nets_factory.get_network_fn("vit_base_patch14_dinov2", 0)
    assert registry.default_image_size == 518 and registry.module.img_size is None
    with pytest.raises(ValueError, match=r"distilled=True with reg_tokens=4: timm has no such"):
        params("deit_tiny_distilled_patch16_224", reg_tokens=4)


def test_pooling_the_class_token_the_patches_or_by_attention():
    def traced(name, **kwargs):
        fn = small_fn(name, **kwargs)
        shapes = jax.eval_shape(fn.init, jax.random.key(0), jnp.ones((1, 32, 32, 3)))
        return jax.eval_shape(fn.apply, shapes, jnp.ones((2, 32, 32, 3)))[1], shapes["params"]

    end_points, siglip = traced("vit_base_patch16_siglip_224")
    assert "cls_token" not in siglip and siglip["pos_embed"].shape == (1, 16, 32)
    assert siglip["attn_pool"]["latent"].shape == (1, 1, 32) and "norm" in siglip
    assert siglip["attn_pool"]["mlp"]["fc1"]["kernel"].shape == (32, 128)
    assert end_points["stem"].shape == (2, 16, 32) and end_points["pre_logits"].shape == (2, 32)
    _, gap = traced("vit_base_patch16_siglip_gap_224")
    assert "attn_pool" not in gap and "fc_norm" not in gap and "norm" in gap
    end_points, avg = traced("vit_tiny_patch16_224", global_pool="avg")  # fc_norm, not norm
    assert "fc_norm" in avg and "norm" not in avg and "norm" not in end_points
    for kwargs, error in (
        ({"global_pool": "max"}, r"global_pool='max' is not one of 'token', 'avg', 'map'"),
        ({"class_token": False}, r"class_token=False leaves no class token to pool"),
    ):
        with pytest.raises(ValueError, match=error):
            traced("vit_tiny_patch16_224", **kwargs)
    with pytest.raises(ValueError, match=r"distilled=True with global_pool='avg', fc_norm=None"):
        traced("deit_tiny_distilled_patch16_224", global_pool="avg")


def test_the_mlp_activation_is_quick_gelu_for_openai_clip_and_named_otherwise():
    x = jnp.array([[[-3.0, -1.5, 0.7, 2.5]]])
    eye = {"kernel": jnp.eye(4), "bias": jnp.zeros(4)}
    mlp = vit.Mlp(4, act_layer="quick_gelu")
    y = mlp.apply({"params": {"fc1": eye, "fc2": eye}}, x, train=False)
    np.testing.assert_allclose(y, x * jax.nn.sigmoid(1.702 * x), rtol=1e-6)
    with pytest.raises(
        ValueError,
        match=r"act_layer='swiglu' is not one of \['gelu', 'gelu_tanh', 'quick_gelu', 'silu'\]",
    ):
        vit.Mlp(4, act_layer="swiglu").apply({"params": {"fc1": eye, "fc2": eye}}, x, train=False)


def test_the_mlp_gelu_is_exact_not_tanh():
    x = jnp.array([[[-3.0, -1.5, 0.7, 2.5]]])
    eye = {"kernel": jnp.eye(4), "bias": jnp.zeros(4)}
    y = vit.Mlp(4).apply({"params": {"fc1": eye, "fc2": eye}}, x, train=False)
    np.testing.assert_array_equal(y, gelu(x))
    assert float(jnp.max(jnp.abs(y - jax.nn.gelu(x, approximate=True)))) > 1e-4


def test_attention_asks_for_the_fused_kernel_on_gpus_in_half_precision_only():
    assert fused_kernel_applies(jnp.bfloat16, "gpu") and fused_kernel_applies(jnp.float16, "gpu")
    assert not fused_kernel_applies(jnp.float32, "gpu")
    assert not fused_kernel_applies(jnp.bfloat16, "cpu")
    q = jnp.ones((1, 3, 2, 8))
    with pytest.raises(ValueError, match=r"'auto', 'xla' or 'cudnn', got 'flash'"):
        DotProductAttention("flash").apply({}, q, q, q)
    if jax.default_backend() == "cpu":  # 'auto' takes XLA's there, as 'xla' does
        auto = DotProductAttention().apply({}, q, q, q)
        np.testing.assert_array_equal(auto, DotProductAttention("xla").apply({}, q, q, q))
    # The networks pass their `attention` field down to every block.
    fn = small_fn(attention="flash")
    with pytest.raises(ValueError, match=r"'auto', 'xla' or 'cudnn', got 'flash'"):
        jax.eval_shape(fn.init, jax.random.key(0), jnp.ones((1, 32, 32, 3)))


@pytest.mark.parametrize("tokens, bias", [(197, False), (49, True)])
def test_attention_padded_to_an_even_length_is_the_unpadded_attention(tokens, bias):
    """cuDNN's kernel takes even lengths in training: ViT's 197 tokens (Swin's 49-token windows,
    with their bias) are padded by one, masked by the keys' lengths, and give the same result and
    gradients (on XLA's implementation here, in float32)."""
    q, k, v = jax.random.normal(jax.random.key(0), (3, 1, tokens, 2, 8))
    b = jax.random.normal(jax.random.key(1), (1, 2, tokens, tokens)) if bias else None

    def output_and_gradients(attention):
        def loss(q, k, v):
            out = attention(q, k, v, b)
            return jnp.sum(jnp.sin(out)), out

        return jax.jit(jax.grad(loss, argnums=(0, 1, 2), has_aux=True))(q, k, v)

    plain = functools.partial(jax.nn.dot_product_attention, implementation="xla")
    padded = functools.partial(fused_attention, implementation="xla")
    got, want = output_and_gradients(padded), output_and_gradients(plain)
    jax.tree.map(functools.partial(np.testing.assert_allclose, atol=1e-6), got, want)


@pytest.mark.cpu_only("a GPU's cuDNN may well take the queries that the CPU refuses")
def test_a_refused_fused_kernel_is_said_once_and_xla_runs(monkeypatch, caplog):
    monkeypatch.setattr(attention, "fused_kernel_applies", lambda dtype: True)  # as on a GPU
    monkeypatch.setattr(attention, "_said", set())
    q = jax.random.normal(jax.random.key(0), (1, 5, 2, 8), jnp.bfloat16)
    for _ in range(2):
        out = DotProductAttention().apply({}, q, q, q)  # the CPU has no cuDNN: refused
    np.testing.assert_array_equal(out, DotProductAttention("xla").apply({}, q, q, q))
    said = [r.getMessage() for r in caplog.records if "DotProductAttention" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(
        "DotProductAttention: cuDNN's fused attention refuses (1, 5, 2, 8) bfloat16 queries ("
    )
    assert said[0].endswith("): XLA's instead")


def test_the_fused_kernel_taking_the_queries_is_said_once(monkeypatch, caplog):
    monkeypatch.setattr(attention, "fused_kernel_applies", lambda dtype: True)  # as on a GPU
    monkeypatch.setattr(attention, "_said", set())
    # cuDNN's taking them, as it does on a GPU (its padding, run on XLA's implementation)
    monkeypatch.setattr(
        attention, "fused_attention", functools.partial(fused_attention, implementation="xla")
    )
    caplog.set_level(logging.INFO)
    q = jax.random.normal(jax.random.key(0), (1, 5, 2, 8), jnp.bfloat16)
    for _ in range(2):
        DotProductAttention().apply({}, q, q, q)
    said = [r.getMessage() for r in caplog.records if "DotProductAttention" in r.getMessage()]
    assert said == [
        "DotProductAttention: cuDNN's fused attention for (1, 5, 2, 8) bfloat16 queries "
        "(padded by one token)"
    ]
    assert caplog.records[-1].levelno == logging.INFO


def test_auto_attention_with_a_bias_is_xlas_and_says_so(monkeypatch, caplog):
    """With a bias (Swin's, BEiT's, MaxViT's) cuDNN's kernel was slower than XLA's on an H200
    (Swin-T's windows: 0.15x), so 'auto' takes XLA's there; 'cudnn' still forces the kernel."""
    monkeypatch.setattr(attention, "fused_kernel_applies", lambda dtype: True)  # as on a GPU
    monkeypatch.setattr(attention, "_said", set())
    asked = []
    xla = functools.partial(fused_attention, implementation="xla")  # cuDNN's stand-in
    monkeypatch.setattr(attention, "fused_attention", lambda *a: asked.append(a) or xla(*a))
    caplog.set_level(logging.INFO)
    q, bias = jax.random.normal(jax.random.key(0), (2, 1, 5, 2, 8), jnp.bfloat16)
    bias = bias.reshape(1, 2, 5, 8)[..., :5]
    for _ in range(2):
        out = DotProductAttention().apply({}, q, q, q, bias)
    np.testing.assert_array_equal(out, DotProductAttention("xla").apply({}, q, q, q, bias))
    said = [r.getMessage() for r in caplog.records if "DotProductAttention" in r.getMessage()]
    assert said == [
        "DotProductAttention: XLA's attention for (1, 5, 2, 8) bfloat16 queries with a bias "
        "(cuDNN's kernel is slower with one)"
    ]
    assert not asked
    DotProductAttention("cudnn").apply({}, q, q, q, bias)
    assert len(asked) == 1


def test_bad_configurations_are_one_line():
    x = jnp.ones((1, 32, 32, 3))
    with pytest.raises(ValueError, match=r"^embed_dim 32 does not split into 3 heads: embed_dim"):
        jax.eval_shape(small_fn(num_heads=3).init, jax.random.key(0), x)
    with pytest.raises(ValueError, match=r"^img_size 4 is smaller than one patch of 8 pixels"):
        jax.eval_shape(small_fn(img_size=4).init, jax.random.key(0), x)

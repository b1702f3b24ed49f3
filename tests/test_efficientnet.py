"""EfficientNet B0-B7 and V2-S/M/L: timm's parameter counts and MACs, compound scaling as fields,
V2's tables and Fused-MBConv block, the MBConv block's squeeze-excite and stochastic depth, and
the conventions of each source; `output_stride`'s dilation plan and pyramid."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nets_factory
import nets_summary as summary
from nets.efficientnet import B0, V2_S, EfficientNet, StageDef
from nets.layers import TORCH, Conv, FusedMBConv, InvertedResidual, batch_norm
from nets.layers.dilation import StageStride
from tests.helpers import numpy_variables, training_gradients

# timm's counts at 1000 classes (`sum(p.numel() for p in timm.create_model(name).parameters())`,
# timm's published figures 5.29M ... 66.35M); its tf_ ports have the same.
# MACs at the default size: what torch's FlopCounterMode counts for timm's model (FLOPs / 2;
# convolutions and the classifier, as `python -m nets_factory`), equal to the last MAC:
#   with torch.utils.flop_counter.FlopCounterMode(display=False) as f:
#       timm.create_model(name).eval()(torch.zeros(1, 3, s, s))
# The paper's Table 2 rounds them to 0.39, 0.70, 1.0, 1.8, 4.2, 9.9, 19 and 37 B FLOPs (B1, B4
# and B5 are 0.69, 4.4 and 10.3 by this count, as in torchvision's table).
TIMM = {
    "efficientnet_b0": (5_288_548, 385_814_752),
    "efficientnet_b1": (7_794_184, 686_802_832),
    "efficientnet_b2": (9_109_994, 993_561_872),
    "efficientnet_b3": (12_233_232, 1_827_141_392),
    "efficientnet_b4": (19_341_616, 4_393_771_024),
    "efficientnet_b5": (30_389_784, 10_266_384_752),
    "efficientnet_b6": (43_040_704, 19_067_593_536),
    "efficientnet_b7": (66_347_960, 37_745_884_192),
}
# Per variant: the paper's resolution, timm's blocks per stage (its `_scale_stage_depth`, read
# from the full-size state dicts in tests/fixtures/state_dicts/efficientnet.txt), stem and head.
SCALES = {
    "efficientnet_b0": (224, (1, 2, 2, 3, 3, 4, 1), 32, 1280),
    "efficientnet_b1": (240, (2, 3, 3, 4, 4, 5, 2), 32, 1280),
    "efficientnet_b2": (260, (2, 3, 3, 4, 4, 5, 2), 32, 1408),
    "efficientnet_b3": (300, (2, 3, 3, 5, 5, 6, 2), 40, 1536),
    "efficientnet_b4": (380, (2, 4, 4, 6, 6, 8, 2), 48, 1792),
    "efficientnet_b5": (456, (3, 5, 5, 7, 7, 9, 3), 48, 2048),
    "efficientnet_b6": (528, (3, 6, 6, 8, 8, 11, 3), 56, 2304),
    "efficientnet_b7": (600, (4, 7, 7, 10, 10, 13, 4), 64, 2560),
}
SMALL = {"width_multiplier": 0.25, "depth_multiplier": 0.5}  # the parity fixtures' scale
# Four blocks of B0's kinds for real compute at little compile time (SMALL's ten take twice as
# long): the unexpanded block, expanded 3x3 and 5x5 ones, strided and residual.
TINY_B0 = {"stages": (B0[0], B0[1], B0[2]._replace(repeats=2)), "depth_multiplier": 1.0}

# V2 at the paper's evaluation size: timm's counts (`efficientnetv2_*`; its `tf_efficientnetv2_*`
# and torchvision's `efficientnet_v2_*` have the same, and torchvision's table says 21,458,488,
# 54,139,356, 118,515,272 parameters and 8.366, 24.582, 56.08 "GFLOPS", which are these MACs),
# MACs counted as V1's above. V2-S: 696 in the stem (3 * 3 * 3 * 24 + 2 * 24), 19,846,552 in the
# blocks, 330,240 in the head (256 * 1280 + 2 * 1280), 1,281,000 in the classifier.
V2 = {
    "efficientnetv2_s": (384, 21_458_488, 8_365_617_152),
    "efficientnetv2_m": (480, 54_139_356, 24_582_460_384),
    "efficientnetv2_l": (480, 118_515_272, 56_079_699_008),
}
# timm's blocks per stage (from its `_gen_efficientnetv2_*` arch_defs), stem and head widths.
V2_TABLES = {
    "efficientnetv2_s": ((2, 4, 4, 6, 9, 15), 24, 1280),
    "efficientnetv2_m": ((3, 5, 5, 7, 14, 18, 5), 24, 1280),
    "efficientnetv2_l": ((4, 7, 7, 10, 19, 25, 7), 32, 1280),
}
V2_SMALL = {"width_multiplier": 0.125, "depth_multiplier": 0.34}  # the parity fixtures' scale
# Five blocks of V2-S's kinds, each residual one included, for real compute at little compile
# time: the unexpanded fused block, two expanded ones, two MBConv.
TINY_V2 = {
    "stages": tuple(V2_S[s]._replace(repeats=n) for s, n in ((0, 1), (1, 2), (3, 2))),
    "depth_multiplier": 1.0,
}


@pytest.mark.parametrize("name", sorted(TIMM))
@pytest.mark.parametrize("prefix", ["", "tf_"])
def test_timm_parameter_counts_and_macs(name, prefix):
    # The sizes `python -m nets_factory` lists, which the registry tests measure
    # (tests/test_nets_factory.py::test_shapes_and_end_points): tracing all sixteen again here
    # would double the family's test time.
    size, params, macs = summary.recorded_sizes()[prefix + name]
    assert (params, macs) == TIMM[name] and size == SCALES[name][0]


@pytest.mark.parametrize("name", sorted(SCALES))
def test_compound_scaling_is_timms(name):
    size, repeats, stem, head = SCALES[name]
    fn = nets_factory.get_network_fn(name, 1000)
    assert fn.default_image_size == size
    module = fn.module
    assert tuple(module.repeats(stage) for stage in module.stages) == repeats
    assert (module.width(module.stem_filters), module.width(module.head_filters)) == (stem, head)
    # One module, scaled by fields: the registry holds no copies of the table.
    assert type(module) is EfficientNet and module.stages is EfficientNet.stages


def test_tf_names_carry_tensorflows_conventions():
    ours = nets_factory.get_network_fn("efficientnet_b3", 10).module
    tf = nets_factory.get_network_fn("tf_efficientnet_b3", 10).module
    assert (ours.padding, ours.bn_epsilon, ours.bn_momentum) == ("SYMMETRIC", 1e-5, 0.9)
    assert (tf.padding, tf.bn_epsilon, tf.bn_momentum) == ("SAME", 1e-3, 0.99)
    assert (tf.width_multiplier, tf.depth_multiplier) == (ours.width_multiplier, 1.4)


def test_squeeze_excite_squeezes_a_quarter_of_the_block_input():
    fn = nets_factory.get_network_fn("efficientnet_b0", 1000)
    images = jax.ShapeDtypeStruct((1, 224, 224, 3), jnp.float32)
    params = jax.eval_shape(fn.init, jax.random.key(0), images)["params"]
    se = lambda block: params[block]["squeeze_excite"]["Conv"]["kernel"].shape  # noqa: E731
    # Block input 32 (no expansion) -> 8; input 16 expanded to 96 -> 4; 192 -> 1152 -> 48.
    assert se("blocks_0_0") == (1, 1, 32, 8)
    assert se("blocks_1_0") == (1, 1, 96, 4)
    assert se("blocks_6_0") == (1, 1, 1152, 48)
    assert "expand" not in params["blocks_0_0"] and "expand" in params["blocks_1_0"]


# Every V2 name: timm's own, its TF ports, torchvision's.
V2_NAMES = {
    f"{prefix}{v}": f"efficientnetv2_{v}"
    for prefix in ("efficientnetv2_", "tf_efficientnetv2_", "efficientnet_v2_")
    for v in "sml"
}


@pytest.mark.parametrize("name", sorted(V2_NAMES))
def test_v2_timm_parameter_counts_and_macs(name):
    # The sizes `python -m nets_factory` lists, measured by the registry tests, as V1's.
    assert summary.recorded_sizes()[name] == V2[V2_NAMES[name]]


@pytest.mark.parametrize("name", sorted(V2_TABLES))
def test_v2_tables_are_timms(name):
    repeats, stem, head = V2_TABLES[name]
    fn = nets_factory.get_network_fn(name, 1000)
    module = fn.module
    assert fn.default_image_size == V2[name][0]
    assert tuple(module.repeats(stage) for stage in module.stages) == repeats
    assert (module.width(module.stem_filters), module.head_width()) == (stem, head)
    assert [stage.kind for stage in module.stages[:4]] == ["fused"] * 3 + ["mbconv"]
    assert type(module) is EfficientNet
    # timm rounds V2-S's head with the width multiplier, keeps V2-M's and V2-L's at 1280.
    narrow = module.clone(width_multiplier=0.25)
    assert narrow.head_width() == (320 if name == "efficientnetv2_s" else 1280)


def test_v2_names_carry_their_sources_conventions():
    fields = lambda name: nets_factory.get_network_fn(name, 10).module  # noqa: E731
    timm, tf, tv = (
        fields("efficientnetv2_m"),
        fields("tf_efficientnetv2_m"),
        fields("efficientnet_v2_m"),
    )
    assert (timm.padding, timm.bn_epsilon, timm.bn_momentum) == ("SYMMETRIC", 1e-5, 0.9)
    assert (tf.padding, tf.bn_epsilon, tf.bn_momentum) == ("SAME", 1e-3, 0.9)
    assert (tv.padding, tv.bn_epsilon, tv.bn_momentum) == ("SYMMETRIC", 1e-3, 0.9)
    assert timm.stages is tf.stages is tv.stages and timm.dropout_rate == 0.3


def small(name="efficientnet_b0", **kw):
    scale = V2_SMALL if name.startswith("efficientnetv2") else SMALL
    return nets_factory.get_network_fn(name, **{"num_classes": 10, **scale, **kw})


def test_v2_blocks_fused_then_mbconv_with_squeeze_excite():
    fn = small("efficientnetv2_s", width_multiplier=0.25, depth_multiplier=0.1)  # a block a stage
    images = jax.ShapeDtypeStruct((1, 32, 32, 3), jnp.float32)
    params = jax.eval_shape(fn.init, jax.random.key(0), images)["params"]
    first = {"squeeze_excite": "Conv"}  # the first convolution of each layer
    kernels = lambda block: {  # noqa: E731
        layer: params[block][layer][first.get(layer, "conv")]["kernel"].shape
        for layer in params[block]
    }
    # Stem 24 * 0.25 -> 8; the unexpanded fused block: one 3x3 convolution 8 -> 8.
    assert kernels("blocks_0_0") == {"conv": (3, 3, 8, 8)}
    # Fused: a 3x3 expansion 8 -> 32 (x4), a 1x1 projection to 48 * 0.25 -> 16; no SE.
    assert kernels("blocks_1_0") == {"expand": (3, 3, 8, 32), "project": (1, 1, 32, 16)}
    # MBConv: 16 -> 64, depthwise, squeeze-excite to a quarter of the input (4), 64 -> 32.
    assert kernels("blocks_3_0") == {
        "expand": (1, 1, 16, 64),
        "depthwise": (3, 3, 1, 64),
        "squeeze_excite": (1, 1, 64, 4),
        "project": (1, 1, 64, 32),
    }


def test_v2_end_points_per_stage_and_features_mode():
    fn = small("efficientnetv2_s", num_classes=None, depth_multiplier=0.1)
    images = jax.ShapeDtypeStruct((2, 54, 54, 3), jnp.float32)
    variables = jax.eval_shape(fn.init, jax.random.key(0), images)
    features, end_points = jax.eval_shape(fn.apply, variables, images)
    assert features.shape == (2, 160) and "logits" not in end_points
    shapes = [end_points[f"blocks_{s}"].shape for s in range(6)]
    assert end_points["stem"].shape == (2, 27, 27, 8)
    assert [(h, c) for _, h, _, c in shapes] == [
        (27, 8),
        (14, 8),
        (7, 8),
        (4, 16),
        (4, 24),
        (2, 32),
    ]
    assert end_points["head"].shape == (2, 2, 2, 160)


def test_fused_block_without_expansion_is_one_convolution_plus_its_input():
    norm = batch_norm(TORCH, False, jnp.float32)
    block = FusedMBConv(8, 1, conv=Conv, norm=norm, act=jax.nn.silu, padding="SYMMETRIC")
    x = jax.random.normal(jax.random.key(0), (2, 6, 6, 8))
    variables = numpy_variables(jax.eval_shape(block.init, jax.random.key(1), x))
    assert set(variables["params"]) == {"conv"}
    kernel = variables["params"]["conv"]["conv"]["kernel"]
    bn = {**variables["params"]["conv"]["bn"], **variables["batch_stats"]["conv"]["bn"]}
    conv = jax.lax.conv_general_dilated(
        x, kernel, (1, 1), ((1, 1), (1, 1)), dimension_numbers=("NHWC", "HWIO", "NHWC")
    )
    normed = (conv - bn["mean"]) / np.sqrt(bn["var"] + 1e-5) * bn["scale"] + bn["bias"]
    np.testing.assert_allclose(block.apply(variables, x), jax.nn.silu(normed) + x, atol=1e-5)
    # Dilated (an output_stride): the kernel's taps 2 apart, padded by 2 (timm's `get_padding`
    # at stride 1: dilation * (k - 1) // 2), the same parameters.
    conv = jax.lax.conv_general_dilated(
        x, kernel, (1, 1), ((2, 2), (2, 2)), rhs_dilation=(2, 2),
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
    )  # fmt: skip
    normed = (conv - bn["mean"]) / np.sqrt(bn["var"] + 1e-5) * bn["scale"] + bn["bias"]
    dilated = block.clone(dilation=2).apply(variables, x)
    np.testing.assert_allclose(dilated, jax.nn.silu(normed) + x, atol=1e-5)
    # Strided, or to another width: no residual.
    strided = block.clone(strides=2)
    assert strided.apply(variables, x).shape == (2, 3, 3, 8)
    with pytest.raises(ValueError, match=r"^FusedMBConv without expansion .* se_ratio must be 0"):
        block.clone(se_ratio=0.25).init(jax.random.key(1), x)


def test_fused_block_squeezes_a_fraction_of_its_input():
    norm = batch_norm(TORCH, False, jnp.float32)
    block = FusedMBConv(16, 4, conv=Conv, norm=norm, act=jax.nn.silu, se_ratio=0.25)
    x = jax.ShapeDtypeStruct((1, 6, 6, 12), jnp.float32)
    params = jax.eval_shape(block.init, jax.random.key(1), x)["params"]
    # Input 12, inner make_divisible(48) = 48, squeeze 12 / 4 = 3.
    assert params["expand"]["conv"]["kernel"].shape == (3, 3, 12, 48)
    assert params["squeeze_excite"]["Conv"]["kernel"].shape == (1, 1, 48, 3)
    assert params["project"]["conv"]["kernel"].shape == (1, 1, 48, 16)


def test_stage_kinds_are_checked():
    fn = small(stages=(B0[0], B0[1]._replace(kind="fusedmb")))
    with pytest.raises(ValueError, match=r"^stage 1's kind must be one of \('mbconv', 'fused'\), "):
        jax.eval_shape(fn.init, jax.random.key(0), jax.ShapeDtypeStruct((1, 32, 32, 3), "f4"))
    assert V2_S[0] == StageDef(1, 24, 2, 3, 1, "fused", 0.0)


def test_end_points_per_stage_and_features_mode():
    fn = small(num_classes=0)
    images = jax.ShapeDtypeStruct((2, 54, 54, 3), jnp.float32)
    variables = jax.eval_shape(fn.init, jax.random.key(0), images)
    features, end_points = jax.eval_shape(fn.apply, variables, images)
    assert features.shape == (2, 320) and "logits" not in end_points
    sides = [end_points[f"blocks_{s}"].shape[1] for s in range(7)]
    assert end_points["stem"].shape[1] == 27 and sides == [27, 14, 7, 4, 4, 2, 2]
    assert end_points["head"].shape == (2, 2, 2, 320)
    assert end_points["global_pool"].shape == (2, 1, 1, 320)


@pytest.mark.parametrize(
    ("name", "tiny"), [("efficientnet_b0", TINY_B0), ("efficientnetv2_s", TINY_V2)]
)
def test_gradient_reaches_every_parameter_and_bfloat16_keeps_float32_params(name, tiny):
    fn = small(name, is_training=True, drop_path_rate=0.2, **tiny)
    images = jax.random.normal(jax.random.key(1), (2, 32, 32, 3))
    variables = numpy_variables(jax.eval_shape(fn.init, jax.random.key(0), images))
    grads, _ = training_gradients(fn, variables, images, {"dropout": jax.random.key(2)})
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
        assert np.any(np.asarray(g) != 0), jax.tree_util.keystr(path)

    evaluate = small(name, **tiny)
    reference, _ = jax.jit(evaluate.apply)(variables, images)
    half = small(name, dtype=jnp.bfloat16, **tiny)
    logits, end_points = jax.jit(half.apply)(variables, images)
    assert logits.dtype == end_points["blocks_2"].dtype == jnp.bfloat16
    bf16_variables = jax.eval_shape(half.init, jax.random.key(0), images)
    assert {leaf.dtype for leaf in jax.tree.leaves(bf16_variables)} == {jnp.dtype(jnp.float32)}
    np.testing.assert_allclose(np.float32(logits), reference, atol=0.1, rtol=0.1)


@pytest.mark.parametrize("kind", [InvertedResidual, FusedMBConv])
def test_drop_path_drops_whole_examples_of_the_residual_branch(kind):
    extra = {"squeeze_excite": True} if kind is InvertedResidual else {}
    block = kind(
        16,
        6,
        conv=Conv,
        norm=batch_norm(TORCH, False, jnp.float32),
        act=jax.nn.silu,
        se_ratio=0.25,
        drop_path_rate=0.5,
        deterministic=False,
        **extra,
    )
    x = jnp.broadcast_to(jax.random.normal(jax.random.key(0), (1, 5, 5, 16)), (64, 5, 5, 16))
    variables = numpy_variables(jax.eval_shape(block.init, jax.random.key(1), x[:1]))
    out = block.apply(variables, x, rngs={"dropout": jax.random.key(2)})
    kept = block.clone(drop_path_rate=0.0).apply(variables, x)
    branch = np.asarray(kept - x)
    assert np.abs(branch).max() > 0.1
    # Each example is its input (branch dropped) or its input plus twice the branch (kept,
    # scaled by 1 / (1 - 0.5)); both occur.
    dropped = np.all(np.isclose(out, x, atol=1e-6), axis=(1, 2, 3))
    doubled = np.all(np.isclose(out, x + 2 * branch, atol=1e-5), axis=(1, 2, 3))
    assert np.all(dropped ^ doubled) and 0 < dropped.sum() < 64
    np.testing.assert_array_equal(block.clone(deterministic=True).apply(variables, x), kept)


def test_multipliers_must_be_positive():
    fn = small(width_multiplier=0)
    with pytest.raises(ValueError, match=r"^width_multiplier must be positive, got 0"):
        jax.eval_shape(fn.init, jax.random.key(0), jax.ShapeDtypeStruct((1, 32, 32, 3), "f4"))
    fn = small(drop_path_rate=1.0)
    with pytest.raises(ValueError, match=r"^drop_path_rate must be in \[0, 1\), got 1.0"):
        jax.eval_shape(fn.init, jax.random.key(0), jax.ShapeDtypeStruct((1, 32, 32, 3), "f4"))


def test_default_image_size_is_a_field():
    fn = nets_factory.get_network_fn("efficientnet_b0", 10, default_image_size=256)
    assert fn.default_image_size == 256
    assert nets_factory.get_network_fn("efficientnet_b0", 10).default_image_size == 224


def test_output_stride_dilates_past_it_as_timms_builder():
    # B0 at 8: stage 3 (stride 16) stops striding, its first block keeps dilation 1 and the
    # rest take 2 (timm's builder raises the dilation after the block that stops striding);
    # stage 5's first block keeps 2, then 4. The parity tests (test_pretrained_efficientnet.py)
    # show it is timm's function.
    plan = EfficientNet(output_stride=8).stage_plan()
    assert plan[3:] == [StageStride(1, 2, 1), StageStride(1, 2, 2), StageStride(1, 4, 2)] + [
        StageStride(1, 4, 4)
    ]
    assert EfficientNet().stage_plan()[3] == StageStride(2, 1, 1)  # None: the table as it is

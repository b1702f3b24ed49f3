"""`remat=True` (timm's `set_grad_checkpointing`): each block recomputed in the backward pass.

Per family, on tiny configurations: the variables keep their names and every block is one
`checkpoint` of the gradient's program (abstract traces, no compile); the backward pass keeps a
fraction of the residuals. The gradients, the BatchNorm statistics and the dropped blocks of
stochastic depth are those without it (ResNet's blocks; what `jax.checkpoint` guarantees of any
function, checked where flax's mutable collections and rngs cross it). What XLA makes of it on a
device: `bench/remat_memory.py`.
"""

import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nets_factory
from nets.efficientnet import V2_S
from nets.hrnet import StageDef
from nets.layers import remat as remat_layers
from nets.layers.remat import POLICIES
from nets.mobilenet import BlockDef
from nets.mobilenet_v4 import cn, er, mqa, uir
from nets.mobilevit import Stage
from nets.xception import AlignedBlock
from tests.helpers import XLA_CONVS, equations, numpy_variables
from tests.test_efficientformer import SMALL as EFFICIENTFORMER
from tests.test_efficientformer_v2 import SMALL as EFFICIENTFORMER_V2
from tests.test_efficientvit_msra import SMALL as EFFICIENTVIT_MSRA
from tests.test_pretrained_ghostnet import SMALL as GHOSTNET

# name -> (constructor fields of a tiny configuration, its checkpointed units (the blocks, and the
# stem and the layers between blocks where they are recomputed too), image size or (height, width))
TINY = {
    # Three blocks and the stem (conv_init, bn_init, the max pool).
    "resnet50": (
        {"stage_sizes": (2, 1), "num_filters": 4, "drop_path_rate": 0.2, **XLA_CONVS},
        4,
        32,
    ),
    "vit_tiny_patch16_224": (
        {"img_size": 16, "patch_size": 8, "embed_dim": 16, "depth": 3, "num_heads": 2},
        3,
        16,
    ),
    "swin_tiny_patch4_window7_224": (
        {"img_size": 32, "embed_dim": 8, "depths": (2, 1), "num_heads": (1, 2), "window_size": 4},
        4,
        32,
    ),
    # V2's blocks: cosine attention, the position bias MLP, post-norms.
    "swinv2_tiny_window8_256": (
        {
            "img_size": 32,
            "default_image_size": 32,
            "embed_dim": 8,
            "depths": (2, 1),
            "num_heads": (1, 2),
            "window_size": 4,
            "pretrained_window_sizes": (0, 0),
        },
        4,
        32,
    ),
    "convnext_tiny": ({"depths": (1, 2), "widths": (8, 16)}, 4, 32),
    # MetaFormer's stages of BatchNorm blocks (their statistics cross the checkpoints).
    "inception_next_tiny": ({"depths": (1, 2), "dims": (8, 16), "mlp_ratios": (4, 3)}, 4, 32),
    # Gated CNN blocks in the same stages, LayerNorm downsamplings after their convolutions.
    "mambaout_tiny": ({"depths": (1, 2), "dims": (8, 16)}, 4, 32),
    # Spatial-reduction attention (the 2x2/2 reduction), the depthwise MLP; stage norms outside.
    "pvt_v2_b0": (
        {
            "depths": (2, 1),
            "embed_dims": (8, 16),
            "num_heads": (1, 2),
            "sr_ratios": (2, 1),
            "mlp_ratios": (2.0, 2.0),
            **XLA_CONVS,
        },
        4,
        32,
    ),
    "eva02_base_patch14_224": (
        {"img_size": 16, "patch_size": 8, "embed_dim": 16, "depth": 3, "num_heads": 2},
        3,
        16,
    ),
    # At 16x24 px: each block resizes its table (made for 2x2 patches) to 2x3.
    "beit_base_patch16_224": (
        {"img_size": 16, "patch_size": 8, "embed_dim": 16, "depth": 3, "num_heads": 2},
        3,
        (16, 24),
    ),
    # Two stages of MaxViT blocks (MBConv, block and grid attention each), 3x3 windows.
    "maxvit_tiny_tf_224": (
        {
            "default_image_size": 24,
            "partition_ratio": 8,
            "embed_dim": (8, 16),
            "depths": (2, 1),
            "stem_width": 8,
            "dim_head": 8,
            **XLA_CONVS,
        },
        4,
        24,
    ),
    # An inverted residual, then a MobileViT stage (its inverted residual and MobileViT block),
    # and the same in v2's blocks.
    "mobilevit_xxs": (
        {
            "stem_chs": 8,
            "stages": (Stage(1, 8, 1, 2.0), Stage(1, 16, 2, 2.0, 16, 1)),
            "num_features": 16,
            **XLA_CONVS,
        },
        4,
        16,
    ),
    "mobilevitv2_050": (
        {"stem_chs": 8, "stages": (Stage(1, 8, 1, 2.0), Stage(1, 16, 2, 2.0, 8, 1)), **XLA_CONVS},
        4,
        16,
    ),
    # gMLP's blocks (MLP-Mixer's, gMixer's and ResMLP's are checkpointed by the same line).
    "gmlp_ti16_224": (
        {"default_image_size": 16, "patch_size": 8, "embed_dim": 8, "depth": 3},
        3,
        16,
    ),
    # Three NFNet blocks: one each of the first and last stages (a projection; pooled), and
    # squeeze-excite gates.
    "dm_nfnet_f0": (
        {
            "depths": (1, 1, 1),
            "channels": (16, 32, 48),
            "stem_features": 16,
            "group_size": 8,
            **XLA_CONVS,
        },
        4,
        16,
    ),
    # Pooling blocks, then a pooling and an attention block in the last stage (its map: 2x2).
    "efficientformer_l1": (EFFICIENTFORMER, 6, 64),
    # V2: convolutional blocks, the strided and the downsampling attentions (64 px).
    "efficientformerv2_s0": (EFFICIENTFORMER_V2, 7, 64),
    # An MBConv block, then two TinyViT blocks (window attention, local convolution, MLP).
    "tiny_vit_5m_224": (
        {
            "embed_dims": (8, 16),
            "depths": (1, 2),
            "num_heads": (1, 2),
            "window_sizes": (1, 2),
            **XLA_CONVS,
        },
        4,
        16,
    ),
    # A LeViT block, then the subsampling attention with its MLP and one more block.
    "levit_128s": (
        {"embed_dims": (16, 24), "depths": (1, 1), "num_heads": (2, 3), "key_dim": 8},
        4,
        32,
    ),
    # Ghost bottlenecks with V2's attention (the parity fixtures' five-block table).
    "ghostnetv2_100": ({**GHOSTNET, **XLA_CONVS}, 6, 52),
    # A fused block, then two inverted residuals with squeeze-excite (V2-S's stages 2, 4, 5).
    "efficientnetv2_s": (
        {"stages": (V2_S[1], *V2_S[3:5]), "width_multiplier": 0.25, "depth_multiplier": 0.1},
        4,
        32,
    ),
    # RegNet-Y: a stage of one strided block (its projection), one of two (an identity
    # shortcut after the strided one); squeeze-excite gates.
    "regnet_y_400mf": (
        {"w0": 8, "wa": 4.0, "wm": 2.0, "depth": 3, "group_width": 8, "stem_width": 8, **XLA_CONVS},
        4,
        32,
    ),
    # The stem, a dense layer in each of two dense blocks, the transition between them.
    "densenet121": (
        {
            "block_config": (1, 1),
            "growth_rate": 4,
            "num_init_features": 8,
            "bn_size": 2,
            **XLA_CONVS,
        },
        4,
        32,
    ),
    # The stem (base_layer, level0, level1: one unit), then four one-level trees: two basic
    # blocks each, the first's shortcut projection where the width changes (two of them) and a
    # root adding its first child back (DLA-102's), three of them level roots (the pooled input
    # a child). The bottlenecks are checkpointed by the same line.
    "dla34": (
        {"levels": (1,) * 6, "channels": (4, 4, 8, 8, 16, 16), "shortcut_root": True, **XLA_CONVS},
        15,
        32,
    ),
    # The b networks' blocks: a projection at stride 1, one at stride 2, then a plain block.
    "dpn68b": (
        {
            "depths": (1, 2),
            "increments": (4, 4),
            "inner_width": 8,
            "groups": 2,
            "stem_features": 8,
            **XLA_CONVS,
        },
        4,
        32,
    ),
    # CSPResNet's cross stages of bottlenecks with squeeze-excite and stochastic depth: the stem
    # with its pool, each stage's entry (downsampling, expansion) and transition (both 1x1s), the
    # 3 blocks.
    "cspresnet50": (
        {
            "depths": (1, 2),
            "widths": (16, 32),
            "strides": (1, 2),
            "stem_widths": (8,),
            "se_ratio": 0.25,
            "drop_path_rate": 0.1,
            **XLA_CONVS,
        },
        8,
        32,
    ),
    # CS3's stages (one transition, after the Dark blocks): the stem, each stage's entry and
    # transition, the 2 blocks.
    "cs3darknet_s": (
        {"depths": (1, 1), "widths": (8, 16), "stem_widths": (4, 8), **XLA_CONVS},
        7,
        32,
    ),
    # DarkNet-AA's stages (an entry of average pool and 1x1, no transition): the stem, each
    # stage's entry, the 2 blocks.
    "darknetaa53": ({"depths": (1, 1), "widths": (8, 16), "stem_widths": (4,), **XLA_CONVS}, 5, 32),
    # The stem, layer1's bottleneck, the transition, a module of two branches of one basic
    # block each and its fusion, the head's two bottlenecks, its downsampling and final layer.
    "hrnet_w18_small": (
        {
            "stem_width": 8,
            "layer1": StageDef(1, (1,), (4,), "BOTTLENECK"),
            "stages": (StageDef(1, (1, 1), (4, 8)),),
            "head_widths": (2, 4),
            "num_features": 16,
            **XLA_CONVS,
        },
        10,
        32,
    ),
    # MIT's EfficientViT-B: per stage its strided MBConv, then a residual MBConv (stage 0), the
    # attention block (stage 2); the stem (its convolution and residual block) one unit.
    "efficientvit_b0": (
        {
            "widths": (8, 8, 8, 16, 16),
            "depths": (1, 2, 1, 1, 0),
            "head_dim": 8,
            "head_widths": (16, 24),
            **XLA_CONVS,
        },
        7,
        32,
    ),
    # The stem's three MobileOne blocks (one unit at the network's paths), a RepMixer block, the
    # three downsamplings, an attention block after its position encoding (drop path's draws),
    # `final_conv`.
    "fastvit_sa12": (
        {
            "depths": (1, 0, 0, 1),
            "dims": (8, 8, 16, 32),
            "drop_path_rate": 0.1,
            **XLA_CONVS,
        },
        7,
        32,
    ),
    # MSRA's EfficientViT: a block in each stage, after the two downsamplings (not recomputed);
    # the blocks' layers at the network's own paths (`nn.share_scope`).
    "efficientvit_m1": (EFFICIENTVIT_MSRA, 4, 48),
    # RepViT's stages, as timm's: gated and plain blocks, then the downsampling with a block.
    "repvit_m0_9": ({"embed_dims": (8, 16), "depths": (2, 1), **XLA_CONVS}, 3, 32),
    # The Inceptions have fixed tables: all their units, thinned (five in the slow tier, SLOW).
    # Each stem is two units, a resolution each (`run_layers`); a block and the pool after it
    # are one. GoogLeNet's: its stem's two, nine Inception modules (maxpool3 and 4 in theirs).
    "googlenet": ({"depth_multiplier": 0.1, "min_depth": 2, **XLA_CONVS}, 11, 32),
    # Slim's Mixed blocks (v1-v4's and Inception-ResNet-v2's machinery): v2's stem's two, its
    # eight blocks and two strided ones; v3's two and eleven, at its smallest size without the
    # auxiliary head.
    "inception_v2": ({"depth_multiplier": 0.1, "min_depth": 2, **XLA_CONVS}, 12, 32),
    # v1's two, nine blocks, Mixed_3c and 4f each with the pool after it.
    "inception_v1": ({"depth_multiplier": 0.1, "min_depth": 2, **XLA_CONVS}, 11, 32),
    "inception_v3": (
        {"depth_multiplier": 0.1, "min_depth": 2, "create_aux_logits": False, **XLA_CONVS},
        13,
        75,
    ),
    # The stem's two (the convolutions with Mixed_3a, Mixed_4a with 5a), Inception-A/B/C and
    # both reductions.
    "inception_v4": (
        {"depth_multiplier": 0.05, "min_depth": 2, "create_aux_logits": False, **XLA_CONVS},
        18,
        75,
    ),
    # v3's stem's two, Mixed_5b, the 39 residual blocks of the three Repeat scopes, Mixed_6a
    # and 7a, Block8.
    "inception_resnet_v2": (
        {"depth_multiplier": 0.05, "min_depth": 2, "create_aux_logits": False, **XLA_CONVS},
        45,
        75,
    ),
    # The first entry block (its `activated` argument None), the other two, a middle block and
    # the exit block.
    "legacy_xception": (
        {"widths": (4, 8, 8, 8, 16, 16, 16, 16, 16), "middle_blocks": 1, **XLA_CONVS},
        6,
        32,
    ),
    # Pre-activated aligned blocks: strided with a shortcut, the identity's, the last's (none).
    "xception41p": (
        {
            "blocks": (
                AlignedBlock((8, 8, 8), 2),
                AlignedBlock((8, 8, 8)),
                AlignedBlock((8, 16, 16), skip=False, start_with_relu=False),
            ),
            "stem_widths": (4, 8),
            **XLA_CONVS,
        },
        4,
        16,
    ),
    # The ImageNet stem's convolution (at the network's paths) and two cells, a reduction and a
    # normal cell; drop-path with the default progress, a static Python number.
    "nasnet_mobile": (
        {
            "num_cells": 1,
            "num_reduction_layers": 1,
            "num_conv_filters": 4,
            "drop_path_rate": 0.4,
            "use_aux_head": False,
            **XLA_CONVS,
        },
        5,
        16,
    ),
    # The CIFAR stem's convolution (at the network's paths), then PNASNet's cell (its older input
    # None).
    "pnasnet_mobile": (
        {"stem_type": "cifar", "num_cells": 1, "num_reduction_layers": 0, **XLA_CONVS},
        2,
        16,
    ),
    # Inverted residuals: V3's without expansion (squeeze-excite), EdgeTPU's fused one, a 5x5
    # hard-swish one with squeeze-excite; V3's `Conv_1` (timm's last block) is the fourth.
    "mobilenet_v3_small": (
        {
            "blocks": (
                BlockDef(1, 16, 3, 2, se=True),
                BlockDef(4, 16, 3, fused=True),
                BlockDef(3, 16, 5, se=True, hswish=True),
            ),
            "head_filters": 16,
            "last_filters": 16,
            "depth_multiplier": 0.5,
            **XLA_CONVS,
        },
        5,
        32,
    ),
    # Slim's 13 depthwise-separable layers, each pair one block (their variables at the top).
    "mobilenet_v1": ({"depth_multiplier": 0.125, **XLA_CONVS}, 14, 16),
    # One block of each kind: a Fused IB, a UIB, Mobile MQA (keys and values downsampled, layer
    # scale, drop path), a plain convolution (timm's `cn` blocks).
    "mobilenetv4_hybrid_medium": (
        {
            "stages": ((er(16, 3, 2, 2), uir(16, 3, 3, 2, 2)), (mqa(16, 2, 8, 2), cn(16, 1))),
            "head_filters": 16,
            "drop_path_rate": 0.1,
            **XLA_CONVS,
        },
        5,
        32,
    ),
    # The stem (a block too), the strided first blocks of the four stages and a grouped one with
    # the identity branch, each with d2se's squeeze-excite.
    "repvgg_d2se": (
        {"depths": (2, 1, 1, 1), "width_factors": (0.125,) * 4, "stem_width": 8, "groups": 2},
        6,
        32,
    ),
}


def parts(name, remat, batch=2):
    """The network's loss of its parameters in training mode, and its images."""
    kwargs, _, size = TINY[name]
    fn = nets_factory.get_network_fn(name, 10, is_training=True, remat=remat, **kwargs)
    height, width = (size, size) if isinstance(size, int) else size
    images = jax.random.normal(jax.random.key(1), (batch, height, width, 3))

    def loss(params, batch_stats):
        (logits, _), updates = fn.apply(
            {"params": params, "batch_stats": batch_stats},
            images,
            mutable=["batch_stats"],
            rngs={"dropout": jax.random.key(2)},
        )
        return jnp.sum(logits * jnp.arange(10)), updates

    return loss, images


def abstract_variables(name, images):
    """The network's abstract variables, traced without remat: the checkpointed network's
    are the same (each test applies it to them: flax's apply would find no parameter it named
    otherwise)."""
    kwargs = TINY[name][0]
    fn = nets_factory.get_network_fn(name, 10, is_training=True, **kwargs)
    return jax.eval_shape(fn.init, jax.random.key(0), images)


def residual_bytes(loss, variables) -> int:
    """The bytes of what the backward pass of `loss` keeps from its forward pass."""
    kept = jax.eval_shape(
        lambda p, s: jax.tree.leaves(jax.vjp(lambda p: loss(p, s)[0], p)[1]),
        variables["params"],
        variables.get("batch_stats", {}),
    )
    return sum(math.prod(a.shape) * a.dtype.itemsize for a in kept)


# Whole Inceptions (fixed tables) whose traces take seconds: in the slow tier.
SLOW = ("googlenet", "inception_v1", "inception_v3", "inception_v4", "inception_resnet_v2")


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in sorted(TINY)]
)
def test_each_block_is_recomputed_under_its_own_names(name):
    # jax.checkpoint's primitive (remat2) in the trace of init, which runs the forward pass:
    # what autodiff then recomputes (the gradient's trace holds the same count, in 3x the
    # time). The variables keep their names: every network wraps its units in `checkpointed`,
    # whose forms keep them (test_checkpointed_units_keep_their_variables_names).
    kwargs, count, size = TINY[name]
    fn = nets_factory.get_network_fn(name, 10, is_training=True, remat=True, **kwargs)
    height, width = (size, size) if isinstance(size, int) else size
    images = jax.ShapeDtypeStruct((2, height, width, 3), jnp.float32)
    init = jax.make_jaxpr(fn.init)(jax.random.key(0), images)
    assert len([e for e in equations(init.jaxpr) if e.primitive.name == "remat2"]) == count


class Unit(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x):
        return nn.relu(nn.Dense(self.features, name="fc")(x))


class Units(nn.Module):
    """`checkpointed`'s three forms: a module class, a partial over one, and a function of the
    calling module whose layers (a stem's) take their names from the network."""

    remat: bool

    @nn.compact
    def __call__(self, x):
        def stem(module, x):
            return nn.Dense(8, name="stem_fc")(x)

        x = remat_layers.checkpointed(stem, self.remat)(self, x)
        x = remat_layers.checkpointed(Unit, self.remat)(8, name="unit1")(x)
        return remat_layers.checkpointed(functools.partial(Unit, 4), self.remat)(name="unit2")(x)


def test_checkpointed_units_keep_their_variables_names():
    x = jnp.ones((2, 3))
    plain = Units(False).init(jax.random.key(0), x)
    init = jax.make_jaxpr(Units(True).init, return_shape=True)
    jaxpr, checkpointed_variables = init(jax.random.key(0), x)
    assert len([e for e in equations(jaxpr.jaxpr) if e.primitive.name == "remat2"]) == 3
    assert jax.tree.map(jnp.shape, checkpointed_variables) == jax.tree.map(jnp.shape, plain)
    np.testing.assert_array_equal(Units(True).apply(plain, x), Units(False).apply(plain, x))


def test_the_backward_pass_keeps_a_fraction_of_the_residuals():
    # ViT-S/16 at batch 8 keeps 1,043 MiB without remat, 123 MiB with it (ResNet-50: 1,104 and
    # 353); whether the device's compiler keeps them so is bench/remat_memory.py's question.
    plain_loss, images = parts("vit_tiny_patch16_224", False, batch=16)
    loss, _ = parts("vit_tiny_patch16_224", True, batch=16)
    plain = abstract_variables("vit_tiny_patch16_224", images)
    assert residual_bytes(loss, plain) < 0.4 * residual_bytes(plain_loss, plain)


def test_densenets_recomputed_layers_keep_their_new_maps_not_the_concatenations():
    # Pleiss et al.'s memory-efficient DenseNet: a dense layer takes the maps before it and
    # concatenates them itself, so checkpointed it keeps each map once. What the backward pass
    # keeps grows with the layers (a new map each), not with their square (each layer's
    # concatenated input), as it did when the layers took the concatenation.
    def kept(layers):
        fn = nets_factory.get_network_fn(
            "densenet121",
            10,
            is_training=True,
            remat=True,
            block_config=(layers,),
            growth_rate=8,
            num_init_features=16,
            bn_size=2,
            **XLA_CONVS,
        )
        images = jnp.zeros((2, 32, 32, 3))
        variables = jax.eval_shape(fn.init, jax.random.key(0), images)

        def loss(params, batch_stats):
            variables = {"params": params, "batch_stats": batch_stats}
            (logits, _), updates = fn.apply(variables, images, mutable=["batch_stats"])
            return logits.sum(), updates

        weights = sum(math.prod(a.shape) * 4 for a in jax.tree.leaves(variables["params"]))
        return residual_bytes(loss, variables) - weights  # which grow with the square too

    four, eight, sixteen = kept(4), kept(8), kept(16)
    assert sixteen - eight < 2.1 * (eight - four)  # 2.03; 3.2 with the concatenations kept


def test_gradients_statistics_and_dropped_blocks_are_the_same():
    # ResNet's blocks: BatchNorm statistics and stochastic depth's draws, recomputed.
    plain_loss, images = parts("resnet50", False)
    loss, _ = parts("resnet50", True)
    abstract = abstract_variables("resnet50", images)
    rng = np.random.default_rng(0)  # numpy's: no compile per shape
    variables = jax.tree.map(lambda a: rng.normal(0, 0.3, a.shape).astype(np.float32), abstract)
    args = (variables["params"], variables.get("batch_stats", {}))
    both = jax.jit(
        lambda p, s: [jax.value_and_grad(f, has_aux=True)(p, s) for f in (plain_loss, loss)]
    )
    ((value, updates), gradient), ((remat_value, remat_updates), remat_gradient) = both(*args)
    np.testing.assert_allclose(remat_value, value, rtol=1e-5)
    jax.tree.map(np.testing.assert_array_equal, remat_updates, updates)
    scale = max(float(jnp.abs(g).max()) for g in jax.tree.leaves(gradient))
    jax.tree.map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6 * scale),
        remat_gradient,
        gradient,
    )


def test_nasnet_drops_the_same_paths_whether_its_progress_is_a_number_or_an_array():
    # A cell's mode and a Python number's progress are static arguments of its checkpoint, so the
    # keep probability 1 - 0.3 * 0.3 is computed in float64 as without remat (traced, it would
    # round to another float32); an array's progress (train.py's schedule) is traced in both.
    fns = [
        nets_factory.get_network_fn(
            "nasnet_cifar",
            10,
            is_training=True,
            remat=remat,
            num_cells=1,
            num_reduction_layers=0,
            num_conv_filters=4,
            drop_path_rate=0.3,
            **XLA_CONVS,
        )
        for remat in (False, True)
    ]
    images = jax.random.normal(jax.random.key(1), (4, 8, 8, 3))
    variables = numpy_variables(jax.eval_shape(fns[0].init, jax.random.key(0), images))

    def outputs(progress):
        rngs = {"dropout": jax.random.key(2)}
        return [
            fn.apply(variables, images, drop_path_progress=progress, rngs=rngs, mutable=True)
            for fn in fns
        ]

    # One program each (compiled: a quarter of the eager run's time), the number closed over.
    for plain, checkpointed in (
        jax.jit(lambda: outputs(0.3))(),
        jax.jit(outputs)(jnp.float32(0.3)),
    ):
        jax.tree.map(np.testing.assert_array_equal, checkpointed, plain)


def test_a_policy_keeps_what_it_names_and_no_more():
    # ViT-Ti's blocks at batch 16 keep 553 KiB without remat, 119 KiB with it, 264 KiB with
    # their products' outputs (qkv, projections, MLP), 239 KiB without attention's two products;
    # ResNet's: 741, 284 and with the convolutions' outputs 464 KiB.
    def kept(name, batch, remat):
        loss, images = parts(name, remat, batch=batch)
        return residual_bytes(loss, abstract_variables(name, images))

    vit = {remat: kept("vit_tiny_patch16_224", 16, remat) for remat in (False, True, *POLICIES)}
    assert vit[True] < vit["dots_with_no_batch_dims_saveable"] < vit["dots_saveable"] < vit[False]
    resnet = {remat: kept("resnet50", 8, remat) for remat in (False, True, "dots_saveable")}
    assert resnet[True] < resnet["dots_saveable"] < resnet[False]


def test_an_unknown_policy_names_the_valid_ones_when_the_network_is_built():
    with pytest.raises(
        ValueError, match="remat='dots'.*True.*'dots_saveable', 'dots_with_no_batch_dims_saveable'"
    ):
        nets_factory.get_network_fn("resnet50", 10, remat="dots")


def test_every_network_built_of_blocks_takes_remat():
    # No blocks: the plain stacks of layers.
    without = {"alexnet", "alexnet_v2", "cifarnet", "lenet", "overfeat"}
    without |= {name for name in nets_factory.networks_map if name.startswith("vgg")}
    lacking = {
        name
        for name in nets_factory.networks_map
        if "remat" not in nets_factory.constructor_fields(name)
    }
    assert lacking == without

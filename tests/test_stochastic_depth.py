"""Stochastic depth under one name, `drop_path_rate`: each family's rule per block, training only.

ConvNeXt's, Swin's and EfficientNet's blocks are checked in their own files (whole examples
dropped, the mean kept); NASNet's schedule in tests/test_nasnet.py and the loop's progress in
tests/test_training_steps.py. Here: the rule per block of every family, and ResNet's and ViT's
blocks (new), on tiny configurations.
"""

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nets_factory
from nets import efficientnet, mlp_mixer, mobilevit, nfnet, pvt_v2, resnet, vit
from nets.layers import InvertedResidual
from tests.helpers import numpy_variables

TINY_RESNET = {"stage_sizes": (2, 1, 2), "num_filters": 4}  # resnet20's module: 5 blocks
TINY_NFNET = {
    "depths": (1, 2, 1, 1),
    "channels": (16, 32, 48, 64),
    "stem_features": 16,
    "group_size": 8,
}
TINY_VIT = {"img_size": 16, "patch_size": 8, "embed_dim": 16, "depth": 5, "num_heads": 2}
TINY_MIXER = {"default_image_size": 32, "patch_size": 8, "embed_dim": 8, "depth": 3}


def blocks_built(name, blocks, is_training, **kwargs):
    """Every module of `blocks` types that `name` builds, in call order (abstract apply)."""
    built = []

    def record(next_fun, args, kw, context):
        if isinstance(context.module, blocks) and context.method_name == "__call__":
            built.append(context.module)
        return next_fun(*args, **kw)

    fn = nets_factory.get_network_fn(name, 10, is_training=is_training, **kwargs)
    images = jax.ShapeDtypeStruct((1, 32, 32, 3), jnp.float32)
    with nn.intercept_methods(record):
        init = functools.partial(fn.module.init, train=is_training)
        jax.eval_shape(init, {"params": jax.random.key(0), "dropout": jax.random.key(1)}, images)
    return built


@pytest.mark.parametrize(
    "name, blocks, kwargs, expected",
    [
        # timm's ResNet, ViT (and ConvNeXt, Swin): rate * i / (blocks - 1), the last at `rate`;
        # EfficientNet's rate * i / blocks is unchanged.
        ("resnet20", (resnet.ResNetBlock,), TINY_RESNET, [0.0, 0.1, 0.2, 0.3, 0.4]),
        ("vit_tiny_patch16_224", (vit.Block,), TINY_VIT, [0.0, 0.1, 0.2, 0.3, 0.4]),
        # timm's NFNets: the same rule over every block (its `stagewise` lists hold them).
        ("eca_nfnet_l0", (nfnet.NormFreeBlock,), TINY_NFNET, [0.0, 0.1, 0.2, 0.3, 0.4]),
        # timm's PVT v2 (its `stagewise` rates are the same line, split by stage).
        (
            "pvt_v2_b0",
            (pvt_v2.Block,),
            {"depths": (2, 1, 1, 1), "embed_dims": (8,) * 4, "num_heads": (1,) * 4},
            [0.0, 0.1, 0.2, 0.3, 0.4],
        ),
        # timm's ByobNet (MobileViT): the same rule over the inverted residuals and MobileViT
        # blocks together, 10 in XXS (timm's figures: 0.0444, 0.0889, ... 0.4).
        (
            "mobilevit_xxs",
            (InvertedResidual, mobilevit.MobileViTBlock),
            {},
            [0.4 * i / 9 for i in range(10)],
        ),
        # timm's MlpMixer (MLP-Mixer, gMixer, ResMLP, gMLP): the rate itself in every block.
        ("mixer_s32_224", (mlp_mixer.MixerBlock,), TINY_MIXER, [0.4] * 3),
        ("resmlp_12_224", (mlp_mixer.ResBlock,), TINY_MIXER, [0.4] * 3),
        ("gmlp_ti16_224", (mlp_mixer.SpatialGatingBlock,), TINY_MIXER, [0.4] * 3),
    ],
)
def test_rates_follow_each_papers_linear_rule(name, blocks, kwargs, expected):
    built = blocks_built(name, blocks, True, drop_path_rate=0.4, **kwargs)
    np.testing.assert_allclose([b.drop_path_rate for b in built], expected)


def test_resnet_blocks_drop_in_training_only():
    for is_training in (True, False):
        built = blocks_built("resnet20", resnet.ResNetBlock, is_training, **TINY_RESNET)
        assert {b.deterministic for b in built} == {not is_training}


def test_vit_block_drops_each_branch_of_whole_examples_in_training_only():
    block = vit.Block(num_heads=2, drop_path_rate=0.5)
    x = jnp.broadcast_to(jax.random.normal(jax.random.key(0), (1, 3, 8)), (64, 3, 8))
    init = functools.partial(block.init, train=False)
    variables = numpy_variables(jax.eval_shape(init, jax.random.key(1), x[:1]))
    variables["params"] = jax.tree.map(lambda p: p + 0.5, variables["params"])
    train = jax.jit(functools.partial(block.apply, train=True))
    out = np.asarray(train(variables, x, rngs={"dropout": jax.random.key(2)}))
    # 4 outcomes per example: either branch kept (scaled) or dropped; both dropped is x itself.
    outcomes = {tuple(np.round(o.ravel(), 4)) for o in out}
    assert len(outcomes) == 4 and tuple(np.round(np.asarray(x[0]).ravel(), 4)) in outcomes
    evaluate = [
        jax.jit(functools.partial(b.apply, train=False))(variables, x[:1])
        for b in (block, block.clone(drop_path_rate=0.0))
    ]
    np.testing.assert_array_equal(*evaluate)


def test_resnet_block_drops_its_branch_and_scales_the_kept_ones():
    # A basic block on 256 copies of an image: each output is x, or x + branch / keep (linear act).
    block = resnet.ResNetBlock(
        4,
        conv=nn.Conv,
        norm=lambda **kw: nn.BatchNorm(use_running_average=True, **kw),
        act=lambda y: y,  # linear, so the branch reads off the output
        drop_path_rate=0.25,
        deterministic=False,
    )
    x = jnp.broadcast_to(jax.random.normal(jax.random.key(0), (1, 4, 4, 4)), (256, 4, 4, 4))
    variables = numpy_variables(jax.eval_shape(block.init, jax.random.key(1), x[:1]))
    variables["params"] = jax.tree.map(lambda p: p + 0.5, variables["params"])
    out = np.asarray(jax.jit(block.apply)(variables, x, rngs={"dropout": jax.random.key(2)}))
    evaluate = jax.jit(block.clone(deterministic=True).apply)
    branch = np.asarray(evaluate(variables, x[:1]))[0] - x[0]
    assert np.abs(branch).max() > 0.1
    dropped = np.all(np.isclose(out, x[0], atol=1e-5), axis=(1, 2, 3))
    kept = np.all(np.isclose(out, x[0] + branch / 0.75, atol=1e-4), axis=(1, 2, 3))
    assert np.all(dropped | kept)
    assert 0.15 < dropped.mean() < 0.35  # rate 0.25
    # The expected branch is the evaluation one: mean over examples of (out - x) ~ branch.
    np.testing.assert_allclose((out - x[0]).mean(0), branch, atol=0.15 * np.abs(branch).max())


def test_the_rate_is_checked_and_slims_old_name_refused_with_the_new():
    images = jax.ShapeDtypeStruct((1, 16, 16, 3), jnp.float32)
    fn = nets_factory.get_network_fn("resnet20", 10, drop_path_rate=1.0, **TINY_RESNET)
    with pytest.raises(ValueError, match=r"^drop_path_rate must be in \[0, 1\), got 1.0"):
        jax.eval_shape(fn.init, jax.random.key(0), images)
    with pytest.raises(TypeError, match="drop_path_keep_prob is now drop_path_rate = 1 - keep"):
        nets_factory.get_network_fn("nasnet_large", 10, drop_path_keep_prob=0.7)
    assert efficientnet.efficientnet_b0().drop_path_rate == 0.0  # off unless asked

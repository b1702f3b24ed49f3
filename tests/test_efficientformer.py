"""EfficientFormer: timm's parameter counts and MACs, the attention blocks' names and bias
tables, the fixed map the tables are made for, the distillation head in training (the two
heads' mean), refused configurations. Full-size networks through the recorded sizes; parity in
tests/test_pretrained_efficientformer.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nets_factory
import nets_summary as summary
from tests.helpers import XLA_CONVS

# timm 1.0's counts at 1000 classes (sum of `numel` of `timm.create_model(name).parameters()`).
# An attention block of width c (8 heads, keys 32, values 128): qkv c * 1536 + 1536, proj
# 1024 * c + c, 8 * 49 biases, two LayerNorms 4c, MLP 8c^2 + 5c, layer scales 2c; a pooling
# block: MLP 8c^2 + 5c and two BatchNorms' affine 10c, layer scales 2c. The two heads: 2 * 1001c.
PUBLISHED_COUNTS = {
    "efficientformer_l1": 12_289_928,
    "efficientformer_l3": 31_406_000,
    "efficientformer_l7": 82_229_328,
}
# MACs at 224 px, batch 1: PyTorch's `FlopCounterMode` on timm's networks, halved (both heads and
# the attention products included, as here).
TORCH_MACS = {
    "efficientformer_l1": 1_291_284_736,
    "efficientformer_l3": 3_906_573_312,
    "efficientformer_l7": 10_119_325_696,
}
SMALL = {
    "embed_dims": (8, 8, 8, 16),
    "depths": (1, 1, 1, 2),
    "num_heads": 2,
    "key_dim": 4,
    "attention_resolution": 2,
    **XLA_CONVS,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_published_parameter_counts_and_macs(name):
    # The registry tests check nets/sizes.tsv against a trace of every network.
    sizes = summary.recorded_sizes()[name]
    assert (sizes.params, sizes.macs) == (PUBLISHED_COUNTS[name], TORCH_MACS[name])
    assert sizes.image_size == 224


def init_shapes(images=(1, 64, 64, 3), **fields):
    fn = nets_factory.get_network_fn("efficientformer_l1", 10, **{**SMALL, **fields})
    return fn, jax.eval_shape(fn.init, jax.random.key(0), jnp.ones(images))


def test_attention_blocks_follow_timms_flattening_in_their_names():
    # timm's last stage lists a parameter-free flattening module before its first attention
    # block: one attention block of two is `blocks_2`, two of two are `blocks_1`, `blocks_2`.
    for num_vit, names in ((1, ["blocks_0", "blocks_2"]), (2, ["blocks_1", "blocks_2"])):
        _, variables = init_shapes(num_vit=num_vit)
        stage = variables["params"]["stages_3"]
        assert sorted(stage) == [*names, "downsample"]
        attention = stage["blocks_2"]["token_mixer"]
        assert attention["attention_biases"].shape == (2, 4)  # heads, 2 * 2 offsets
        assert attention["qkv"]["kernel"].shape == (16, 2 * (4 + 4 + 16))


def test_images_must_give_the_tables_map():
    # Each 3x3/2 convolution keeps ceil(n / 2): 33 to 64 px leave the 2x2 map the tables are for.
    fn, _ = init_shapes()
    assert (fn.min_image_size, fn.module.max_image_size) == (33, 64)
    assert nets_factory.get_network_fn("efficientformer_l1", 10).min_image_size == 193
    init_shapes((1, 33, 40, 3))
    with pytest.raises(ValueError, match=r"^efficientformer_l1 takes images of 33 to 64 pixels"):
        init_shapes((1, 96, 96, 3))
    images = jnp.ones((1, 96, 96, 3))  # the module alone says it too
    with pytest.raises(ValueError, match=r"^EfficientFormer's .* for a 2x2 map .* got 3x3\n"):
        jax.eval_shape(fn.module.init, jax.random.key(0), images)


def test_bad_configurations_are_one_line():
    cases = (
        ({"embed_dims": (8, 8, 8)}, r"^EfficientFormer needs one width per stage"),
        ({"num_vit": 3}, r"^num_vit=3: the last stage has 2 blocks\n"),
    )
    for fields, message in cases:
        with pytest.raises(ValueError, match=message):
            init_shapes(**fields)


@pytest.mark.slow  # compiles a training step
def test_training_averages_the_heads_and_the_gradient_reaches_every_parameter():
    # Training mode (batch statistics): `logits` is the two heads' mean (each in the end
    # points), and the pooling block's BatchNorms, the layer scales, the offsets' biases, the
    # LayerNorms and both heads all learn.
    fn = nets_factory.get_network_fn("efficientformer_l1", 10, is_training=True, **SMALL)
    images = jax.random.normal(jax.random.key(1), (2, 64, 64, 3))
    variables = fn.init(jax.random.key(0), images)
    params = jax.tree.map(lambda p: p + 0.1, variables["params"])  # no zero biases or tables
    params["head_dist"]["kernel"] = -params["head_dist"]["kernel"]  # two heads that differ

    def loss(params):
        variables_ = {**variables, "params": params}
        (logits, end_points), _ = fn.apply(variables_, images, mutable=["batch_stats"])
        return jnp.sum(jax.nn.log_softmax(logits)[:, 0]), end_points

    grads, end_points = jax.jit(jax.grad(loss, has_aux=True))(params)
    cls_logits, dist_logits = end_points["cls_logits"], end_points["dist_logits"]
    assert not np.allclose(cls_logits, dist_logits)
    np.testing.assert_allclose(end_points["logits"], (cls_logits + dist_logits) / 2, rtol=1e-6)
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
        assert np.any(np.asarray(g) != 0), jax.tree_util.keystr(path)

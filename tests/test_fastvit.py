"""FastViT: timm's parameter counts and MACs, `reparameterize`'s variables exactly those of the
deploy network (shapes only; the fused function is checked against timm's in
tests/test_pretrained_fastvit.py), and a gradient through every branch."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import nets_factory
import nets_summary as summary
from nets import fastvit
from nets.layers.reparam import FUSED
from tests.helpers import numpy_variables

# timm 1.0's counts at 1000 classes (sum of `numel` of `timm.create_model(name,
# num_classes=1000).parameters()`; MobileCLIP's towers publish 512 or 768 classes), training
# form. fastvit_t8: the stem 3 -> 48 (3x3 and 1x1 branches, 3x3 depthwise and 1x1 branches,
# a 1x1 block with an identity); RepMixer blocks of a depthwise 3x3 mixer (and 1x1 scale, two
# BatchNorms and the identity's), the norm's identity BatchNorm, a layer scale, the ConvMlp
# (7x7 depthwise + BatchNorm, 1x1 to 3x and back, biased) and its layer scale; patch
# embeddings of a 7x7 and a 3x3 depthwise branch to twice the width and a 1x1 block;
# final_conv 384 -> 768 (3x3 by two, 1x1, squeeze-excite to 48); the head 768 * 1000 + 1000.
PUBLISHED_COUNTS = {
    "fastvit_t8": 4_026_232,
    "fastvit_t12": 7_553_704,
    "fastvit_s12": 9_473_576,
    "fastvit_sa12": 11_580_968,
    "fastvit_sa24": 21_554_216,
    "fastvit_sa36": 31_527_464,
    "fastvit_ma36": 44_068_004,
    "fastvit_mci0": 11_907_176,  # 11,406,976 with its 512-wide CLIP projection
    "fastvit_mci1": 22_041_832,  # 21,541,632
    "fastvit_mci2": 36_440_360,  # 35,815,232
    "fastvit_mci3": 125_948_584,  # 125,235,648 with its 768-wide projection
    "fastvit_mci4": 322_735_336,  # 321,784,832
}
# MACs at 256 px, batch 1: PyTorch's `FlopCounterMode` on timm's (training-form) networks with
# `timm.layers.set_fused_attn(False)`, halved.
TORCH_MACS = {
    "fastvit_t8": 690_149_376,
    "fastvit_sa12": 1_943_937_024,
    "fastvit_ma36": 7_825_709_056,
    "fastvit_mci0": 2_393_153_536,
    "fastvit_mci3": 14_821_588_992,
    "fastvit_mci4": 27_770_683_392,
}
# The parity fixtures' configurations (tools/fixtures_fastvit.py), by case: the network and
# its keyword arguments.
SMALL = {
    "fastvit_sa": (
        "fastvit_sa12",
        {"depths": (1,) * 4, "dims": (8, 8, 16, 32), "mlp_ratios": (3,) * 4},
    ),
    "fastvit_mci_se": ("fastvit_mci0", {"depths": (1,) * 4, "dims": (8, 8, 16, 32)}),
    "fastvit_mci_ln": (
        "fastvit_mci3",
        {"depths": (1,) * 5, "dims": (8, 8, 16, 32, 32), "mlp_ratios": (4, 4, 4, 1, 1)},
    ),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_published_parameter_counts(name):
    # The recorded figures (nets/sizes.tsv), which the registry tests compare with a trace.
    assert summary.recorded_sizes()[name].params == PUBLISHED_COUNTS[name]


@pytest.mark.parametrize("name", sorted(TORCH_MACS))
def test_macs_are_torchs(name):
    assert summary.recorded_sizes()[name].macs == TORCH_MACS[name]


def _variables(case, **kwargs):
    name, small = SMALL[case]
    fn = nets_factory.get_network_fn(name, 10, **small, **kwargs)
    return jax.eval_shape(fn.init, jax.random.key(0), jax.ShapeDtypeStruct((1, 40, 40, 3), "f4"))


def test_reparameterize_gives_the_deploy_networks_variables():
    fused = jax.eval_shape(fastvit.reparameterize, _variables("fastvit_mci_se"))
    deploy = _variables("fastvit_mci_se", deploy=True)
    shapes = lambda tree: jax.tree.map(lambda leaf: leaf.shape, tree)  # noqa: E731
    assert shapes(fused) == shapes(deploy)
    modules = {k.key for path, _ in jax.tree_util.tree_leaves_with_path(deploy) for k in path}
    assert FUSED in modules and not {"mixer", "conv_kxk_0", "large_conv", "pos_enc"} & modules
    # What stays unfused: the MLPs' BatchNorms and the attention blocks' norms.
    assert "bn" in deploy["batch_stats"]["stages_0"]["blocks_0"]["mlp"]["conv"]
    assert "norm" in deploy["batch_stats"]["stages_3"]["blocks_0"]


def test_the_blocks_are_timms():
    params = _variables("fastvit_mci_se")["params"]
    stem = params["stem_1"]  # depthwise 3x3/2: two branches, no identity at stride 2
    assert sorted(stem) == ["conv_kxk_0", "conv_scale"]
    assert stem["conv_kxk_0"]["conv"]["kernel"].shape == (3, 3, 1, 8)
    mixer = params["stages_0"]["blocks_0"]["token_mixer"]
    assert sorted(mixer) == ["layer_scale", "mixer", "norm"] and sorted(mixer["norm"]) == [
        "identity"
    ]
    embed = params["stages_3"]["downsample"]["proj_0"]  # 16 -> 32, depthwise by two; SE of 8
    assert embed["large_conv"]["conv"]["kernel"].shape == (7, 7, 1, 32)
    assert embed["se"]["fc1"]["kernel"].shape == (1, 1, 32, 8)
    assert "se" not in params["stages_1"]["downsample"]["proj_0"]
    assert params["final_conv"]["se"]["fc1"]["kernel"].shape == (1, 1, 64, 4)  # 64 / 16
    stem_ln = _variables("fastvit_mci_ln")["params"]["stem_0"]
    assert sorted(stem_ln) == ["conv_kxk_0"]  # MCi3/4's stem: no 1x1 branch


# One stage (a compile of half the two-stage network's): the stem's MobileOne blocks, a RepMixer
# block (its mixer and the norm's identity BatchNorm, a difference of branches), the ConvMlp,
# the layer scales, the gated final_conv. The patch embedding's and RepCPE's branches are sums
# of convolutions as the stem's; the attention is `nets.vit.Attention`, checked with ViT.
ONE_STAGE = {
    "depths": (1,),
    "dims": (8,),
    "mlp_ratios": (2,),
    "token_mixers": ("repmixer",),
    "pos_embs": (False,),
    "se_downsamples": (False,),
}


@pytest.mark.slow  # compiles a small network's gradient
def test_gradient_reaches_every_parameter():
    fn = nets_factory.get_network_fn("fastvit_mci0", 10, is_training=True, **ONE_STAGE)
    images = jax.random.normal(jax.random.key(1), (2, 16, 16, 3))
    variables = numpy_variables(jax.eval_shape(fn.init, jax.random.key(0), images))
    # Layer scales at 1 (numpy_variables' 0 would cut the branches after them).
    variables = jax.tree_util.tree_map_with_path(
        lambda path, leaf: np.ones_like(leaf) if path[-1].key == "gamma" else leaf, variables
    )

    def loss(params):
        (logits, _), _ = fn.apply({**variables, "params": params}, images, mutable=["batch_stats"])
        return jnp.sum(jax.nn.log_softmax(logits)[:, 0])

    grads = jax.jit(jax.grad(loss))(variables["params"])
    for path, g in jax.tree_util.tree_leaves_with_path(grads):
        assert np.any(np.asarray(g) != 0), jax.tree_util.keystr(path)

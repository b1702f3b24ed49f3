"""load_pretrained for timm's MetaFormers: parity on fixtures timm produced
(tools/fixtures_metaformer.py), one for each mixer, norm and head (PoolFormer v1 and v2,
ConvFormer, CAFormer), each convention shown to matter, and the MLP head under another class
count and none."""

import functools

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file

import nets_factory
from nets import metaformer
from nets.layers import avg_pool
from nets_weights import published
from tests.helpers import XLA_CONVS
from tests.test_pretrained import FIXTURES, expected, relative_error

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

# The fixtures' small timm networks, as `load_pretrained` keyword arguments; each fixture's
# norm epsilon, which the network's registry name sets.
SMALL = {"depths": (1, 1, 2, 1), "dims": (8, 12, 16, 24)}
PARITY = {
    "poolformer_v1": ("poolformer_s12", SMALL, 1e-5),
    "poolformerv2": ("poolformerv2_s12", SMALL, 1e-6),
    "convformer": ("convformer_s18", SMALL, 1e-6),
    "caformer": ("caformer_s18", {**SMALL, "head_dim": 8}, 1e-6),
}


def load(case, **kw):
    """The fixture through `load_pretrained`, on XLA's convolutions (tests/helpers.py: they
    compile in less CPU than the CPU path's, the same function)."""
    name, fields, _ = PARITY[case]
    folder = FIXTURES / "parity" / case
    return nets_factory.load_pretrained(name, folder, **fields, **XLA_CONVS, **kw)


@functools.cache  # read-only: the parity test and the tests of conventions share each load
def loaded(case):
    return load(case)


@functools.cache
def outputs(case):
    """`(logits, end_points)` of the loaded fixture on its images."""
    network_fn, variables = loaded(case)
    return jax.jit(network_fn.apply)(variables, expected(case)["images"])


def logits_of(case, **fields):
    """The fixture's logits from its weights in its network built with `fields` changed."""
    name, small, _ = PARITY[case]
    variables = published.without_mark(loaded(case)[1])
    fn = nets_factory.get_network_fn(name, 10, **{**small, **XLA_CONVS, **fields})
    return jax.jit(fn.apply)(variables, expected(case)["images"])[0]


# Each value of the norms' epsilon is shown to matter once, on the GroupNorms of the two
# PoolFormers (ConvFormer's and CAFormer's LayerNorms take the same field, 1e-6 as PoolFormerV2's).
EPSILON_CASES = ("poolformer_v1", "poolformerv2")


@pytest.mark.parametrize("case", sorted(PARITY))
def test_logits_are_the_references(case):
    network_fn, _ = loaded(case)
    reference = expected(case)
    logits, end_points = outputs(case)
    assert relative_error(logits, reference["logits"]) <= 1e-4
    assert [end_points[f"stage{i}"].shape[1] for i in (1, 2, 3, 4)] == [10, 5, 3, 2]
    epsilon = PARITY[case][2]
    assert network_fn.module.norm_epsilon == epsilon

    # The epsilon matters: the fixtures' stems answer at a thousandth, so the first block's
    # norms see variances near it; under the other one (1e-5 <-> 1e-6) the logits miss by
    # 5.3e-4 (PoolFormer v1, whose stem's biases keep the variance at ~1e-2) and 0.096 (and
    # ConvFormer's and CAFormer's by 0.96 and 0.41).
    if case in EPSILON_CASES:
        other = {1e-5: 1e-6, 1e-6: 1e-5}[epsilon]
        assert relative_error(logits_of(case, norm_epsilon=other), reference["logits"]) > 2e-4


def test_poolformers_norm_the_whole_map_and_pool_inside_it(monkeypatch):
    # PoolFormer's GroupNorm of one group is not a LayerNorm over the channels (the same
    # parameters: the logits miss by 0.56), and its pooling counts only the pixels inside the
    # map: PyTorch's count_include_pad=True darkens every border (0.66 off).
    reference = expected("poolformer_v1")["logits"]
    assert relative_error(logits_of("poolformer_v1", norm="layer_norm"), reference) > 0.01
    counted = lambda x: avg_pool(x, 3, 1, padding=1, count_include_pad=True) - x  # noqa: E731
    monkeypatch.setattr(metaformer, "pooling", counted)
    assert relative_error(logits_of("poolformerv2"), expected("poolformerv2")["logits"]) > 0.01


def test_scales_and_star_relu_are_the_files():
    block = loaded("poolformerv2")[1]["params"]["stages_3"]["blocks_0"]
    state = load_file(FIXTURES / "parity" / "poolformerv2" / "model.safetensors")
    np.testing.assert_array_equal(
        block["res_scale2"]["gamma"], state["stages.3.blocks.0.res_scale2.scale"]
    )
    np.testing.assert_array_equal(
        block["mlp"]["act"]["scale"], state["stages.3.blocks.0.mlp.act.scale"]
    )
    np.testing.assert_array_equal(block["norm1"]["scale"], state["stages.3.blocks.0.norm1.weight"])
    v1 = loaded("poolformer_v1")[1]["params"]["stages_0"]["blocks_0"]
    state = load_file(FIXTURES / "parity" / "poolformer_v1" / "model.safetensors")
    np.testing.assert_array_equal(
        v1["layer_scale1"]["gamma"], state["stages.0.blocks.0.layer_scale1.scale"]
    )


def test_the_mlp_head_keeps_its_hidden_layers_under_other_classes():
    # As timm's loading with another num_classes: only `head.fc.fc2` is replaced.
    state = load_file(FIXTURES / "parity" / "caformer" / "model.safetensors")
    network_fn, variables = load("caformer", num_classes=5)
    head = variables["params"]["head"]
    np.testing.assert_array_equal(head["fc1"]["kernel"], state["head.fc.fc1.weight"].T)
    np.testing.assert_array_equal(head["norm"]["scale"], state["head.fc.norm.weight"])
    assert head["fc2"]["kernel"].shape == (96, 5) and network_fn.pretrained.class_names == ()

    # Without a classifier the whole head is left out; the features are `pre_logits`.
    features_fn, variables = load("caformer", num_classes=0)
    assert "head" not in variables["params"]
    features, _ = jax.jit(features_fn.apply)(variables, expected("caformer")["images"])
    np.testing.assert_allclose(features, outputs("caformer")[1]["pre_logits"], atol=1e-5)

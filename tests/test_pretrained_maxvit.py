"""load_pretrained for timm's MaxViT (the TF ports): parity on fixtures timm produced
(tools/fixtures_maxvit.py), each convention the TF weights need shown to matter, timm's key
layout, the preprocessing of files without a config, and a file of other windows refused."""

import functools

import jax
import pytest

import nets_factory
from nets import maxvit
from nets.layers import avg_pool
from nets_weights import architectures, published
from tests.helpers import XLA_CONVS
from tests.test_maxvit import SMALL
from tests.test_pretrained import FIXTURES, expected, relative_error

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

# The fixtures' small timm networks (timm's `partition_ratio` 8 and 16 where its networks have
# 32), as `load_pretrained` keyword arguments.
PARITY = {
    "maxvit_tf_24": ("maxvit_tiny_tf_224", SMALL),
    "maxvit_tf_odd_30": (
        "maxvit_small_tf_384",
        {
            "default_image_size": 32,
            "partition_ratio": 16,
            "embed_dim": (12, 16),
            "depths": (1, 1),
            "stem_width": 8,
            "dim_head": 4,
        },
    ),
}


@functools.cache  # read-only: the parity test and the tests of conventions share each load
def loaded(case):
    name, kwargs = PARITY[case]
    return nets_factory.load_pretrained(name, FIXTURES / "parity" / case, **kwargs)


def error_under(case, variables, **fields):
    """The fixture's weights in its network built with `fields` changed: the relative error of
    its logits (XLA's convolutions: the padding is the layer's whichever kernels run)."""
    name, kwargs = PARITY[case]
    fn = nets_factory.get_network_fn(name, 10, **{**kwargs, **fields, **XLA_CONVS})
    reference = expected(case)
    logits, _ = jax.jit(fn.apply)(published.without_mark(variables), reference["images"])
    return relative_error(logits, reference["logits"])


@pytest.mark.parametrize("case", sorted(PARITY))
def test_logits_are_the_references(case):
    network_fn, variables = loaded(case)
    reference = expected(case)
    logits, end_points = jax.jit(network_fn.apply)(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) <= 1e-4
    assert "predictions" in end_points
    assert (network_fn.module.padding, network_fn.module.bn_epsilon) == ("SAME", 1e-3)


def test_each_convention_matters(monkeypatch):
    # The same weights under each convention but one miss the logits (the parity bound is 1e-4;
    # measured: symmetric padding 0.39, BatchNorm epsilon 1e-5 0.011, exact GELU 3.4e-4, the
    # bias read at the query's offset from the key (Swin's order) 0.065; on the odd maps, the
    # average pool's padding left out of its counts 0.040).
    _, variables = loaded("maxvit_tf_24")
    wrong = [{"padding": "SYMMETRIC"}, {"bn_epsilon": 1e-5}, {"act_layer": "gelu"}]
    for fields in wrong:
        assert error_under("maxvit_tf_24", variables, **fields) > 1e-4, fields
    with monkeypatch.context() as patch:
        key_minus_query = maxvit.relative_position_bias
        swin_order = lambda table, window: key_minus_query(table, window).transpose(0, 2, 1)  # noqa: E731
        patch.setattr(maxvit, "relative_position_bias", swin_order)
        assert error_under("maxvit_tf_24", variables) > 1e-4
    _, variables = loaded("maxvit_tf_odd_30")
    patch_pool = functools.partial(avg_pool, count_include_pad=False)
    monkeypatch.setattr(maxvit, "avg_pool", patch_pool)
    assert error_under("maxvit_tf_odd_30", variables) > 1e-4


LAYOUT = {
    ("stem", "conv1"): "stem.conv1",
    ("stem", "norm1"): "stem.norm1",
    (
        "stages_1",
        "blocks_0",
        "conv",
        "shortcut",
        "expand",
    ): "stages.1.blocks.0.conv.shortcut.expand",
    ("stages_0", "blocks_1", "conv", "se", "fc2"): "stages.0.blocks.1.conv.se.fc2",
    ("stages_3", "blocks_1", "attn_grid", "attn", "rel_pos"): (
        "stages.3.blocks.1.attn_grid.attn.rel_pos"
    ),
    ("stages_2", "blocks_4", "attn_block", "mlp", "fc1"): "stages.2.blocks.4.attn_block.mlp.fc1",
    ("head_norm",): "head.norm",
    ("head_pre_logits",): "head.pre_logits.fc",
    ("head",): "head.fc",
}


def test_layout_is_timms_and_the_tables_load_as_they_are():
    arch = architectures.ARCHITECTURES["maxvit_base_tf_384"]
    layout = arch.layout(nets_factory.get_network_fn("maxvit_base_tf_384", 10).module)
    assert {path: layout(path) for path in LAYOUT} == LAYOUT
    keys = arch.framework.keys(
        "stages.0.blocks.0.attn_block.attn.rel_pos", "relative_position_bias_table"
    )
    assert keys == ["stages.0.blocks.0.attn_block.attn.rel_pos.relative_position_bias_table"]


def test_preprocessing_of_files_without_a_config():
    table = architectures.ARCHITECTURES
    tiny, xlarge = table["maxvit_tiny_tf_224"], table["maxvit_xlarge_tf_224"]
    assert tiny.preprocessing["mean"] == (0.485, 0.456, 0.406)  # timm's in1k at 224
    assert xlarge.preprocessing["mean"] == (0.5, 0.5, 0.5)  # its only weights: in21k
    assert table["maxvit_large_tf_512"].preprocessing == {
        "image_size": 512,
        "crop_fraction": 1.0,
        "crop_mode": "squash",
        "interpolation": "bicubic",
        "mean": (0.5, 0.5, 0.5),
        "std": (0.5, 0.5, 0.5),
    }


def test_a_file_of_other_windows_is_refused_in_one_line():
    # The fixture's tables are for 3x3 windows; a network made for 1x1 ones (24 // 24) needs
    # [heads, 1, 1]. timm's loader would resize them; ours names the table and both shapes.
    name, kwargs = PARITY["maxvit_tf_24"]
    with pytest.raises(
        ValueError,
        match=r"'stages.0.blocks.0.attn_block.attn.rel_pos.relative_position_bias_table' has "
        r"shape \(2, 5, 5\); .* needs \(2, 1, 1\)",
    ):
        nets_factory.load_pretrained(
            name, FIXTURES / "parity" / "maxvit_tf_24", **{**kwargs, "partition_ratio": 24}
        )
    with pytest.raises(ValueError, match=r"trained with bn_epsilon=0.001; bn_epsilon=1e-05"):
        nets_factory.load_pretrained(
            name, FIXTURES / "parity" / "maxvit_tf_24", **kwargs, bn_epsilon=1e-5
        )

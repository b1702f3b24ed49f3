"""load_pretrained for timm's PVT v2: parity on fixtures timm produced (tools/fixtures_pvt_v2.py),
the spatial-reduction and the linear variant at maps that are odd or not multiples of the
reduction, and the conventions parity needs: PyTorch's symmetric padding, and two LayerNorm
epsilons."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file

import nets_factory
from nets.layers import Conv
from tests.test_pretrained import FIXTURES, expected, relative_error

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

# The fixtures' small networks, as `load_pretrained` keyword arguments.
SMALL = {
    "depths": (2, 1, 1, 1),
    "embed_dims": (8, 16, 16, 24),
    "num_heads": (1, 2, 2, 3),
    "mlp_ratios": (2.0,) * 4,
}
# Each fixture: the name it loads under, its fields, its image size and last stage's map.
PARITY = {
    "pvt_v2": ("pvt_v2_b0", {**SMALL, "sr_ratios": (4, 3, 2, 1)}, 52, 2),  # maps 13, 7, 4, 2
    "pvt_v2_li": ("pvt_v2_b2_li", SMALL, 48, 2),  # maps 12, 6, 3, 2, each pooled to 7x7
}


def load(case, **kw):
    name, fields, _, _ = PARITY[case]
    return nets_factory.load_pretrained(name, FIXTURES / "parity" / case, **{**fields, **kw})


def parity(case, **kw):
    network_fn, variables = load(case, **kw)
    reference = expected(case)
    logits, end_points = jax.jit(network_fn.apply)(variables, reference["images"])
    return relative_error(logits, reference["logits"]), end_points


@pytest.mark.parametrize("case", sorted(PARITY))
def test_logits_are_the_references(case):
    error, end_points = parity(case)
    assert error <= 1e-4  # 3.2e-7 and 4.4e-7 measured
    assert expected(case)["images"].shape[1] == PARITY[case][2]
    assert end_points["stage4"].shape[1:3] == (PARITY[case][3],) * 2


def same_padding(*args, padding="SAME", **kwargs):
    """`Conv` with TensorFlow's 'SAME' where timm pads `k // 2` on every side."""
    return Conv(*args, padding="SAME" if isinstance(padding, int) else padding, **kwargs)


def test_the_conventions_are_needed():
    # 'SAME' shifts the stride-4 and stride-2 patch embeddings' windows by a pixel.
    assert parity("pvt_v2", conv=same_padding)[0] > 0.1
    # The LayerNorm epsilons: timm's 1e-6 in the blocks and stages, torch's 1e-5 in the patch
    # embeddings and reductions. Swapped, the logits move by 4e-5, a hundred times the error
    # with them (4e-7; each alone: 1e-5 and 3e-5; on `pvt_v2`, 5e-6 each against 3e-7).
    assert parity("pvt_v2_li", epsilon=1e-5, embed_epsilon=1e-6)[0] > 3e-5


def test_tensors_are_the_files():
    _, variables = load("pvt_v2")
    timm = load_file(FIXTURES / "parity" / "pvt_v2" / "model.safetensors")
    block = variables["params"]["stages_1"]["blocks_0"]
    np.testing.assert_array_equal(  # [C, 1, 3, 3] -> [3, 3, 1, C]
        block["mlp"]["dwconv"]["kernel"],
        timm["stages.1.blocks.0.mlp.dwconv.weight"].transpose(2, 3, 1, 0),
    )
    np.testing.assert_array_equal(
        block["attn"]["kv"]["kernel"], timm["stages.1.blocks.0.attn.kv.weight"].T
    )
    downsample = variables["params"]["stages_2"]["downsample"]["norm"]["scale"]
    np.testing.assert_array_equal(downsample, timm["stages.2.downsample.norm.weight"])


def test_features_and_preprocessing():
    network_fn, variables = load("pvt_v2_li", num_classes=0)
    assert "head" not in variables["params"]
    maps = jax.eval_shape(network_fn.features, variables, jnp.ones((1, 48, 48, 3)))
    assert {name: m.shape for name, m in maps.items()} == {
        "stage1": (1, 12, 12, 8),
        "stage2": (1, 6, 6, 16),
        "stage3": (1, 3, 3, 16),
        "stage4": (1, 2, 2, 24),
    }
    assert network_fn.pretrained.crop_fraction == pytest.approx(0.9)
    assert network_fn.pretrained.interpolation == "bicubic"

"""load_pretrained for timm's LeViT: parity on fixtures timm produced (tools/fixtures_levit.py),
in its linear mode (an odd map subsampled) and its conv mode (1x1 kernels, `levit_conv_*` files,
loaded into the same network); each convention shown to matter."""

import functools

import jax
import numpy as np
import pytest

import nets_factory
from nets import levit
from nets_weights import published
from tests.helpers import XLA_CONVS
from tests.test_pretrained import FIXTURES, expected, relative_error

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

# The fixtures' small timm networks, as `load_pretrained` keyword arguments.
SMALL = {"embed_dims": (16, 24, 32), "key_dim": 8, "num_heads": (2, 3, 4), "depths": (1, 1, 1)}
# Each fixture: the name its config.json gives, its image size and its stages' maps.
PARITY = {
    "levit": ("levit_128s", 48, [3, 2, 1]),
    "levit_conv": ("levit_conv_128s", 32, [2, 1, 1]),
}


@functools.cache  # read-only: the parity test and the tests of conventions share each load
def loaded(case, name="levit_128s"):
    fields = {**SMALL, "default_image_size": PARITY[case][1], **XLA_CONVS}
    return nets_factory.load_pretrained(name, FIXTURES / "parity" / case, **fields)


def logits_of(case, variables=None, **fields):
    """The fixture's logits from its weights (or `variables`) in its network built with
    `fields` changed."""
    variables = published.without_mark(variables or loaded(case)[1])
    fields = {**SMALL, **XLA_CONVS, **fields}
    fn = nets_factory.get_network_fn("levit_128s", 10, **fields)
    return jax.jit(fn.apply)(variables, expected(case)["images"])[0]


@pytest.mark.parametrize("case", sorted(PARITY))
def test_logits_are_the_references(case):
    network_fn, variables = loaded(case)
    reference = expected(case)
    assert reference["images"].shape[1] == PARITY[case][1]
    logits, end_points = jax.jit(network_fn.apply)(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) <= 1e-4
    assert [end_points[f"stage{i}"].shape[1] for i in (1, 2, 3)] == PARITY[case][2]
    heads = (end_points["cls_logits"] + end_points["dist_logits"]) / 2
    np.testing.assert_allclose(logits, heads, rtol=1e-6)  # LevitDistilled's inference
    assert network_fn.pretrained.interpolation == "bicubic"
    assert network_fn.pretrained.crop_fraction == pytest.approx(0.9)
    # Under the file's own name too (the conv mode's loads into levit_128s).
    _, same = loaded(case, PARITY[case][0])
    np.testing.assert_array_equal(
        same["params"]["head"]["linear"]["kernel"], variables["params"]["head"]["linear"]["kernel"]
    )


def test_each_convention_matters(monkeypatch):
    """'SAME' padding (the strided 3x3s padded at the end only: 1.0 off), the offsets' index
    transposed (`|dw| * h + |dh|`: 0.66), the biases left out (0.41), SiLU for Hardswish
    (timm's default in its classes: 0.81), one head alone (1.2): the logits are not timm's
    (the fixture's parity: 2.3e-6)."""
    case = "levit"
    reference = expected(case)["logits"]
    assert relative_error(logits_of(case, padding="SAME"), reference) > 1e-2
    with monkeypatch.context() as patch:
        index = levit.attention_bias_index

        def transposed(window, stride=1):
            i = index(window, stride)
            return i % window[1] * window[0] + i // window[1]

        patch.setattr(levit, "attention_bias_index", transposed)
        assert relative_error(logits_of(case), reference) > 1e-3
    without = jax.tree_util.tree_map_with_path(
        lambda path, leaf: 0 * leaf if path[-1].key == "attention_biases" else leaf,
        published.without_mark(loaded(case)[1]),
    )
    assert relative_error(logits_of(case, without), reference) > 1e-3
    with monkeypatch.context() as patch:
        patch.setattr(levit, "hard_swish", jax.nn.silu)
        assert relative_error(logits_of(case), reference) > 1e-2
    network_fn, variables = loaded(case)
    _, end_points = jax.jit(network_fn.apply)(variables, expected(case)["images"])
    assert relative_error(end_points["cls_logits"], reference) > 1e-2

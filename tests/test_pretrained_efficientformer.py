"""load_pretrained for timm's EfficientFormer: parity on fixtures timm produced
(tools/fixtures_efficientformer.py), with a pooling block then an attention block in the last
stage (timm's flattening module between them) and with attention blocks only; each convention
shown to matter."""

import functools

import jax
import numpy as np
import pytest

import nets_factory
from nets import efficientformer
from nets_weights import published
from tests.helpers import XLA_CONVS
from tests.test_pretrained import FIXTURES, expected, relative_error

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

# The fixtures' small timm networks, as `load_pretrained` keyword arguments: 2 heads of
# 4-channel keys over the last 2x2 map.
SMALL = {
    "embed_dims": (8, 16, 16, 24),
    "depths": (1, 1, 2, 2),
    "num_heads": 2,
    "key_dim": 4,
    "attention_resolution": 2,
}
# Each fixture: its attention blocks and image size.
PARITY = {"efficientformer": (1, 48), "efficientformer_all_vit": (2, 56)}


def fields_of(case, **fields):
    num_vit, size = PARITY[case]
    return {**SMALL, "num_vit": num_vit, "default_image_size": size, **XLA_CONVS, **fields}


@functools.cache  # read-only: the parity test and the tests of conventions share each load
def loaded(case):
    folder = FIXTURES / "parity" / case
    return nets_factory.load_pretrained("efficientformer_l1", folder, **fields_of(case))


def logits_of(case, variables=None, **fields):
    """The fixture's logits from its weights (or `variables`) in its network built with
    `fields` changed."""
    variables = published.without_mark(variables or loaded(case)[1])
    fn = nets_factory.get_network_fn("efficientformer_l1", 10, **fields_of(case, **fields))
    return jax.jit(fn.apply)(variables, expected(case)["images"])[0]


@pytest.mark.parametrize("case", sorted(PARITY))
def test_logits_are_the_references(case):
    network_fn, variables = loaded(case)
    reference = expected(case)
    assert reference["images"].shape[1] == PARITY[case][1]
    logits, end_points = jax.jit(network_fn.apply)(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) <= 1e-4
    np.testing.assert_allclose(
        logits, (end_points["cls_logits"] + end_points["dist_logits"]) / 2, rtol=1e-6
    )
    assert end_points["stage4"].shape == (2, 2, 2, 24)
    assert network_fn.pretrained.interpolation == "bicubic"
    assert network_fn.pretrained.crop_fraction == pytest.approx(0.95)


def test_each_convention_matters(monkeypatch):
    """The offsets' index transposed (`|dw| * r + |dh|`: 6.6e-4 off), the biases left out
    (9.5e-4), tanh's GELU (1.1e-3), or the classifier alone, not its mean with the distillation
    head (1.6): the logits are not timm's (the fixture's parity: 1.0e-6)."""
    case = "efficientformer_all_vit"
    reference = expected(case)["logits"]
    with monkeypatch.context() as patch:
        index = efficientformer.attention_bias_index
        patch.setattr(
            efficientformer, "attention_bias_index", lambda r: index(r) % r * r + index(r) // r
        )
        assert relative_error(logits_of(case), reference) > 3e-4
    without = jax.tree_util.tree_map_with_path(
        lambda path, leaf: 0 * leaf if path[-1].key == "attention_biases" else leaf,
        published.without_mark(loaded(case)[1]),
    )
    assert relative_error(logits_of(case, without), reference) > 3e-4
    network_fn, variables = loaded(case)
    _, end_points = jax.jit(network_fn.apply)(variables, expected(case)["images"])
    assert relative_error(end_points["cls_logits"], reference) > 0.5
    with monkeypatch.context() as patch:
        patch.setattr(efficientformer, "gelu", jax.nn.gelu)  # approximate=True
        assert relative_error(logits_of(case), reference) > 3e-4

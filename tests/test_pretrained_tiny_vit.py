"""load_pretrained for timm's TinyViT: parity on fixtures timm produced
(tools/fixtures_tiny_vit.py), with maps of whole windows and, at 52 px, odd maps merged and
windows padded; each convention shown to matter."""

import functools

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import nets_factory
from nets import tiny_vit
from nets_weights import published
from nets_weights.files import WeightFileError
from tests.helpers import XLA_CONVS
from tests.test_pretrained import FIXTURES, expected, relative_error

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

# The fixtures' small timm networks, as `load_pretrained` keyword arguments.
SMALL = {"embed_dims": (8, 16, 16, 24), "depths": (2, 2, 1, 1), "num_heads": (1, 2, 2, 3)}
# Each fixture: its windows, its image size and its stages' maps.
PARITY = {
    "tiny_vit": ((1, 4, 4, 2), 64, [16, 8, 4, 2]),
    "tiny_vit_padded_52": ((1, 3, 4, 3), 52, [13, 7, 4, 2]),
}


@functools.cache  # read-only: the parity test and the tests of conventions share each load
def loaded(case, folder=None):
    fields = {**SMALL, "window_sizes": PARITY[case][0], **XLA_CONVS}
    folder = folder or FIXTURES / "parity" / case
    return nets_factory.load_pretrained("tiny_vit_5m_224", folder, **fields)


def logits_of(case, variables=None, **fields):
    """The fixture's logits from its weights (or `variables`) in its network built with
    `fields` changed."""
    variables = published.without_mark(variables or loaded(case)[1])
    fields = {**SMALL, "window_sizes": PARITY[case][0], **XLA_CONVS, **fields}
    fn = nets_factory.get_network_fn("tiny_vit_5m_224", 10, **fields)
    return jax.jit(fn.apply)(variables, expected(case)["images"])[0]


@pytest.mark.parametrize("case", sorted(PARITY))
def test_logits_are_the_references(case):
    network_fn, variables = loaded(case)
    reference = expected(case)
    assert reference["images"].shape[1] == PARITY[case][1]
    logits, end_points = jax.jit(network_fn.apply)(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) <= 1e-4
    assert [end_points[f"stage{i}"].shape[1] for i in (1, 2, 3, 4)] == PARITY[case][2]
    assert network_fn.pretrained.interpolation == "bicubic"
    assert network_fn.pretrained.crop_fraction == pytest.approx(0.95)


def test_each_convention_matters(monkeypatch):
    """'SAME' padding (the strided 3x3s padded at the end only: 0.89 off), the offsets' index
    transposed (`|dw| * w + |dh|`: 5.8e-3), the biases left out (3.2e-3), or tanh's GELU
    (7.8e-4): the logits are not timm's (the fixture's parity: 6.0e-7); a contradicting padding
    is refused."""
    case = "tiny_vit_padded_52"
    reference = expected(case)["logits"]
    assert relative_error(logits_of(case, padding="SAME"), reference) > 1e-2
    with pytest.raises(ValueError, match=r"trained with padding='SYMMETRIC'; padding='SAME'"):
        nets_factory.load_pretrained(
            "tiny_vit_5m_224", FIXTURES / "parity" / case, padding="SAME", **SMALL
        )
    with monkeypatch.context() as patch:
        index = tiny_vit.attention_bias_index
        patch.setattr(tiny_vit, "attention_bias_index", lambda w: index(w) % w * w + index(w) // w)
        assert relative_error(logits_of(case), reference) > 1e-3
    without = jax.tree_util.tree_map_with_path(
        lambda path, leaf: 0 * leaf if path[-1].key == "attention_biases" else leaf,
        published.without_mark(loaded(case)[1]),
    )
    assert relative_error(logits_of(case, without), reference) > 1e-3
    with monkeypatch.context() as patch:
        patch.setattr(tiny_vit, "gelu", jax.nn.gelu)  # approximate=True
        assert relative_error(logits_of(case), reference) > 2e-4


def test_buffers_in_a_file_are_skipped_and_other_windows_refused(tmp_path):
    """A file holding `attention_bias_idxs` (the original repository's) loads the same; a file
    whose tables are of other windows is refused by their shapes (timm would resize them)."""
    folder = FIXTURES / "parity" / "tiny_vit"
    tensors = load_file(folder / "model.safetensors")
    attn = "stages.1.blocks.0.attn"
    assert f"{attn}.attention_bias_idxs" not in tensors  # timm's is not persistent
    tensors[f"{attn}.attention_bias_idxs"] = np.zeros((16, 16), np.int64)
    save_file(tensors, tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text((folder / "config.json").read_text())
    _, variables = loaded("tiny_vit", tmp_path)
    np.testing.assert_array_equal(
        variables["params"]["stages_1"]["blocks_0"]["attn"]["attention_biases"],
        tensors[f"{attn}.attention_biases"],
    )
    with pytest.raises(WeightFileError, match="attention_biases"):
        nets_factory.load_pretrained(
            "tiny_vit_5m_224", folder, **SMALL, window_sizes=(1, 3, 4, 2), **XLA_CONVS
        )

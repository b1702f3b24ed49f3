"""load_pretrained for timm's MLP-Mixer, gMixer, ResMLP and gMLP: parity on fixtures timm produced
(tools/fixtures_mlp_mixer.py), one for each kind of block, and the conventions they show."""

import jax
import jax.numpy as jnp
import pytest

import nets_factory
from nets import mlp_mixer
from tests.test_pretrained import FIXTURES, expected, relative_error

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

# The fixtures' small timm networks (16 tokens of width 32, two blocks), as `load_pretrained`
# keyword arguments.
SMALL = {"patch_size": 8, "embed_dim": 32, "depth": 2, "default_image_size": 32}
PARITY = {
    "mlp_mixer_mixer": "mixer_b16_224",
    "mlp_mixer_gmixer": "gmixer_24_224",
    "mlp_mixer_resmlp": "resmlp_24_224",
    "mlp_mixer_gmlp": "gmlp_s16_224",
}


def error(case, edit=lambda variables: variables):
    """The relative error of the logits of `case` loaded through `load_pretrained`, the
    variables `edit`ed first."""
    network_fn, variables = nets_factory.load_pretrained(
        PARITY[case], FIXTURES / "parity" / case, **SMALL
    )
    reference = expected(case)
    logits, _ = jax.jit(network_fn.apply)(edit(variables), reference["images"])
    return relative_error(logits, reference["logits"])


@pytest.mark.parametrize("case", sorted(PARITY))
def test_logits_are_the_references(case):
    assert error(case) <= 1e-4


def test_gmixers_gate_is_the_second_half():
    # timm's GluMlp: `x1 * silu(x2)`; the halves of each fc1 swapped (the gate first, as
    # EVA-02's) computes another function.
    def gate_first(variables):
        def swap(path, leaf):
            if any(getattr(key, "key", None) == "fc1" for key in path):
                return jnp.concatenate(jnp.split(leaf, 2, axis=-1)[::-1], axis=-1)
            return leaf

        return jax.tree_util.tree_map_with_path(swap, variables)

    assert error("mlp_mixer_gmixer", gate_first) > 1e-2


def test_the_spatial_gates_norm_has_pytorchs_epsilon(monkeypatch):
    # timm builds gMLP's gate with nn.LayerNorm's default 1e-5, not the blocks' 1e-6: with
    # theirs, the logits drift well past the parity's error.
    right = error("mlp_mixer_gmlp")
    monkeypatch.setattr(mlp_mixer, "SGU_EPSILON", 1e-6)
    assert error("mlp_mixer_gmlp") > 10 * right

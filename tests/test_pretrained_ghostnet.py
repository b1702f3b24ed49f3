"""load_pretrained for timm's GhostNet and GhostNetV2: parity on fixtures timm produced
(tools/fixtures_ghostnet.py), its own class with a reduced table at width 0.5."""

import jax
import pytest

import nets_factory
from nets import ghostnet
from nets.ghostnet import BlockDef
from tests.test_pretrained import FIXTURES, expected, relative_error

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

# The fixtures' table (tools/fixtures_ghostnet.py's CFGS) and head, as `load_pretrained` keyword
# arguments.
SMALL = {
    "stages": (
        (BlockDef(3, 16, 16, 0, 1),),
        (BlockDef(3, 32, 16, 0.25, 2),),
        (BlockDef(3, 32, 24, 0.25, 1), BlockDef(5, 48, 24, 0, 1)),
        (BlockDef(5, 48, 32, 0.25, 2),),
    ),
    "width_multiplier": 0.5,
    "head_filters": 16,
}
PARITY = {"ghostnet": "ghostnet_100", "ghostnetv2": "ghostnetv2_100"}


def logits(case: str, **kwargs):
    network_fn, variables = nets_factory.load_pretrained(
        PARITY[case], FIXTURES / "parity" / case, **SMALL, **kwargs
    )
    return jax.jit(network_fn.apply)(variables, expected(case)["images"])[0]


@pytest.mark.parametrize("case", sorted(PARITY))
def test_logits_are_the_references(case):
    assert relative_error(logits(case), expected(case)["logits"]) <= 1e-4


def test_the_upsampling_is_torchs_nearest(monkeypatch):
    # PyTorch's 'nearest' reads pixel floor(i * in / out); the centre-aligned rule (jax.image's,
    # PyTorch's 'nearest-exact') computes another function on the fixture's 13x13 map (6x6 gate).
    def centred(x, size):
        return jax.image.resize(x, (x.shape[0], *size, x.shape[3]), "nearest")

    monkeypatch.setattr(ghostnet, "upsample_nearest", centred)
    assert relative_error(logits("ghostnetv2"), expected("ghostnetv2")["logits"]) > 1e-2


def test_the_squeeze_excite_gate_is_hard(monkeypatch):
    # timm's `hard_sigmoid` (relu6(x + 3) / 6), not the logistic sigmoid of EfficientNet's.
    monkeypatch.setattr(ghostnet.nn, "hard_sigmoid", ghostnet.nn.sigmoid)
    assert relative_error(logits("ghostnet"), expected("ghostnet")["logits"]) > 1e-3

"""load_pretrained for timm's GhostNet and GhostNetV2: parity on fixtures timm produced
(tools/fixtures_ghostnet.py), its own class with a reduced table at width 0.5."""

import functools

import jax
import pytest

import nets_factory
from nets import ghostnet
from nets.ghostnet import BlockDef
from nets_weights import architectures
from tests.test_pretrained import FIXTURES, expected, relative_error
from tests.test_pretrained_mobilenet import assert_each_convention_matters

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


@functools.cache  # read-only: the parity test and the tests of conventions share each load
def loaded(case: str):
    return nets_factory.load_pretrained(PARITY[case], FIXTURES / "parity" / case, **SMALL)


def logits(case: str):
    network_fn, variables = loaded(case)
    return jax.jit(network_fn.apply)(variables, expected(case)["images"])[0]


@pytest.mark.parametrize("case", sorted(PARITY))
def test_logits_are_the_references(case):
    assert relative_error(logits(case), expected(case)["logits"]) <= 1e-4


def test_padding_and_epsilon_matter():
    # Under 'SAME' padding, or BatchNorm epsilon 1e-3, the same weights compute another function.
    _, variables = loaded("ghostnet")
    arch = architectures.ARCHITECTURES["ghostnet_100"]
    assert_each_convention_matters(arch, SMALL, variables, expected("ghostnet"))


def test_the_upsampling_is_torchs_nearest(monkeypatch):
    # PyTorch's 'nearest' reads pixel floor(i * in / out); the centre-aligned rule (jax.image's,
    # PyTorch's 'nearest-exact') computes another function on the fixture's 13x13 map (6x6 gate).
    def centred(x, size):
        return jax.image.resize(x, (x.shape[0], *size, x.shape[3]), "nearest")

    monkeypatch.setattr(ghostnet, "upsample_nearest", centred)
    assert relative_error(logits("ghostnetv2"), expected("ghostnetv2")["logits"]) > 1e-2

"""load_pretrained for timm's Xception: parity on fixtures timm produced
(tools/fixtures_xception.py), also dilated (`output_stride`), and the conventions they depend
on."""

from functools import partial

import jax
import jax.numpy as jnp
import pytest
from safetensors.numpy import load_file

import nets_factory
from nets import xception
from nets.layers import max_pool
from tests.helpers import assert_dilated_parity
from tests.test_pretrained import FIXTURES, expected, relative_error

pytestmark = pytest.mark.slow  # parity: compiles a thinned reference network

# The fixture's small timm network, as `load_pretrained` keyword arguments.
LEGACY = {"widths": (8, 16, 16, 16, 24, 24, 32, 32, 40)}


def legacy_logits(**kwargs):
    network_fn, variables = nets_factory.load_pretrained(
        "legacy_xception", FIXTURES / "parity" / "legacy_xception", **LEGACY, **kwargs
    )
    reference = expected("legacy_xception")
    return jax.jit(network_fn.apply)(variables, reference["images"]), reference


def test_legacy_logits_are_timms():
    (logits, end_points), reference = legacy_logits()
    assert relative_error(logits, reference["logits"]) <= 1e-4
    assert end_points["block12"].shape == (2, 1, 1, 32) and end_points["stem"].shape[1] == 15


def test_the_blocks_sequential_numbering_is_timms():
    """Block 1 has no leading ReLU: its separable convolutions are `rep.0` and `rep.3`, the
    others' `rep.1`, `rep.4`, `rep.7`."""
    _, variables = nets_factory.load_pretrained(
        "legacy_xception", FIXTURES / "parity" / "legacy_xception", **LEGACY
    )
    state = load_file(FIXTURES / "parity" / "legacy_xception" / "model.safetensors")
    params = variables["params"]
    assert params["block1"]["sep2"]["pointwise"]["kernel"].shape == (1, 1, 16, 16)
    assert state["block1.rep.3.pointwise.weight"].shape == (16, 16, 1, 1)
    assert params["block5"]["bn3"]["scale"].shape == state["block5.rep.8.weight"].shape == (24,)
    assert params["block12"]["sep1"]["conv1"]["kernel"].shape == (3, 3, 1, 24)


class _ShortcutAfterReLU(xception.Block):
    """The shortcut adding the activated input, as an in-place first ReLU would give it."""

    def __call__(self, x, activated):
        return super().__call__(x if activated is None else activated, activated)


def _zero_padded_max_pool(x, window, strides, padding):
    return max_pool(
        jnp.pad(x, ((0, 0), (padding, padding), (padding, padding), (0, 0))), window, strides
    )


@pytest.mark.parametrize(
    "attribute, replacement",
    [("Block", _ShortcutAfterReLU), ("max_pool", _zero_padded_max_pool)],
    ids=["shortcut_after_relu", "zero_padded_pools"],
)
def test_each_convention_matters(monkeypatch, attribute, replacement):
    """The shortcut adds the input before the block's ReLU; the pools (after BatchNorm, so over
    negative values) pad with -inf, as PyTorch's: either changed, the logits are not timm's."""
    monkeypatch.setattr(xception, attribute, replacement)
    (logits, _), reference = legacy_logits()
    assert relative_error(logits, reference["logits"]) > 1e-2


# The aligned fixtures' small timm networks (tools/fixtures_xception.py's ALIGNED_BLOCKS).
_BLOCKS = (
    xception.AlignedBlock((16, 16, 16), 2),
    xception.AlignedBlock((24, 24, 24), 2),
    xception.AlignedBlock((24, 24, 24)),
    xception.AlignedBlock((24, 32, 32), 2),
    xception.AlignedBlock((40, 40, 48), skip=False, start_with_relu=False),
)
ALIGNED = {
    "xception_aligned": ("xception65", {"blocks": _BLOCKS}),
    "xception_aligned_preact": ("xception41p", {"blocks": _BLOCKS}),
}


def aligned_logits(case, **kwargs):
    name, small = ALIGNED[case]
    network_fn, variables = nets_factory.load_pretrained(
        name, FIXTURES / "parity" / case, **small, **kwargs
    )
    reference = expected(case)
    return jax.jit(network_fn.apply)(variables, reference["images"]), reference


@pytest.mark.parametrize("case", sorted(ALIGNED))
def test_aligned_logits_are_timms(case):
    (logits, end_points), reference = aligned_logits(case)
    assert relative_error(logits, reference["logits"]) <= 1e-4
    assert end_points["block3_tap"].shape == (2, 5, 5, 32)  # 33 -> 17 -> 9 -> 5 -> 3


def test_aligned_batch_norm_epsilon_matters():
    """Each file's epsilon is its network's: xception41p's PyTorch 1e-5 (the loader refuses
    another); TensorFlow's 1e-3 (the others') gives other logits."""
    with pytest.raises(ValueError, match="bn_epsilon"):
        aligned_logits("xception_aligned_preact", bn_epsilon=1e-3)
    name, small = ALIGNED["xception_aligned_preact"]
    network_fn, variables = nets_factory.load_pretrained(
        name, FIXTURES / "parity" / "xception_aligned_preact", **small
    )
    reference = expected("xception_aligned_preact")
    module = network_fn.module.clone(bn_epsilon=1e-3)
    logits, _ = jax.jit(partial(module.apply, train=False))(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) > 1e-3


# The dilated case's small timm network (tools/fixtures_xception.py's DILATED_BLOCKS): four
# strided blocks, the last at stride 32, each widening (so keeping its shortcut unstrided); the
# other cases' networks stop at 16.
DILATED = {
    "blocks": (
        xception.AlignedBlock((16, 16, 16), 2),
        xception.AlignedBlock((24, 24, 24), 2),
        xception.AlignedBlock((32, 32, 32), 2),
        xception.AlignedBlock((32, 40, 40), 2),
        xception.AlignedBlock((48, 48, 56), skip=False, start_with_relu=False),
    )
}


def test_output_stride_is_timms():
    """timm's at 8: the third strided block and the exit block stride by 1, dilated by 2, the
    last blocks by 4."""
    assert_dilated_parity("xception65", "xception_aligned_dilated", DILATED)

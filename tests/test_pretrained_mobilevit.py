"""load_pretrained for timm's MobileViTs: parity on fixtures timm produced
(tools/fixtures_mobilevit.py), with maps that unfold into whole patches and maps resized to
them, and each convention shown to matter; timm's `output_stride` 8 and 16 on the 40 px cases."""

import functools

import jax
import jax.numpy as jnp
import pytest

import nets_factory
from nets import mobilevit
from nets.mobilevit import Stage
from nets_weights import published
from tests.helpers import XLA_CONVS, assert_dilated_parity
from tests.test_pretrained import FIXTURES, expected, relative_error

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

# The fixtures' small timm network (tools/fixtures_mobilevit.py), as `load_pretrained` keyword
# arguments.
SMALL = {
    "stem_chs": 8,
    "stages": (
        Stage(1, 8, 1, 2.0),
        Stage(2, 16, 2, 2.0),
        Stage(1, 16, 2, 2.0, 16, 1),
        Stage(1, 16, 2, 2.0, 16, 2),
        Stage(1, 24, 2, 2.0, 24, 1),
    ),
    "num_features": 32,
}
# MobileViT v2's (`small_v2`): the same stages with Transformers half as wide, no final_conv.
SMALL_V2 = {
    **SMALL,
    "stages": (
        *SMALL["stages"][:2],
        *(s._replace(transformer_dim=s.channels // 2) for s in SMALL["stages"][2:4]),
        SMALL["stages"][4]._replace(transformer_dim=16),  # timm's make_divisible(12)
    ),
    "num_features": 0,
}
PARITY = {
    "mobilevit_32": ("mobilevit_xxs", SMALL),
    "mobilevit_resized_40": ("mobilevit_s", SMALL),
    "mobilevitv2_resized_40": ("mobilevitv2_050", SMALL_V2),
}


@functools.cache  # read-only: the parity test and the tests of conventions share each load
def loaded(case):
    """The fixture through `load_pretrained`, on XLA's convolutions (tests/helpers.py)."""
    name, small = PARITY[case]
    return nets_factory.load_pretrained(name, FIXTURES / "parity" / case, **small, **XLA_CONVS)


def logits_of(case, **fields):
    """The fixture's logits from its weights in its network built with `fields` changed."""
    name, small = PARITY[case]
    variables = published.without_mark(loaded(case)[1])
    fn = nets_factory.get_network_fn(name, 10, **{**small, **XLA_CONVS, **fields})
    return jax.jit(fn.apply)(variables, expected(case)["images"])[0]


@pytest.mark.parametrize("case", sorted(PARITY))
def test_logits_are_the_references(case):
    network_fn, variables = loaded(case)
    reference = expected(case)
    logits, end_points = jax.jit(network_fn.apply)(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) <= 1e-4
    maps = [end_points[f"stage{i}"].shape[1] for i in (3, 4, 5)]
    # v1's blocks resize their odd maps back; v2's keep them enlarged to whole patches.
    assert maps == {"mobilevit_32": [4, 2, 1], "mobilevitv2_resized_40": [6, 4, 2]}.get(
        case, [5, 3, 2]
    )
    # Inputs in [0, 1], as timm's configs say (files without a config.json of their own).
    assert (network_fn.pretrained.mean, network_fn.pretrained.std) == ((0.0,) * 3, (1.0,) * 3)


def test_conventions_matter(monkeypatch):
    # PyTorch's symmetric padding: TensorFlow's 'SAME' pads the strided 3x3s at the end only (the
    # logits 1.2 off). The LayerNorms' epsilon reaches every norm of the blocks (1e-1: 0.54 off);
    # the fixture's norms see variances far above 1e-5, so 1e-6 shows only 6.7e-5, under the
    # tolerance: the field is stated in the architecture so that a contradicting one raises.
    reference = expected("mobilevit_resized_40")["logits"]
    assert relative_error(logits_of("mobilevit_resized_40", padding="SAME"), reference) > 1e-2
    with pytest.raises(ValueError, match=r"trained with padding='SYMMETRIC'; padding='SAME'"):
        nets_factory.load_pretrained(
            "mobilevit_xxs", FIXTURES / "parity" / "mobilevit_32", padding="SAME", **SMALL
        )
    assert relative_error(logits_of("mobilevit_resized_40", epsilon=1e-1), reference) > 1e-3

    # The sequences are the pixels at one position of every patch: sequences of each patch's
    # own pixels (the other transpose) attend over other tokens.
    def per_patch(x, p):
        b, h, w, c = x.shape
        x = x.reshape(b, h // p, p, w // p, p, c).transpose(0, 1, 3, 2, 4, 5)
        return x.reshape(-1, p * p, c)

    def per_patch_fold(x, p, size):
        (h, w), c = size, x.shape[-1]
        x = x.reshape(-1, h // p, w // p, p, p, c).transpose(0, 1, 3, 2, 4, 5)
        return x.reshape(-1, h, w, c)

    with monkeypatch.context() as patch:
        patch.setattr(mobilevit, "unfold", per_patch)
        patch.setattr(mobilevit, "fold", per_patch_fold)
        assert relative_error(logits_of("mobilevit_32"), expected("mobilevit_32")["logits"]) > 1e-2

    # Resizing to whole patches as PyTorch's bilinear interpolation, without antialiasing when
    # it shrinks the map back (jax's default antialiasing of the 6 -> 5 and 4 -> 3: 0.17 off).
    def antialiased(x, size):
        shape = (x.shape[0], *size, x.shape[-1])
        return jax.image.resize(x, shape, "bilinear", antialias=True)

    monkeypatch.setattr(mobilevit, "resize", antialiased)
    assert relative_error(logits_of("mobilevit_resized_40"), reference) > 1e-3


def test_unfold_and_fold_are_inverse():
    x = jnp.arange(2 * 4 * 6 * 3.0).reshape(2, 4, 6, 3)
    patches = mobilevit.unfold(x, 2)
    assert patches.shape == (8, 6, 3)
    # Sequence 1 holds pixel (0, 1) of every patch of the first image, in row-major order.
    assert patches[1, :, 0].tolist() == x[0, 0::2, 1::2, 0].reshape(-1).tolist()
    assert (mobilevit.fold(patches, 2, (4, 6)) == x).all()


def test_v2_enlarges_as_align_corners_and_its_epsilon_is_the_field(monkeypatch):
    # MobileViT v2 enlarges its odd maps with corners aligned (v1's half-pixel resize instead:
    # 0.72 off).
    reference = expected("mobilevitv2_resized_40")["logits"]
    with monkeypatch.context() as patch:
        patch.setattr(mobilevit, "resize_align_corners", mobilevit.resize)
        assert relative_error(logits_of("mobilevitv2_resized_40"), reference) > 1e-3
    # Its GroupNorms' epsilon (PyTorch's 1e-5) is the field's: 1e-1 misses by 0.33, 1e-6 by 1.0e-4.
    assert relative_error(logits_of("mobilevitv2_resized_40", epsilon=1e-1), reference) > 1e-3


# Each block kind at one stride (a compile each, ~1 s of CPU): v1 at 8 (stage 4 dilated by 2
# from 1, stage 5 by 4 from 2, its maps of 5 resized to 6 and back in each MobileViT block), v2
# at 16 (stage 5 dilated by 2 on the map of 4 its enlargement kept). The fixtures hold both
# strides of both: 2.2e-6 / 1.6e-6 (v1 at 8 / 16), 2.1e-6 / 1.3e-6 (v2) measured.
@pytest.mark.parametrize("case", ["mobilevit_resized_40", "mobilevitv2_resized_40"])
def test_output_stride_is_timms(case):
    """The deep stages dilated and their 2x2 patches kept, as timm's ByobNet does (40 px: maps
    of 5 in the dilated stages; v2 leaves them resized to whole patches, 6, as at 32)."""
    name, small = PARITY[case]
    nominal = case == "mobilevit_resized_40"
    assert_dilated_parity(name, case, {**small, **XLA_CONVS}, nominal_maps=nominal)

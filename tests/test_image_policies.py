"""The host's image policies against timm's and torchvision's own output on a photograph
(tests/fixtures/augment, written by tools/fixtures_augment.py), and timm's string grammar."""

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from nets_training import config, image_ops, image_policies
from nets_training.errors import UserError
from nets_training.image_ops import Fill

FIXTURES = Path(__file__).parent / "fixtures" / "augment"
OPS = np.load(FIXTURES / "ops.npz")
PHOTO = Image.fromarray(OPS["photo"])  # 32x24 of matplotlib's grace_hopper.jpg
POLICIES = json.loads((FIXTURES / "policies.json").read_text())
MEAN_COLOR = (124, 116, 104)  # timm's img_mean of ImageNet's mean


def mismatches(prefix: str, make) -> list[str]:
    """'key: max difference' for each fixture `prefix ...` whose `make(fields)` differs."""
    bad = []
    for key in (k for k in OPS.files if k.startswith(prefix + " ")):
        got, want = np.asarray(make(key.split()[1:]), np.int32), OPS[key]
        if got.shape != want.shape:
            bad.append(f"{key}: shape {got.shape}")
        elif np.any(got != want):
            bad.append(f"{key}: {np.abs(got - want).max()}")
    return bad


def test_every_timm_operation_gives_timms_pixels_at_a_fixed_magnitude():
    def make(fields):
        name, sign = fields
        negate = sign == "-"  # timm's coin flip; the fixture used bilinear then, else bicubic
        fill = Fill(MEAN_COLOR, Image.BILINEAR if negate else Image.BICUBIC)
        return image_ops.timm_op(PHOTO, name, 7.3, negate, fill, 32, radius_draw=0.3)

    signed = {k.split()[1] for k in OPS.files if k.startswith("timm ") and k.endswith(" -")}
    assert signed == {name for name, op in image_ops.TIMM_OPS.items() if op.signed}
    assert {k.split()[1] for k in OPS.files if k.startswith("timm ")} == set(image_ops.TIMM_OPS)
    assert mismatches("timm", make) == []


def test_posterize_to_no_bits_is_black_as_before_pillow_13():
    """timm's PosterizeIncreasing at magnitude 10 keeps 0 bits: Pillow < 13 made the image black,
    Pillow 13 raises (and stops timm's loader under 'rand-m9-mstd0.5-inc1' when the noise
    reaches 10)."""
    fill = Fill(MEAN_COLOR, Image.BICUBIC)
    black = image_ops.timm_op(PHOTO, "PosterizeIncreasing", 10.0, False, fill, 32)
    assert np.asarray(black).shape == OPS["photo"].shape and not np.asarray(black).any()


def test_every_trivial_augment_operation_and_bin_is_torchvisions():
    def make(fields):
        name, sign = fields
        magnitudes, _ = image_ops.TA_SPACE[name]
        magnitude = magnitudes[23] if magnitudes else 0.0
        resample = Image.BILINEAR if sign == "-" else Image.NEAREST
        return image_ops.ta_op(
            PHOTO, name, -magnitude if sign == "-" else magnitude, Fill((0, 0, 0), resample)
        )

    assert mismatches("ta", make) == []
    space = {name: [list(m), signed] for name, (m, signed) in image_ops.TA_SPACE.items()}
    assert space == POLICIES["ta_wide"]


def test_colour_jitter_scales_as_torchvisions_adjustments():
    enhancers = dict(
        zip(("brightness", "contrast", "saturation"), image_policies.JITTER_ENHANCERS, strict=True)
    )
    assert mismatches("jitter", lambda f: enhancers[f[0]](PHOTO).enhance(float(f[1]))) == []


@pytest.mark.parametrize("text", [t for t in POLICIES if t != "ta_wide"])
def test_policy_strings_parse_as_timm_parses_them(text):
    want, policy = POLICIES[text], image_policies.parse(text)
    ops = lambda seq: [[op.name, op.prob, op.magnitude] for op in seq]  # noqa: E731
    if text.startswith("rand"):
        assert ops(policy.ops) == want["ops"] and policy.num_layers == want["num_layers"]
        assert (
            policy.weights == pytest.approx(want["weights"])
            if want["weights"]
            else policy.weights is None
        )
        assert policy.mmax == (want["mmax"] or 10)
    else:
        assert [ops(sub) for sub in policy.policy] == want["policy"]
    assert policy.std == (float("inf") if want["std"] == float("inf") else want["std"])


@pytest.mark.parametrize(
    "value, message",
    [
        (
            "rand-m9-mstd0.5-foo",
            "data.auto_augment: unknown image policy 'rand-m9-mstd0.5-foo' (at 'foo'); valid: "
            "'rand' followed by any of -m<int",
        ),
        ("rand-m9.5", "data.auto_augment: -m9.5: expected int; valid: 'rand'"),
        ("rand-tbest", "data.auto_augment: -tbest: unknown operation set"),
        ("imagenet", "data.auto_augment: unknown image policy 'imagenet' in 'imagenet'; valid:"),
        ("original-m9", "data.auto_augment: 'original-m9': AutoAugment takes -mstd<std> only"),
    ],
)
def test_a_bad_policy_string_is_one_line_with_the_grammar(value, message):
    with pytest.raises(UserError) as error:
        config.from_dict({"data": {"auto_augment": value}})
    text = str(error.value)
    assert text.startswith(message) and "\n" not in text
    assert "ta_wide" in text and "rand-m9-mstd0.5-inc1" in text


def test_op_magnitudes_are_noised_clipped_and_applied_with_their_probability(monkeypatch):
    drawn = []
    monkeypatch.setattr(
        image_policies, "timm_op", lambda img, name, m, *a, **k: drawn.append(m) or img
    )
    ctx = image_policies.context((0.5, 0.5, 0.5), "bilinear", 32)
    rng = np.random.default_rng(0)
    op = image_policies.Op("Rotate", 0.5, 9.0)
    for _ in range(4000):
        op(PHOTO, rng, ctx, std=0.5, mmax=10.0)
    assert abs(len(drawn) / 4000 - 0.5) < 0.03 and max(drawn) == 10.0  # clipped at timm's 10
    assert abs(np.median(drawn) - 9.0) < 0.05 and 0.4 < np.std(drawn) < 0.5
    drawn.clear()
    for _ in range(2000):
        image_policies.Op("Rotate", 1.0, 9.0)(PHOTO, rng, ctx, std=float("inf"), mmax=10.0)
    assert min(drawn) >= 0 and max(drawn) <= 9 and abs(np.mean(drawn) - 4.5) < 0.2  # uniform

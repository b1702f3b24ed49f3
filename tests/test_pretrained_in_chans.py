"""load_pretrained(..., in_chans=C): published RGB weights for grayscale or multispectral images,
their input convolution adapted as timm's `in_chans` does; parity with timm's own loader on the
ResNet and ViT fixtures (tools/fixtures_in_chans.py)."""

import jax
import pytest

import nets_factory
from tests.test_pretrained import FIXTURES, PARITY, expected, relative_error
from tests.test_pretrained_vit import PARITY as VIT_PARITY

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

CASES = {"resnet_basic": PARITY["resnet_basic"], "vit_small_config": VIT_PARITY["vit_small_config"]}
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


@pytest.mark.parametrize("in_chans", [1, 4])
@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_are_timms_for_other_channel_counts(case, in_chans):
    name, kwargs = CASES[case]
    network_fn, variables = nets_factory.load_pretrained(
        name, FIXTURES / "parity" / case, in_chans=in_chans, **kwargs
    )
    reference = expected("in_chans")
    images = reference[f"{case}_{in_chans}_images"]
    logits, _ = jax.jit(network_fn.apply)(variables, images)
    assert relative_error(logits, reference[f"{case}_{in_chans}_logits"]) <= 1e-4
    # The normalisation follows the channels: their mean for one, R, G, B, R for four.
    info = network_fn.pretrained
    assert info.in_chans == in_chans
    if in_chans == 1:
        assert info.mean == pytest.approx((sum(IMAGENET_MEAN) / 3,))
        assert info.std == pytest.approx((sum(IMAGENET_STD) / 3,))
    else:
        assert (info.mean, info.std) == (
            IMAGENET_MEAN + IMAGENET_MEAN[:1],
            IMAGENET_STD + IMAGENET_STD[:1],
        )


def test_a_channel_count_below_one_is_refused_before_anything_is_traced():
    name, kwargs = PARITY["resnet_basic"]
    with pytest.raises(ValueError, match=r"^in_chans=0: images have 1 channel or more \(3: RGB\)$"):
        nets_factory.load_pretrained(
            name, FIXTURES / "parity" / "resnet_basic", in_chans=0, **kwargs
        )

"""load_pretrained for timm's PiT: parity on fixtures timm produced (tools/fixtures_pit.py), the
plain network on an odd map and the distilled one on an even map, and the conventions that
parity needs: the position embeddings' NCHW map transposed, the poolings' symmetric padding, the
distilled logits the mean of the two heads."""

import jax
import jax.numpy as jnp
import pytest

import nets_factory
from nets.layers import Conv
from tests.test_pit import SMALL
from tests.test_pretrained import FIXTURES, expected, relative_error

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

# case -> our name, the image size the fixture's position embeddings are made for.
PARITY = {"pit_small_32": ("pit_s_224", 32), "pit_distilled_36": ("pit_s_distilled_224", 36)}


def load(case: str, **kwargs):
    name, size = PARITY[case]
    return nets_factory.load_pretrained(
        name, FIXTURES / "parity" / case, **{**SMALL, "img_size": size, **kwargs}
    )


def same_padding_pools(*args, padding=None, **kwargs) -> Conv:
    """`Conv`, but TensorFlow's 'SAME' padding for the poolings' strided convolutions."""
    return Conv(*args, padding="SAME" if kwargs.get("strides") == 2 else padding, **kwargs)


def test_logits_are_the_references():
    network_fn, variables = load("pit_small_32")
    reference = expected("pit_small_32")
    logits, _ = jax.jit(network_fn.apply)(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) <= 1e-4


def test_the_distilled_logits_are_the_references_and_the_conventions_matter():
    network_fn, variables = load("pit_distilled_36")
    reference = expected("pit_distilled_36")
    apply = jax.jit(network_fn.apply)
    logits, end_points = apply(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) <= 1e-4
    # timm's eval output is the mean of the two heads, neither head alone.
    mean = (end_points["cls_logits"] + end_points["dist_logits"]) / 2
    assert jnp.allclose(logits, mean)
    for head in ("cls_logits", "dist_logits"):
        assert relative_error(end_points[head], reference["logits"]) > 1e-2
    # The position embeddings' map read as timm's [1, C, h, w] without the transpose (here as
    # its rows and columns swapped) breaks parity.
    params = dict(variables["params"])
    params["pos_embed"] = jnp.swapaxes(params["pos_embed"], 1, 2)
    swapped, _ = apply({**variables, "params": params}, reference["images"])
    assert relative_error(swapped, reference["logits"]) > 1e-2
    # TensorFlow's 'SAME' padding of the poolings (the 8x8 and 4x4 maps padded after only)
    # instead of PyTorch's pixel each side breaks parity.
    network_fn, variables = load("pit_distilled_36", conv=same_padding_pools)
    padded, _ = jax.jit(network_fn.apply)(variables, reference["images"])
    assert relative_error(padded, reference["logits"]) > 1e-2

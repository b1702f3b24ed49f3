"""load_pretrained for timm's RepViT: parity on fixtures timm produced (tools/fixtures_repvit.py)
with the current and the legacy token mixers (odd maps downsampled), `reparameterize` against
timm's own `fuse()` of the same networks, and each convention shown to matter."""

import functools

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file

import nets_factory
from nets import repvit
from nets_weights import published
from nets_weights.repvit import layout
from tests.helpers import XLA_CONVS
from tests.test_pretrained import FIXTURES, expected, relative_error
from tests.test_repvit import SMALL

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

PARITY = {"repvit": "repvit_m0_9", "repvit_legacy": "repvit_m1"}
SIZE = 40  # the fixtures' images: maps of 10, 5, 3 and 2 pixels


@functools.cache  # read-only: the tests share each load
def loaded(case):
    fields = {**SMALL, "default_image_size": SIZE, **XLA_CONVS}
    return nets_factory.load_pretrained(PARITY[case], FIXTURES / "parity" / case, **fields)


@functools.cache  # each network compiled once (its function is the trace's: patch none)
def outputs(case):
    network_fn, variables = loaded(case)
    return jax.jit(network_fn.apply)(variables, expected(case)["images"])


def apply(case, deploy=False):
    """The case's network (`deploy`: fused) as a function of its variables: a new trace."""
    fn = nets_factory.get_network_fn(PARITY[case], 10, deploy=deploy, **SMALL, **XLA_CONVS)
    return jax.jit(lambda variables: fn.apply(variables, expected(case)["images"])[0])


deployed = functools.cache(functools.partial(apply, deploy=True))


@pytest.mark.parametrize("case", sorted(PARITY))
def test_logits_are_the_references(case):
    network_fn, _ = loaded(case)
    reference = expected(case)
    logits, end_points = outputs(case)
    assert relative_error(logits, reference["logits"]) <= 1e-4  # 7.7e-7 / 1.0e-6 measured
    assert [end_points[f"stages_{i}"].shape[1] for i in range(4)] == [10, 5, 3, 2]
    heads = (end_points["cls_logits"] + end_points["dist_logits"]) / 2
    np.testing.assert_allclose(logits, heads, rtol=1e-6)  # RepVitClassifier's inference
    assert network_fn.pretrained.interpolation == "bicubic"
    assert network_fn.pretrained.crop_fraction == pytest.approx(0.95)


@pytest.mark.parametrize("case", sorted(PARITY))
def test_the_fused_network_is_timms_fused_one(case):
    _, variables = loaded(case)
    timm_fused = load_file(FIXTURES / "parity" / case / "fused.safetensors")
    fused = repvit.reparameterize(published.without_mark(variables))
    logits = deployed(case)(fused)
    assert relative_error(logits, timm_fused["logits"]) <= 1e-4  # 7.0e-7 / 2.0e-6 measured
    assert relative_error(logits, expected(case)["logits"]) <= 1e-4  # the training form's too
    for path in (("stages_0", "blocks_0"), ("stages_2", "downsample", "pre_block")):
        ours = fused["params"]
        for part in path:
            ours = ours[part]
        ours = ours["token_mixer"]["reparam_conv"]
        prefix = layout(path)
        theirs = timm_fused[f"{prefix}.token_mixer.weight"].transpose(2, 3, 1, 0)
        np.testing.assert_allclose(ours["kernel"], theirs, atol=1e-6)
        np.testing.assert_allclose(
            ours["bias"], timm_fused[f"{prefix}.token_mixer.bias"], atol=1e-6
        )


def test_each_convention_matters(monkeypatch):
    """GELU's tanh approximation for torch's exact one (7.3e-4 off), one head alone for the mean
    of both (timm's inference: 1.0), the fusion with another BatchNorm epsilon (Slim's 1e-3:
    1.1e-2): none is timm's function (the fixture's parity: 7.7e-7)."""
    case = "repvit"
    reference = expected(case)["logits"]
    variables = published.without_mark(loaded(case)[1])
    with monkeypatch.context() as patch:
        patch.setattr(repvit, "gelu", functools.partial(jax.nn.gelu, approximate=True))
        assert relative_error(apply(case)(variables), reference) > 1e-4
    assert relative_error(outputs(case)[1]["cls_logits"], reference) > 1e-2
    fused = repvit.reparameterize(variables, eps=1e-3)
    assert relative_error(deployed(case)(fused), reference) > 1e-3


def test_reparameterize_leaves_its_input_as_it_was():
    variables = published.without_mark(loaded("repvit")[1])
    before = jax.tree.map(np.array, variables)
    repvit.reparameterize(variables)
    jax.tree.map(np.testing.assert_array_equal, before, variables)

"""load_pretrained for timm's FastViT: parity on fixtures timm produced (tools/fixtures_fastvit.py)
in the training form (SA's layout; MCi0..2's gated patch embeddings; MCi3/4's five stages and
LayerNorm), and `reparameterize` against timm's own `reparameterize_model` of the same networks:
its fused convolutions and the deploy network's logits. Each convention the weights need is
shown to matter."""

import jax
import pytest
from safetensors.numpy import load_file

import nets_factory
from nets import fastvit
from nets_weights.fastvit import layout
from tests.helpers import assert_fused_like_timms
from tests.test_fastvit import SMALL
from tests.test_pretrained import FIXTURES, expected, relative_error

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks


def load(case, **kwargs):
    name, small = SMALL[case]
    return nets_factory.load_pretrained(name, FIXTURES / "parity" / case, **small, **kwargs)


def logits_of(network_fn, variables, case):
    return jax.jit(network_fn.apply)(variables, expected(case)["images"])[0]


@pytest.mark.parametrize("case", sorted(SMALL))
def test_logits_are_the_references(case):
    network_fn, variables = load(case)
    logits = logits_of(network_fn, variables, case)
    # 1.7e-7 / 9.7e-7 / 1.2e-6 measured (fastvit_sa / fastvit_mci_se / fastvit_mci_ln)
    assert relative_error(logits, expected(case)["logits"]) <= 1e-4


def test_the_fused_network_is_timms_reparameterized_one():
    """On MCi0's layout (every fused module: stem blocks, gated large kernels, RepMixers, a
    RepCPE); folded with another BatchNorm epsilon (Slim's 1e-3) it is another function."""
    case = "fastvit_mci_se"
    _, variables = load(case)
    name, small = SMALL[case]
    deploy = jax.jit(nets_factory.get_network_fn(name, 10, deploy=True, **small).apply)
    fused = fastvit.reparameterize(variables)
    timm_fused = load_file(FIXTURES / "parity" / case / "fused.safetensors")
    images = expected(case)["images"]
    assert relative_error(deploy(fused, images)[0], timm_fused["logits"]) <= 1e-4  # 4.8e-7
    paths = [
        "stem_1",
        "stages_2/downsample/proj_0",
        "stages_1/blocks_0/token_mixer",
        "stages_3/pos_emb",
    ]
    assert_fused_like_timms(fused["params"], timm_fused, paths, layout, atol=1e-5)
    other_epsilon = deploy(fastvit.reparameterize(variables, eps=1e-3), images)[0]
    assert relative_error(other_epsilon, expected(case)["logits"]) > 1e-3  # 2.8e-1 measured


def test_mcis_activation_after_the_large_kernel_matters():
    """MCi's GELU after the patch embedding's large kernel (timm's `lkc_use_act`) changes no
    variable: the weights load without it, and compute another function."""
    network_fn, variables = load("fastvit_mci_se", lkc_use_act=False)
    logits = logits_of(network_fn, variables, "fastvit_mci_se")
    assert relative_error(logits, expected("fastvit_mci_se")["logits"]) > 1e-3  # 1.2 measured

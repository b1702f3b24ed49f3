"""load_pretrained for timm's NFNets: parity on fixtures timm produced (tools/fixtures_nfnet.py)
under DeepMind's conventions and under timm's own, also dilated (`output_stride`), each
convention shown to matter, timm's key layout, and the conventions set by the architecture."""

import functools
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from safetensors.numpy import load_file, save_file

import nets_factory
from nets import nfnet
from nets.layers import avg_pool
from nets_training import networks, optim
from nets_weights import architectures, published
from tests.helpers import XLA_CONVS, assert_dilated_parity
from tests.test_pretrained import FIXTURES, expected, relative_error

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

# The fixtures' small timm networks (tools/fixtures_nfnet.py), as `load_pretrained` keyword
# arguments: four stages of 1, 2, 1, 1 blocks, groups of 8, a stem of 32 channels.
SMALL = {"depths": (1, 2, 1, 1), "channels": (16, 32, 48, 64), "stem_features": 32, "group_size": 8}
PARITY = {"dm_nfnet_small": "dm_nfnet_f0", "eca_nfnet_small": "eca_nfnet_l0"}


@functools.cache  # read-only: the parity test and the tests of conventions share each load
def loaded(case):
    return nets_factory.load_pretrained(PARITY[case], FIXTURES / "parity" / case, **SMALL)


def error_under(case, **fields):
    """The fixture's weights in its network built with `fields` changed: the relative error of
    its logits (XLA's convolutions: the padding is the layer's whichever kernels run)."""
    _, variables = loaded(case)
    fn = nets_factory.get_network_fn(PARITY[case], 10, **{**SMALL, **fields, **XLA_CONVS})
    reference = expected(case)
    logits, _ = jax.jit(fn.apply)(published.without_mark(variables), reference["images"])
    return relative_error(logits, reference["logits"])


@pytest.mark.parametrize("case", sorted(PARITY))
def test_logits_are_the_references(case):
    # Measured: 3.5e-7 (DeepMind's conventions), 8.5e-7 (timm's own).
    network_fn, variables = loaded(case)
    reference = expected(case)
    logits, end_points = jax.jit(network_fn.apply)(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) <= 1e-4
    assert end_points["final_conv"].shape == (2, 2, 2, 128 if case.startswith("dm") else 96)


def test_output_stride_is_timms():
    """DeepMind's case at 8: the third stage's first block's conv2 at dilation 1, conv2b and the
    next blocks' at 2, the last stage's at 2 then 4, its shortcut pooled 2x2 at stride 1 as timm's
    `AvgPool2dSame` (zeros counted: not counting them misses by 0.41), all under 'SAME'."""
    assert_dilated_parity(PARITY["dm_nfnet_small"], "dm_nfnet_small", SMALL)


def test_each_convention_matters(monkeypatch):
    # The same weights under each convention but one miss the logits (the parity bound is 1e-4;
    # measured: DeepMind's under symmetric padding 1.0, gamma in the kernels 1.2, the kernels'
    # epsilon 1e-6 2.8e-3; timm's own under 'SAME' 1.4 (gamma in the activations: 0.91); the
    # shortcuts' average pools counting the padding of their odd maps 0.66).
    wrong = {
        "dm_nfnet_small": [
            {"padding": "SYMMETRIC"},
            {"gamma_in_act": False},
            {"std_epsilon": 1e-6},
        ],
        "eca_nfnet_small": [{"padding": "SAME"}],
    }
    for case, conventions in wrong.items():
        for fields in conventions:
            assert error_under(case, **fields) > 1e-4, (case, fields)
    counting = lambda *args, **kwargs: avg_pool(*args, **{**kwargs, "count_include_pad": True})  # noqa: E731
    monkeypatch.setattr(nfnet, "avg_pool", counting)
    assert error_under("dm_nfnet_small") > 1e-4


def test_the_architecture_sets_the_conventions():
    dm, light = loaded("dm_nfnet_small")[0].module, loaded("eca_nfnet_small")[0].module
    assert (dm.padding, dm.gamma_in_act, dm.skipinit) == ("SAME", True, True)
    assert (light.padding, light.gamma_in_act, light.skipinit) == ("SYMMETRIC", False, False)
    with pytest.raises(ValueError, match="padding"):
        nets_factory.load_pretrained(
            "dm_nfnet_f0", FIXTURES / "parity" / "dm_nfnet_small", padding="SYMMETRIC", **SMALL
        )


LAYOUT = {
    ("stem_conv1",): "stem.conv1",
    ("stem_conv4",): "stem.conv4",
    ("stages_1_0", "downsample"): "stages.1.0.downsample.conv",
    ("stages_2_5", "conv2b"): "stages.2.5.conv2b",
    ("stages_0_0", "attn_last", "fc1"): "stages.0.0.attn_last.fc1",
    ("stages_3_2", "attn_last", "conv"): "stages.3.2.attn_last.conv",
    ("stages_3_2",): "stages.3.2",
    ("final_conv",): "final_conv",
    ("head", "fc"): "head.fc",
}


def test_layout_is_timms():
    arch = architectures.ARCHITECTURES["dm_nfnet_f0"]
    layout = arch.layout(nets_factory.get_network_fn("dm_nfnet_f0", 10).module)
    assert {path: layout(path) for path in LAYOUT} == LAYOUT
    assert arch.framework.keys("stages.0.0", "skipinit_gain") == ["stages.0.0.skipinit_gain"]
    assert arch.framework.keys("stages.0.0.conv1", "gain") == ["stages.0.0.conv1.gain"]
    assert arch.preprocessing["crop_mode"] == "squash"


def test_adaptive_gradient_clipping_is_timms_on_timms_gradient(tmp_path):
    # tools/fixtures_nfnet.py agc: the small DeepMind NFNet's cross-entropy gradient in training
    # mode, and timm's train.py's AGC of it at 0.01 (the classifier, its last two parameters,
    # left alone). Our network's gradient is timm's; our clipping of timm's gradient is timm's.
    case = FIXTURES / "parity" / "dm_nfnet_small"
    train_fn, variables = nets_factory.load_pretrained(
        PARITY["dm_nfnet_small"], case, is_training=True, **SMALL
    )
    reference = load_file(case / "agc.safetensors")

    def as_variables(prefix):  # timm's tensors under our names, converted as its weights are
        folder = tmp_path / prefix
        folder.mkdir()
        tensors = {k[len(prefix) + 1 :]: v for k, v in reference.items() if k.startswith(prefix)}
        save_file(tensors, folder / "model.safetensors")
        shutil.copy(case / "config.json", folder)
        _, converted = nets_factory.load_pretrained(PARITY["dm_nfnet_small"], folder, **SMALL)
        return converted["params"]

    timms_gradient, timms_clipped = as_variables("grad"), as_variables("clipped")
    params = published.without_mark(variables)["params"]
    images = expected("dm_nfnet_small")["images"]
    labels = jnp.arange(images.shape[0]) % 10

    def loss(params):
        logits, _ = train_fn.apply({"params": params}, images, rngs={"dropout": jax.random.key(0)})
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

    gradient = jax.jit(jax.grad(loss))(params)
    for ours, theirs in zip(
        jax.tree.leaves(gradient), jax.tree.leaves(timms_gradient), strict=True
    ):
        assert relative_error(ours, theirs) <= 1e-4
    classifier = networks.classifier_params(train_fn)
    assert classifier == {"head/fc/kernel", "head/fc/bias"}
    clip = optim.adaptive_clipping(0.01, classifier)
    # One program: eagerly, each of the 114 tensors' norms and bounds compiles its own (7 s).
    clipped, _ = jax.jit(clip.update)(timms_gradient, clip.init(params), params)
    for ours, theirs in zip(jax.tree.leaves(clipped), jax.tree.leaves(timms_clipped), strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-9)
    before, after = jax.tree.leaves(timms_gradient), jax.tree.leaves(clipped)
    kept = [np.array_equal(a, b) for a, b in zip(before, after, strict=True)]
    assert 2 <= sum(kept) < len(kept)  # the head, and parameters within their bound

"""load_pretrained on Keras Applications' HDF5 files: parity with Keras's MobileNet and MobileNetV2
on fixtures it produced (tools/fixtures_keras.py), their conventions, and one-line errors for bad
files."""

import functools
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file

import nets_factory
from nets_weights import WeightFileError, published
from nets_weights.mobilenet_v1 import KERAS_PADDING
from tests.helpers import XLA_CONVS

pytestmark = pytest.mark.slow  # parity: compiles thinned reference networks

PARITY = Path(__file__).with_name("fixtures") / "parity"
# Each fixture (alpha 0.25, 10 classes) under a registry name and a Keras name: at 64 px every
# stride-2 map is even, at 56 px the depthwise layers of stride 2 see 7 and 3 pixel maps.
EVEN, ODD = PARITY / "keras_mobilenet" / "model.h5", PARITY / "keras_mobilenet_odd" / "model.h5"
# MobileNetV2 (alpha 0.35, 10 classes): at 64 px every stride-2 map is even; at 72 px the last two
# are 9 and 5 pixels, which Keras pads on both sides (TensorFlow's 'SAME', our default padding).
V1, V2 = {"downsample_padding": KERAS_PADDING}, {"padding": "SAME", "bn_epsilon": 1e-3}
CASES = {
    "keras_mobilenet": ("mobilenet_v1_025", V1),
    "keras_mobilenet_odd": ("keras_mobilenet_2_5", V1),
}
CASES |= {
    case: ("keras_mobilenet_v2_0_35", V2)
    for case in ("keras_mobilenet_v2", "keras_mobilenet_v2_odd")
}
V2_EVEN = PARITY / "keras_mobilenet_v2" / "model.h5"


def relative_error(logits, reference):
    return float(np.max(np.abs(np.asarray(logits) - reference)) / np.max(np.abs(reference)))


@functools.cache  # read-only: the parity test and the tests of its variables share each load
def loaded(name, path):
    return nets_factory.load_pretrained(name, path)


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_are_kerass(case):
    pytest.importorskip("h5py")
    name, convention = CASES[case]
    network_fn, variables = loaded(name, PARITY / case / "model.h5")
    reference = load_file(PARITY / case / "expected.safetensors")
    logits, _ = jax.jit(network_fn.apply)(variables, reference["images"])
    assert relative_error(logits, reference["logits"]) <= 1e-4
    assert {key: getattr(network_fn.module, key) for key in convention} == convention
    info = network_fn.pretrained
    assert info.mean == info.std == (0.5,) * 3 and info.class_names == ()  # 10 classes


def test_slims_padding_computes_another_function_on_odd_maps():
    # At 56 px the same weights under 'SAME' differ by ~2% (1e-7 under Keras's padding); at 64 px
    # the two paddings are one function.
    pytest.importorskip("h5py")
    _, variables = loaded("keras_mobilenet_2_5", ODD)  # the parity test's load of the file
    # On XLA's convolutions: the padding is the layer's whichever kernels run (tests/helpers.py).
    slim = nets_factory.get_network_fn("mobilenet_v1_025", 10, **XLA_CONVS)
    reference = load_file(PARITY / "keras_mobilenet_odd" / "expected.safetensors")
    logits, _ = jax.jit(slim.apply)(published.without_mark(variables), reference["images"])
    assert relative_error(logits, reference["logits"]) > 5e-3
    with pytest.raises(ValueError, match=r"trained with downsample_padding=\(\(0, 1\), \(0, 1\)\)"):
        nets_factory.load_pretrained("mobilenet_v1_025", EVEN, downsample_padding="SAME")


@pytest.mark.parametrize("change", [{"padding": "SYMMETRIC"}, {"bn_epsilon": 1e-5}])
def test_mobilenet_v2_refuses_torchvisions_conventions(change):
    # torchvision's padding (one pixel on each side of even maps too) or its epsilon change the
    # 64 px fixture's logits by 4e-4 and 8e-4 (relative; 3e-7 under Keras's, the parity bar 1e-4).
    # That each computes another function of Slim's weights is shown once for all MobileNet V2
    # and V3 networks, whose layers take both fields alike (test_pretrained_mobilenet.py's
    # mobilenetv3_large_tf case, from Keras's ('SAME', 1e-3) too); test_logits_are_kerass pins
    # the pair here.
    pytest.importorskip("h5py")
    key, value = next(iter(change.items()))
    with pytest.raises(ValueError, match=rf"trained with {key}=.*; {key}={value!r} would"):
        nets_factory.load_pretrained("keras_mobilenet_v2_0_35", V2_EVEN, **change)


def test_mobilenet_v2_keeps_1280_last_channels_below_alpha_1():
    # Keras's `last_block_filters` is 1280 below alpha 1 (our finegrain mode), not 0.35 * 1280.
    pytest.importorskip("h5py")
    with pytest.raises(WeightFileError, match=r"'Conv_1_bn/moving_mean:0' has shape \(1280,\)"):
        nets_factory.load_pretrained(
            "keras_mobilenet_v2_0_35", V2_EVEN, finegrain_classification_mode=False
        )


def test_depthwise_and_classifier_kernels_take_our_layout():
    h5py = pytest.importorskip("h5py")
    path = EVEN
    _, variables = loaded("mobilenet_v1_025", path)
    with h5py.File(path) as f:
        depthwise = np.asarray(f["conv_dw_2/conv_dw_2/depthwise_kernel:0"], np.float32)
        classifier = np.asarray(f["conv_preds/conv_preds/kernel:0"], np.float32)
    params = variables["params"]
    assert depthwise.shape == (3, 3, 16, 1)  # [kh, kw, channels, multiplier]
    ours = np.asarray(params["Conv2d_2_depthwise"]["conv"]["kernel"])
    np.testing.assert_array_equal(ours, depthwise.reshape(3, 3, 1, 16))
    np.testing.assert_array_equal(np.asarray(params["Logits"]["kernel"]), classifier[0, 0])


def test_in_chans_adapts_the_stem_in_kerass_layout_too():
    # Keras kernels are already ours (HWIO): one channel sums R, G and B on that path too (timm's
    # rule, whose logits tests/test_pretrained_in_chans.py compares on PyTorch's layout).
    pytest.importorskip("h5py")
    _, rgb = loaded("mobilenet_v1_025", EVEN)
    gray_fn, gray = nets_factory.load_pretrained("mobilenet_v1_025", EVEN, in_chans=1)
    stem = rgb["params"]["Conv2d_0"]["conv"]["kernel"]
    np.testing.assert_allclose(
        gray["params"]["Conv2d_0"]["conv"]["kernel"], stem.sum(axis=2, keepdims=True), rtol=1e-6
    )
    assert gray_fn.pretrained.in_chans == 1 and gray_fn.pretrained.mean == (0.5,)


def test_a_whole_model_file_loads_its_model_weights(tmp_path):
    h5py = pytest.importorskip("h5py")
    with h5py.File(EVEN) as f, h5py.File(tmp_path / "model.h5", "w") as out:
        f.copy(f["/"], out, "model_weights")
        for key, value in f.attrs.items():
            out["model_weights"].attrs[key] = value
    _, ours = nets_factory.load_pretrained("mobilenet_v1_025", tmp_path / "model.h5")
    _, theirs = loaded("mobilenet_v1_025", EVEN)
    jax.tree.map(np.testing.assert_array_equal, ours, theirs)


def test_bad_keras_files_say_so_in_one_line(tmp_path):
    h5py = pytest.importorskip("h5py")
    (tmp_path / "corrupt.h5").write_bytes(b"\x89HDF\r\n\x1a\n" + b"\x00" * 64)
    with pytest.raises(WeightFileError, match=r"corrupt.h5 is not a readable Keras HDF5 file"):
        nets_factory.load_pretrained("mobilenet_v1_025", tmp_path / "corrupt.h5")
    with h5py.File(tmp_path / "keras3.h5", "w") as f:
        f.create_group("layers/conv1/vars").create_dataset("0", data=np.ones(3))
    with pytest.raises(WeightFileError, match=r"not in Keras 2's save_weights layout"):
        nets_factory.load_pretrained("mobilenet_v1_025", tmp_path / "keras3.h5")
    # Another width's file: alpha 0.25's 8 stem channels for alpha 1.0's 32.
    with pytest.raises(WeightFileError, match=r"'conv1_bn/moving_mean:0' has shape \(8,\);"):
        nets_factory.load_pretrained("mobilenet_v1", EVEN)


def test_without_h5py_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "h5py", None)  # `import h5py` raises ImportError
    with pytest.raises(WeightFileError, match=r"h5py is not installed: `pip install '.*\[keras\]'"):
        nets_factory.load_pretrained("mobilenet_v1_025", EVEN)

"""Parity fixtures of Keras Applications' MobileNet (V1) and MobileNetV2, in the HDF5 layout of
its published files.

Standalone (TensorFlow, not torch or timm; `tools/parity.py` imports torch):

    python3 -m venv /work/tfenv && /work/tfenv/bin/pip install tensorflow-cpu==2.21.0 h5py \
        numpy safetensors
    /work/tfenv/bin/python tools/fixtures_keras.py
    /work/tfenv/bin/python tools/fixtures_keras.py full /tmp/keras  # full size (docs/pretrained.md)

Keras's published weights (`mobilenet_2_5_224_tf.h5`, ...) are Keras 2 `save_weights` HDF5 files:
the root's `layer_names` attribute lists every layer; each layer's group has a `weight_names`
attribute (`conv1/kernel:0`, ...) and holds those datasets, so `conv1/conv1/kernel:0`. Keras 3
writes another layout (`.weights.h5`), so `write_h5` writes the published one with h5py.

Each case: `MobileNet(alpha=0.25, classes=10)` with non-trivial weights (BatchNorm gammas
~U(0.5, 1.5), betas and biases ~N(0, 0.1), moving means ~N(0, 0.1), moving variances
~U(0.5, 1.5), every value rounded to float16, in which the file stores them), and its logits
(`classifier_activation=None`: before the softmax) on fixed inputs, computed in float32:
`tests/fixtures/parity/<case>/model.h5` and `expected.safetensors` (`images` NHWC, `logits`).
`keras_mobilenet` runs at 64 px, where every stride-2 layer sees an even map; `keras_mobilenet_odd`
at 56 px, where the depthwise layers of stride 2 see 7 and 3 pixel maps (Keras pads those by one
pixel at the bottom/right only, TensorFlow's 'SAME' on both sides). The index
(`tests/fixtures/state_dicts/keras_mobilenet.txt`) lists the keys and shapes of the four
full-size networks (224 px, 1000 classes).

MobileNetV2 likewise: `MobileNetV2(alpha=0.35, classes=10)` at 64 px (`keras_mobilenet_v2`) and
at 72 px (`keras_mobilenet_v2_odd`: its last two stride-2 layers see 9 and 5 pixel maps, which
Keras pads by one pixel on each side); the index `keras_mobilenet_v2.txt` lists its three full-size
networks (alphas 1.0, 1.4, 0.35).
"""

import sys
from collections.abc import Callable
from pathlib import Path

import h5py
import keras
import numpy as np
from safetensors.numpy import save_file

ROOT = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
ALPHAS = {"keras_mobilenet_1_0": 1.0, "keras_mobilenet_7_5": 0.75}
ALPHAS |= {"keras_mobilenet_5_0": 0.5, "keras_mobilenet_2_5": 0.25}
V2_ALPHAS = {"keras_mobilenet_v2_1_0": 1.0, "keras_mobilenet_v2_1_4": 1.4}
V2_ALPHAS |= {"keras_mobilenet_v2_0_35": 0.35}


def weight_names(layer, name: str | None = None) -> list[str]:
    """Keras 2's names of a layer's weights: `conv1/kernel:0`, `conv1_bn/moving_mean:0`,
    `conv_dw_1/depthwise_kernel:0` (Keras 3 calls that one `kernel`); `name`: the layer's. A
    layer of layers (ConvNeXt's `Sequential` stem) names each weight by its inner layer
    (`convnext_tiny_stem_conv/kernel:0`), and ConvNeXt's `LayerScale` its one weight `gamma`
    (Keras 3: `variable_3`)."""
    names = []
    for w in layer.weights:
        inner, _, leaf = w.path.removeprefix(f"{layer.name}/").rpartition("/")
        if isinstance(layer, keras.layers.DepthwiseConv2D) and leaf == "kernel":
            leaf = "depthwise_kernel"
        if type(layer).__name__ == "LayerScale":
            leaf = "gamma"
        names.append(f"{inner or name or layer.name}/{leaf}:0")
    return names


def write_h5(
    model,
    path: Path,
    dtype=np.float16,
    rename: Callable[[str], str] = str,
    libver: str = "earliest",
) -> None:
    """`model.save_weights` as Keras 2 wrote it (the published files' layout), each layer
    named `rename(layer.name)`. `libver='latest'`: HDF5's newer object headers, which halve a
    file of many small layers (the published files have the earliest; readers do not care)."""
    with h5py.File(path, "w", libver=libver) as f:
        f.attrs["layer_names"] = [rename(layer.name).encode() for layer in model.layers]
        f.attrs["backend"] = b"tensorflow"
        f.attrs["keras_version"] = b"2.2.4"
        for layer in model.layers:
            group = f.create_group(rename(layer.name))
            names = weight_names(layer, rename(layer.name))
            group.attrs["weight_names"] = [n.encode() for n in names]
            for name, weight in zip(names, layer.get_weights(), strict=True):
                group.create_dataset(name, data=weight.astype(dtype))


def perturb(model, rng: np.random.Generator) -> None:
    """Non-trivial values for every weight, rounded to float16."""
    for layer in model.layers:
        values = []
        for w, value in zip(layer.weights, layer.get_weights(), strict=True):
            leaf = w.path.rpartition("/")[2]
            if leaf == "gamma" or leaf == "moving_variance":
                value = rng.uniform(0.5, 1.5, value.shape)
            elif leaf in ("beta", "bias", "moving_mean"):
                value = rng.normal(0.0, 0.1, value.shape)
            values.append(value.astype(np.float16).astype(np.float32))
        layer.set_weights(values)


def write_case(
    folder: Path,
    size: int,
    alpha: float = 0.25,
    classes: int = 10,
    application=keras.applications.MobileNet,
) -> None:
    keras.utils.set_random_seed(sum(map(ord, folder.name)))
    model = application(
        input_shape=(size, size, 3),
        alpha=alpha,
        weights=None,
        classes=classes,
        classifier_activation=None,
    )
    perturb(model, np.random.default_rng(sum(map(ord, folder.name))))
    images = np.random.default_rng(0).normal(size=(2, size, size, 3)).astype(np.float32)
    logits = np.asarray(model(images, training=False), np.float32)
    folder.mkdir(parents=True, exist_ok=True)
    write_h5(model, folder / "model.h5")
    save_file({"images": images, "logits": logits}, folder / "expected.safetensors")
    print(folder, logits.shape, float(np.abs(logits).max()))


def write_index(index: str, alphas: dict[str, float], application, title: str) -> None:
    lines = [f"# key shape of every weight of Keras's full-size {title} (fixtures_keras.py)"]
    for architecture, alpha in alphas.items():
        model = application(alpha=alpha, weights=None)
        lines.append(f"[{architecture}]")
        for layer in model.layers:
            for name, w in zip(weight_names(layer), layer.weights, strict=True):
                lines.append(f"{name} {','.join(map(str, w.shape))}")
    (ROOT / "state_dicts" / f"{index}.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["full"]:  # `full FOLDER`: full-size MobileNets to measure parity on
        for size in (224, 200):
            write_case(Path(sys.argv[2]) / f"mobilenet_1_0_{size}", size, 1.0, 1000)
            v2 = Path(sys.argv[2]) / f"mobilenet_v2_1_0_{size}"
            write_case(v2, size, 1.0, 1000, keras.applications.MobileNetV2)
        v2 = Path(sys.argv[2]) / "mobilenet_v2_1_4_224"  # alpha > 1: a wider last conv
        write_case(v2, 224, 1.4, 1000, keras.applications.MobileNetV2)
    else:
        write_case(ROOT / "parity" / "keras_mobilenet", 64)
        write_case(ROOT / "parity" / "keras_mobilenet_odd", 56)
        write_index("keras_mobilenet", ALPHAS, keras.applications.MobileNet, "MobileNets")
        v2 = keras.applications.MobileNetV2
        write_case(ROOT / "parity" / "keras_mobilenet_v2", 64, 0.35, 10, v2)
        write_case(ROOT / "parity" / "keras_mobilenet_v2_odd", 72, 0.35, 10, v2)
        write_index("keras_mobilenet_v2", V2_ALPHAS, v2, "MobileNetV2s")

"""Parity fixtures of Keras Applications' EfficientNet (B0-B7), EfficientNetV2 (S, M, L), DenseNet
(121, 169, 201) and ConvNeXt, in the HDF5 layout of their published files (`efficientnetb0.h5`,
`efficientnetv2-s.h5`, `densenet121_weights_tf_dim_ordering_tf_kernels.h5`, ...).

Standalone, in the TensorFlow environment of `tools/fixtures_keras.py` (whose `write_h5` and
`perturb` it uses):

    /work/tfenv/bin/python tools/fixtures_keras_modern.py
    /work/tfenv/bin/python tools/fixtures_keras_modern.py full /tmp/keras_modern  # full size

Each case: Keras's own builder at a small configuration, 10 classes, at 72 px (stride-2 layers
see even and odd maps), with non-trivial weights rounded to float16 (`perturb`) and stored as
float16, and its logits (before the softmax) on fixed images: `tests/fixtures/parity/<case>/
model.h5` and `expected.safetensors` (`images` NHWC, `logits`).

- `keras_efficientnet`: `EfficientNet(width_coefficient=0.1, depth_coefficient=0.5)` (stages of
  1-2 blocks, 8-32 channels, a 128-wide head); its stride-2 layers see 72, 36, 18 and 9 pixel
  maps. Keras's EfficientNet holds its preprocessing: `Rescaling(1 / 255)`, a `Normalization`
  layer whose mean and variance the file holds, and, built with `weights='imagenet'`, a
  `Rescaling(1 / sqrt(std))` after it (tensorflow/tensorflow#49930). The published files'
  Normalization holds ImageNet's mean and, as its variance, ImageNet's std, so Keras's pipeline
  computes `(x / 255 - mean) / std`. A model built with `weights=None` has no such rescaling: the
  fixture's Keras model holds `std ** 2` as its variance, which computes the published pipeline's
  function, and the file holds what the published ones hold (`std`, float32; the count int64).
  Its images are in [0, 255].
- `keras_densenet`: `DenseNet([1, 1, 1, 1])` (Keras's growth rate 32); images ~N(0, 1), as
  `preprocess_input` (mode 'torch') would give. Its stem's layers are named as the published
  files name them (Keras 2's `conv1/conv`, `conv1/bn`; Keras 3 says `conv1_conv`).
- `keras_efficientnetv2`: `EfficientNetV2(0.125, 0.3, name="efficientnetv2-s")` (V2-S's table:
  stages of 1-5 blocks, 8-32 channels, a 160-wide head; widths where Keras's `round_filters`,
  which has no 10% rule, and timm's `make_divisible` agree), whose stride-2 layers see 72, 36, 18,
  9 and 5 pixel maps. Its preprocessing is `Rescaling(1 / 128, offset=-1)`, no weights; images in
  [0, 255].

The indexes `tests/fixtures/state_dicts/keras_efficientnet.txt` (B0, B3, B7),
`keras_efficientnetv2.txt` (V2-S), `keras_densenet.txt` (121, 201) and `keras_convnext.txt` (tiny,
large) list the keys and shapes of full-size networks (1000 classes); the others' layouts are the
same at other sizes, and each entry costs the test suite 2-4 s. `full FOLDER` writes EfficientNet B0
at 224 px, B3 at 300 px (odd maps: 75, 19), DenseNet-121 and ConvNeXtTiny (layer scales ~U(0.5,
1.5)) at 224 px, 1000 classes, and EfficientNetV2S at 384 px with its logits in float64 too
(`logits64`), to measure parity at full size (docs/pretrained.md).
"""

import sys
from pathlib import Path

import h5py
import keras
import numpy as np
from fixtures_keras import ROOT, perturb, weight_names, write_h5
from keras.src.applications.convnext import ConvNeXt
from keras.src.applications.densenet import DenseNet
from keras.src.applications.efficientnet import EfficientNet
from keras.src.applications.efficientnet_v2 import EfficientNetV2
from safetensors.numpy import save_file

MEAN, STD = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
# Keras's EfficientNetB0..B7: (width, depth, resolution, dropout).
VARIANTS = {
    "b0": (1.0, 1.0, 224, 0.2),
    "b1": (1.0, 1.1, 240, 0.2),
    "b2": (1.1, 1.2, 260, 0.3),
    "b3": (1.2, 1.4, 300, 0.3),
    "b4": (1.4, 1.8, 380, 0.4),
    "b5": (1.6, 2.2, 456, 0.4),
    "b6": (1.8, 2.6, 528, 0.5),
    "b7": (2.0, 3.1, 600, 0.5),
}

# The index's variants: the smallest, B3 (width 1.2: rounded widths) and B7 (depth 3.1: stages of
# up to 13 blocks, `block6m_`). The others' layouts are the same at other widths and depths (each
# index entry adds 2-4 s to the test suite).
INDEXED = ("b0", "b3", "b7")
DENSENETS = {"densenet121": (6, 12, 24, 16), "densenet169": (6, 12, 32, 32)}
DENSENETS |= {"densenet201": (6, 12, 48, 32)}
CONVNEXTS = {
    "convnext_tiny": ((3, 3, 9, 3), (96, 192, 384, 768)),
    "convnext_small": ((3, 3, 27, 3), (96, 192, 384, 768)),
    "convnext_base": ((3, 3, 27, 3), (128, 256, 512, 1024)),
    "convnext_large": ((3, 3, 27, 3), (192, 384, 768, 1536)),
}

# Keras's EfficientNetV2S at width 0.125, depth 0.3 (stages of 1-5 blocks, 8-32 channels, a 160-wide
# head): widths where Keras's `round_filters` (no 10% rule) and timm's `make_divisible` agree.
V2_SMALL = (0.125, 0.3)


def efficientnet(width: float, depth: float, size: int, classes: int, dropout: float = 0.2):
    return EfficientNet(
        width,
        depth,
        size,
        dropout,
        input_shape=(size, size, 3),
        weights=None,
        classes=classes,
        classifier_activation=None,
    )


def normalization(model):
    (layer,) = [layer for layer in model.layers if isinstance(layer, keras.layers.Normalization)]
    return layer


def write_efficientnet(folder: Path, width: float, depth: float, size: int, classes: int) -> None:
    keras.utils.set_random_seed(sum(map(ord, folder.name)))
    model = efficientnet(width, depth, size, classes)
    perturb(model, np.random.default_rng(sum(map(ord, folder.name))))
    layer = normalization(model)
    layer.set_weights([MEAN, STD**2, np.array(0)])  # the published pipeline's function
    layer.finalize_state()  # Keras's layer computes with a copy of its weights, made here
    images = np.random.default_rng(0).uniform(0, 255, (2, size, size, 3)).astype(np.float32)
    logits = np.asarray(model(images, training=False), np.float32)
    folder.mkdir(parents=True, exist_ok=True)
    write_h5(model, folder / "model.h5", libver="latest")
    with h5py.File(folder / "model.h5", "r+") as f:  # the published Normalization, as stored
        group = f[layer.name]
        for leaf, value in (("mean", MEAN), ("variance", STD), ("count", 0)):
            name = f"{layer.name}/{leaf}:0"
            del group[name]
            dtype = np.int64 if leaf == "count" else np.float32
            group.create_dataset(name, data=np.asarray(value, dtype))
    save_file({"images": images, "logits": logits}, folder / "expected.safetensors")
    print(folder, logits.shape, float(np.abs(logits).max()))


def write_index() -> None:
    lines = [
        "# key shape of every weight of Keras's full-size EfficientNets (fixtures_keras_modern.py)"
    ]
    for variant in INDEXED:
        width, depth, size, dropout = VARIANTS[variant]
        lines.append(f"[keras_efficientnet_{variant}]")
        model = efficientnet(width, depth, size, 1000, dropout)
        for layer in model.layers:
            # A fresh session's name, as the published files have it (not `normalization_3`).
            published = "normalization" if layer is normalization(model) else None
            for name, w in zip(weight_names(layer, published), layer.weights, strict=True):
                lines.append(f"{name} {','.join(map(str, w.shape))}")
    (ROOT / "state_dicts" / "keras_efficientnet.txt").write_text("\n".join(lines) + "\n")


def efficientnetv2(variant: str, width: float, depth: float, size: int, classes: int):
    """Keras's `EfficientNetV2` at `variant`'s table (`efficientnetv2-s`: the name picks the
    table and the preprocessing, `Rescaling(1 / 128, offset=-1)` for S/M/L)."""
    return EfficientNetV2(
        width,
        depth,
        size,
        name=f"efficientnetv2-{variant}",
        input_shape=(size, size, 3),
        weights=None,
        classes=classes,
        classifier_activation=None,
    )


def write_efficientnetv2(
    folder: Path, variant: str, width, depth, size: int, classes: int, float64: bool = False
):
    """`float64`: also the logits of the same weights in float64 (`logits64`): full-size V2's
    perturbed blocks are ill-conditioned, so float32 against float32 measures rounding."""
    keras.utils.set_random_seed(sum(map(ord, folder.name)))
    model = efficientnetv2(variant, width, depth, size, classes)
    perturb(model, np.random.default_rng(sum(map(ord, folder.name))))
    images = np.random.default_rng(0).uniform(0, 255, (2, size, size, 3)).astype(np.float32)
    expected = {"images": images, "logits": np.asarray(model(images, training=False), np.float32)}
    if float64:
        keras.config.set_dtype_policy("float64")
        twin = efficientnetv2(variant, width, depth, size, classes)
        keras.config.set_dtype_policy("float32")
        twin.set_weights([w.astype(np.float64) for w in model.get_weights()])
        expected["logits64"] = np.asarray(twin(images.astype(np.float64), training=False))
    folder.mkdir(parents=True, exist_ok=True)
    write_h5(model, folder / "model.h5", libver="latest")
    save_file(expected, folder / "expected.safetensors")
    logits = expected["logits"]
    print(folder, logits.shape, float(np.abs(logits).max()))


def write_efficientnetv2_index() -> None:
    lines = ["# key shape of every weight of Keras's EfficientNetV2S (fixtures_keras_modern.py)"]
    lines.append("[keras_efficientnetv2_s]")  # M and L: the same names, more blocks
    for layer in efficientnetv2("s", 1.0, 1.0, 384, 1000).layers:
        for key, w in zip(weight_names(layer), layer.weights, strict=True):
            lines.append(f"{key} {','.join(map(str, w.shape))}")
    (ROOT / "state_dicts" / "keras_efficientnetv2.txt").write_text("\n".join(lines) + "\n")


def published_densenet_name(name: str) -> str:
    """Keras 3's `conv1_conv` / `conv1_bn` -> Keras 2's `conv1/conv` / `conv1/bn`, the published
    files' names (their other layers' names are Keras 3's)."""
    return {"conv1_conv": "conv1/conv", "conv1_bn": "conv1/bn"}.get(name, name)


def densenet(blocks, size: int, classes: int):
    return DenseNet(
        blocks,
        input_shape=(size, size, 3),
        weights=None,
        classes=classes,
        classifier_activation=None,
    )


def write_densenet(folder: Path, blocks, size: int, classes: int) -> None:
    keras.utils.set_random_seed(sum(map(ord, folder.name)))
    model = densenet(blocks, size, classes)
    perturb(model, np.random.default_rng(sum(map(ord, folder.name))))
    images = np.random.default_rng(0).normal(size=(2, size, size, 3)).astype(np.float32)
    logits = np.asarray(model(images, training=False), np.float32)
    folder.mkdir(parents=True, exist_ok=True)
    write_h5(model, folder / "model.h5", rename=published_densenet_name, libver="latest")
    save_file({"images": images, "logits": logits}, folder / "expected.safetensors")
    print(folder, logits.shape, float(np.abs(logits).max()))


def write_densenet_index() -> None:
    lines = [
        "# key shape of every weight of Keras's full-size DenseNets (fixtures_keras_modern.py)"
    ]
    for name in ("densenet121", "densenet201"):  # 169's layout is between (2 s a network)
        blocks = DENSENETS[name]
        lines.append(f"[keras_{name}]")
        for layer in densenet(blocks, 224, 1000).layers:
            names = weight_names(layer, published_densenet_name(layer.name))
            for key, w in zip(names, layer.weights, strict=True):
                lines.append(f"{key} {','.join(map(str, w.shape))}")
    (ROOT / "state_dicts" / "keras_densenet.txt").write_text("\n".join(lines) + "\n")


def convnext(name: str, depths, widths, size: int, classes: int):
    return ConvNeXt(
        depths,
        widths,
        name=name,
        input_shape=(size, size, 3),
        weights=None,
        classes=classes,
        classifier_activation=None,
    )


def write_convnext(folder: Path, name: str, depths, widths, size: int, classes: int) -> None:
    keras.utils.set_random_seed(sum(map(ord, folder.name)))
    model = convnext(name, depths, widths, size, classes)
    rng = np.random.default_rng(sum(map(ord, folder.name)))
    perturb(model, rng)
    for layer in model.layers:  # at Keras's initial 1e-6 the blocks would hardly reach the logits
        if type(layer).__name__ == "LayerScale":
            layer.set_weights(
                [rng.uniform(0.5, 1.5, w.shape).astype(np.float16) for w in layer.weights]
            )
    images = np.random.default_rng(0).uniform(0, 255, (2, size, size, 3)).astype(np.float32)
    logits = np.asarray(model(images, training=False), np.float32)
    folder.mkdir(parents=True, exist_ok=True)
    write_h5(model, folder / "model.h5", libver="latest")
    save_file({"images": images, "logits": logits}, folder / "expected.safetensors")
    print(folder, logits.shape, float(np.abs(logits).max()))


def write_convnext_index() -> None:
    lines = [
        "# key shape of every weight of Keras's full-size ConvNeXts (fixtures_keras_modern.py)"
    ]
    for name in ("convnext_tiny", "convnext_large"):  # small and base differ in name and sizes
        depths, widths = CONVNEXTS[name]
        lines.append(f"[keras_{name}]")
        for layer in convnext(name, depths, widths, 224, 1000).layers:
            for key, w in zip(weight_names(layer), layer.weights, strict=True):
                if not key.startswith(f"{layer.name}/"):  # an inner layer's, as read
                    key = f"{layer.name}/{key}"
                lines.append(f"{key} {','.join(map(str, w.shape))}")
    (ROOT / "state_dicts" / "keras_convnext.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["full"]:  # `full FOLDER`: the published configurations
        folder = Path(sys.argv[2])
        for variant in ("b0", "b3"):
            width, depth, size, _ = VARIANTS[variant]
            write_efficientnet(folder / f"efficientnet_{variant}", width, depth, size, 1000)
        write_densenet(folder / "densenet121", DENSENETS["densenet121"], 224, 1000)
        tiny = CONVNEXTS["convnext_tiny"]
        write_convnext(folder / "convnext_tiny", "convnext_tiny", *tiny, 224, 1000)
        write_efficientnetv2(folder / "efficientnetv2_s", "s", 1.0, 1.0, 384, 1000, float64=True)
    else:
        write_efficientnet(ROOT / "parity" / "keras_efficientnet", 0.1, 0.5, 72, 10)
        write_index()
        write_densenet(ROOT / "parity" / "keras_densenet", (1, 1, 1, 1), 72, 10)
        write_densenet_index()
        small = ((1, 1, 2, 1), (8, 16, 24, 32))
        write_convnext(ROOT / "parity" / "keras_convnext", "convnext_tiny", *small, 72, 10)
        write_convnext_index()
        write_efficientnetv2(ROOT / "parity" / "keras_efficientnetv2", "s", *V2_SMALL, 72, 10)
        write_efficientnetv2_index()

"""Parity fixtures of Keras Applications' InceptionV3 and InceptionResNetV2, in the HDF5 layout
and the layer naming of its published files.

Standalone, in the TensorFlow environment of `tools/fixtures_keras.py`:

    /work/tfenv/bin/python tools/fixtures_keras_inception.py
    /work/tfenv/bin/python tools/fixtures_keras_inception.py full /tmp/keras  # full size (docs)

Keras's own `InceptionV3(input_shape=(75, 75, 3), classes=10)` and `InceptionResNetV2(...)`
(75 px: the smallest both take), thinned: both build every convolution with their module's
`conv2d_bn(x, filters, ...)`, looked up when called, which `thinned` replaces for the build with
one of `max(int(filters * multiplier), 8)` filters (Slim's `depth_multiplier` / `min_depth` rule,
our networks' fields). InceptionResNetV2's residual up-projections (`conv2d_bn(...,
use_bias=True)`) keep their input's width, as Keras and ours build them. Weights as
`fixtures_keras.perturb` makes them (float16-rounded, stored float16), logits before the softmax
on fixed inputs in float32: `tests/fixtures/parity/<case>/model.h5` and `expected.safetensors`.

Keras names these layers automatically (`conv2d_7`, `batch_normalization_7`), numbering them in
the order it builds them: Keras 2, which wrote the published files, from 1; Keras 3 in a fresh
session from 0 (`conv2d`, `conv2d_1`, ...). Each model is built in a fresh session and its layers
written under Keras 2's numbers, as the published files have them; the tests renumber them back.
The index `tests/fixtures/state_dicts/keras_inception.txt` lists the keys and shapes of both
full-size networks (299 px, 1000 classes), in the files' layer order.
"""

import contextlib
import re
import sys
from pathlib import Path

import keras
import numpy as np
from fixtures_keras import perturb, weight_names, write_h5
from keras.src.applications import inception_resnet_v2, inception_v3
from safetensors.numpy import save_file

ROOT = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
SIZE = 75
MIN_DEPTH = 8  # the tests' load_pretrained arguments: min_depth, and each case's multiplier
CASES = {  # case: (Keras's module, its application, depth_multiplier)
    "keras_inception_v3": (inception_v3, keras.applications.InceptionV3, 0.1),
    "keras_inception_resnet_v2": (
        inception_resnet_v2,
        keras.applications.InceptionResNetV2,
        1 / 16,  # its 40 residual blocks are wide: 0.1 would make a file twice the size
    ),
}
_AUTOMATIC = re.compile(r"(conv2d|batch_normalization)(?:_(\d+))?")


def keras2_name(name: str) -> str:
    """Keras 2's name of a layer Keras 3 named in a fresh session: `conv2d` -> `conv2d_1`."""
    automatic = _AUTOMATIC.fullmatch(name)
    if not automatic:
        return name
    return f"{automatic[1]}_{int(automatic[2] or 0) + 1}"


@contextlib.contextmanager
def thinned(module, multiplier: float):
    """`module.conv2d_bn` building `max(int(filters * multiplier), MIN_DEPTH)` filters, except
    for biased convolutions (InceptionResNetV2's up-projections to the block's input width)."""
    original = module.conv2d_bn

    def conv2d_bn(x, filters, *args, **kwargs):
        if not kwargs.get("use_bias"):
            filters = max(int(filters * multiplier), MIN_DEPTH)
        return original(x, filters, *args, **kwargs)

    module.conv2d_bn = conv2d_bn
    try:
        yield
    finally:
        module.conv2d_bn = original


def build(case: str, size: int, classes: int, thin: bool):
    module, application, multiplier = CASES[case]
    keras.utils.clear_session()  # Keras 3 numbers this model's layers from 0
    with thinned(module, multiplier) if thin else contextlib.nullcontext():
        return application(
            input_shape=(size, size, 3),
            weights=None,
            classes=classes,
            classifier_activation=None,
        )


def write_case(folder: Path, case: str, size: int, classes: int, thin: bool) -> None:
    keras.utils.set_random_seed(sum(map(ord, folder.name)))
    model = build(case, size, classes, thin)
    perturb(model, np.random.default_rng(sum(map(ord, folder.name))))
    images = np.random.default_rng(0).normal(size=(2, size, size, 3)).astype(np.float32)
    logits = np.asarray(model(images, training=False), np.float32)
    folder.mkdir(parents=True, exist_ok=True)
    # The committed fixtures in the newer HDF5 headers: half the size.
    libver = "latest" if thin else "earliest"
    write_h5(model, folder / "model.h5", rename=keras2_name, libver=libver)
    save_file({"images": images, "logits": logits}, folder / "expected.safetensors")
    size_mb = (folder / "model.h5").stat().st_size / 1e6
    print(folder, logits.shape, float(np.abs(logits).max()), f"{size_mb:.2f} MB")


def write_index() -> None:
    lines = [
        "# key shape of every weight of Keras's full-size Inceptions (fixtures_keras_inception.py)"
    ]
    for case in CASES:
        model = build(case, 299, 1000, thin=False)
        lines.append(f"[{case}]")
        for layer in model.layers:
            names = weight_names(layer, keras2_name(layer.name))
            for name, w in zip(names, layer.weights, strict=True):
                lines.append(f"{name} {','.join(map(str, w.shape))}")
    (ROOT / "state_dicts" / "keras_inception.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["full"]:  # `full FOLDER`: the full-size networks at 299 px
        for case in CASES:
            write_case(Path(sys.argv[2]) / case, case, 299, 1000, thin=False)
    else:
        for case in CASES:
            write_case(ROOT / "parity" / case, case, SIZE, 10, thin=True)
        write_index()

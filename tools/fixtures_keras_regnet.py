"""Parity fixtures of Keras Applications' RegNets (`regnetx004.h5`, `regnety008.h5`,
`regnety080.h5`, ...), written by Keras 2's own builder and `save_weights`: Keras 3 has no RegNet,
so this runs tf_keras (Keras 2.21) in the TensorFlow environment of `tools/fixtures_keras.py`:

    /work/tfenv/bin/pip install --no-deps --target /tmp/tfk tf_keras==2.21.0
    PYTHONPATH=/tmp/tfk /work/tfenv/bin/python tools/fixtures_keras_regnet.py
    PYTHONPATH=/tmp/tfk /work/tfenv/bin/python tools/fixtures_keras_regnet.py full /tmp/keras_regnet

Each case: Keras's `RegNet(depths, widths, group_width, block_type, ...)` at a small configuration
(depths (1, 1, 2, 2), widths (8, 16, 32, 64), group width 8: our `w0=8, wa=10, wm=2, depth=6,
group_width=8`), 10 classes, at 72 px (its stride-2 layers see 72, 36, 18, 9 and 5 pixel maps),
with non-trivial weights rounded to float16 (BatchNorm gammas and moving variances ~U(0.5, 1.5),
betas, biases and moving means ~N(0, 0.1)) and stored as float16, and its logits (before the
softmax) on fixed images in [0, 255] (the model rescales them by 1 / 255 itself):
`tests/fixtures/parity/keras_regnet{x,y}/model.h5` and `expected.safetensors`. The classifier is
named by Keras's session counter, as in the published files (`1head_dense`).

`tests/fixtures/state_dicts/keras_regnet.txt` lists the keys and shapes of the full-size
RegNetY008 (RegNetX004's are the same names without squeeze-excite, `XBlock`; RegNetY080's more
blocks). `full FOLDER` writes RegNetX004, RegNetY008 and RegNetY080 at 224 px, 1000 classes, with
their logits in float64 too (`logits64`: Keras's float64 model with the same weights).
"""

import sys
from pathlib import Path

import h5py
import numpy as np
import tf_keras
from safetensors.numpy import save_file
from tf_keras.src.applications.regnet import MODEL_CONFIGS, RegNet

ROOT = Path(__file__).resolve().parents[1] / "tests" / "fixtures"
SMALL = {"depths": (1, 1, 2, 2), "widths": (8, 16, 32, 64), "group_width": 8}
FULL = {"regnetx004": "x004", "regnety008": "y008", "regnety080": "y080"}


def regnet(model: str, config: dict, size: int, classes: int):
    """Keras's RegNet named `model` (`regnety008`: its layers' prefix) with `config`'s stages."""
    return RegNet(
        config["depths"],
        config["widths"],
        config["group_width"],
        model[len("regnet")].upper(),
        224,
        model_name=model,
        weights=None,
        input_shape=(size, size, 3),
        classes=classes,
        classifier_activation=None,
    )


def perturb(model, rng: np.random.Generator) -> None:
    """Non-trivial values for every weight, rounded to float16."""
    for layer in model.layers:
        values = []
        for w, value in zip(layer.weights, layer.get_weights(), strict=True):
            leaf = w.name.rpartition("/")[2].partition(":")[0]
            if leaf in ("gamma", "moving_variance"):
                value = rng.uniform(0.5, 1.5, value.shape)
            elif leaf in ("beta", "bias", "moving_mean"):
                value = rng.normal(0.0, 0.1, value.shape)
            values.append(value.astype(np.float16).astype(np.float32))
        layer.set_weights(values)


def to_float16(source: Path, path: Path) -> None:
    """Keras's `save_weights` file `source` copied to `path` with every dataset as float16 (HDF5's
    newer object headers, `libver='latest'`: a third of the size; readers do not care)."""
    with h5py.File(source) as f, h5py.File(path, "w", libver="latest") as out:

        def copy(name, item):
            if isinstance(item, h5py.Dataset):
                out.create_dataset(name, data=item[...].astype(np.float16))
            else:
                out.require_group(name).attrs.update(item.attrs)

        out.attrs.update(f.attrs)
        f.visititems(copy)


def write(folder: Path, model_name: str, config: dict, size: int, classes: int) -> None:
    tf_keras.utils.set_random_seed(sum(map(ord, folder.name)))
    model = regnet(model_name, config, size, classes)
    perturb(model, np.random.default_rng(sum(map(ord, folder.name))))
    images = np.random.default_rng(0).uniform(0, 255, (2, size, size, 3)).astype(np.float32)
    expected = {"images": images, "logits": np.asarray(model(images, training=False), np.float32)}
    if classes == 1000:  # full size: the same weights in float64 too, `logits64`
        tf_keras.backend.set_floatx("float64")
        twin = regnet(model_name, config, size, classes)
        tf_keras.backend.set_floatx("float32")
        twin.set_weights([w.astype(np.float64) for w in model.get_weights()])
        expected["logits64"] = np.asarray(twin(images.astype(np.float64), training=False))
    folder.mkdir(parents=True, exist_ok=True)
    if classes < 1000:
        model.save_weights(folder / "float32.h5")
        to_float16(folder / "float32.h5", folder / "model.h5")
        (folder / "float32.h5").unlink()
    else:
        model.save_weights(folder / "model.h5")
    save_file(expected, folder / "expected.safetensors")
    logits = expected["logits"]
    print(folder, logits.shape, float(np.abs(logits).max()))


def write_index() -> None:
    lines = ["# key shape of every weight of Keras's RegNetY008 (fixtures_keras_regnet.py)"]
    lines.append("[keras_regnety_008]")
    for layer in regnet("regnety008", MODEL_CONFIGS["y008"], 224, 1000).layers:
        for w in layer.weights:
            lines.append(f"{layer.name}/{w.name.rpartition('/')[2]} {','.join(map(str, w.shape))}")
    (ROOT / "state_dicts" / "keras_regnet.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["full"]:
        for model_name, config in FULL.items():
            write(Path(sys.argv[2]) / model_name, model_name, MODEL_CONFIGS[config], 224, 1000)
    else:
        write(ROOT / "parity" / "keras_regnetx", "regnetx004", SMALL, 72, 10)
        write(ROOT / "parity" / "keras_regnety", "regnety008", SMALL, 72, 10)
        write_index()

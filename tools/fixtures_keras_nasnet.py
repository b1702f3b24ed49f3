"""Parity fixtures of Keras Applications' NASNet (NASNetMobile, NASNetLarge), in the HDF5 layout
of its published files (`NASNet-mobile.h5`, `NASNet-large.h5`).

Standalone, in the TensorFlow environment of `tools/fixtures_keras.py` (whose `write_case` it
uses):

    /work/tfenv/bin/python tools/fixtures_keras_nasnet.py
    /work/tfenv/bin/python tools/fixtures_keras_nasnet.py full /tmp/keras_nasnet  # full size

Each case: Keras's `NASNet(...)` builder (NASNetMobile and NASNetLarge are two of its
configurations) at a small configuration, 10 classes, with non-trivial weights rounded to float16
(`perturb`) and stored as float16, and its logits (before the softmax) on fixed inputs:
`tests/fixtures/parity/<case>/model.h5` and `expected.safetensors` (`images` NHWC, `logits`).

- `keras_nasnet_mobile`: `skip_reduction=False` as NASNetMobile, at 66 px, where every map a
  stride-2 layer reads is even (32, 16, 8, 4).
- `keras_nasnet_large`: `skip_reduction=True` as NASNetLarge, at 72 px: odd maps (35, 9, 5) and
  an even one (18).

The index `tests/fixtures/state_dicts/keras_nasnet.txt` lists the keys and shapes of the two
full-size networks (1000 classes). `full FOLDER` writes NASNetMobile at 224 px and NASNetLarge at
331 px, 1000 classes, to measure parity at full size (docs/pretrained.md).
"""

import sys
from pathlib import Path

from fixtures_keras import ROOT, weight_names, write_case
from keras.src.applications.nasnet import NASNet

# `NASNet(...)` arguments: the published networks, and the fixtures' small ones (penultimate
# filters a multiple of 24 * filter_multiplier ** 2; 192 gives 8 filters per state).
MOBILE = {"penultimate_filters": 1056, "num_blocks": 4, "stem_block_filters": 32}
MOBILE |= {"skip_reduction": False}
LARGE = {"penultimate_filters": 4032, "num_blocks": 6, "stem_block_filters": 96}
LARGE |= {"skip_reduction": True}
SMALL = {"penultimate_filters": 192, "num_blocks": 1, "stem_block_filters": 12}
CASES = {
    "keras_nasnet_mobile": (66, SMALL | {"skip_reduction": False}),
    "keras_nasnet_large": (72, SMALL | {"skip_reduction": True}),
}


def nasnet(config: dict):
    """Keras's `NASNet(...)` at `config`, called as `fixtures_keras.write_case` calls an
    application (NASNet has no `alpha`: its width is `penultimate_filters`)."""

    def application(input_shape, alpha=None, **kwargs):
        del alpha
        return NASNet(input_shape, default_size=input_shape[0], **config, **kwargs)

    return application


def write_index() -> None:
    lines = ["# key shape of every weight of Keras's full-size NASNets (fixtures_keras_nasnet.py)"]
    for architecture, size, config in (
        ("keras_nasnet_mobile", 224, MOBILE),
        ("keras_nasnet_large", 331, LARGE),
    ):
        lines.append(f"[{architecture}]")
        model = nasnet(config)((size, size, 3), weights=None, classifier_activation=None)
        for layer in model.layers:
            for name, w in zip(weight_names(layer), layer.weights, strict=True):
                lines.append(f"{name} {','.join(map(str, w.shape))}")
    (ROOT / "state_dicts" / "keras_nasnet.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    if sys.argv[1:2] == ["full"]:  # `full FOLDER`: the published configurations
        folder = Path(sys.argv[2])
        write_case(folder / "nasnet_mobile", 224, classes=1000, application=nasnet(MOBILE))
        write_case(folder / "nasnet_large", 331, classes=1000, application=nasnet(LARGE))
    else:
        for case, (size, config) in CASES.items():
            write_case(ROOT / "parity" / case, size, application=nasnet(config))
        write_index()

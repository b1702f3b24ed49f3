"""Parity fixtures of the DenseNet family (see tools/parity.py for how to run it).

timm's DenseNet is torchvision's module for module, with torchvision's keys. torchvision's
`.pth` downloads spell the dense layers' keys the old way (`denselayer1.norm.1.weight`); the
index has one such section, made by `old_keys` and checked against timm's own converter.
"""

import re

from parity import ROOT, timm, write_case, write_index  # noqa: F401  (timm first: the shims)
from timm.models.densenet import DenseNet, _filter_torchvision_pretrained  # noqa: E402

_NEW_KEY = re.compile(r"^(.*denselayer\d+\.(?:norm|relu|conv))([12])\.(\w+)$")


def old_keys(state_dict: dict) -> dict:
    """`denselayer{l}.norm1.weight` -> torchvision's saved `denselayer{l}.norm.1.weight`; those
    files predate BatchNorm's `num_batches_tracked`, which is left out too."""
    state_dict = {k: v for k, v in state_dict.items() if not k.endswith("num_batches_tracked")}
    old = {_NEW_KEY.sub(r"\1.\2.\3", k): v for k, v in state_dict.items()}
    assert set(old) != set(state_dict)
    assert set(_filter_torchvision_pretrained(dict(old))) == set(state_dict)
    return old


# name -> (architecture in config.json, the small timm network, image size); the tests hold the
# matching `load_pretrained` keyword arguments.
CASES = {
    "densenet": (
        "densenet121",
        lambda: DenseNet(growth_rate=8, block_config=(1, 2), num_classes=10),
        40,
    ),
}
FULL_SIZE = ["densenet121", "densenet161", "densenet169", "densenet201"]


if __name__ == "__main__":
    for case, (arch, build, size) in CASES.items():
        write_case(case, arch, build, size)
    write_index("densenet", FULL_SIZE)
    model = timm.create_model("densenet121", pretrained=False)
    old = old_keys(model.state_dict())
    with (ROOT / "state_dicts" / "densenet.txt").open("a") as f:
        f.write("[densenet121 torchvision-pth]\n")
        f.writelines(f"{k} {','.join(map(str, v.shape))}\n" for k, v in old.items())

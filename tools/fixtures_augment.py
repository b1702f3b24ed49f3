"""Parity fixtures of the augmentation (tests/fixtures/augment/), written by timm's and
torchvision's own code.

Run on a developer machine with torch and timm (never dependencies of the project; see
tools/parity.py), and torchvision's wheel, whose pure-Python transforms are imported from the
unpacked wheel without its compiled operators (its CUDA build does not load beside CPU torch):

    pip download --no-deps torchvision==0.29.1 -d /tmp/tv
    PYTHONPATH=../shared/tools /tmp/torchenv/bin/python tools/fixtures_augment.py \\
        --torchvision-wheel /tmp/tv/torchvision-0.29.1-*.whl \\
        --photo .venv/lib/python3.11/site-packages/matplotlib/mpl-data/sample_data/grace_hopper.jpg

Written with torch 2.13.0 (CPU), timm 1.0.31, torchvision 0.29.1, Pillow 13.0.0, numpy 2.4.6:

- `ops.npz`: a 32x24 crop of the photograph (matplotlib's grace_hopper.jpg) and, for every timm
  operation at magnitude 7.3, each sign (+ bicubic, - bilinear); torchvision's TrivialAugment Wide
  operations at magnitude bin 23 of 31, each sign (+ nearest, - bilinear); torchvision's
  brightness, contrast and saturation at one factor each.
- `policies.json`: timm's parse of RandAugment / AutoAugment strings, TrivialAugment's bins.
- `mixup.npz`: timm's `Mixup` on a small batch in each mode and setting, with the lam, box and
  choice it drew; `rand_bbox` boxes with their centre draws.
- `erasing.npz`: the boxes timm's `RandomErasing` erased on 4000 images (one box each), and the
  erased share of 4000 images with up to 3 boxes.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from PIL import Image
from torchvision_wheel import import_torchvision  # tools/, beside this script

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "augment"
PHOTO_SIZE = (32, 24)  # w, h: not square, so that a swapped axis shows
TRAIN_SIZE = 32  # the training size timm's absolute translations scale with
MEAN_COLOR = (124, 116, 104)  # timm's img_mean for ImageNet's mean
TIMM_MAGNITUDE = 7.3  # not an integer, as after timm's magnitude noise
TA_BIN = 23  # of 31


class FixedRandom:
    """Stands in for the `random` module inside timm's operations: the sign and the blur radius
    as the fixture asks."""

    def __init__(self, negate: bool, draw: float = 0.3):
        self.value, self.draw = (0.9 if negate else 0.1), draw

    def random(self):
        return self.value

    def uniform(self, a, b):
        return a + (b - a) * self.draw


def photo(path: str) -> Image.Image:
    image = Image.open(path).convert("RGB")
    w, h = image.size
    return image.resize(PHOTO_SIZE, Image.BICUBIC, box=(w * 0.15, h * 0.05, w * 0.85, h * 0.6))


def timm_ops(img: Image.Image, out: dict) -> None:
    from timm.data import auto_augment as aa

    negating = {  # timm's level functions that flip the sign at random (_randomly_negate)
        aa._rotate_level_to_arg,
        aa._shear_level_to_arg,
        aa._translate_abs_level_to_arg,
        aa._translate_rel_level_to_arg,
        aa._enhance_increasing_level_to_arg,
    }
    for name in aa.NAME_TO_OP:
        for negate in (False, True) if aa.LEVEL_TO_ARG[name] in negating else (False,):
            aa.random = FixedRandom(negate)
            hparams = dict(
                translate_const=int(TRAIN_SIZE * 0.45),
                img_mean=MEAN_COLOR,
                interpolation=Image.BILINEAR if negate else Image.BICUBIC,
            )
            op = aa.AugmentOp(name, prob=1.0, magnitude=TIMM_MAGNITUDE, hparams=hparams)
            out[f"timm {name} {'-' if negate else '+'}"] = np.asarray(op(img))


def ta_ops(img: Image.Image, out: dict, meta: dict) -> None:
    from torchvision.transforms import InterpolationMode
    from torchvision.transforms.autoaugment import TrivialAugmentWide, _apply_op

    space = TrivialAugmentWide()._augmentation_space(31)
    for name, (magnitudes, signed) in space.items():
        values = [float(m) for m in magnitudes] if magnitudes.ndim else []
        meta[name] = [values, bool(signed)]
        for sign in (1, -1) if signed else (1,):
            magnitude = sign * values[TA_BIN] if values else 0.0
            mode = InterpolationMode.NEAREST if sign > 0 else InterpolationMode.BILINEAR
            result = _apply_op(img, name, magnitude, interpolation=mode, fill=None)
            out[f"ta {name} {'-' if sign < 0 else '+'}"] = np.asarray(result)


def jitter_ops(img: Image.Image, out: dict) -> None:
    from torchvision.transforms import functional as F

    for label, fn, factor in (
        ("brightness", F.adjust_brightness, 0.7),
        ("contrast", F.adjust_contrast, 1.3),
        ("saturation", F.adjust_saturation, 0.6),
    ):
        out[f"jitter {label} {factor}"] = np.asarray(fn(img, factor))


POLICY_STRINGS = [
    "rand-m9-mstd0.5-inc1",
    "rand-m9-mstd0.5",
    "rand-m7-n3-p0.7-mmax12",
    "rand-m10-mstd101-tweights",
    "rand-m6-t3a",
    "rand-m6-t3aw",
    "original",
    "originalr-mstd0.5",
    "v0",
    "v0r",
    "3a",
]


def policies(ta_space: dict) -> dict:
    from timm.data import auto_augment as aa

    def ops(policy):
        return [[op.name, op.prob, op.magnitude] for op in policy]

    result = {"ta_wide": ta_space}
    for text in POLICY_STRINGS:
        hparams = dict(translate_const=100, img_mean=MEAN_COLOR)
        if text.startswith("rand"):
            t = aa.rand_augment_transform(text, hparams)
            weights = None if t.choice_weights is None else [float(w) for w in t.choice_weights]
            first = t.ops[0].hparams
            result[text] = {
                "ops": ops(t.ops),
                "num_layers": t.num_layers,
                "weights": weights,
                "std": first.get("magnitude_std", 0.0),
                "mmax": first.get("magnitude_max"),
            }
        else:
            t = aa.auto_augment_transform(text, hparams)
            result[text] = {
                "policy": [ops(sub) for sub in t.policy],
                "std": t.policy[0][0].hparams.get("magnitude_std", 0.0),
            }
    return result


MIXUP_CASES = {
    "mixup": dict(mixup_alpha=0.8),
    "cutmix": dict(mixup_alpha=0.0, cutmix_alpha=1.0),
    "both": dict(mixup_alpha=0.8, cutmix_alpha=1.0, switch_prob=0.5),
    "minmax": dict(mixup_alpha=0.0, cutmix_minmax=(0.2, 0.8)),
    "prob": dict(mixup_alpha=0.8, cutmix_alpha=1.0, prob=0.5),
}


def mixup_cases(out: dict) -> None:
    """Each case and mode: timm's input and output, and what it drew, per example."""
    import torch
    from timm.data import mixup as m

    drawn: dict = {}

    def record(name, fn):
        def recorded(*args, **kwargs):
            result = fn(*args, **kwargs)
            drawn.setdefault(name, []).append(result)
            return result

        return recorded

    m.cutmix_bbox_and_lam = record("box", m.cutmix_bbox_and_lam)
    for name in ("_params_per_batch", "_params_per_elem"):
        setattr(m.Mixup, name, record("params", getattr(m.Mixup, name)))
    batch, classes, shape = 6, 5, (3, 6, 8)
    generator = np.random.default_rng(0)
    for case, kwargs in MIXUP_CASES.items():
        for mode in ("batch", "pair", "elem"):
            for seed in range(2 if case == "both" else 1):
                drawn.clear()
                np.random.seed(100 * seed + len(case))
                x = generator.normal(size=(batch, *shape)).astype(np.float32)
                target = generator.integers(0, classes, batch)
                mixup = m.Mixup(**kwargs, mode=mode, label_smoothing=0.1, num_classes=classes)
                mixed, soft = mixup(torch.from_numpy(x.copy()), torch.from_numpy(target))
                lam, cutmix, box = per_example(drawn, mode, batch)
                prefix = f"{case} {mode} {seed} "
                out[prefix + "x"], out[prefix + "target"] = x, target
                out[prefix + "mixed"], out[prefix + "soft"] = mixed.numpy(), soft.numpy()
                out[prefix + "lam"] = lam
                out[prefix + "cutmix"], out[prefix + "box"] = cutmix, box
    for i, lam in enumerate(np.random.default_rng(1).uniform(0, 1, 40)):
        h, w = (8, 10) if i % 2 else (7, 9)
        np.random.seed(i)
        box = m.rand_bbox((h, w), lam)
        np.random.seed(i)
        cy, cx = np.random.randint(0, h), np.random.randint(0, w)
        out[f"bbox {i}"] = np.asarray([h, w, cy, cx, *box], np.int64)
        out[f"bbox {i} lam"] = np.float64(lam)


def per_example(drawn: dict, mode: str, batch: int):
    """Each example's final lam, whether it took a cutmix box, and the box, from timm's draws."""
    (params,) = drawn["params"]
    boxes = iter(drawn.get("box", []))
    lam_raw, use_cutmix = (np.full(batch, p) for p in params) if mode == "batch" else params
    draws = {"batch": 1, "pair": batch // 2, "elem": batch}[mode]
    lam, cutmix, box = np.ones(batch, np.float32), np.zeros(batch, bool), np.zeros((batch, 4))
    for i in range(draws):
        members = (
            range(batch) if mode == "batch" else (i, batch - 1 - i) if mode == "pair" else (i,)
        )
        if lam_raw[i] == 1.0:
            continue
        if use_cutmix[i]:
            (yl, yh, xl, xh), corrected = next(boxes)
            for j in members:
                lam[j], cutmix[j], box[j] = corrected, True, (yl, yh, xl, xh)
        else:
            for j in members:
                lam[j] = lam_raw[i]
    return lam, cutmix, box.astype(np.int64)


def erasing(out: dict) -> None:
    import random

    import torch
    from timm.data.random_erasing import RandomErasing

    torch.manual_seed(0)
    random.seed(0)
    height, width, n = 20, 36, 4000
    ones = torch.ones((n, 3, height, width))
    one_box = RandomErasing(0.5, mode="const", max_count=1, device="cpu")(ones.clone())
    boxes = []
    for image in (one_box[:, 0] == 0).numpy():
        rows, cols = np.nonzero(image.any(1))[0], np.nonzero(image.any(0))[0]
        boxes.append(
            [rows[0], cols[0], rows[-1] - rows[0] + 1, cols[-1] - cols[0] + 1]
            if len(rows)
            else [-1, -1, 0, 0]
        )
    out["size"] = np.asarray([height, width])
    out["boxes"] = np.asarray(boxes, np.int16)  # top, left, h, w; -1: nothing erased
    three = RandomErasing(0.5, mode="const", max_count=3, device="cpu")(ones.clone())
    out["erased_share_count3"] = (three[:, 0] == 0).float().mean((1, 2)).numpy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--torchvision-wheel", required=True)
    parser.add_argument("--photo", required=True)
    args = parser.parse_args()
    import_torchvision(args.torchvision_wheel)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / ".." / "shared" / "tools"))
    from timm_compat import import_timm

    import_timm()
    OUT.mkdir(parents=True, exist_ok=True)
    img = photo(args.photo)
    ops, ta_space = {"photo": np.asarray(img)}, {}
    timm_ops(img, ops)
    ta_ops(img, ops, ta_space)
    jitter_ops(img, ops)
    np.savez_compressed(OUT / "ops.npz", **ops)
    (OUT / "policies.json").write_text(json.dumps(policies(ta_space), indent=1) + "\n")
    mixup: dict = {}
    mixup_cases(mixup)
    np.savez_compressed(OUT / "mixup.npz", **mixup)
    erased: dict = {}
    erasing(erased)
    np.savez_compressed(OUT / "erasing.npz", **erased)
    for path in sorted(OUT.iterdir()):
        print(f"{path.stat().st_size:>8} {path}")


if __name__ == "__main__":
    main()

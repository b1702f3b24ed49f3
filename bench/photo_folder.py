"""Writes an image folder of JPEG photographs for the input-pipeline benchmarks.

    python bench/photo_folder.py /tmp/photos --images 512

`DIR/train/<class>/*.jpg` and `DIR/val/<class>/*.jpg` (2 classes): random crops of a photograph
(matplotlib's grace_hopper.jpg, or `--photo`) resized to ImageNet's typical sizes (sides of 333
to 500 pixels, JPEG quality 90), so that decoding and cropping cost what they cost on ImageNet's
files. `bench/input_pipeline.py` and `bench/timm_input_pipeline.py` read the same folder.
"""

import argparse
from pathlib import Path

import numpy as np
from PIL import Image


def sample_photo() -> str:
    from matplotlib import cbook  # the test extra's matplotlib holds the photograph

    return cbook.get_sample_data("grace_hopper.jpg", asfileobj=False)


def write(folder: Path, images: int, photo: str, seed: int = 0) -> None:
    source = Image.open(photo).convert("RGB")
    w, h = source.size
    rng = np.random.default_rng(seed)
    for split, count in (("train", images), ("val", max(images // 8, 2))):
        for i in range(count):
            cw, ch = rng.integers(w // 2, w + 1), rng.integers(h // 2, h + 1)
            x, y = rng.integers(0, w - cw + 1), rng.integers(0, h - ch + 1)
            side = rng.integers(333, 501)
            size = (side, int(side * ch / cw)) if cw >= ch else (int(side * cw / ch), side)
            image = source.resize(size, Image.BICUBIC, box=(x, y, x + cw, y + ch))
            path = folder / split / f"class{i % 2}" / f"{i:05d}.jpg"
            path.parent.mkdir(parents=True, exist_ok=True)
            image.save(path, quality=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--images", type=int, default=512, help="training images")
    parser.add_argument("--photo", help="the photograph to crop; default: grace_hopper.jpg")
    args = parser.parse_args()
    write(args.folder, args.images, args.photo or sample_photo())
    print(f"wrote {args.folder}/train and {args.folder}/val")


if __name__ == "__main__":
    main()

"""Lists every image file under a folder that the training pipeline cannot decode, at once.

    python -m nets_training.check_images DIR        # e.g. an imagefolder's DIR (train/ and val/)

A training run stops at the first unreadable file (or skips it, with `data.skip_unreadable`);
this decodes each .jpg/.jpeg/.png file exactly as the pipeline does, in threads, and prints one
line per unreadable file, then a count. The exit status is 1 if any file is unreadable.
"""

import argparse
import sys
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from nets_training.data import available_cpus, open_image
from nets_training.sources import IMAGE_EXTENSIONS, DataError


def image_files(folder: Path) -> list[Path]:
    """Every file under `folder` that the imagefolder source reads, in sorted order."""
    return sorted(
        p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS
    )


def _error(path: Path) -> str | None:
    try:
        open_image(str(path))
    except DataError as e:
        return str(e)
    return None


def unreadable(paths: Iterable[Path], threads: int | None = None) -> list[str]:
    """The decoding error of each file of `paths` that cannot be read, in the order given."""
    with ThreadPoolExecutor(threads or available_cpus()) as pool:  # Pillow decodes without the GIL
        return [error for error in pool.map(_error, paths) if error is not None]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument(
        "--threads", type=int, default=None, help="default: one per CPU this process may use"
    )
    args = parser.parse_args(argv)
    bad = 0
    for folder in args.folders:
        if not folder.is_dir():
            print(f"check_images: {folder}: not a folder", file=sys.stderr)
            return 2
        paths = image_files(folder)
        errors = unreadable(paths, args.threads)
        for error in errors:
            print(error)
        print(f"{folder}: {len(paths)} images, {len(errors)} unreadable", file=sys.stderr)
        bad += len(errors)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""Datasets as random-access sources of `{'image', 'label'}` records, one function per `data.name`.

A source's image is either a uint8 array of the dataset's fixed size (digits, synthetic, CIFAR:
the whole set lives in memory and the device resizes it if the network wants another size) or a
file path / array of any size (imagefolder, tfds), decoded and cropped to `image_size` on the host.
Everything here is picklable, so grain's worker processes can read it.
"""

import dataclasses
import functools
import io
import pickle
import tarfile
from pathlib import Path
from typing import Any

import numpy as np

from nets_training import download as fetch
from nets_training.config import DataConfig
from nets_training.errors import UserError

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")
SYNTHETIC_CLASSES = 1000  # synthetic data's classes when model.num_classes is unset: ImageNet's


class DataError(UserError):
    """A missing or unreadable dataset file."""


@dataclasses.dataclass(frozen=True)
class Dataset:
    """A train and an eval split, and what the pipeline needs to know about them."""

    train: Any  # random access: len(), [i] -> {'image': ..., 'label': int}
    eval: Any
    num_classes: int
    channels: int
    fixed_size: int | None  # the in-memory images' size; None: variable-size files or arrays
    mean: tuple[float, ...]
    std: tuple[float, ...]
    crop: str  # the default training crop: 'none', 'pad' or 'resized'
    flip: bool  # the default training flip
    crop_padding: int = 4  # the default padding of crop='pad', in the dataset's pixels
    epochs: float = 90  # the default length: ImageNet's 90 epochs (Goyal et al. 2017)


@dataclasses.dataclass(frozen=True)
class ArraySource:
    """In-memory uint8 images [n, h, w, c] and int labels [n]."""

    images: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"image": self.images[index], "label": np.int32(self.labels[index])}


@dataclasses.dataclass(frozen=True)
class FileSource:
    """Image files; the pipeline decodes them (so a bad file fails with its name)."""

    paths: tuple[str, ...]
    labels: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"image": self.paths[index], "label": np.int32(self.labels[index])}


# ---------------------------------------------------------------------------------------------


DIGITS_FILE = Path(__file__).parent / "datasets" / "digits.csv.gz"
DIGITS_TEST = 360  # the last 360 of 1,797 images (20%) are the test split; classes are balanced


def digits() -> Dataset:
    """UCI optdigits, as scikit-learn ships it: 8x8 grayscale, 0..16 per pixel, 10 classes."""
    table = np.loadtxt(DIGITS_FILE, delimiter=",", dtype=np.int64)
    images = (table[:, :64] * 255 // 16).astype(np.uint8).reshape(-1, 8, 8, 1)
    labels = table[:, 64]
    split = len(labels) - DIGITS_TEST
    return Dataset(
        train=ArraySource(images[:split], labels[:split]),
        eval=ArraySource(images[split:], labels[split:]),
        num_classes=10,
        channels=1,
        fixed_size=8,
        mean=(0.3046,),  # of the training split
        std=(0.3754,),
        crop="pad",
        flip=False,  # digits are not mirror-symmetric
        crop_padding=1,  # shifts of up to 1 pixel of 8
        epochs=20,  # 97.2-98.3% top-1 with configs/default.yaml, by CPU
    )


SYNTHETIC_IMAGES = 16  # the distinct images synthetic records cycle over


@dataclasses.dataclass(frozen=True)
class SyntheticSource:
    """`length` records cycling over 16 fixed random images; labels cycle over the classes.

    The images are drawn once per process, at the first record (not pickled to data workers):
    drawing a 224 px image costs 0.8 ms under the GIL, which capped a GPU run at 2,600 img/s.
    """

    length: int
    size: int
    num_classes: int

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> dict[str, Any]:
        image = _synthetic_images(self.size)[index % SYNTHETIC_IMAGES]
        return {"image": image, "label": np.int32(index % self.num_classes)}


@functools.cache
def _synthetic_images(size: int) -> np.ndarray:
    """`SYNTHETIC_IMAGES` uint8 images `[size, size, 3]`, image i from seed i; read-only."""
    shape = (size, size, 3)
    images = np.stack(
        [np.random.default_rng(i).integers(0, 256, shape) for i in range(SYNTHETIC_IMAGES)]
    ).astype(np.uint8)
    images.flags.writeable = False
    return images


def synthetic(examples: int, size: int, num_classes: int) -> Dataset:
    """Random images for throughput measurements: the model's work without the data's."""
    return Dataset(
        train=SyntheticSource(examples, size, num_classes),
        eval=SyntheticSource(max(1, examples // 10), size, num_classes),
        num_classes=num_classes,
        channels=3,
        fixed_size=size,
        mean=IMAGENET_MEAN,
        std=IMAGENET_STD,
        crop="none",
        flip=False,
        epochs=1,
    )


CIFAR_URL = "https://www.cs.toronto.edu/~kriz/cifar.html"


def cifar(directory: str | None, num_classes: int, download: bool = False) -> Dataset:
    """CIFAR-10/100 from the python-version archive (`cifar-10-python.tar.gz`) or its folder.

    `directory` may be the archive itself, the extracted `cifar-10-batches-py` (`cifar-100-python`)
    folder, or a folder holding either; None: the archive in the cache, where
    `python -m nets_training.download cifar10` puts it. `download`: where the data is missing,
    download the archive there (into the cache, the folder, or as the archive named) first.
    """
    if num_classes == 10:
        names, train_files, eval_files, key = (
            "cifar-10",
            [f"data_batch_{i}" for i in range(1, 6)],
            ["test_batch"],
            b"labels",
        )
    else:
        names, train_files, eval_files, key = "cifar-100", ["train"], ["test"], b"fine_labels"
    folder = {"cifar-10": "cifar-10-batches-py", "cifar-100": "cifar-100-python"}[names]
    name, archive_name = f"cifar{num_classes}", f"{names}-python.tar.gz"
    where = directory or str(fetch.destination(name))
    try:
        read = _cifar_reader(_require_path(where), archive_name, folder)
    except DataError as e:  # no data there: download it, or say where it comes from
        if download:
            read = _cifar_reader(fetch.download(name, directory), archive_name, folder)
        elif directory is None:
            raise DataError(
                f"{names.upper()}: data.dir is unset and {archive_name} is not in the cache "
                f"({fetch.cache_folder()}): download it with `{fetch.COMMAND} {name}` (or "
                "--set data.download=true), or give your copy with --set data.dir=PATH"
            ) from None
        else:
            raise DataError(
                f"{e}; download the python version, {archive_name}, from {CIFAR_URL} "
                f"and give it (or the folder it extracts to) with --set data.dir=PATH, or "
                "--set data.download=true to download it there"
            ) from None

    def load(files: list[str]) -> ArraySource:
        batches = [read(name) for name in files]
        data = np.concatenate([b[b"data"] for b in batches])
        images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
        return ArraySource(np.ascontiguousarray(images), np.concatenate([b[key] for b in batches]))

    mean, std = {
        10: ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
        100: ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
    }[num_classes]
    # He et al. 2015's recipe: 4-pixel pad-and-crop, flips, 64k steps of 128 (164 epochs).
    return Dataset(
        load(train_files), load(eval_files), num_classes, 3, 32, mean, std, "pad", True, 4, 164
    )


def _cifar_reader(path: Path, archive_name: str, folder: str):
    """Returns `read(name) -> dict` over the archive or the extracted folder at `path`."""
    candidates = [path, path / archive_name, path / folder]
    archive = next((p for p in candidates if p.is_file() and p.name.endswith(".tar.gz")), None)
    if archive is not None:
        with tarfile.open(archive, "r:gz") as tar:
            members = {Path(m.name).name: m for m in tar.getmembers() if m.isfile()}
            blobs = {name: tar.extractfile(m).read() for name, m in members.items()}

        def read(name: str) -> dict:
            if name not in blobs:
                raise DataError(
                    f"{archive}: no member named {name!r}; is this the {folder} archive?"
                )
            return _unpickle(io.BytesIO(blobs[name]), f"{archive}:{name}")

        return read
    extracted = next(
        (
            p
            for p in (path / folder, path)
            if (p / "batches.meta").exists() or (p / "meta").exists()
        ),
        None,
    )
    if extracted is None:
        raise DataError(f"data.dir {path}: neither {archive_name} nor an extracted {folder}/ here")

    def read(name: str) -> dict:
        file = extracted / name
        if not file.is_file():
            raise DataError(f"{file}: missing from the extracted {folder} folder")
        with open(file, "rb") as f:
            return _unpickle(f, str(file))

    return read


def _unpickle(f, name: str) -> dict:
    try:
        return pickle.load(f, encoding="bytes")  # CIFAR's own format; only read trusted files
    except Exception as e:
        raise DataError(f"{name}: not a CIFAR python batch ({e})") from None


def imagefolder(directory: str | None) -> Dataset:
    """`DIR/train/<class>/*.{jpg,png}` and `DIR/val/<class>/...`; classes are train's folders."""
    root = _require_path(directory)
    train_dir, val_dir = root / "train", root / "val"
    for d in (train_dir, val_dir):
        if not d.is_dir():
            raise DataError(f"data.dir {root}: expected {d}/<class>/*.jpg|png (imagefolder layout)")
    classes = sorted(p.name for p in train_dir.iterdir() if p.is_dir())
    if len(classes) < 2:  # one class would train to 100% and learn nothing
        found = f"only one class folder, {classes[0]!r}" if classes else "no class folders"
        raise DataError(f"{train_dir}: {found}; a classifier needs at least 2 classes")
    unknown = sorted({p.name for p in val_dir.iterdir() if p.is_dir()} - set(classes))
    if unknown:
        raise DataError(f"{val_dir}: class folders not in {train_dir}: {', '.join(unknown)}")

    def images(folder: Path) -> list[str]:  # a val/ class folder may be missing: no images
        found = sorted(folder.iterdir()) if folder.is_dir() else []
        return [str(f) for f in found if f.suffix.lower() in IMAGE_EXTENSIONS]

    def files(split: Path) -> FileSource:
        found = [(label, images(split / name)) for label, name in enumerate(classes)]
        if split == train_dir:  # an empty class would be a logit that no image ever trains
            empty = [classes[label] for label, paths in found if not paths]
            if empty:
                raise DataError(
                    f"{train_dir}: no {'/'.join(IMAGE_EXTENSIONS)} images in the class "
                    f"folder(s) {', '.join(empty)}; add images or remove the folder(s)"
                )
        pairs = [(path, label) for label, paths in found for path in paths]
        if not pairs:
            raise DataError(f"{split}: no {'/'.join(IMAGE_EXTENSIONS)} images")
        paths, labels = zip(*pairs, strict=True)
        return FileSource(paths, labels)

    return Dataset(
        files(train_dir),
        files(val_dir),
        len(classes),
        3,
        None,
        IMAGENET_MEAN,
        IMAGENET_STD,
        "resized",
        True,
    )


def tfds(name: str, directory: str | None) -> Dataset:
    """A TensorFlow Datasets dataset through its random-access `tfds.data_source`."""
    try:
        import tensorflow_datasets as tfds_lib
    except ImportError:
        raise DataError(
            "data.name=tfds needs tensorflow-datasets: pip install tensorflow-datasets "
            "(or use data.name=imagefolder with the images on disk)"
        ) from None
    builder = tfds_lib.builder(name, data_dir=directory)
    splits = builder.info.splits
    eval_split = next((s for s in ("validation", "test") if s in splits), None)
    if "train" not in splits or eval_split is None:
        raise DataError(
            f"tfds {name}: needs a train and a validation or test split, has {list(splits)}"
        )
    source = lambda split: tfds_lib.data_source(name, split=split, data_dir=directory)  # noqa: E731
    return Dataset(
        source("train"),
        source(eval_split),
        builder.info.features["label"].num_classes,
        3,
        None,
        IMAGENET_MEAN,
        IMAGENET_STD,
        "resized",
        True,
    )


def _require_path(directory: str | None) -> Path:
    if not directory:
        raise DataError("data.dir is required for this dataset")
    path = Path(directory).expanduser()
    if not path.exists():
        raise DataError(f"data.dir {path}: no such file or directory")
    return path


# The data keys that only some sources read (`load`): the others ignore them.
READ_BY = {
    "dir": ("cifar10", "cifar100", "imagefolder", "tfds"),
    "download": ("cifar10", "cifar100"),
    "tfds_name": ("tfds",),
    "synthetic_examples": ("synthetic",),
}


def load(
    data: DataConfig, image_size: int | None = None, num_classes: int | None = None
) -> Dataset:
    """The dataset `data.name` names. Synthetic data is made to the network's measure: it needs
    the network's `image_size` and `num_classes`, which other sources ignore."""
    if data.name == "digits":
        return digits()
    if data.name == "synthetic":
        return synthetic(data.synthetic_examples, image_size, num_classes)
    if data.name in ("cifar10", "cifar100"):
        return cifar(data.dir, int(data.name[5:]), data.download)
    if data.name == "imagefolder":
        return imagefolder(data.dir)
    return tfds(data.tfds_name, data.dir)

"""Input pipelines on grain: deterministic, the same however many processes share them.

Training: source -> shuffle (a new order every epoch) -> endless repeat -> augment (each record's
randomness derives from the seed and its place in the stream) -> local batches, of which process
p of P takes p, p + P, p + 2P, ... -> threads and, with `data.workers`, worker processes. So the
global batch of step s is the same whether one process feeds every device or P processes each
feed theirs, and the stream's position is the step itself: a run resumes on any process count.

Images leave the pipeline as uint8 `[batch, h, w, c]` (a quarter of float32's bytes to move);
the train and eval steps scale, resize and normalise them on the device (`nets_training.steps`).
"""

import dataclasses
import functools
import math
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable, Sequence
from typing import Any

import grain
import numpy as np
from absl import flags, logging
from grain.multiprocessing import SharedMemoryArray
from PIL import Image

from nets_training.config import DataConfig
from nets_training.image_policies import RESAMPLE, HostAugment, host_augment, pick
from nets_training.sources import DataError, Dataset
from nets_weights.images import ImageError, decode

EVAL_CROP_FRACTION = 0.875  # eval: the centre 87.5% square, the Inception/ResNet convention


def open_image(image: Any) -> Image.Image:
    """A PIL image from a file path (`nets_weights.images.decode`: upright RGB, 16-bit samples
    scaled) or an array (any size); errors name the file."""
    if isinstance(image, str | bytes):
        try:
            return decode(image)
        except ImageError as e:
            raise DataError(str(e)) from None
    array = np.asarray(image)
    return Image.fromarray(array[..., 0] if array.shape[-1] == 1 else array)


_skipped: set[str] = set()  # the unreadable files this process has skipped
_skipped_lock = threading.Lock()


def log_skipped(error: DataError) -> None:
    """Logs an unreadable file (`data.skip_unreadable`) once, with how many this process has
    skipped so far."""
    with _skipped_lock:
        if str(error) in _skipped:
            return
        _skipped.add(str(error))
        count = len(_skipped)
    logging.warning(
        "data.skip_unreadable: skipped %s (%d unreadable file(s) so far; "
        "`python -m nets_training.check_images DIR` lists them all)",
        error,
        count,
    )


def center_crop(image: Image.Image, size: int, fraction: float) -> Image.Image:
    """The centred square of side `fraction * min(w, h)`, resized to `size`."""
    w, h = image.size
    side = fraction * min(w, h)
    left, top = (w - side) / 2, (h - side) / 2
    return image.resize((size, size), Image.BILINEAR, box=(left, top, left + side, top + side))


def random_resized_crop(
    image: Image.Image,
    size: int,
    min_area: float,
    rng: np.random.Generator,
    resample: int = Image.BILINEAR,
) -> Image.Image:
    """Inception's crop: a random area in [min_area, 1] and aspect ratio in [3/4, 4/3]."""
    w, h = image.size
    for _ in range(10):
        area = w * h * rng.uniform(min_area, 1.0)
        ratio = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
        cw, ch = round(math.sqrt(area * ratio)), round(math.sqrt(area / ratio))
        if 0 < cw <= w and 0 < ch <= h:
            x, y = rng.integers(0, w - cw + 1), rng.integers(0, h - ch + 1)
            return image.resize((size, size), resample, box=(x, y, x + cw, y + ch))
    return center_crop(image, size, 1.0)


def pad_crop(image: np.ndarray, padding: int, rng: np.random.Generator) -> np.ndarray:
    """He et al.'s CIFAR crop: zero-pad by `padding` pixels, crop the original size at random."""
    h, w = image.shape[:2]
    padded = np.pad(image, ((padding, padding), (padding, padding), (0, 0)))
    y, x = rng.integers(0, 2 * padding + 1, size=2)
    return padded[y : y + h, x : x + w]


def mirror(image: Image.Image | np.ndarray) -> Image.Image | np.ndarray:
    """`image` flipped left to right. A PIL image is flipped by Pillow: copying numpy's reversed
    view of a 224x224 RGB array costs about 0.4 CPU ms, Pillow's flip under 0.1 (one image in
    two is flipped: 0.17 of ResNet-50's 2.5 CPU ms an image on a 2-core VM, 0.2 of 2.0 on a
    16-core Xeon host)."""
    if isinstance(image, Image.Image):
        return image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return image[:, ::-1]


def _as_array(image: Image.Image | np.ndarray, channels: int) -> np.ndarray:
    array = np.asarray(image, dtype=np.uint8)
    return array[..., None] if channels == 1 and array.ndim == 2 else array


@dataclasses.dataclass(frozen=True)
class TrainTransform:
    """Decodes (files) and augments one record; `rng` is grain's per-record generator."""

    image_size: int  # the size variable-size images are cropped to
    fixed_size: bool  # in-memory images keep their size; the device resizes them
    channels: int
    crop: str
    padding: int
    min_area: float
    flip: bool
    skip_unreadable: bool = False  # an unreadable file gives None (see `fill_skipped`)
    resample: tuple[int, ...] = (Image.BILINEAR,)  # the crop's interpolation; two: one drawn
    augment: HostAugment | None = None  # the image policy and colour jitter, after the flip

    def __call__(self, record: dict[str, Any], rng: np.random.Generator) -> dict[str, Any] | None:
        try:
            return self._augment(record, rng)
        except DataError as e:
            if not self.skip_unreadable:
                raise
            log_skipped(e)
            return None

    def _augment(self, record: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
        image = record["image"]  # an array, or a file's path; a PIL image once cropped
        if self.crop == "resized":
            size = image.shape[0] if self.fixed_size else self.image_size
            resample = pick(self.resample, rng)
            image = random_resized_crop(open_image(image), size, self.min_area, rng, resample)
        elif not self.fixed_size:
            image = center_crop(open_image(image), self.image_size, 1.0)
        if self.crop == "pad":
            image = pad_crop(_as_array(image, self.channels), self.padding, rng)
        if self.flip and rng.random() < 0.5:
            image = mirror(image)
        if self.augment is not None:
            if not isinstance(image, Image.Image):
                image = open_image(np.ascontiguousarray(image))
            image = self.augment(image, rng)
        image = np.ascontiguousarray(_as_array(image, self.channels))
        return {"image": image, "label": record["label"]}


def fill_skipped(records: Sequence[dict[str, Any] | None]) -> dict[str, np.ndarray]:
    """A training batch whose skipped records (None) are replaced by the batch's readable ones in
    turn: the batch keeps its size (one compiled step, one sharding), and the pipeline keeps its
    structure, so a run stopped by a bad file resumes with `data.skip_unreadable` at its place."""
    readable = [r for r in records if r is not None]
    if not readable:
        raise DataError(f"every image of a batch of {len(records)} was unreadable")
    filled = [r if r is not None else readable[i % len(readable)] for i, r in enumerate(records)]
    return {key: np.stack([r[key] for r in filled]) for key in filled[0]}


@dataclasses.dataclass(frozen=True)
class EvalTransform:
    """Decodes, resizes and centre-crops variable-size images; in-memory ones pass unchanged.
    `valid` is 0 for a file skipped as unreadable (`data.skip_unreadable`): eval leaves it out.
    `crop` replaces the centre crop (published weights' own resize and crop)."""

    image_size: int
    fixed_size: bool
    channels: int
    skip_unreadable: bool = False
    crop: Callable[[Image.Image], Image.Image] | None = None

    def __call__(self, record: dict[str, Any]) -> dict[str, Any]:
        image, valid = record["image"], np.float32(1)
        if not self.fixed_size:
            try:
                crop = self.crop or functools.partial(
                    center_crop, size=self.image_size, fraction=EVAL_CROP_FRACTION
                )
                image = _as_array(crop(open_image(image)), self.channels)
            except DataError as e:
                if not self.skip_unreadable:
                    raise
                log_skipped(e)
                image = np.zeros((self.image_size, self.image_size, self.channels), np.uint8)
                valid = np.float32(0)
        image = np.asarray(image, dtype=np.uint8)
        return {"image": image, "label": record["label"], "valid": valid}


def available_cpus() -> int:
    """The CPUs this process may run on: its affinity (what `taskset` or a job scheduler gave
    it), which can be fewer than the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS has no affinity
        return os.cpu_count() or 1


MAX_THREADS = 16  # reading threads of one process: beyond, they contend for its GIL


def with_parallelism(data: DataConfig, in_memory: bool) -> DataConfig:
    """`data` with its unset (None) `workers` and `threads` fitted to `available_cpus()`.

    Image files decode in a worker process per CPU but two (the training loop's thread and the
    device feed's), each with 2 threads, one decoding while the other runs Python; on two CPUs,
    in as many threads of the training process. In-memory records cost microseconds: they need
    no workers, and more than 2 threads only contend for the GIL.
    """
    cpus = available_cpus()
    workers = data.workers
    if workers is None:
        workers = 0 if in_memory else max(0, cpus - 2)
    threads = data.threads
    if threads is None:
        threads = 2 if in_memory or workers else max(2, min(cpus, MAX_THREADS))
    return dataclasses.replace(data, workers=workers, threads=threads)


def _read_options(data: DataConfig) -> grain.ReadOptions:
    return grain.ReadOptions(num_threads=data.threads, prefetch_buffer_size=4 * data.threads)


class RepeatedAugmentation(grain.MapDataset):
    """Repeated augmentation (Hoffer et al. 2020) as DeiT's `RASampler` orders it, on the one
    training stream: epoch e of `parent` (a shuffled, repeated source of `length` records) is
    its first `length / repeats` records, each `repeats` times in a row, so the epoch keeps its
    length. Random access, as `parent`'s: the order is the seed's and the epoch's, and a run
    resumes at any step; each copy's augmentation is its own (its place in the stream)."""

    def __init__(self, parent: grain.MapDataset, length: int, repeats: int):
        super().__init__(parent)
        self._length, self._repeats = length, repeats

    def __len__(self) -> int:
        return len(self._parent)

    def __str__(self) -> str:
        return f"RepeatedAugmentation(repeats={self._repeats})"

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        epoch, position = divmod(index, self._length)
        return self._parent[epoch * self._length + position // self._repeats]


def train_transform(dataset: Dataset, data: DataConfig, image_size: int) -> TrainTransform:
    """What the training pipeline does to each record, as `data` (resolved) says."""
    if data.crop is None or data.flip is None:
        raise ValueError("train_iterator: data.crop and data.flip must be resolved (loop.resolve)")
    return TrainTransform(
        image_size=image_size,
        fixed_size=dataset.fixed_size is not None,
        channels=dataset.channels,
        crop=data.crop,
        padding=dataset.crop_padding if data.crop_padding is None else data.crop_padding,
        min_area=data.min_crop_area,
        flip=data.flip,
        skip_unreadable=data.skip_unreadable,
        resample=RESAMPLE[data.train_interpolation],
        augment=host_augment(
            data.auto_augment,
            data.color_jitter,
            data.mean or dataset.mean,
            data.train_interpolation,
            dataset.fixed_size or image_size,
        ),
    )


def train_iterator(*args, **kwargs) -> grain.DatasetIterator:
    """An endless iterator of this process's training batches (host arrays); `train_dataset`'s
    arguments."""
    return iter(train_dataset(*args, **kwargs))


def train_dataset(
    dataset: Dataset,
    data: DataConfig,
    image_size: int,
    local_batch: int,
    seed: int,
    process_index: int = 0,
    process_count: int = 1,
    start_step: int = 0,
) -> grain.IterDataset:
    """This process's training batches, endless, from step `start_step` on.

    `data` is resolved (`loop.resolve`): its crop and flip are the ones the run's config.yaml says;
    unset worker and thread counts are fitted here as there (`with_parallelism`).
    """
    data = with_parallelism(data, dataset.fixed_size is not None)
    transform = train_transform(dataset, data, image_size)
    ds = grain.MapDataset.source(dataset.train).seed(seed).shuffle().repeat(None)
    if data.repeated_augmentation > 1:
        ds = RepeatedAugmentation(ds, len(dataset.train), data.repeated_augmentation)
    ds = ds.random_map(transform)  # each example's randomness: the seed and its global index
    batch_fn = fill_skipped if data.skip_unreadable else None  # None: grain's own stacking
    ds = ds.batch(local_batch, drop_remainder=True, batch_fn=batch_fn)
    # Step s's global batch is local batches sP .. sP + P - 1 of the one stream: this process's
    # is sP + p. Random access: nothing before `start_step` is read.
    ds = ds[start_step * process_count + process_index :: process_count]
    ds = ds.to_iter_dataset(_read_options(data))
    if data.workers:
        if not flags.FLAGS.is_parsed():  # grain reads absl flags; callers outside absl.app have
            # none parsed (train.py has)
            flags.FLAGS.mark_as_parsed()
        options = grain.MultiprocessingOptions(num_workers=data.workers)
        ds = ds.mp_prefetch(options, worker_init_fn=start_worker)
        ds = ds.map(in_own_memory)
    return ds


DEVICE_BATCHES = 2  # batches on the devices ahead of the step that runs


def on_device(ds: grain.IterDataset, put: Callable[[Any], Any]) -> grain.IterDataset:
    """`ds`'s batches, each `put` on the devices by a thread of its own, `DEVICE_BATCHES` ahead
    of the consumer (grain's `experimental.device_put` pattern; `put` places a process's part of
    a global batch, which `jax.device_put` cannot). The training loop's thread then only
    dispatches steps: it waits for data only when the pipeline falls behind the devices."""
    return grain.experimental.ThreadPrefetchIterDataset(
        ds.map(put), prefetch_buffer_size=DEVICE_BATCHES
    )


def start_worker(worker_index: int, worker_count: int) -> None:
    """A data worker's start (grain's `worker_init_fn`). The training process stops its workers
    itself (`close`), after saving: a terminal's Ctrl-C, which reaches the whole process group,
    is left to it (a worker's own KeyboardInterrupt would only print its traceback). A worker
    whose training process ended without stopping it (killed) ends too, instead of waiting for
    ever to hand over its next batch."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_end_with, args=(parent,), daemon=True).start()


def _end_with(parent: multiprocessing.process.BaseProcess) -> None:
    parent.join()  # returns once the parent process is gone
    os._exit(0)


def in_own_memory(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`batch` copied out of the shared memory that worker processes hand it over in, which is
    released as the copy is made. The device arrays made from a batch may keep its host buffer
    (XLA:CPU does not copy), and shared memory still held at exit is what Python's resource
    tracker reports as leaked."""
    return {key: np.array(value) for key, value in batch.items()}


def close(iterator: grain.DatasetIterator) -> None:
    """Stops `iterator`'s worker processes, and returns once the shared memory of the batches
    they had prefetched is released.

    grain releases that memory on a thread pool of its own (`SharedMemoryArray`'s), which the
    interpreter's exit stops before it is done, and `os._exit` skips: the resource tracker then
    reports the memory as leaked. So the pool is drained here (a private attribute: grain has no
    call that waits for it), and releases after this one are made at once, until workers start
    again and grain makes a new pool.
    """
    iterator.close()
    pool = getattr(SharedMemoryArray, "_del_thread_pool", None)
    if pool is not None:
        SharedMemoryArray._del_thread_pool = None
        pool.close()
        pool.join()


def eval_batches(
    dataset: Dataset,
    data: DataConfig,
    image_size: int,
    local_batch: int,
    process_index: int = 0,
    process_count: int = 1,
    crop: Callable[[Image.Image], Image.Image] | None = None,
) -> grain.IterDataset:
    """One pass over this process's part of the eval split, in full batches (host arrays) with a
    `mask`; `loop.evaluate` puts them on the devices ahead of its steps.

    As in training, global batch b is local batches bP .. bP + P - 1 of the split in order, and
    this process's is bP + p: each global batch is the same on any number of processes, and so
    are the sums. The split is padded to whole global batches with blank records (mask 0), so
    every process yields as many batches, each full: the jitted eval step sees one shape and no
    process waits for another that has finished. `crop` replaces the centre crop of image files
    (`EvalTransform`).
    """
    data = with_parallelism(data, dataset.fixed_size is not None)
    transform = EvalTransform(
        image_size, dataset.fixed_size is not None, dataset.channels, data.skip_unreadable, crop
    )
    records = grain.MapDataset.source(dataset.eval).map(transform)
    per_step = local_batch * process_count
    length = math.ceil(len(records) / per_step) * per_step
    blank = functools.cache(lambda: {k: np.zeros_like(v) for k, v in records[0].items()})
    padded = grain.MapDataset.range(length).map(
        lambda i: records[i] if i < len(records) else blank()
    )
    ds = padded.batch(local_batch)[process_index::process_count]
    return ds.to_iter_dataset(_read_options(data)).map(_masked)


def _masked(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {"image": batch["image"], "label": batch["label"], "mask": batch["valid"]}

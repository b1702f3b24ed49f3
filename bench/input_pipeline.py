"""Times the input pipeline of a training config alone: decoding, augmentation, batching.

    python bench/input_pipeline.py --config configs/default.yaml --batches 100
    python bench/input_pipeline.py --config configs/imagenet_resnet50.yaml --set data.dir=... \
        --set data.workers=8
    python bench/photo_folder.py /tmp/photos && python bench/input_pipeline.py --deit \
        --set data.dir=/tmp/photos --set data.workers=2

Prints img/s for this process's share of the batch, in all and per worker process (`data.workers`;
the training process itself with none; a worker's `data.threads` decode and resize in parallel,
where Pillow lets go of the GIL, so one worker can keep more than one CPU busy). Compare it with
`bench/train_step.py` (or the img/s that `train.py` shows) for the same network, batch and size:
the smaller one bounds training.
`--deit` adds DeiT's training policy (configs/imagenet_deit_small.yaml) on an image folder at
224 px: bicubic random-resized crops, flips and RandAugment 'rand-m9-mstd0.5-inc1' on the host,
which this times; its erasing and mixup/cutmix run in the train step on the device
(`bench/train_step.py --augment`). `bench/timm_input_pipeline.py` times timm's own loader.
`--per-image N` gives the CPU time of one image's decoding and augmentation instead, in this
thread alone, the median of `--rounds` passes over the same N records: the figure that contention
on a shared machine disturbs least.
"""

import argparse
import statistics
import time

import numpy as np

from nets_training import config, data, loop, sharding

# DeiT's training policy (configs/imagenet_deit_small.yaml) on an image folder (--set data.dir).
DEIT = [
    "data.name=imagefolder",
    "data.image_size=224",
    "data.batch_size=128",
    "data.crop=resized",
    "data.flip=true",
    "data.train_interpolation=bicubic",
    "data.auto_augment=rand-m9-mstd0.5-inc1",
    "data.reprob=0.25",  # erasing and mixing: on the device, not timed here
    "mixup.mixup_alpha=0.8",
    "mixup.cutmix_alpha=1.0",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/default.yaml")
    parser.add_argument("--set", action="append", default=[], help="key.path=value override")
    parser.add_argument("--batches", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5, help="batches left out of the timing")
    parser.add_argument("--deit", action="store_true", help="DeiT's policy on an image folder")
    parser.add_argument(
        "--per-image", type=int, default=0, help="N: CPU ms per image of N, in this thread only"
    )
    parser.add_argument("--rounds", type=int, default=5, help="--per-image's passes")
    args = parser.parse_args()

    cfg, dataset, _ = loop.resolve(config.load(args.config, (DEIT if args.deit else []) + args.set))
    d = cfg.data
    if args.per_image:
        print_per_image(dataset, d, cfg.train.seed, args.per_image, args.rounds)
        return
    batch = sharding.local_batch_size(d.batch_size, "data.batch_size")
    batches = data.train_iterator(dataset, d, d.image_size, batch, cfg.train.seed)
    for _ in range(args.warmup):
        next(batches)
    times = []
    for _ in range(args.batches):
        start = time.perf_counter()
        images = next(batches)["image"]
        times.append(time.perf_counter() - start)
    rate = args.batches * batch / sum(times)
    print(
        f"{d.name} batch {batch} of {images.shape[1:]} {images.dtype}, {d.workers} workers, "
        f"{d.threads} threads: {rate:8.1f} img/s, {rate / max(d.workers, 1):.1f} per worker "
        f"(median batch {statistics.median(times) * 1e3:.1f} ms)"
    )
    if hasattr(batches, "close"):
        batches.close()


def print_per_image(dataset, d: config.DataConfig, seed: int, count: int, rounds: int) -> None:
    """Prints the CPU ms an image of the training transform: the median of `rounds` passes over
    the same `count` records, after one that brings the files into the page cache."""
    transform = data.train_transform(dataset, d, d.image_size)
    records = [dataset.train[i % len(dataset.train)] for i in range(count)]

    def cpu_ms() -> float:
        rng = np.random.default_rng(seed)  # the same crops and flips every pass
        start = time.process_time()
        for record in records:
            transform(record, rng)
        return (time.process_time() - start) / count * 1e3

    cpu_ms()
    ms = statistics.median(cpu_ms() for _ in range(rounds))
    print(
        f"{d.name} at {d.image_size} px, policy {d.auto_augment}: {ms:.2f} CPU ms an image "
        f"({count} images, median of {rounds} passes)"
    )


if __name__ == "__main__":
    main()

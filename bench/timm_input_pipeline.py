"""timm's own training loader on an image folder: the baseline of `bench/input_pipeline.py`.

    PYTHONPATH=../shared/tools /tmp/torchenv/bin/python bench/timm_input_pipeline.py \\
        /tmp/photos --workers 2 --torchvision-wheel /tmp/tv/torchvision-0.29.1-*.whl
    ... bench/timm_input_pipeline.py /tmp/photos --per-image 256 --torchvision-wheel ...
    ... bench/timm_input_pipeline.py /tmp/photos --resnet50 --workers 14 --batch 1024

Runs where torch and timm are installed (never dependencies of the project; see tools/parity.py);
`--torchvision-wheel` loads torchvision's Python transforms from its wheel where torchvision
itself does not install (tools/torchvision_wheel.py). The loader is the one timm's train.py builds
for DeiT's recipe (`timm.data.create_loader`, prefetcher on): RandomResizedCrop (bicubic), flip,
RandAugment 'rand-m9-mstd0.5-inc1' in `--workers` processes; then, with `--full`, Mixup/CutMix
in the workers' collate (FastCollateMixup, 0.8 / 1.0, label smoothing 0.1) and random erasing
(0.25, 'pixel') with the normalisation in the main process, where train.py runs them on the
GPU. `--resnet50` gives ResNet-50's policy instead (configs/imagenet_resnet50.yaml, as
`bench/input_pipeline.py` times it): bilinear random-resized crops and flips, no RandAugment, no
colour jitter. Prints img/s of `--batch`-image batches, in all and per worker, the first
`--warmup` left out. (timm's posterize at 0 bits is made black, as before Pillow 13, which
refuses it: `keep_no_bits_black`.)
"""

import argparse
import statistics
import sys
import time
from pathlib import Path


def keep_no_bits_black(auto_augment) -> None:
    """timm's PosterizeIncreasing at magnitude 10 keeps 0 bits, which Pillow 13 refuses (timm's
    loader then stops at the first image whose magnitude noise reaches 10); older Pillow made
    the image black, as nets_training.image_ops does: so does timm's here."""
    posterize = auto_augment.posterize

    def black_at_no_bits(img, bits, **kwargs):
        if bits <= 0:
            return img.point([0] * 256 * len(img.getbands()))
        return posterize(img, bits, **kwargs)

    for name, op in auto_augment.NAME_TO_OP.items():
        if op is posterize:
            auto_augment.NAME_TO_OP[name] = black_at_no_bits


# timm's transforms for DeiT's recipe, and for ResNet-50's policy (no colour jitter: None, as
# timm's own default 0.4 would add it).
POLICIES = {
    "deit": {"auto_augment": "rand-m9-mstd0.5-inc1", "interpolation": "bicubic"},
    "resnet50": {"auto_augment": None, "interpolation": "bilinear", "color_jitter": None},
}


def per_image_ms(folder: Path, count: int, policy: dict) -> float:
    """CPU milliseconds an image of timm's decoding and training transforms (uint8 out, as with
    its prefetcher), in this thread alone."""
    from timm.data import ImageDataset, create_transform

    transform = create_transform(224, is_training=True, use_prefetcher=True, **policy)
    dataset = ImageDataset(str(folder / "train"), transform=transform)
    start = time.process_time()
    for i in range(count):
        dataset[i % len(dataset)]
    return (time.process_time() - start) / count * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="an image folder: FOLDER/train/<class>/*.jpg")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--full", action="store_true", help="mixup/cutmix and erasing too")
    parser.add_argument("--resnet50", action="store_true", help="ResNet-50's policy, not DeiT's")
    parser.add_argument("--torchvision-wheel", help="import torchvision's transforms from it")
    parser.add_argument(
        "--per-image", type=int, default=0, help="N: CPU ms per image of N, in this thread only"
    )
    args = parser.parse_args()
    if args.torchvision_wheel:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
        from torchvision_wheel import import_torchvision

        import_torchvision(args.torchvision_wheel)
    import torch
    from timm.data import FastCollateMixup, ImageDataset, auto_augment, create_loader

    keep_no_bits_black(auto_augment)
    policy = POLICIES["resnet50" if args.resnet50 else "deit"]
    what = "ResNet-50's crop and flip" if args.resnet50 else "RandAugment"

    if args.per_image:
        ms = per_image_ms(args.folder, args.per_image, policy)
        print(f"timm {what}: {ms:.2f} CPU ms an image")
        return
    collate = None
    if args.full:
        collate = FastCollateMixup(
            mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=0.1, num_classes=2
        )
    loader = create_loader(
        ImageDataset(str(args.folder / "train")),
        input_size=(3, 224, 224),
        batch_size=args.batch,
        is_training=True,
        re_prob=0.25 if args.full else 0.0,
        re_mode="pixel",
        num_workers=args.workers,
        collate_fn=collate,
        device=torch.device("cpu"),
        use_prefetcher=True,
        **policy,
    )
    batches = (batch for _ in iter(int, 1) for batch in loader)  # epoch after epoch
    times = []
    for i in range(args.warmup + args.batches):
        start = time.perf_counter()
        images, _ = next(batches)
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
    what += ", mixup/cutmix, erasing" if args.full else ""
    rate = args.batches * args.batch / sum(times)
    print(
        f"timm {what}: batch {args.batch} of {tuple(images.shape[1:])} {images.dtype}, "
        f"{args.workers} workers: {rate:8.1f} img/s, {rate / max(args.workers, 1):.1f} per worker "
        f"(median batch {statistics.median(times) * 1e3:.1f} ms)"
    )


if __name__ == "__main__":
    main()

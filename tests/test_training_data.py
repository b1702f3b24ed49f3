"""Every data source on small files written here, and the pipeline's determinism and position."""

import dataclasses
import io
import pickle
import sys
import tarfile

import numpy as np
import pytest
from PIL import Image

from nets_training import data, sources
from nets_training.config import DataConfig
from nets_training.errors import UserError


def first_batches(it, n):
    return [next(it) for _ in range(n)]


def test_digits_split_is_fixed_balanced_and_embedded():
    ds = sources.digits()
    assert (len(ds.train), len(ds.eval), ds.num_classes, ds.channels) == (1437, 360, 10, 1)
    assert ds.train[0]["image"].shape == (8, 8, 1) and ds.train[0]["image"].dtype == np.uint8
    assert np.bincount(ds.eval.labels).min() >= 33  # every class in the test split


def test_train_stream_is_deterministic_and_resumes_at_a_step():
    ds, cfg = sources.digits(), DataConfig(batch_size=16, crop="pad", flip=False)
    make = lambda start=0: data.train_iterator(ds, cfg, 8, 16, 3, start_step=start)  # noqa: E731
    it = make()
    first_batches(it, 95)  # past the end of an epoch (89 batches)
    expected = first_batches(it, 3)
    for a, b in zip(expected, first_batches(make(95), 3), strict=True):
        np.testing.assert_array_equal(a["image"], b["image"])
        np.testing.assert_array_equal(a["label"], b["label"])
    other_seed = next(data.train_iterator(ds, cfg, 8, 16, seed=4))
    assert not np.array_equal(other_seed["label"], first_batches(make(), 1)[0]["label"])


def test_processes_take_their_part_of_one_processs_global_batches():
    """Step s's global batch is the same on 1 or 3 processes (each process's local batch is its
    part of it, augmentation included: each example's draws are its own), from the start and
    from a resumed step."""
    policy = dict(auto_augment="rand-m9-mstd0.5-inc1", train_interpolation="random")
    ds, cfg = sources.digits(), DataConfig(crop="pad", flip=True, **policy)
    for start in (0, 90):  # 90: in the second epoch, as a resumed run
        alone = first_batches(data.train_iterator(ds, cfg, 8, 12, 5, 0, 1, start), 2)
        parts = [
            first_batches(data.train_iterator(ds, cfg, 8, 4, 5, p, 3, start), 2) for p in range(3)
        ]
        for step, whole in enumerate(alone):
            for key in ("image", "label"):
                joined = np.concatenate([part[step][key] for part in parts])
                np.testing.assert_array_equal(joined, whole[key])


def test_eval_batches_cover_the_split_once_with_padding_masked():
    ds = sources.digits()
    shards = [list(data.eval_batches(ds, DataConfig(), 8, 64, p, 3)) for p in range(3)]
    assert len({len(s) for s in shards}) == 1  # every process runs the same number of steps
    assert sum(b["mask"].sum() for s in shards for b in s) == 360
    labels = np.concatenate([b["label"][b["mask"] > 0] for s in shards for b in s])
    np.testing.assert_array_equal(np.sort(labels), np.sort(ds.eval.labels))


def test_synthetic_source_has_the_network_size_and_classes():
    ds = sources.synthetic(50, 12, 7)
    cfg = DataConfig(name="synthetic", crop="none", flip=False)
    batch = next(data.train_iterator(ds, cfg, 12, 10, 0))
    assert batch["image"].shape == (10, 12, 12, 3) and batch["label"].max() < 7


def write_image(path, color, fmt):
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.full((20, 30, 3), color, np.uint8)
    pixels[:, :10] = 255 - np.array(color, np.uint8)  # not flip-symmetric
    Image.fromarray(pixels).save(path, format=fmt)


@pytest.fixture
def image_folder(tmp_path):
    colors = {"cat": (200, 30, 30), "dog": (30, 200, 30), "emu": (30, 30, 200)}
    for split in ("train", "val"):
        for name, color in colors.items():
            for i in range(3):
                fmt, ext = ("JPEG", "jpg") if i % 2 else ("PNG", "png")
                write_image(tmp_path / split / name / f"{i}.{ext}", color, fmt)
    (tmp_path / "train" / "cat" / "notes.txt").write_text("not an image")
    return tmp_path


def test_imagefolder_decodes_jpeg_and_png_and_crops_to_size(image_folder):
    ds = sources.imagefolder(str(image_folder))
    assert (len(ds.train), len(ds.eval), ds.num_classes) == (9, 9, 3)
    cfg = DataConfig(name="imagefolder", dir=str(image_folder), crop="resized", flip=True)
    batch = next(data.train_iterator(ds, cfg, 16, 9, seed=0))
    assert batch["image"].shape == (9, 16, 16, 3) and batch["image"].dtype == np.uint8
    (evals,) = list(data.eval_batches(ds, cfg, 16, 9))
    # Eval crops the centre: colours survive and each class keeps its own dominant channel.
    dominant = evals["image"][:, 8, 12].argmax(-1)
    np.testing.assert_array_equal(dominant, evals["label"])


def test_corrupt_image_error_names_the_file(image_folder):
    bad = image_folder / "train" / "dog" / "1.jpg"
    bad.write_bytes(b"\xff\xd8 this is not really a jpeg")
    ds = sources.imagefolder(str(image_folder))
    cfg = DataConfig(name="imagefolder", crop="resized", flip=True)
    it = data.train_iterator(ds, cfg, 8, 9, seed=0)
    with pytest.raises(sources.DataError, match=r"cannot read image .*dog/1\.jpg"):
        next(it)


def test_skip_unreadable_logs_each_bad_file_keeps_batches_full_and_eval_leaves_it_out(
    image_folder, caplog
):
    for split in ("train", "val"):
        (image_folder / split / "dog" / "1.jpg").write_bytes(b"\xff\xd8 not a jpeg")
    ds = sources.imagefolder(str(image_folder))
    # In this process (no worker processes, whatever the machine's CPUs: each worker process
    # logs the files it skips once itself).
    cfg = DataConfig(
        name="imagefolder", crop="resized", flip=False, skip_unreadable=True, workers=0
    )
    it = data.train_iterator(ds, cfg, 8, 9, seed=0)
    batches = first_batches(it, 3)  # each epoch of 9 holds the bad file once
    assert all(b["image"].shape == (9, 8, 8, 3) for b in batches)
    skipped = [r for r in caplog.records if "data.skip_unreadable: skipped" in r.getMessage()]
    assert len(skipped) == 1 and "dog/1.jpg" in skipped[0].getMessage()  # once per file
    expected = next(it)
    resumed = data.train_iterator(ds, cfg, 8, 9, seed=0, start_step=3)  # as a resumed run
    np.testing.assert_array_equal(next(resumed)["image"], expected["image"])
    (evals,) = list(data.eval_batches(ds, cfg, 8, 9))
    assert evals["mask"].sum() == 8 and len(evals["mask"]) == 9
    bad = [i for i, p in enumerate(ds.eval.paths) if p.endswith("dog/1.jpg")]
    assert evals["mask"][bad].tolist() == [0.0]


def test_check_images_lists_every_unreadable_file_at_once(image_folder, capsys):
    from nets_training import check_images

    (image_folder / "train" / "dog" / "1.jpg").write_bytes(b"\xff\xd8 not a jpeg")
    (image_folder / "val" / "emu" / "0.png").write_bytes(b"")
    assert check_images.main([str(image_folder)]) == 1
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert len(lines) == 2 and all(line.startswith("cannot read image ") for line in lines)
    assert "train/dog/1.jpg" in lines[0] and "val/emu/0.png" in lines[1]
    assert err.strip() == f"{image_folder}: 18 images, 2 unreadable"
    (image_folder / "train" / "dog" / "1.jpg").unlink()
    (image_folder / "val" / "emu" / "0.png").unlink()
    assert check_images.main([str(image_folder)]) == 0


def test_a_single_class_folder_is_refused(image_folder):
    for name in ("dog", "emu"):
        for split in ("train", "val"):
            for f in (image_folder / split / name).iterdir():
                f.unlink()
            (image_folder / split / name).rmdir()
    with pytest.raises(UserError) as error:
        sources.imagefolder(str(image_folder))
    assert str(error.value) == (
        f"{image_folder / 'train'}: only one class folder, 'cat'; a classifier needs at least "
        "2 classes"
    )


def test_imagefolder_layout_errors(tmp_path):
    with pytest.raises(UserError, match="data.dir .*nowhere: no such file or directory"):
        sources.imagefolder(str(tmp_path / "nowhere"))
    with pytest.raises(UserError, match=r"expected .*train/<class>/\*\.jpg\|png"):
        sources.imagefolder(str(tmp_path))
    with pytest.raises(UserError, match="data.dir is required"):
        sources.imagefolder(None)


def cifar_batch(n, seed, label_key):
    rng = np.random.default_rng(seed)
    return {
        b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
        label_key: list(rng.integers(0, 10, n)),
    }


def write_cifar10(folder):
    folder.mkdir(parents=True)
    batches = {f"data_batch_{i}": cifar_batch(4, i, b"labels") for i in range(1, 6)}
    batches["test_batch"] = cifar_batch(3, 9, b"labels")
    batches["batches.meta"] = {b"label_names": [b"x"] * 10}
    for name, content in batches.items():
        (folder / name).write_bytes(pickle.dumps(content))
    return batches


def test_cifar10_from_the_archive_and_from_its_folder(tmp_path):
    batches = write_cifar10(tmp_path / "cifar-10-batches-py")
    with tarfile.open(tmp_path / "cifar-10-python.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    archive = tmp_path / "archive"
    archive.mkdir()
    (tmp_path / "cifar-10-python.tar.gz").rename(archive / "cifar-10-python.tar.gz")
    for where in (
        archive,
        archive / "cifar-10-python.tar.gz",
        tmp_path,
        tmp_path / "cifar-10-batches-py",
    ):
        ds = sources.cifar(str(where), 10)
        assert (len(ds.train), len(ds.eval), ds.fixed_size) == (20, 3, 32)
        first = batches["data_batch_1"][b"data"][0].reshape(3, 32, 32).transpose(1, 2, 0)
        np.testing.assert_array_equal(ds.train[0]["image"], first)  # channels last
        assert ds.eval[2]["label"] == batches["test_batch"][b"labels"][2]


def test_cifar100_reads_fine_labels(tmp_path):
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    for name, n in (("train", 5), ("test", 2)):
        content = cifar_batch(n, 1, b"fine_labels") | {b"coarse_labels": [0] * n}
        (folder / name).write_bytes(pickle.dumps(content))
    (folder / "meta").write_bytes(pickle.dumps({}))
    ds = sources.cifar(str(tmp_path), 100)
    assert (len(ds.train), ds.num_classes) == (5, 100)


def test_cifar_errors_name_what_is_missing(tmp_path, monkeypatch):
    with pytest.raises(UserError, match="neither cifar-10-python.tar.gz nor an extracted"):
        sources.cifar(str(tmp_path), 10)
    # No data where data.dir says: where to get it.
    with pytest.raises(UserError) as missing:
        sources.cifar(str(tmp_path / "cifar10"), 10)
    assert str(missing.value) == (
        f"data.dir {tmp_path / 'cifar10'}: no such file or directory; download the python "
        "version, cifar-10-python.tar.gz, from https://www.cs.toronto.edu/~kriz/cifar.html and "
        "give it (or the folder it extracts to) with --set data.dir=PATH, or --set "
        "data.download=true to download it there"
    )
    # No data.dir, nothing in the cache (tests/test_training_download.py: the whole message).
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(
        UserError, match=r"is not in the cache .* nets_training.download cifar100` \(or"
    ):
        sources.cifar(None, 100)
    bad = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(bad, "w:gz") as tar:
        info = tarfile.TarInfo("cifar-10-batches-py/data_batch_1")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"abc"))
    with pytest.raises(UserError, match="data_batch_1: not a CIFAR python batch"):
        sources.cifar(str(bad), 10)


def test_tfds_without_tensorflow_datasets_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow_datasets", None)
    with pytest.raises(UserError, match="needs tensorflow-datasets: pip install"):
        sources.tfds("mnist", None)


def test_worker_processes_give_the_same_stream():
    ds = sources.synthetic(64, 8, 5)
    cfg = DataConfig(crop="resized", flip=True, auto_augment="ta_wide")
    plain = data.train_iterator(ds, cfg, 8, 8, seed=1)
    workers = data.train_iterator(ds, dataclasses.replace(cfg, workers=2), 8, 8, seed=1)
    try:
        for a, b in zip(first_batches(plain, 4), first_batches(workers, 4), strict=True):
            np.testing.assert_array_equal(a["image"], b["image"])
    finally:
        workers.close()

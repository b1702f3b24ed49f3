"""data.repeated_augmentation: DeiT's RASampler on the one training stream, on 12 tiny images."""

import numpy as np
import pytest

from nets_training import data, sources
from nets_training.config import DataConfig
from nets_training.errors import UserError

LENGTH = 12


def dataset():
    """12 random 6x6 images whose labels are their indices."""
    images = np.random.default_rng(0).integers(0, 255, (LENGTH, 6, 6, 1), np.uint8)
    train = sources.ArraySource(images, np.arange(LENGTH))
    return sources.Dataset(train, train, LENGTH, 1, 6, (0.5,), (0.5,), "pad", True, 2)


def stream(repeats, seed=0, local_batch=4, process=0, processes=1, start=0, batches=9):
    cfg = DataConfig(crop="pad", flip=True, repeated_augmentation=repeats)
    it = data.train_iterator(dataset(), cfg, 6, local_batch, seed, process, processes, start)
    return [next(it) for _ in range(batches)]


def labels(batches):
    return np.concatenate([b["label"] for b in batches])


def test_each_epoch_repeats_a_third_of_its_order_three_times_with_their_own_augmentation():
    batches = stream(3)
    order = labels(batches).reshape(3, LENGTH)  # three epochs of 12
    for epoch in order:
        distinct = epoch[::3]
        np.testing.assert_array_equal(epoch, np.repeat(distinct, 3))
        assert len(set(distinct)) == LENGTH // 3
    assert len({tuple(e[::3]) for e in order}) == 3  # a new order every epoch
    plain = labels(stream(1)).reshape(3, LENGTH)
    np.testing.assert_array_equal(order[:, ::3], plain[:, : LENGTH // 3])  # the same shuffle
    images = np.concatenate([b["image"] for b in batches])
    assert not np.array_equal(images[0], images[1])  # copies are augmented apart
    assert not np.array_equal(labels(stream(3, seed=1)), labels(batches))


def test_processes_take_their_part_and_a_resumed_run_its_place():
    alone = stream(3, local_batch=6, start=3, batches=2)
    parts = [stream(3, local_batch=2, process=p, processes=3, start=3, batches=2) for p in range(3)]
    for step, whole in enumerate(alone):
        for key in ("image", "label"):
            joined = np.concatenate([part[step][key] for part in parts])
            np.testing.assert_array_equal(joined, whole[key])
    from_start = stream(3, local_batch=6, batches=5)
    for a, b in zip(from_start[3:], alone, strict=True):
        np.testing.assert_array_equal(a["image"], b["image"])


def test_a_count_below_one_is_refused():
    from nets_training import config

    with pytest.raises(UserError, match=r"^data.repeated_augmentation: must be >= 1, got 0$"):
        config.from_dict({"data": {"repeated_augmentation": 0}})

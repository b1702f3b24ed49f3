"""Feeding the devices: batches placed ahead of the step by a thread of their own, steps that
move nothing else, the wait for data measured, and worker and thread counts that fit the CPUs."""

import json
import re
import threading

import jax
import numpy as np
import pytest
from helpers import train_tiny_run

from nets_training import data, loop, sharding, sources
from nets_training.config import DataConfig
from nets_training.errors import UserError


def test_steps_move_nothing_but_the_batches_the_feed_placed(tmp_path, monkeypatch, capsys):
    """Under `jax.transfer_guard('disallow')` each train and eval step runs: its state and batch
    are already on the devices, with the shardings it was compiled for (a host array, or one the
    step had to reshard, would raise). The train and eval batches were placed by threads of
    their own. The records say how long the loop waited for data; the start says what it
    compiles."""
    build, shard, guarded_steps, placed_by = loop.build, sharding.shard_batch, [], set()
    evaluated = []

    def shard_batch(batch, mesh):
        placed_by.add(threading.current_thread().name)
        return shard(batch, mesh)

    def guarded_build(*args, **kwargs):
        run = build(*args, **kwargs)
        step = run.train_step

        def guarded(state, batch, teacher):
            assert all(isinstance(leaf, jax.Array) for leaf in jax.tree.leaves(batch))
            with jax.transfer_guard("disallow"):
                out = step(state, batch, teacher)
            guarded_steps.append(int(out[0].step))
            return out

        def guarded_eval(state, batch):
            assert all(isinstance(leaf, jax.Array) for leaf in jax.tree.leaves(batch))
            with jax.transfer_guard("disallow"):
                evaluated.append(run_eval(state, batch))
            return evaluated[-1]

        guarded.lower = step.lower  # the loop compiles it first
        run.train_step, run_eval, run.eval_step = guarded, run.eval_step, guarded_eval
        return run

    monkeypatch.setattr(loop, "build", guarded_build)
    monkeypatch.setattr(sharding, "shard_batch", shard_batch)
    train_tiny_run(tmp_path, "train.steps=4", "train.log_every=2", "train.eval_every=0")
    assert guarded_steps == [1, 2, 3, 4] and evaluated  # the last step's evaluation
    assert placed_by and threading.current_thread().name not in placed_by
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    waits = [r["train/data_wait"] for r in records if "train/data_wait" in r]
    assert len(waits) == 2 and all(0 <= w <= 1 for w in waits)
    lines = capsys.readouterr().out.splitlines()
    compiling = lines.index("compiling the train step ...")  # not a silent minute on a GPU
    assert re.fullmatch(
        r"state set up in [\d.]+ s, train step compiled in [\d.]+ s; first step done [\d.]+ s "
        "after start",
        lines[compiling + 1],
    )


def test_an_input_bound_run_says_what_would_feed_it():
    d = DataConfig(name="imagefolder", workers=0, threads=2)
    line = loop.input_bound_line(0.42, d, cpus=16)
    assert line.startswith("input-bound: the steps waited for data 42% of the time (no worker")
    assert "16 CPUs): data.workers adds processes that decode" in line
    line = loop.input_bound_line(0.42, d, cpus=2)  # no core to spare for a worker
    assert "2 CPUs): every CPU is busy" in line and "data.workers" not in line


def test_on_device_places_batches_ahead_in_order_and_stops_with_its_source():
    ds = data.train_dataset(sources.synthetic(64, 8, 5), resolved_data(), 8, 8, seed=0)
    mesh = sharding.make_mesh()
    put = lambda batch: sharding.shard_batch(batch, mesh)  # noqa: E731
    host = data.train_iterator(sources.synthetic(64, 8, 5), resolved_data(), 8, 8, seed=0)
    fed = iter(data.on_device(ds, put))
    for _ in range(5):
        expected, batch = next(host), next(fed)
        assert batch["image"].sharding == sharding.data_sharded(mesh)
        np.testing.assert_array_equal(np.asarray(batch["image"]), expected["image"])
        np.testing.assert_array_equal(np.asarray(batch["label"]), expected["label"])
    fed.close()
    with pytest.raises(ValueError):  # closed: its thread and source are stopped
        next(fed)


def test_an_error_in_the_pipeline_reaches_the_loop_as_itself():
    class Unreadable(sources.DataError):
        pass

    def put(batch):
        raise Unreadable("cannot read image a.jpg: truncated")

    ds = data.train_dataset(sources.synthetic(64, 8, 5), resolved_data(), 8, 8, seed=0)
    with pytest.raises(Unreadable, match="a.jpg"):
        next(iter(data.on_device(ds, put)))


def resolved_data(**fields) -> DataConfig:
    return DataConfig(name="synthetic", crop="none", flip=False, **fields)


def test_synthetic_records_are_made_once_and_the_same_as_ever():
    source = sources.synthetic(40, 8, 5).train
    first, again = source[3]["image"], source[19]["image"]  # 3 and 19: the same of 16 images
    assert np.shares_memory(first, again) and not first.flags.writeable  # made once, read-only
    expected = np.random.default_rng(3).integers(0, 256, (8, 8, 3)).astype(np.uint8)
    np.testing.assert_array_equal(first, expected)  # the images of older versions


@pytest.mark.parametrize(
    "workers, threads, in_memory, cpus, expected",
    [
        (None, None, False, 16, (14, 2)),  # image files: a worker per CPU but two
        (None, None, False, 2, (0, 2)),  # two CPUs: threads of the training process
        (None, None, False, 8, (6, 2)),
        (0, None, False, 16, (0, 16)),  # no workers: a thread per CPU
        (0, None, False, 64, (0, data.MAX_THREADS)),
        (None, None, True, 16, (0, 2)),  # in memory: microseconds a record
        (3, 5, False, 16, (3, 5)),  # set: kept
    ],
)
def test_workers_and_threads_fit_the_cpus_unless_set(
    monkeypatch, workers, threads, in_memory, cpus, expected
):
    monkeypatch.setattr(data, "available_cpus", lambda: cpus)
    d = data.with_parallelism(DataConfig(workers=workers, threads=threads), in_memory)
    assert (d.workers, d.threads) == expected


def test_the_resolved_config_says_the_workers_and_threads_that_ran(monkeypatch):
    monkeypatch.setattr(data, "available_cpus", lambda: 16)
    cfg = loop.Config(data=DataConfig(name="digits"))
    resolved, _, _ = loop.resolve(cfg)
    assert (resolved.data.workers, resolved.data.threads) == (0, 2)


@pytest.mark.cpu_only("the 4 devices conftest forces on the CPU")
def test_a_batch_the_devices_cannot_split_evenly_names_the_key_and_a_size_that_splits():
    assert sharding.local_batch_size(32, "data.batch_size") == 32  # one process: all of it
    with pytest.raises(UserError) as error:
        sharding.local_batch_size(30, "data.batch_size")
    assert str(error.value) == (
        "data.batch_size=30 must be divisible by the number of devices (4); try 28"
    )

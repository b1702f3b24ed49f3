"""Averaging a run's weights (nets-average): the mean of its newest checkpoints' or kept best
evaluations' variables, written to <workdir>/averaged, read by what takes a run's weights; its
refusals. The program itself runs in tests/test_installed.py."""

import gc
import shutil

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from nets_cli import common
from nets_inference import evaluate, load
from nets_training import averaging, checkpoint, teacher
from nets_training.errors import UserError
from nets_training.workdir import AVERAGED_DIR, BEST_DIR
from tests import helpers


@pytest.fixture
def run(tiny_run, tmp_path):
    """A copy of conftest's `tiny_run` (3 steps, a checkpoint each), which others read as is."""
    return shutil.copytree(tiny_run, tmp_path / "run")


def test_the_average_of_the_newest_checkpoints_is_their_mean_and_reads_as_a_run(run):
    points = averaging.points(run, last=2)
    assert [(p.step, p.folder.name) for p in points] == [(3, "3"), (2, "2")]
    folder = averaging.write(run, averaging.average([p.folder for p in points]), points)
    assert folder == run / AVERAGED_DIR / "3"

    averaged = checkpoint.load_variables(run / AVERAGED_DIR)  # as finetune.init_from reads it
    two = [checkpoint.load_variables(run / "checkpoints" / str(s)) for s in (3, 2)]
    mean = jax.tree.map(lambda a, b: ((np.float64(a) + b) / 2).astype(a.dtype), *two)
    jax.tree.map(np.testing.assert_array_equal, averaged, mean)
    kernels = [v["params"]["Dense_0"]["kernel"] for v in (*two, mean)]
    assert not np.array_equal(kernels[0], kernels[2]) and not np.array_equal(*kernels[1:])

    record = evaluate.build(run).evaluate(None, kept=AVERAGED_DIR)  # eval.py --averaged
    assert record["step"] == 3 and record["averaged"] is True and record["eval/images"] == 360
    assert load.from_workdir(run, kept=AVERAGED_DIR).source.startswith(f"{folder} (resnet20)")
    assert teacher._run(run / AVERAGED_DIR) == (run, AVERAGED_DIR)  # distill.teacher

    # Written again over the last: one average in the folder, the newest.
    points = averaging.points(run, last=3)
    averaging.write(run, averaging.average([p.folder for p in points]), points)
    assert [p.name for p in (run / AVERAGED_DIR).iterdir()] == ["3"]


def test_the_kept_best_are_averaged_best_first(run):
    best = checkpoint.BestCheckpointer(run / BEST_DIR, checkpoint.Checkpointer(run / "c", 1), 3, 0)
    for step, top1 in ((1, 0.5), (2, 0.7), (3, 0.6)):
        variables = checkpoint.load_variables(run / "checkpoints" / str(step))
        best.write(step, variables, {"eval/top1": top1})
    best.close()
    points = averaging.points(run)
    assert [(p.step, p.top1) for p in points] == [(2, 0.7), (3, 0.6), (1, 0.5)]
    assert points[0].folder == run / BEST_DIR / "2"


def test_what_cannot_be_averaged_is_refused_in_one_line(run):
    with pytest.raises(UserError, match="holds the weights of 1 evaluation: nothing to average"):
        averaging.points(run)  # the tiny run keeps one best
    with pytest.raises(UserError, match="--last=1: averaging takes at least 2 checkpoints"):
        averaging.points(run, last=1)
    with pytest.raises(UserError, match="--last=4: .*checkpoints holds 3 checkpoints"):
        averaging.points(run, last=4)
    with pytest.raises(UserError, match=r"averaged: no averaged weights there \(nets-average"):
        load.kept_checkpoint(run, AVERAGED_DIR)
    with pytest.raises(UserError, match="--best .* or --averaged, not both"):
        common.kept_weights(True, True, None, None)
    with pytest.raises(UserError, match="--averaged is the average .*: not with --step"):
        common.kept_weights(False, True, None, 3)  # eval.py's and export.py's flags


def test_a_checkpoint_rotated_away_while_read_gives_way_to_the_next(run, monkeypatch):
    # A live run removes its oldest checkpoint at each save, maybe between average.py's listing
    # and its read of it: step 2, the older of the newest two, goes as it is read; the next
    # listing's newest two, 3 and 1, are averaged.
    restore = ocp.StandardCheckpointer.restore

    def rotated(self, directory, *args, **kwargs):
        if directory.parent.name == "2":
            shutil.rmtree(directory.parent)
        return restore(self, directory, *args, **kwargs)

    monkeypatch.setattr(ocp.StandardCheckpointer, "restore", rotated)
    points, weights = averaging.averaged(run, last=2)
    assert [p.step for p in points] == [3, 1]
    two = [checkpoint.load_variables(run / "checkpoints" / str(s), use_ema=False) for s in (3, 1)]
    mean = jax.tree.map(lambda a, b: ((np.float64(a) + b) / 2).astype(a.dtype), *two)
    jax.tree.map(np.testing.assert_array_equal, weights, mean)


def test_a_damaged_checkpoint_is_said_in_one_line_without_echoes(run, capfd):
    # As eval.py, export.py and average.py read it: the reason, the steps there are instead; none
    # of the "Event loop is closed" tracebacks of the reads orbax abandoned, then or later.
    helpers.damage(run / "checkpoints" / "3")
    message = (
        f"checkpoint 3 of {run} is damaged \\(OUT_OF_RANGE: .*\\); its other checkpoints are "
        "steps 1, 2 \\(--step=2: the newest\\); --best reads its best evaluation's weights$"
    )
    with pytest.raises(checkpoint.DamagedCheckpoint, match=message):
        checkpoint.load_variables(run)
    with pytest.raises(checkpoint.DamagedCheckpoint, match=message):
        averaging.averaged(run, last=3)
    assert checkpoint.load_variables(run / "checkpoints" / "2")  # the others read as before
    gc.collect()  # the abandoned reads' futures: asyncio logs their errors when collected
    err = capfd.readouterr().err
    assert "Traceback" not in err and "never retrieved" not in err

"""eval.py: a run's checkpoints evaluated from another process give the run's own evaluation,
once or continuously while it trains, with records in eval.jsonl and one-line errors."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import TINY_RUN, train_tiny_run

ROOT = Path(__file__).resolve().parents[1]


def run(*args):
    return subprocess.run(
        [sys.executable, "eval.py", *args], capture_output=True, text=True, timeout=300, cwd=ROOT
    )


def lines(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("run")
    train_tiny_run(folder, "train.checkpoint_every=1", "train.keep_checkpoints=3")
    return folder


def test_a_checkpoint_evaluates_as_the_run_did(workdir):
    result = run(f"--workdir={workdir}")
    assert result.returncode == 0, result.stderr
    (record,) = lines(workdir / "eval.jsonl")
    own = [r for r in lines(workdir / "metrics.jsonl") if "eval/top1" in r][-1]
    assert record["step"] == own["step"] == 3
    assert {k: record[k] for k in own} == own  # the same figures, to the last bit
    assert record["eval/images"] == 360 and record["ema"] is False
    assert result.stdout.startswith(f"step 3: eval loss {own['eval/loss']:.4f}, top-1 ")

    earlier = run(f"--workdir={workdir}", "--step=2")
    assert earlier.returncode == 0, earlier.stderr
    assert [r["step"] for r in lines(workdir / "eval.jsonl")] == [3, 2]


def test_watch_follows_a_training_run_to_its_last_step(tmp_path):
    steps = ["train.steps=8", "train.checkpoint_every=2", "train.keep_checkpoints=2"]
    sets = [f"--set={s}" for s in (*TINY_RUN, *steps)]
    with subprocess.Popen(
        [sys.executable, "train.py", f"--workdir={tmp_path}", *sets],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ) as trainer:
        deadline = time.monotonic() + 120
        while not (tmp_path / "config.yaml").exists():  # the run has resolved its config
            assert trainer.poll() is None and time.monotonic() < deadline, trainer.stderr.read()
            time.sleep(0.2)
        watched = run(f"--workdir={tmp_path}", "--watch", "--poll_seconds=0.2")
        assert trainer.wait(timeout=120) == 0, trainer.stderr.read()
    assert watched.returncode == 0, watched.stderr
    evaluated = [r["step"] for r in lines(tmp_path / "eval.jsonl")]
    assert evaluated == sorted(set(evaluated)) and evaluated[-1] == 8
    own = [r for r in lines(tmp_path / "metrics.jsonl") if "eval/top1" in r][-1]
    assert lines(tmp_path / "eval.jsonl")[-1]["eval/top1"] == own["eval/top1"]


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--workdir=/no/such/run"],
            "--workdir /no/such/run: no config.yaml there (not a training run's folder)",
        ),
        (["--step=99"], "--step 99: {workdir} has no checkpoint 99"),  # kept: steps 1..3
    ],
)
def test_bad_input_is_one_line(workdir, flags, message):
    given = [f"--workdir={workdir}"] if not flags[0].startswith("--workdir") else []
    result = run(*given, *flags)
    assert result.returncode == 2
    assert result.stderr == f"eval.py: {message.format(workdir=workdir)}\n"

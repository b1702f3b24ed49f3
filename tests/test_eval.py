"""eval.py: a run's checkpoints evaluated from another process give the run's own evaluation,
once or continuously while it trains, with records in eval.jsonl and one-line errors."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from tests import helpers
from tests.helpers import TINY_RUN

pytestmark = pytest.mark.slow  # eval.py and train.py run as subprocesses

ROOT = Path(__file__).resolve().parents[1]


def run(*args):
    return subprocess.run(
        [sys.executable, "eval.py", *args], capture_output=True, text=True, timeout=300, cwd=ROOT
    )


def lines(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


@pytest.fixture(scope="module")
def workdir(tiny_run):
    """conftest's `tiny_run`, which eval.py's and export.py's tests share."""
    return tiny_run


def test_a_checkpoint_evaluates_as_the_run_did(workdir):
    # The run's best evaluation (--best: <workdir>/best) is its only one, of its last step.
    result = run(f"--workdir={workdir}", "--best")
    assert result.returncode == 0, result.stderr
    (record,) = lines(workdir / "eval.jsonl")
    own = [r for r in lines(workdir / "metrics.jsonl") if "eval/top1" in r][-1]
    assert record["step"] == own["step"] == 3 and record["best"] is True
    assert {k: record[k] for k in own} == own  # the same figures, to the last bit
    assert record["eval/images"] == 360 and record["ema"] is False
    start = f"step 3 (the run's best): eval loss {own['eval/loss']:.4f}, top-1 "
    assert result.stdout.startswith(start)

    # Another step, where the record cannot be written (a read-only or full disk): the figures
    # are printed all the same, and the record's loss is one line.
    (workdir / "eval.jsonl").rename(workdir / "kept.jsonl")
    (workdir / "eval.jsonl").mkdir()
    earlier = run(f"--workdir={workdir}", "--step=2")
    (workdir / "eval.jsonl").rmdir()
    (workdir / "kept.jsonl").rename(workdir / "eval.jsonl")
    assert earlier.returncode == 1 and earlier.stdout.startswith("step 2: eval loss ")
    assert earlier.stderr == (
        f"eval.py: the record was not written ({workdir / 'eval.jsonl'}: Is a directory)\n"
    )


def test_watch_follows_a_training_run_to_its_last_step(tmp_path):
    steps = ["train.steps=8", "train.checkpoint_every=2", "train.keep_checkpoints=2"]
    sets = [f"--set={s}" for s in (*TINY_RUN, *steps)]
    with subprocess.Popen(
        # No compilation cache (train.py's default is in the home folder): as cold as in CI.
        [sys.executable, "train.py", f"--workdir={tmp_path}", "--compilation_cache=", *sets],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ) as trainer:
        # Started with the run: it waits for the run's config.yaml, then for each checkpoint.
        watched = run(f"--workdir={tmp_path}", "--watch", "--poll_seconds=0.2")
        assert trainer.wait(timeout=120) == 0, trainer.stderr.read()
    assert watched.returncode == 0, watched.stderr
    evaluated = [r["step"] for r in lines(tmp_path / "eval.jsonl")]
    assert evaluated == sorted(set(evaluated)) and evaluated[-1] == 8
    own = [r for r in lines(tmp_path / "metrics.jsonl") if "eval/top1" in r][-1]
    assert lines(tmp_path / "eval.jsonl")[-1]["eval/top1"] == own["eval/top1"]


def test_watch_gives_up_on_a_run_that_stopped_before_its_end(workdir):
    # The finished 3-step run, read as one of 10 steps: no process holds it, so after the
    # stated time without a new checkpoint the watch ends, saying what to do.
    watched = run(
        f"--workdir={workdir}",
        "--set=train.steps=10",
        "--watch",
        "--poll_seconds=0.1",
        "--give_up_seconds=0.5",
    )
    (workdir / "eval.jsonl").unlink()  # the module's other tests count its records
    assert watched.returncode == 2 and watched.stdout.startswith("step 3: eval loss ")
    said = watched.stderr.splitlines()
    assert said[0].startswith(f"watching {workdir / 'checkpoints'} until step 10, every 0.1 s;")
    assert said[1:] == [
        f"eval.py: --watch: no new checkpoint in {workdir} for 0.5 s and no run holds it: the "
        "run stopped before its last step 10 (evaluated: step 3); resume it with train.py "
        f"--workdir={workdir}, and watch again"
    ]


def test_watch_ends_soon_on_a_run_that_stopped_before_its_first_checkpoint(tmp_path, monkeypatch):
    from nets_inference import evaluate
    from nets_training.errors import UserError
    from nets_training.workdir import hold_workdir

    # Its config.yaml written, no checkpoint, no process holding the lock: after the time a
    # starting run takes to hold it (START_SECONDS, 30 s; none here), not after give_up_seconds.
    monkeypatch.setattr(evaluate, "START_SECONDS", 0.0)
    looks = []

    def checkpoint_steps():
        looks.append(len(looks))
        return [] if len(looks) < 4 else [5]

    run = types.SimpleNamespace(
        workdir=tmp_path, last_step=5, checkpoint_steps=checkpoint_steps, evaluate=lambda *_: 0.5
    )
    with pytest.raises(UserError) as stopped:
        list(evaluate.watch(run, poll_seconds=0.01, give_up_seconds=900))
    assert str(stopped.value) == (
        f"--watch: no checkpoint in {tmp_path} after 0 s and no run holds it: the run stopped "
        f"before its first checkpoint (its own output says why); start it again with train.py "
        f"--workdir={tmp_path}, and watch again"
    )
    looks.clear()
    with hold_workdir(tmp_path):  # a live run, slow to its first checkpoint: waited for
        assert list(evaluate.watch(run, poll_seconds=0.01, give_up_seconds=900)) == [0.5]


def test_watch_says_at_once_what_it_waits_for_and_gives_up_on_a_run_never_started(
    tmp_path, monkeypatch
):
    from nets_inference import evaluate
    from nets_training.errors import UserError

    # A mistyped --workdir: no config.yaml, no run holding it. Said in one line before the wait,
    # given up on after the time a starting run takes to hold it (START_SECONDS, 30 s; 0.05 s
    # here), as a run with no checkpoint is, not after give_up_seconds (900 s by default).
    monkeypatch.setattr(evaluate, "START_SECONDS", 0.05)
    said = []
    with pytest.raises(UserError) as stopped:
        evaluate.wait_for_start(tmp_path / "typo", 0.01, 900, said.append)
    assert said == [
        f"waiting for {tmp_path / 'typo' / 'config.yaml'} (a run starting in {tmp_path / 'typo'}, "
        "a folder that does not exist yet); giving up after 0.05 s unless a run holds the workdir"
    ]
    assert str(stopped.value) == (
        f"--watch: {tmp_path / 'typo'} has no config.yaml after 0.05 s and no run holds it: "
        f"start the run (train.py --workdir={tmp_path / 'typo'}) first"
    )
    said.clear()
    with pytest.raises(UserError, match="after 0.01 s and no run holds it"):  # the smaller limit
        evaluate.wait_for_start(tmp_path, 0.01, 0.01, said.append)
    assert said[0].endswith(
        f"(a run starting in {tmp_path}); giving up after 0.01 s unless a run holds the workdir"
    )
    (tmp_path / "config.yaml").write_text("")  # the run started: nothing to wait for or say
    said.clear()
    evaluate.wait_for_start(tmp_path, 0.01, 0.01, said.append)
    assert said == []


def test_ctrl_c_stops_a_watch_at_once_in_one_line(workdir):
    # Asleep between two looks at the run (a minute here), it answers within a second or two.
    command = [sys.executable, "eval.py", f"--workdir={workdir}", "--set=train.steps=10"]
    with subprocess.Popen(
        [*command, "--watch", "--poll_seconds=60"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as watch:
        try:
            assert watch.stdout.readline().startswith("step 3: eval loss "), watch.communicate()
            os.killpg(watch.pid, signal.SIGINT)  # as a terminal's Ctrl-C
            since = time.monotonic()
            _, stderr = watch.communicate(timeout=60)
        finally:
            (workdir / "eval.jsonl").unlink(missing_ok=True)  # the module's other tests count it
    assert watch.returncode == 128 + signal.SIGINT and time.monotonic() - since < 5
    assert stderr.splitlines()[1:] == ["eval.py: SIGINT: stopped"]  # after the "watching" line


# One case per stage where eval.py's errors arise (the messages of the others: the next tests).
@pytest.mark.parametrize(
    "flags, message",
    [
        (  # the run's config.yaml read; "evaluating a run" is main's own word
            ["--set=optim.lr=5"],
            "--set optim.lr would change nothing: evaluating a run reads only model: name, "
            "num_classes, dtype, kwargs; data: name, dir, ",
        ),
        (  # its data and step built; the steps it has named, and its kept best
            ["--step=99"],
            "--step 99: {workdir} has no checkpoint 99; its checkpoints are steps 1, 2, 3 "
            "(--step=3: the newest); --best reads its best evaluation's weights\n",
        ),
    ],
)
def test_bad_input_is_one_line(workdir, flags, message):
    result = run(f"--workdir={workdir}", *flags)
    assert result.returncode == 2
    assert result.stderr.startswith(f"eval.py: {message.format(workdir=workdir)}")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_a_damaged_checkpoint_is_one_line_naming_the_others(workdir, tmp_path):
    # A file of the newest checkpoint cut short (a full disk, a copy cut short): its reason in
    # one line, the steps to read instead, none of the echoes of orbax's abandoned reads.
    damaged = shutil.copytree(workdir, tmp_path / "run")
    helpers.damage(damaged / "checkpoints" / "3")
    result = run(f"--workdir={damaged}")
    assert result.returncode == 2 and result.stdout == ""
    assert re.fullmatch(
        f"eval.py: checkpoint 3 of {damaged} is damaged \\(OUT_OF_RANGE: Error reading "
        '"[^"]+": Requested byte range .* is not valid for value of size 1000\\); its other '
        "checkpoints are steps 1, 2 \\(--step=2: the newest\\); --best reads its best "
        "evaluation's weights\n",
        result.stderr,
    ), result.stderr


def test_a_run_evaluates_on_its_own_config_and_weights_on_the_one_given(workdir):
    from nets_cli import common
    from nets_inference import load
    from nets_training.errors import UserError

    common.check_eval_data(None, None)
    common.check_eval_data("w.safetensors", "configs/default.yaml")
    with pytest.raises(UserError) as error:
        common.check_eval_data("w.safetensors", None)
    assert str(error.value) == "--weights needs --config (the data to evaluate on)"
    with pytest.raises(UserError) as error:
        common.check_eval_data(None, "configs/default.yaml")
    assert str(error.value) == (
        "--config is for --weights; a run (--workdir) evaluates with its own config.yaml: "
        "change a key with --set (e.g. --set data.dir=NEW)"
    )
    with pytest.raises(UserError) as error:
        load.run_config(Path("/no/such/run"))
    assert str(error.value) == (
        "--workdir /no/such/run: no config.yaml there (not a training run's folder)"
    )
    with pytest.raises(UserError) as error:
        load.run_config(workdir, ["data.bogus=1"])  # --set reaches the run's config.yaml
    assert str(error.value).startswith(
        "unknown config key 'data.bogus'; valid keys in data: name, dir, "
    )


def test_an_empty_config_yaml_is_refused_not_read_as_the_defaults(tmp_path):
    # A run writes its config.yaml whole (a renamed temporary file), so `--watch`, which reads
    # it as soon as it exists, never sees it empty; an empty one would be the defaults' network.
    from nets_inference import load
    from nets_training import workdir
    from nets_training.errors import UserError

    (tmp_path / "config.yaml").touch()
    with pytest.raises(UserError, match=r"config.yaml is empty: its run wrote none"):
        load.run_config(tmp_path)
    workdir.write_config(tmp_path, "model:\n  name: resnet20\n")
    assert load.run_config(tmp_path).model.name == "resnet20"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]  # no temporary left


def test_set_refuses_what_evaluation_would_not_read():
    from nets_cli import common
    from nets_inference import evaluate
    from nets_training.errors import UserError

    def check(overrides, data_name="digits", reads=evaluate.RUN_KEYS):
        common.check_overrides(overrides, data_name, reads, "evaluation")

    check(["data.eval_batch_size=60", "model.kwargs.num_filters=4", "train.steps=10"])
    check(["data.name=imagefolder", "data.dir=/elsewhere"], "imagefolder")  # its source reads it
    digits_dir = (
        "--set data.dir would change nothing: data.name=digits does not read it (only cifar10, "
        "cifar100, imagefolder, tfds do)"
    )
    for reads in (evaluate.RUN_KEYS, None):  # None: train.py's check, of every key
        with pytest.raises(UserError) as error:
            check(["data.dir=/elsewhere"], reads=reads)
        assert str(error.value) == digits_dir
    with pytest.raises(UserError, match=r"^--set data.flip would change nothing: evaluation "):
        check(["data={eval_batch_size: 60, flip: true}"])  # a mapping sets each of its keys
    with pytest.raises(UserError, match=r"^--set model.name .* reads only data: name, dir, "):
        check(["model.name=resnet18"], "imagefolder", evaluate.WEIGHTS_KEYS)  # --weights names it


def test_a_trained_networks_class_count_is_not_advised_to_change(workdir, tmp_path):
    from nets_inference import evaluate
    from nets_training.errors import UserError

    for split in ("train", "val"):
        for label in range(11):  # one class more than the run's digits
            (tmp_path / split / f"c{label:02}").mkdir(parents=True)
            (tmp_path / split / f"c{label:02}" / "0.png").touch()
    with pytest.raises(UserError) as refused:
        evaluate.build(workdir, ["data.name=imagefolder", f"data.dir={tmp_path}"])
    assert str(refused.value) == (
        f"--workdir {workdir}: its network was trained for 10 classes, and imagefolder's data has "
        "11 (labels 0..10): a trained network's class count cannot change: give data of the "
        "run's 10 classes (or train a network for 11)"
    )


def test_out_of_memory_says_which_overrides_need_less(workdir):
    import dataclasses

    import jax
    import jax.numpy as jnp

    from nets_inference import evaluate
    from nets_training.errors import OutOfMemory

    evaluator = evaluate.build(workdir, ["data.eval_batch_size=512"])
    # An eval step that asks for petabytes: XLA:CPU refuses it as a GPU refuses a batch too large.
    petabytes = jax.jit(lambda weights, batch: jnp.zeros(2**50, jnp.float32))
    with pytest.raises(OutOfMemory) as refused:
        dataclasses.replace(evaluator, eval_step=petabytes).evaluate(3)
    assert refused.value.exit_code == 1  # not a mistake in the input (2)
    assert str(refused.value) == (
        "out of memory on cpu; XLA could not allocate 4,194,304.0 GiB. To need less, give "
        "--set data.eval_batch_size=256 (now 512), or --set model.dtype=bfloat16 (activations in "
        "half the bytes)"
    )


def test_published_weights_evaluate_with_their_own_preprocessing(tmp_path):
    pytest.importorskip("h5py")
    import jax
    import numpy as np
    import optax
    from PIL import Image

    import nets_factory
    from nets_weights import predict

    # Ten classes (the fixture's), images of other sizes than the weights' 224 px.
    rng = np.random.default_rng(0)
    for split, count in (("train", 1), ("val", 2)):
        for label in range(10):
            (tmp_path / split / f"c{label}").mkdir(parents=True)
            for i in range(count):
                pixels = rng.integers(0, 256, (240 + 7 * i, 300, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(tmp_path / split / f"c{label}" / f"{i}.png")
    weights = ROOT / "tests" / "fixtures" / "parity" / "keras_mobilenet" / "model.h5"
    result = run(
        "--model=mobilenet_v1_025",
        f"--weights={weights}",
        "--config=configs/default.yaml",
        "--set=data.name=imagefolder",
        f"--set=data.dir={tmp_path}",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{weights}: eval loss ") and "on 20 images" in result.stdout

    network_fn, variables = nets_factory.load_pretrained("mobilenet_v1_025", weights)
    paths = sorted((tmp_path / "val").glob("*/*.png"))
    images = predict.read_images(paths, network_fn.pretrained)
    labels = np.array([int(p.parent.name[1:]) for p in paths])
    logits, _ = jax.jit(network_fn.apply)(variables, images)
    loss = optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()
    top1 = np.mean(np.argmax(logits, -1) == labels)
    assert f"eval loss {float(loss):.4f}, top-1 {100 * top1:.2f}%" in result.stdout
    assert not (tmp_path / "eval.jsonl").exists()


def test_an_imagenet_subset_is_evaluated_with_the_weights_class_indices():
    from nets_inference import evaluate
    from nets_training import sources
    from nets_training.errors import UserError

    paths = ("v/n01443537/a.jpg", "v/n01440764/b.jpg", "v/n15075141/c.jpg")  # 1, 0, 999
    split = sources.FileSource(paths, (1, 0, 2))  # the folder's own order: 3 classes
    subset = sources.Dataset(split, split, 3, 3, None, (0.5,) * 3, (0.5,) * 3, "none", False)
    imagenet = evaluate.with_weights_classes(subset, 1000, "w", "imagefolder")
    assert imagenet.eval.labels == (1, 0, 999)
    slim = evaluate.with_weights_classes(subset, 1001, "w", "imagefolder")  # background first
    assert slim.eval.labels == (2, 1, 1000) and slim.num_classes == 1001
    assert evaluate.with_weights_classes(subset, 3, "w", "imagefolder") is subset
    with pytest.raises(UserError, match=r"^--weights w: 10 classes, but imagefolder's eval split"):
        evaluate.with_weights_classes(subset, 10, "w", "imagefolder")
    with pytest.raises(UserError, match=r"^--weights w's weights hold no classifier: they give"):
        evaluate.with_weights_classes(subset, 0, "w", "imagefolder")  # DINOv2's, SigLIP's


def test_eval_batches_are_no_larger_than_the_data():
    import jax

    from nets_inference import evaluate

    devices = jax.device_count()
    assert evaluate.fitting_batch(1024, 64) == -(-64 // devices) * devices
    assert evaluate.fitting_batch(32, 5000) == 32

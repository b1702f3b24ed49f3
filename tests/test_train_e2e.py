"""`train.py` as users run it: a subprocess on the embedded digits with a tiny network.

One straight run is the reference; a run killed with SIGKILL and restarted, a run stopped with
SIGTERM and restarted by the command it printed, and a one-device run must all end where it ends.
The runs share a persistent compilation cache, so each distinct program compiles once per test
session.
"""

import errno
import glob
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
import yaml

import nets_factory
from nets_training import config, loop
from nets_training.errors import UserError
from nets_training.workdir import LOCK_FILE
from tests.helpers import TINY_NETWORK, made_once, session_folder

pytestmark = pytest.mark.slow  # train.py run as subprocesses, each starting JAX and compiling

ROOT = Path(__file__).parent.parent
STEPS = 12
TINY = [
    TINY_NETWORK,
    "data.batch_size=32",
    "data.eval_batch_size=120",
    f"train.steps={STEPS}",
    "train.log_every=2",
    "train.eval_every=6",
    "train.checkpoint_every=3",
    "train.keep_checkpoints=2",
    "optim.ema_decay=0.9",  # evaluation reads the EMA; resuming must restore it exactly
    # Every augmentation on, host and device: a resumed run (or one device) draws what the
    # straight one did.
    "data.auto_augment=rand-m9-mstd0.5-inc1",
    "data.reprob=0.25",
    "mixup.mixup_alpha=0.8",
    "mixup.cutmix_alpha=1.0",
    "mixup.mode=elem",
    "optim.label_smoothing=0.1",
]
TIMING = {"train/img_per_sec", "train/data_wait"}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return session_folder(tmp_path_factory) / "xla_cache"


def command(workdir, cache, *sets, flags=()):
    """train.py's command line; `workdir` None: none given (a new folder under ./runs)."""
    args = [sys.executable, str(ROOT / "train.py")]
    args += [f"--workdir={workdir}"] if workdir else []
    args += [f"--compilation_cache={cache}", *flags]
    return args + [f"--set={s}" for s in (*TINY, *sets)]


def environment(devices=4):
    """The test session's environment (conftest's XLA flags) with `devices` CPU devices."""
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if "device_count" not in f]
    flags.append(f"--xla_force_host_platform_device_count={devices}")
    return dict(os.environ, PYTHONPATH=str(ROOT), XLA_FLAGS=" ".join(flags))


def train(workdir, cache, *sets, devices=4, flags=()):
    return subprocess.run(
        command(workdir, cache, *sets, flags=flags),
        env=environment(devices),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def records(workdir):
    lines = (Path(workdir) / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING} for line in lines]


def final_state(workdir, step=STEPS):
    """The state saved at `step`, on this process's first device, whatever the topology of the
    run that saved it (several devices or processes)."""
    path = Path(workdir, "checkpoints", str(step), "state")
    checkpointer = ocp.StandardCheckpointer()
    here = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    target = jax.tree.map(
        lambda saved: jax.ShapeDtypeStruct(saved.shape, saved.dtype, sharding=here),
        checkpointer.metadata(path).item_metadata.tree,
    )
    return checkpointer.restore(path, target)


def leaves(tree):
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        yield jax.tree_util.keystr(path, simple=True, separator="/"), np.asarray(leaf)


def assert_same_state(a, b, **tolerance):
    a, b = dict(leaves(a)), dict(leaves(b))
    assert a.keys() == b.keys()
    for name in a:
        if tolerance:
            np.testing.assert_allclose(a[name], b[name], err_msg=name, **tolerance)
        else:
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def interrupt(workdir, cache, signum, *sets, at_step=3, logged=None, cwd=ROOT):
    """Starts a run (`sets`: config overrides), sends `signum` once checkpoint `at_step` is
    complete (or, given `logged`, once it has logged step `logged`); returns (rc, stderr).
    `workdir` None: the run is given none, and makes its own under `cwd`/runs."""
    process = subprocess.Popen(
        command(workdir, cache, *sets),
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
    )
    deadline = time.time() + 240
    folder = workdir or Path(cwd, "runs", "*")

    def ready():
        if logged is None:
            return glob.glob(f"{folder}/checkpoints/{at_step}")
        metrics = Path(workdir, "metrics.jsonl")
        lines = metrics.read_text().splitlines() if metrics.exists() else []
        return any(json.loads(line)["step"] == logged for line in lines if line.endswith("}"))

    while not ready():
        assert process.poll() is None, process.communicate()[1]
        assert time.time() < deadline
        time.sleep(0.02)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=240)
    return process.returncode, stderr


@pytest.mark.cpu_only("4 forced CPU devices against 1, 'on 1 cpu device'")
def test_train_resumes_exactly_after_sigterm_and_sigkill_and_matches_one_device(tmp_path, cache):
    straight = train(tmp_path / "straight", cache)
    assert straight.returncode == 0, straight.stderr
    assert "done: 12 steps, best eval top-1" in straight.stderr + straight.stdout
    reference = records(tmp_path / "straight")
    assert [r["step"] for r in reference if "train/loss" in r] == [2, 4, 6, 8, 10, 12]
    assert [r["step"] for r in reference if "eval/top1" in r] == [6, 12]
    assert {"train/loss", "train/lr", "train/top1", "epoch"} <= reference[0].keys()
    assert {"eval/loss", "eval/top1", "eval/top5"} <= reference[-1].keys()
    assert sorted(os.listdir(tmp_path / "straight" / "checkpoints")) == ["12", "9"]
    assert list((tmp_path / "straight" / "tensorboard").glob("events.out.tfevents.*"))
    resolved = yaml.safe_load((tmp_path / "straight" / "config.yaml").read_text())
    assert resolved["model"]["num_classes"] == 10 and resolved["data"]["image_size"] == 8
    source_defaults = {k: resolved["data"][k] for k in ("mean", "std", "crop", "flip")}
    assert source_defaults == {"mean": [0.3046], "std": [0.3754], "crop": "pad", "flip": False}
    expected = final_state(tmp_path / "straight")

    # Started without --workdir, as the README's `python train.py`: the hint names the one used.
    # It logs every step, so that each of the straight run's records is seen to average two.
    (tmp_path / "stopped").mkdir()
    every_step = "train.log_every=1"
    returncode, stderr = interrupt(
        None, cache, signal.SIGTERM, every_step, cwd=tmp_path / "stopped"
    )
    assert returncode == 128 + signal.SIGTERM, stderr
    line = stderr.strip().splitlines()[-1]
    assert line.startswith("train.py: SIGTERM at step ") and "saved a checkpoint" in line
    saved_at = int(line.split("step ")[1].split(":")[0])
    (workdir,) = (tmp_path / "stopped" / "runs").iterdir()
    assert (workdir / "checkpoints" / str(saved_at)).is_dir()
    hint = shlex.split(line.split("; to resume, run: ")[1])
    assert hint == [*command(None, cache, every_step), f"--workdir=runs/{workdir.name}"]

    # Resumed, then killed as soon as it has logged a step: its lock dies with it, the records
    # it wrote past the checkpoint are dropped, and the hint, run again, ends the run as the
    # straight one ended.
    assert saved_at < STEPS - 2, line
    returncode, stderr = interrupt(
        workdir, cache, signal.SIGKILL, every_step, logged=saved_at + 1, cwd=tmp_path / "stopped"
    )
    assert returncode == -signal.SIGKILL, stderr
    assert (workdir / LOCK_FILE).exists()
    again = subprocess.run(
        hint,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=workdir.parent.parent,
    )
    assert again.returncode == 0, again.stderr
    assert "resumed at step" in again.stderr + again.stdout
    resumed = records(workdir)
    assert [r["step"] for r in resumed if "train/loss" in r] == list(range(1, STEPS + 1))
    assert_each_record_averages_its_steps(reference, resumed)
    assert_same_state(final_state(workdir), expected)
    # (SIGINT, a Ctrl-C: test_ctrl_c_reaches_the_data_workers_too_and_the_run_stops_...)

    one_device = train(tmp_path / "one", cache, devices=1)
    assert one_device.returncode == 0, one_device.stderr
    assert "on 1 cpu device" in one_device.stderr + one_device.stdout
    for got, want in zip(records(tmp_path / "one"), reference, strict=True):
        assert got.keys() == want.keys()
        np.testing.assert_allclose(list(got.values()), list(want.values()), rtol=2e-4, atol=1e-5)
    assert_same_state(final_state(tmp_path / "one"), expected, rtol=1e-3, atol=1e-5)


def assert_each_record_averages_its_steps(records_of_two, every_step):
    """`records_of_two` (train.log_every=2) from the run that logged `every_step` (1): each train
    record's loss and top-1 are the means of its two steps', the rest are its step's; the
    evaluations are the same."""
    by_step = {r["step"]: r for r in every_step if "train/loss" in r}
    evaluations = [r for r in every_step if "eval/top1" in r]
    assert evaluations == [r for r in records_of_two if "eval/top1" in r]
    for record in (r for r in records_of_two if "train/loss" in r):
        two = [by_step[record["step"] - 1], by_step[record["step"]]]
        for key, value in record.items():
            averaged = key in ("train/loss", "train/top1")
            assert value == (np.mean([r[key] for r in two]) if averaged else two[1][key]), key


@pytest.fixture(scope="module")
def one_step(tmp_path_factory, cache):
    """A finished one-step run of the tiny network: `(its workdir, its output)`. The fine-tuning
    test starts from it and the class-count test resumes it (each train.steps is a program of
    its own to compile: one run serves both, trained once for the session)."""

    def make(folder):
        result = train(folder / "run", cache, "train.steps=1")
        assert result.returncode == 0, result.stderr
        (folder / "output.txt").write_text(result.stderr + result.stdout)

    folder = made_once(tmp_path_factory, "one_step", make)
    return folder / "run", (folder / "output.txt").read_text()


def test_finetune_restores_all_but_the_excluded_head_and_freezes_the_rest(
    tmp_path, cache, one_step
):
    base, _ = one_step
    head = ["model.num_classes=12", "train.steps=2", f"finetune.init_from={base}"]
    mismatch = train(tmp_path / "bad", cache, *head)
    assert mismatch.returncode == 2
    warning, error = mismatch.stderr.strip().splitlines()  # 12 logits for 10 classes: a warning
    assert warning.endswith(
        "model.num_classes=12 but digits has 10 classes: logits 10..11 are never a target"
    )
    assert error == (
        f"train.py: finetune.init_from: params/Dense_0/bias has shape (10,) in "
        f"{base / 'checkpoints' / '1' / 'state'} but (12,) here; exclude it with "
        "a finetune.exclude regex"
    )
    tuned = train(
        tmp_path / "tuned",
        cache,
        *head,
        "finetune.exclude=[Dense_0]",
        "finetune.trainable=[Dense_0]",
    )
    assert tuned.returncode == 0, tuned.stderr
    before = dict(leaves(final_state(base, 1)["params"]))
    after = dict(leaves(final_state(tmp_path / "tuned", 2)["params"]))
    assert after["Dense_0/kernel"].shape == (8, 12)
    for name, value in after.items():
        if "Dense_0" not in name:
            np.testing.assert_array_equal(value, before[name], err_msg=name)


def test_finetune_from_published_weights_builds_their_convention_and_replaces_the_head(
    tmp_path, cache
):
    # A timm checkpoint (tests/fixtures/parity): its network needs PyTorch's padding, which the
    # run sets itself and writes to config.yaml; the 10-class head gives way to 12 classes, and
    # its RGB stem to the digits' one channel, as timm's in_chans adapts it.
    fixture = ROOT / "tests" / "fixtures" / "parity" / "resnet_bottleneck"
    tuned = train(
        tmp_path / "tuned",
        cache,
        "model.name=resnet50",
        "model.kwargs={stage_sizes: [2, 1, 1, 1], num_filters: 8}",
        "model.num_classes=12",
        "data.image_size=32",
        "train.steps=2",
        f"finetune.init_from={fixture}",
        "finetune.trainable=[Dense_0]",
    )
    assert tuned.returncode == 0, tuned.stderr
    log = tuned.stdout + tuned.stderr
    assert f"fine-tuning from {fixture}, kept at initialisation: " in log
    assert (
        "params/Dense_0/bias, params/Dense_0/kernel, "
        "its RGB input convolution adapted to 1 channel as timm's in_chans"
    ) in log
    written = yaml.safe_load((tmp_path / "tuned" / "config.yaml").read_text())
    assert written["model"]["kwargs"]["padding"] == "SYMMETRIC"
    _, reference = nets_factory.load_pretrained(
        "resnet50", fixture, stage_sizes=(2, 1, 1, 1), num_filters=8, in_chans=1
    )
    after = dict(leaves(final_state(tmp_path / "tuned", 2)["params"]))
    assert after["Dense_0/kernel"].shape == (256, 12)
    assert after["conv_init/kernel"].shape == (7, 7, 1, 8)
    for name, value in dict(leaves(reference["params"])).items():
        if "Dense_0" not in name:
            np.testing.assert_array_equal(after[name], value, err_msg=name)
    # A field that contradicts the weights is refused as the config resolves, before anything
    # runs (how train.py prints such errors: test_bad_input_is_one_line_on_stderr_...).
    contradicting = config.load(
        "default.yaml",
        ["model.name=resnet50", "model.kwargs={padding: SAME}", f"finetune.init_from={fixture}"],
    )
    with pytest.raises(UserError) as refused:
        loop.resolve(contradicting)
    assert str(refused.value) == (
        "finetune.init_from: resnet50's weights were trained with padding='SYMMETRIC'; "
        "padding='SAME' would compute another function"
    )


def test_non_finite_loss_stops_with_its_step_and_keeps_the_last_good_checkpoint(tmp_path, cache):
    blowup = [
        "optim.name=sgd",
        "optim.lr=1e30",
        "optim.schedule=constant",
        "train.checkpoint_every=1",
    ]
    result = train(tmp_path, cache, *blowup, "train.log_every=1")
    assert result.returncode == 2
    line = result.stderr.strip().splitlines()[-1]  # after the progress bar
    assert line.startswith("train.py: loss became non-finite at step ")
    bad = int(line.split("at step ")[1].split(";")[0])
    kept = sorted(int(p) for p in os.listdir(tmp_path / "checkpoints"))
    assert kept and kept[-1] == bad - 1 and f"last good checkpoint is step {bad - 1}" in line
    logged = records(tmp_path)  # the check comes first: no record has the non-finite loss
    assert logged[-1]["step"] == bad - 1
    assert np.isfinite([r["train/loss"] for r in logged if "train/loss" in r]).all()
    for _, value in leaves(final_state(tmp_path, kept[-1])["params"]):
        assert np.isfinite(value).all()


# One case per stage where train.py's errors arise, with the images too small for the network
# below (after JAX starts, in a workdir the start made). The other messages are asserted where
# they are raised: tests/test_training_{config,resolve,data,feed,workdir}.py, test_eval.py.
@pytest.mark.parametrize(
    "sets, message",
    [
        # Reading the config, before JAX starts.
        (["optim.lrr=1"], "unknown config key 'optim.lrr' (did you mean 'lr'?); valid keys"),
        # After the checkpoints folder is made: the failed start removes it.
        (["finetune.trainable=[nomatch]"], "finetune.trainable: ['nomatch'] match no parameter"),
    ],
)
def test_bad_input_is_one_line_on_stderr_and_a_non_zero_exit(tmp_path, cache, sets, message):
    result = train(tmp_path, cache, *sets)
    assert result.returncode == 2
    assert result.stderr.startswith(f"train.py: {message}")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert not list(tmp_path.iterdir())  # the workdir: a failed start leaves nothing in it


def test_out_of_memory_is_one_line_that_says_what_needs_less(tmp_path, cache):
    # ResNet-20 two million filters wide: XLA:CPU cannot allocate its parameters (petabytes,
    # past any address space, whatever the host's overcommit), as a GPU cannot a batch too large
    # for it; the first step's wait is where XLA says so.
    result = train(tmp_path, cache, "model.kwargs.num_filters=2000000", "train.steps=2")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    line = result.stderr.strip().splitlines()[-1]  # after the progress bar
    size = r"[\d,]+\.\d GiB"
    assert re.match(rf"train.py: out of memory on cpu; XLA could not allocate {size}\.", line)
    assert "a smaller data.batch_size (now " in line and "model.kwargs.remat=true" in line
    assert line.endswith(
        "model.dtype=bfloat16 (activations in half the bytes). No checkpoint was saved"
    )


def test_resuming_with_another_class_count_says_what_changed_and_changes_nothing(cache, one_step):
    workdir, output = one_step
    assert "n/a img/s" in output  # its only step is compilation
    written = (workdir / "metrics.jsonl").read_text()
    assert "NaN" not in written and "train/img_per_sec" not in written
    saved = sorted(os.listdir(workdir / "checkpoints"))
    resolved = (workdir / "config.yaml").read_text()
    # (another optimizer: tests/test_training_checkpoint.py)
    result = train(workdir, cache, "train.steps=1", "model.num_classes=12")
    assert result.returncode == 2
    warning, error = result.stderr.splitlines(keepends=True)
    assert "model.num_classes=12 but digits has 10 classes" in warning
    assert error == (
        f"train.py: checkpoint {workdir / 'checkpoints' / '1'} has params/Dense_0/bias of shape "
        "(10,), this config (12,): its workdir holds a run of another configuration (changed: "
        "model.num_classes: 10 -> 12); undo the change to resume that run, or use another "
        "workdir to start a new one\n"
    )
    assert sorted(os.listdir(workdir / "checkpoints")) == saved
    assert (workdir / "metrics.jsonl").read_text() == written
    assert (workdir / "config.yaml").read_text() == resolved


def largest_file(folder):
    return max((p for p in folder.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)


DAMAGES = {  # checkpoint: how it is damaged
    6: lambda step: largest_file(step / "state").write_bytes(b"truncated"),
    5: lambda step: (step / "state" / "_METADATA").unlink(),
    4: lambda step: shutil.rmtree(step / "state"),  # an item missing
}


def test_damaged_checkpoints_are_moved_aside_and_the_run_resumes_from_the_newest_whole_one(
    tmp_path, cache
):
    each_step = ["train.steps=6", "train.checkpoint_every=1", "train.keep_checkpoints=6"]
    assert train(tmp_path / "straight", cache, *each_step).returncode == 0
    shutil.copytree(tmp_path / "straight", tmp_path / "damaged")
    for step, damage in DAMAGES.items():
        damage(tmp_path / "damaged" / "checkpoints" / str(step))
    resumed = train(tmp_path / "damaged", cache, *each_step)
    assert resumed.returncode == 0, resumed.stderr
    output = resumed.stdout + resumed.stderr
    for step in DAMAGES:
        moved = tmp_path / "damaged" / "damaged_checkpoints" / str(step)
        assert f"checkpoint {step} does not read back (" in output
        assert f"); moved it to {moved} and resumed from step 3\n" in output
        assert moved.is_dir()  # kept for the user, with what is left of it
    assert records(tmp_path / "damaged") == records(tmp_path / "straight")
    assert_same_state(final_state(tmp_path / "damaged", 6), final_state(tmp_path / "straight", 6))

    # None that reads back: a clear stop, nothing moved.
    for step in range(1, 7):
        (tmp_path / "damaged" / "checkpoints" / str(step) / "state" / "_METADATA").unlink()
    result = train(tmp_path / "damaged", cache, *each_step)
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert result.stderr.startswith(
        f"train.py: no checkpoint in {tmp_path / 'damaged' / 'checkpoints'} reads back (step 6: "
    )
    assert "; step 1: " in result.stderr and "move them elsewhere" in result.stderr
    assert sorted(os.listdir(tmp_path / "damaged" / "checkpoints")) == list("123456")


# Runs train.py with orbax's JSON writer (the log window's) failing as the OS would from checkpoint
# 9 on.
FAILING_DISK = """
import errno, os, runpy, sys
import orbax.checkpoint as ocp
save = ocp.JsonCheckpointHandler.async_save
async def failing(self, directory, *args, **kwargs):
    if int(directory.parent.name.split(".")[0]) >= 9:
        code = int(os.environ["FAIL_ERRNO"])
        raise OSError(code, os.strerror(code), str(directory))
    return await save(self, directory, *args, **kwargs)
ocp.JsonCheckpointHandler.async_save = failing
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_a_failing_save_is_one_line_and_keeps_the_last_complete_checkpoints(tmp_path, cache):
    code = errno.ENOSPC
    result = subprocess.run(
        [sys.executable, "-c", FAILING_DISK, *command(tmp_path, cache)[1:]],
        env=dict(environment(), FAIL_ERRNO=str(code)),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"train.py: could not write checkpoint 9 in {tmp_path / 'checkpoints'}: "
        f"{os.strerror(code)}; the last complete checkpoint is step 6"
    )
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["3", "6"]  # no temporary folder


def interrupt_group(args, until):
    """Starts `args`, and once `until()` is true sends SIGINT to its process group, as a
    terminal's Ctrl-C does (data workers included); returns (exit status, stderr, the seconds
    from the signal to the end)."""
    process = subprocess.Popen(
        args,
        env=environment(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        start_new_session=True,
    )
    deadline = time.time() + 240
    while not until():
        assert process.poll() is None, process.communicate()[1]
        assert time.time() < deadline
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGINT)
    since = time.monotonic()
    _, stderr = process.communicate(timeout=240)
    return process.returncode, stderr, time.monotonic() - since


def test_ctrl_c_while_the_run_starts_stops_it_at_once_in_one_line(tmp_path):
    # A cold compilation cache of its own: the signal comes as the run loads its data and
    # compiles (an interrupted compile used to crash the interpreter's exit, a segfault).
    workdir = tmp_path / "run"
    returncode, stderr, seconds = interrupt_group(
        command(workdir, tmp_path / "cold_cache"), lambda: (workdir / LOCK_FILE).exists()
    )
    assert returncode == 128 + signal.SIGINT, stderr
    assert "Traceback" not in stderr and "Segmentation" not in stderr
    said = [line for line in stderr.splitlines() if "train.py:" in line]
    assert said == ["train.py: SIGINT: stopped before any checkpoint was saved"]
    assert seconds < 10  # not the rest of the compile: within a second or two, on an idle machine


def test_ctrl_c_reaches_the_data_workers_too_and_the_run_stops_without_their_traces(
    tmp_path, cache
):
    workers = "data.workers=1"  # a worker process is all it takes (each one starts JAX: ~3 CPU s)
    returncode, stderr, _ = interrupt_group(
        command(tmp_path, cache, workers), lambda: (tmp_path / "checkpoints" / "3").exists()
    )
    assert returncode == 128 + signal.SIGINT, stderr
    assert "train.py: SIGINT at step " in stderr and "saved a checkpoint" in stderr
    assert "Traceback" not in stderr and "leaked" not in stderr  # the workers' shared memory
    resumed = train(tmp_path, cache, workers)  # to the end: a clean exit, workers and all
    assert resumed.returncode == 0, resumed.stderr
    assert f"done: {STEPS} steps" in resumed.stderr + resumed.stdout
    assert "Traceback" not in resumed.stderr and "leaked" not in resumed.stderr


def can_mount_in_a_namespace_of_its_own() -> bool:
    unshare = ["unshare", "--user", "--map-root-user", "--mount", "true"]
    return (
        shutil.which("unshare") is not None
        and subprocess.run(unshare, capture_output=True).returncode == 0
    )


@pytest.mark.skipif(
    not can_mount_in_a_namespace_of_its_own(),
    reason="a full disk is a tmpfs mounted in a user and mount namespace: `unshare` cannot here",
)
def test_a_full_disk_is_one_line_without_the_echoes_of_the_writes_in_flight(tmp_path, cache):
    # A real full disk: orbax's tensorstore writes fail while others are in flight, which end
    # on orbax's closed event loop (an "Event loop is closed" traceback each, 45-124 of them).
    workdir = tmp_path / "small_disk"
    workdir.mkdir()
    mount = 'mount -t tmpfs -o size=48k tmpfs "$0" && exec "$@"'
    result = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", mount, str(workdir)]
        + command(workdir, cache),
        env=environment(),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert result.returncode == 2, result.stderr
    for echo in ("Traceback", "Event loop is closed", "never retrieved", "Exception"):
        assert echo not in result.stderr
    said = [line for line in result.stderr.splitlines() if "train.py:" in line]
    assert said == [
        f"train.py: could not write checkpoint 3 in {workdir / 'checkpoints'}: "
        f"{os.strerror(errno.ENOSPC)}; no checkpoint is saved"
    ]


def test_images_too_small_for_the_network_are_one_line_before_anything_runs(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), f"--workdir={tmp_path / 'run'}", "--model=vgg11"]
        + ["--set=data.image_size=16"],
        env=environment(1),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert result.returncode == 2 and result.stderr == (
        "train.py: data.image_size=16: vgg11 needs images of at least 32 px; set "
        "data.image_size=32 or more, or leave it unset\n"
    )
    assert not (tmp_path / "run").exists()

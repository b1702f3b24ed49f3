"""Several processes on one machine (JAX's distributed runtime, CPU collectives over Gloo), as
several hosts run: the same run as one process with as many devices, resumable on another
process count, and a clean end when a peer dies."""

import shutil
import signal
import socket
import subprocess
import time

import pytest

from tests.test_train_e2e import (
    ROOT,
    assert_same_state,
    command,
    environment,
    final_state,
    records,
    train,
)

pytestmark = [pytest.mark.slow, pytest.mark.cpu_only("a CPU device a process, Gloo collectives")]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("xla_cache")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(workdir, cache, processes, *sets):
    """`processes` train.py processes of one run, one CPU device each."""
    address = f"127.0.0.1:{free_port()}"
    return [
        subprocess.Popen(
            command(
                workdir,
                cache,
                *sets,
                flags=[
                    f"--coordinator_address={address}",
                    f"--num_processes={processes}",
                    f"--process_id={i}",
                ],
            ),
            env=environment(devices=1),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for i in range(processes)
    ]


def test_two_processes_are_the_run_of_one_with_two_devices_and_resume_on_one(tmp_path, cache):
    runs = start(tmp_path / "two", cache, 2, "train.keep_checkpoints=4")
    said = [process.communicate(timeout=300) for process in runs]
    assert [p.returncode for p in runs] == [0, 0], said
    assert "on 2 cpu device" in "".join(said[0])  # process 0 speaks for the run

    # The checkpoints hold nothing per process: one process with two devices resumes them, and
    # its steps 7-12 are the two processes' to the bit (the data of each step is the same).
    shutil.copytree(tmp_path / "two", tmp_path / "one")
    shutil.rmtree(tmp_path / "one" / "checkpoints" / "9")
    shutil.rmtree(tmp_path / "one" / "checkpoints" / "12")
    logged = records(tmp_path / "two")
    kept = [r for r in logged if r["step"] <= 6]
    metrics = tmp_path / "one" / "metrics.jsonl"
    lines = metrics.read_text().splitlines()[: len(kept)]
    metrics.write_text("".join(line + "\n" for line in lines))
    resumed = train(tmp_path / "one", cache, "train.keep_checkpoints=4", devices=2)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed at step 6" in resumed.stderr + resumed.stdout
    assert records(tmp_path / "one") == logged
    assert_same_state(final_state(tmp_path / "one"), final_state(tmp_path / "two"))


def test_a_dead_peer_ends_the_others_in_one_line(tmp_path, cache):
    runs = start(tmp_path / "run", cache, 2, "train.steps=100000", "train.checkpoint_every=3")
    deadline = time.time() + 240
    while not (tmp_path / "run" / "checkpoints" / "3").is_dir():
        assert all(p.poll() is None for p in runs), runs[0].communicate()[1]
        assert time.time() < deadline
        time.sleep(0.05)
    runs[1].send_signal(signal.SIGKILL)  # a preempted host
    killed_at = time.time()
    _, stderr = runs[0].communicate(timeout=120)
    waited = time.time() - killed_at
    runs[1].communicate()
    assert runs[0].returncode == 1, stderr
    assert waited < 20, waited
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("train.py: another process of this run ended"), stderr[-2000:]
    assert "Traceback" not in stderr and "Check failure" not in stderr
    assert "the last complete checkpoint is step" in last and "--workdir=" in last

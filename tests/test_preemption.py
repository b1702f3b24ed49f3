"""Ctrl-C in a program under `preemption.exit_promptly`: one line and exit status 130 within a
second or two, wherever the main thread is. Each case runs a small script as its own process (a
signal is the whole process's); the programs themselves are tested in test_train_e2e.py and
test_eval.py."""

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from nets_training.preemption import CLEANUP_SECONDS, GRACE_SECONDS

ROOT = Path(__file__).resolve().parents[1]

# The main thread blocks SIGINT, so that the signal reaches the watcher's thread and not this
# one: `time.sleep` then stands for a native call that no signal interrupts (an XLA compile).
BLOCK = "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})"


def start(body: str, tmp_path: Path) -> subprocess.Popen:
    """Runs `body` (it prints 'ready' when it wants a signal) under `exit_promptly`."""
    script = textwrap.dedent(
        """
        import signal, sys, time
        from pathlib import Path
        from nets_training import preemption
        done = Path(sys.argv[1])
        def ready(what="ready"):
            print(what, flush=True)
        """
    ) + textwrap.dedent(body)
    return subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path / "done")],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def interrupt_when(process: subprocess.Popen, line: str = "ready", settle: float = 0.0) -> float:
    """Sends SIGINT `settle` seconds after the process printed `line` (time for it to go from
    printing into its sleep); returns when."""
    assert process.stdout.readline().strip() == line, process.communicate()
    time.sleep(settle)
    process.send_signal(signal.SIGINT)
    return time.monotonic()


def ended(process: subprocess.Popen, since: float) -> tuple[str, float]:
    """stderr, and the seconds from `since` to the end, once the process has ended with 130."""
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    return stderr, time.monotonic() - since


def test_a_stuck_main_thread_is_ended_by_the_watcher_after_the_cleanups(tmp_path):
    process = start(
        f"""
        with preemption.exit_promptly(lambda: "prog: stopped", unwind=True):
            with preemption.on_abrupt_exit(lambda: done.write_text("cleaned")):
                {BLOCK}
                ready()
                time.sleep(30)
        """,
        tmp_path,
    )
    stderr, seconds = ended(process, interrupt_when(process, settle=0.5))
    assert stderr == "prog: stopped\n"
    assert (tmp_path / "done").read_text() == "cleaned"
    assert seconds < GRACE_SECONDS + 5  # 30 s asleep otherwise


@pytest.mark.parametrize("unwind", [True, False])
def test_a_running_main_thread_unwinds_only_when_asked(tmp_path, unwind):
    process = start(
        f"""
        with preemption.exit_promptly(lambda: "prog: stopped", unwind={unwind}):
            try:
                ready()
                time.sleep(30)
            finally:
                done.write_text("unwound")
        """,
        tmp_path,
    )
    stderr, seconds = ended(process, interrupt_when(process))
    assert stderr == "prog: stopped\n" and seconds < 5
    assert (tmp_path / "done").exists() == unwind


def test_a_main_thread_asleep_with_its_handler_pending_is_woken_and_unwinds(tmp_path):
    # A Ctrl-C that comes just before the main thread goes to sleep (`time.sleep`, a lock) leaves
    # Python's handler waiting for the sleep to end. The same state, made at will: the signal
    # reaches another thread, whose raise_signal directs it there.
    process = start(
        """
        import threading
        with preemption.exit_promptly(lambda: "prog: stopped", unwind=True):
            try:
                threading.Timer(0.2, signal.raise_signal, (signal.SIGINT,)).start()
                ready()
                time.sleep(30)
            finally:
                done.write_text("unwound")
        """,
        tmp_path,
    )
    assert process.stdout.readline().strip() == "ready"
    stderr, seconds = ended(process, time.monotonic())
    assert stderr == "prog: stopped\n" and seconds < GRACE_SECONDS + 2
    assert (tmp_path / "done").exists()  # woken, it unwound: not ended by the watcher


def test_the_loops_first_ctrl_c_is_a_request_even_while_stuck_and_the_second_ends_it(tmp_path):
    process = start(
        f"""
        with preemption.exit_promptly(lambda: "prog: stopped", unwind=True):
            with preemption.catch_signals() as stop:
                {BLOCK}
                ready()
                time.sleep({GRACE_SECONDS + 1})  # stuck past the grace: a request waits
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {{signal.SIGINT}})  # its handler runs
                {BLOCK}
                ready(f"stop requested: {{stop.name}}")
                time.sleep(30)
        """,
        tmp_path,
    )
    interrupt_when(process)
    stderr, seconds = ended(process, interrupt_when(process, "stop requested: SIGINT", 0.5))
    assert stderr == "prog: stopped\n" and seconds < GRACE_SECONDS + 5


def test_a_ctrl_c_waits_for_the_cleanups_that_must_not_stop_halfway(tmp_path):
    process = start(
        """
        with preemption.exit_promptly(lambda: "prog: stopped", unwind=True):
            with preemption.deferring_interrupts():
                ready()
                time.sleep(1)
                done.write_text("closed")
            time.sleep(30)
        """,
        tmp_path,
    )
    stderr, seconds = ended(process, interrupt_when(process))
    assert stderr == "prog: stopped\n" and seconds < CLEANUP_SECONDS + 2
    assert (tmp_path / "done").read_text() == "closed"


@pytest.mark.parametrize("stuck", [False, True])
def test_a_ctrl_c_lost_in_a_finalizer_is_sent_again(tmp_path, stuck):
    # Python cannot raise a KeyboardInterrupt out of a `__del__` (JAX's arrays run theirs at every
    # collection). The interrupt is sent again: it must wake a main thread asleep by then, and a
    # main thread stuck by then (SIGINT blocked) must be ended by the watcher.
    process = start(
        f"""
        class Finalized:
            def __del__(self):
                ready()
                time.sleep(1)

        with preemption.exit_promptly(lambda: "prog: stopped", unwind=True):
            try:
                Finalized()
                {BLOCK if stuck else ""}
                time.sleep(30)
            finally:
                done.write_text("unwound")
        """,
        tmp_path,
    )
    stderr, seconds = ended(process, interrupt_when(process))
    assert stderr == "prog: stopped\n" and seconds < 1 + 2 * GRACE_SECONDS + 2
    assert (tmp_path / "done").exists() != stuck

"""The workdir's lock and tidying, without training: held while a run lasts, gone with a killed
process, nothing left behind by a failed start, one-line errors for what cannot be written."""

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from nets_training import workdir
from nets_training.errors import UserError
from nets_training.workdir import LOCK_FILE, hold_workdir

ROOT = Path(__file__).parent.parent
HOLD_FOREVER = """
import sys, time
from pathlib import Path
from nets_training.workdir import hold_workdir
with hold_workdir(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(600)
"""


def test_a_second_holder_is_told_who_holds_it_until_the_first_is_killed(tmp_path):
    with subprocess.Popen(
        [sys.executable, "-c", HOLD_FOREVER, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    ) as holder:
        try:
            assert holder.stdout.readline() == "held\n"
            in_use = rf"in use by pid {holder.pid} on host .* since "
            with pytest.raises(UserError, match=in_use), hold_workdir(tmp_path):
                pass
        finally:
            holder.send_signal(signal.SIGKILL)
    with hold_workdir(tmp_path):  # the OS released the lock with the process
        assert (tmp_path / LOCK_FILE).read_text().startswith(f"pid {os.getpid()} on host ")


def test_a_failed_start_removes_the_folders_it_made_and_keeps_what_was_there(tmp_path):
    with pytest.raises(RuntimeError), hold_workdir(tmp_path / "runs" / "new"):
        (tmp_path / "runs" / "new" / "checkpoints").mkdir()
        raise RuntimeError("failed start")
    assert not (tmp_path / "runs").exists()

    (tmp_path / "old" / "checkpoints" / "3").mkdir(parents=True)
    with pytest.raises(RuntimeError), hold_workdir(tmp_path / "old"):
        (tmp_path / "old" / "tensorboard").mkdir()
        raise RuntimeError("failed resume")
    assert sorted(os.listdir(tmp_path / "old")) == ["checkpoints", LOCK_FILE]
    assert os.listdir(tmp_path / "old" / "checkpoints") == ["3"]


def test_a_workdir_that_is_a_file_or_inside_one_is_one_line(tmp_path):
    (tmp_path / "file").write_text("mine")
    for given in (tmp_path / "file", tmp_path / "file" / "run"):
        with pytest.raises(UserError) as raised, hold_workdir(given):
            pass
        assert str(raised.value) == f"workdir {given}: {tmp_path / 'file'} is a file, not a folder"
    assert (tmp_path / "file").read_text() == "mine"


def test_a_workdir_that_cannot_be_written_is_one_line(tmp_path, monkeypatch):
    def read_only(path, *args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

    monkeypatch.setattr(workdir.os, "open", read_only)  # as root, chmod would not stop a write
    with pytest.raises(UserError) as raised, hold_workdir(tmp_path):
        pass
    assert str(raised.value) == f"workdir {tmp_path}: cannot write there: Read-only file system"

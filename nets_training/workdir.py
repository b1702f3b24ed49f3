"""The run's folder: created when a run starts, locked while it runs, tidied when a start fails;
its resolved `config.yaml` written whole or not at all.

The lock is `fcntl.flock` on `<workdir>/train.lock`: the operating system releases it when the
process ends, however it ends (`kill -9` included), so it never outlives its run; the file itself
stays and says who held it last. On a shared file system, Linux's NFS client makes `flock` a
lock that other hosts see too.
"""

import contextlib
import errno
import fcntl
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

from nets_training.atomic import write_atomically
from nets_training.errors import UserError

LOCK_FILE = "train.lock"
# How long a run that is starting may take to hold its workdir (train.py reads its config and
# imports JAX first): past this, a workdir that no run holds has none (`nets-eval --watch`).
START_SECONDS = 30.0
BEST_DIR = "best"  # the weights of the run's best evaluations (`checkpoint.BestCheckpointer`)
AVERAGED_DIR = "averaged"  # `nets-average`'s average of the run's weights
SUBFOLDERS = ("checkpoints", "tensorboard", BEST_DIR)  # what a start creates inside the workdir
CONFIG_FILE = "config.yaml"  # the run's resolved config: resumes, eval.py and export.py read it


def write_config(workdir: Path, text: str) -> None:
    """Writes the run's `config.yaml` whole (`atomic.write_atomically`): `nets-eval
    --watch` reads it as soon as it exists, and a file read while still being written (empty,
    or cut short) would read as the defaults' network."""
    write_atomically(workdir / CONFIG_FILE, text.encode())


@contextlib.contextmanager
def hold_workdir(workdir: Path, enabled: bool = True) -> Iterator[None]:
    """Creates `workdir` (with missing parents) and holds its lock while the block runs.

    When the block raises, the folders that this start created (the workdir, its missing parents,
    its `SUBFOLDERS`) and that are still empty are removed again, with the lock file when it is
    all the workdir holds, so a failed start leaves nothing behind. `enabled` False (processes
    other than 0) does nothing.

    Raises:
      UserError: `workdir` is a file, cannot be written, or another run holds it (the message
        gives that run's process id, host and start time).
    """
    if not enabled:
        yield
        return
    missing = [p for p in (*reversed(workdir.parents), workdir) if not p.exists()]
    missing += [workdir / name for name in SUBFOLDERS if not (workdir / name).exists()]
    new_lock = not (workdir / LOCK_FILE).exists()
    try:
        workdir.mkdir(parents=True, exist_ok=True)
        lock = _acquire(workdir / LOCK_FILE)
    except (FileExistsError, NotADirectoryError):
        files = (p for p in (*workdir.parents, workdir) if p.exists() and not p.is_dir())
        file = next(files, workdir)
        raise UserError(f"workdir {workdir}: {file} is a file, not a folder") from None
    except OSError as e:
        if e.errno == errno.EWOULDBLOCK:
            raise UserError(
                f"workdir {workdir} is in use by {_holder(workdir / LOCK_FILE)}; wait for that "
                "run to end, stop it, or use another workdir"
            ) from None
        raise UserError(f"workdir {workdir}: cannot write there: {e.strerror}") from None
    try:
        yield
    except BaseException:
        _remove_empty([p for p in missing if workdir in p.parents])
        if new_lock and [p.name for p in workdir.iterdir()] == [LOCK_FILE]:
            (workdir / LOCK_FILE).unlink()
            _remove_empty([p for p in missing if workdir not in p.parents])
        raise
    finally:
        os.close(lock)


def _acquire(path: Path) -> int:
    """An open descriptor of `path` holding its exclusive lock, with this process's details in
    the file. Retries when the file was replaced between opening and locking it (a failed start
    removing its workdir), so that the lock held is the one on the file that the path names."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise
        try:
            if os.fstat(fd).st_ino == os.stat(path).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()} on host {socket.gethostname()} since {since}\n".encode())
    return fd


def is_held(workdir: Path) -> bool:
    """Whether a live run holds `workdir` (its lock is taken; the operating system frees it when
    the run's process ends, however it ends)."""
    try:
        fd = os.open(workdir / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def _holder(path: Path) -> str:
    try:
        return path.read_text().strip() or "another run (starting)"
    except OSError:
        return "another run"


def _remove_empty(folders: list[Path]) -> None:
    """Removes those of `folders` that are empty, deepest first."""
    for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            folder.rmdir()  # fails, as it should, when not empty

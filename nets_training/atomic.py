"""Files written whole or not at all: a temporary file beside the target, renamed over it, so a
reader (another process, or the next run after a crash) never sees one half written."""

import os
import tempfile
from pathlib import Path


def write_atomically(path: Path, data: bytes) -> None:
    """Writes `data` to `path` through a temporary file in its folder, synced, then renamed over
    it; the temporary file is removed if anything fails."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        # mkstemp makes the file private (0600); the file gets the mode any new file would
        # (0644 under the usual umask), so another account can read it.
        os.fchmod(handle, 0o666 & ~_umask())
        with os.fdopen(handle, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _umask() -> int:
    """The process's umask (reading it means setting it: set it back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask

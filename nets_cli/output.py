"""Standard output read by a pipe that may close early (`python -m nets_factory | head -2`)."""

import contextlib
import os
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def quiet_when_the_reader_stops() -> Iterator[None]:
    """Ends the program quietly, with exit status 0, when the reader of its standard output
    stopped reading (`head` has the lines it wanted): Python's recipe for a broken pipe, rather
    than a `BrokenPipeError` traceback. Standard output then goes to the null device, so the
    interpreter's last flush of what is left in its buffer does not fail again ("Exception
    ignored ... BrokenPipeError", status 120); a program that ended with a status of its own
    (`sys.exit(2)` after a one-line error) keeps it."""
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        _to_null_device()
        sys.exit(0)
    except SystemExit:
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            _to_null_device()
        raise


def _to_null_device() -> None:
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, sys.stdout.fileno())
    os.close(null)

"""SIGTERM and SIGINT ask the loop to save and stop at the next step, instead of killing it.

A second SIGINT (Ctrl-C twice) stops at once, without saving.
"""

import contextlib
import signal
import threading
from collections.abc import Iterator

from nets_training.errors import UserError


class Interrupted(UserError):
    """The run stopped on a signal after saving; `exit_code` is the shell's 128 + signal."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.exit_code = 128 + signum


class StopRequest:
    def __init__(self):
        self.signum: int | None = None

    def __bool__(self) -> bool:
        return self.signum is not None

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


@contextlib.contextmanager
def catch_signals() -> Iterator[StopRequest]:
    """Yields a `StopRequest` that becomes true on SIGTERM or SIGINT while the block runs."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request  # signals reach the main thread only; nothing to install
        return

    def handler(signum, frame):
        if request and signum == signal.SIGINT:
            raise KeyboardInterrupt
        request.signum = signum

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield request
    finally:
        for s, h in previous.items():
            signal.signal(s, h)

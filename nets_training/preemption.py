"""Signals. SIGTERM and SIGINT ask the training loop to save and stop at the next step, instead of
killing it (`catch_signals`); a second SIGINT (Ctrl-C twice), or a SIGINT outside the loop, stops
the program at once (`exit_promptly`).

"At once" means within a second or two, wherever the main thread is. Python runs a signal's
handler in the main thread between bytecodes only, so a Ctrl-C during a native call that does
not check for signals (parts of an XLA compile, minutes for a large network on a cold cache; a
wait on a lock) would wait for the call to end.
`exit_promptly` therefore also reads the signals on a thread of its own (Python writes each
signal's number to `signal.set_wakeup_fd`'s pipe as it arrives), and when the main thread has not
answered an interrupt within `GRACE_SECONDS`, that thread sends the main thread the signal itself
(which wakes it from a system call it entered just after the signal came: a lock, a sleep), and
if it still has not answered `WAKE_SECONDS` later, runs the cleanups registered with
`on_abrupt_exit` and ends the process itself.
"""

import contextlib
import functools
import multiprocessing
import multiprocessing.util
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import NoReturn

from nets_training.errors import UserError

# For the main thread to answer an interrupt before the watcher wakes it (`_Watcher._expired`),
# then ends the run: running a handler takes milliseconds, even on a 2-core machine under load.
GRACE_SECONDS = 2.0
CLEANUP_SECONDS = 3.0  # for the main thread to close what it holds once it has answered
WAKE_SECONDS = 0.5  # for a main thread woken from a system call to answer (`_Watcher._expired`)
INTERRUPTED = 128 + signal.SIGINT  # the shell's exit status after a Ctrl-C
_CLOSING = 0  # written by `exit_promptly` as its block ends: the watcher's thread returns


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


def exit_now(status: int) -> NoReturn:
    """Ends the process with `status` once stdout and stderr are flushed, skipping the
    interpreter's teardown but for multiprocessing's part of it.

    For the ends of runs that were interrupted or failed, once they have closed what they hold:
    what teardown would add is the exit handlers of libraries, run on what the failure left
    behind (after an interrupted compile XLA's threads crash it, a segmentation fault; Python
    waits for orbax's thread writing a checkpoint that a second Ctrl-C abandoned).
    Multiprocessing's exit handler (its `atexit` function) is needed, though: it unlinks the
    named semaphores of the data workers' queues, which its resource tracker would otherwise
    report as leaked. Workers
    still there (a stop that did not wait for their start) are ended first, as that handler
    would, but before it waits for their iterators to stop them.
    """
    _flush()
    for child in multiprocessing.active_children():
        child.terminate()
    multiprocessing.util._exit_function()
    os._exit(status)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # closed, or a broken pipe: nothing more to say
            stream.flush()


class _Watcher:
    """One `exit_promptly` block's state, and the thread that reads the signals' numbers from the
    wakeup pipe and ends the process when an interrupt that stops it at once finds the main
    thread stuck (see the module's doc)."""

    def __init__(self, say: Callable[[], str], unwind: bool):
        self.say = say
        self.unwind = unwind
        # Reentrant: a signal handler may run in the main thread while that thread holds it.
        self.lock = threading.RLock()
        self.cleanups: list[Callable[[], None]] = []
        self.stop_signals: int | None = None  # received while `catch_signals` runs; None outside
        self.answered_at: float | None = None  # when the main thread took an interrupt on itself
        self.deferring = 0  # `deferring_interrupts` blocks running
        self.deferred = False  # an interrupt waits for them to end
        self.ending = False  # the process is ending (`end`)
        self._deadline: float | None = None
        self._main_at: tuple | None = None  # where the main thread was when the deadline was set
        self._woken = False  # the main thread was sent the signal itself (`_expired`)
        self._read, self.write = os.pipe()
        os.set_blocking(self.write, False)  # as `signal.set_wakeup_fd` requires
        self._thread = threading.Thread(target=self._run, name="exit_promptly", daemon=True)
        self._thread.start()

    def end(self, cleanups: bool) -> NoReturn:
        """Ends the process, after the cleanups when asked, with the block's line and status 130;
        the main thread, when its handler runs, waits for it."""
        with self.lock:
            ending, self.ending = self.ending, True
        if ending:  # the other thread ends it
            threading.Event().wait()
        for cleanup in reversed(self.cleanups) if cleanups else ():
            with contextlib.suppress(Exception):  # the process ends whatever they leave
                cleanup()
        _flush()
        # Past sys.stderr's buffer: a handler may have interrupted a write to it (a reentrant
        # write raises).
        line = f"{self.say()}\n".encode(sys.stderr.encoding or "utf-8", "backslashreplace")
        os.write(sys.stderr.fileno(), line)
        exit_now(INTERRUPTED)

    def close(self) -> None:
        os.write(self.write, bytes([_CLOSING]))
        self._thread.join()
        os.close(self._read)
        os.close(self.write)

    def _run(self) -> None:
        while True:
            deadline = self._deadline  # once: another thread may re-arm it (`rearm`)
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self._read], [], [], wait)[0]:
                self._expired()
                continue
            received = os.read(self._read, 256)
            if _CLOSING in received:
                return
            for signum in received:
                self._received(signum)

    def _received(self, signum: int) -> None:
        with self.lock:
            if self.stop_signals is not None and signum in (signal.SIGINT, signal.SIGTERM):
                self.stop_signals += 1
                if self.stop_signals == 1 or signum != signal.SIGINT:
                    return  # the loop saves and stops at the end of its step, however long
            elif signum != signal.SIGINT:
                return
            if self._deadline is None:
                self._deadline = time.monotonic() + GRACE_SECONDS
                self._main_at, self._woken = _main_thread_position(), False

    def rearm(self) -> None:
        """For an interrupt the main thread answered without effect (its KeyboardInterrupt lost
        in a finalizer), about to be sent again: a grace of its own, at whose end a main thread
        that has not answered is ended wherever it is."""
        with self.lock:
            self.answered_at = None
            self._deadline = time.monotonic() + GRACE_SECONDS
            self._main_at, self._woken = None, False  # no position to excuse it by (`_expired`)

    def _expired(self) -> None:
        with self.lock:
            if self._deadline is None or time.monotonic() < self._deadline:
                return  # re-armed while the thread waited
            stuck = self.answered_at is None
            if not stuck and time.monotonic() < self.answered_at + CLEANUP_SECONDS:
                self._deadline = self.answered_at + CLEANUP_SECONDS
                return
            if stuck and self._main_at is not None and _main_thread_position() != self._main_at:
                # Running Python, the main thread has seen the signal and gone on: its handler
                # counted it as the loop's first (two Ctrl-C's inside one XLA call are one).
                self._deadline = self._main_at = None
                return
            if stuck and not self._woken:
                # Python runs a handler when a system call is interrupted, not before one starts:
                # a signal that came just before the main thread went to sleep (on a lock, in
                # `time.sleep`) waits for the sleep to end. Interrupted by one more signal of its
                # own, the call returns and the handler runs; a handler not yet run runs once
                # however many signals came, and one that has run (a stop at once) is not
                # repeated (`_stop_at_once`). A thread inside XLA's native code is not woken.
                self._woken = True
                self._deadline = time.monotonic() + WAKE_SECONDS
                signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
                return
        # Stuck (in XLA), the main thread runs no Python until the process ends: the cleanups
        # have what they close to themselves. Past its cleanup time the main thread may be in
        # them: the process ends as it stands.
        self.end(cleanups=stuck)


def _main_thread_position() -> tuple | None:
    """The main thread's innermost Python frame and instruction: unchanged while it is inside a
    native call (an XLA compile), changing as soon as it runs Python."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    return None if frame is None else (frame, frame.f_lasti)


_watcher: _Watcher | None = None  # the innermost block's, while `exit_promptly` runs (signals
# are the process's)


def _stop_at_once() -> None:
    """In a handler: ends the process, or raises KeyboardInterrupt for the main thread to unwind
    (closing what it holds on the way) when the block asks for it, once; while the watcher's
    thread ends the process, waits for it."""
    watcher = _watcher
    if watcher is None:
        raise KeyboardInterrupt
    if not watcher.unwind:
        watcher.end(cleanups=True)
    with watcher.lock:
        ending, answered = watcher.ending, watcher.answered_at is not None
        if not (ending or answered):
            watcher.answered_at = time.monotonic()
            watcher.deferred = watcher.deferring > 0
        deferred = watcher.deferred
    if ending:
        threading.Event().wait()  # until the watcher's `os._exit`
    if not (answered or deferred):  # a further Ctrl-C leaves the cleanups under way to finish
        raise KeyboardInterrupt


def _interrupt(signum, frame) -> None:
    _stop_at_once()


def _raise_again(previous: Callable, unraisable) -> None:
    """`sys.unraisablehook` while `exit_promptly` runs: a KeyboardInterrupt that Python could not
    raise, the handler having run inside a garbage collector's callback or a `__del__` (JAX's
    run at every collection), is raised again in the main thread once this hook has returned
    (the signal is sent from another thread: sent here, its handler could run inside the hook,
    whose exceptions Python prints as "Exception ignored"). It is sent to the process, not to
    that thread (`signal.raise_signal`), so that it wakes a main thread asleep in a system call
    by then. Others go to the `previous` hook."""
    watcher = _watcher
    if watcher is None or not isinstance(unraisable.exc_value, KeyboardInterrupt):
        previous(unraisable)
        return
    watcher.rearm()
    threading.Timer(0.01, os.kill, (os.getpid(), signal.SIGINT)).start()


@contextlib.contextmanager
def exit_promptly(say: Callable[[], str], unwind: bool = False) -> Iterator[None]:
    """While the block runs in the main thread, a SIGINT outside `catch_signals` (or a second one
    inside) ends the process within `GRACE_SECONDS`: the line `say()` returns on stderr, exit
    status 130, no traceback. A block inside another says its own line.

    The signal's handler ends the process itself, unless `unwind`: then the main thread gets a
    KeyboardInterrupt and unwinds, closing what the block holds on its way (within
    `CLEANUP_SECONDS` more). Only what needs it should unwind: a KeyboardInterrupt raised inside
    an import, where a program starting spends seconds, turns into an ImportError or crashes
    the C extension being loaded. Either way, a main thread that does not answer in time
    (inside XLA) is ended by the watcher's thread, after the `on_abrupt_exit` cleanups.
    """
    global _watcher
    watcher, previous_watcher = _Watcher(say, unwind), _watcher
    hook = functools.partial(_raise_again, sys.unraisablehook)
    sys.unraisablehook = hook
    previous_handler = signal.signal(signal.SIGINT, _interrupt)
    previous_fd = signal.set_wakeup_fd(watcher.write, warn_on_full_buffer=False)
    _watcher = watcher
    try:
        yield
    except BaseException as e:
        # Any error after an interrupt is the interrupt's (an import turns it into ImportError).
        if isinstance(e, KeyboardInterrupt) or watcher.answered_at is not None:
            watcher.end(cleanups=False)
        raise
    finally:
        _watcher = previous_watcher
        signal.set_wakeup_fd(previous_fd)
        signal.signal(signal.SIGINT, previous_handler)
        if sys.unraisablehook is hook:  # else a hook chained to it since, which it serves
            sys.unraisablehook = hook.args[0]
        watcher.close()


@contextlib.contextmanager
def on_abrupt_exit(*cleanups: Callable[[], None]) -> Iterator[None]:
    """While the block runs, `exit_promptly` runs `cleanups` (the last first) when it ends the
    process without the main thread's unwinding. They may run in another thread while the main
    thread is stuck in native code, and must close what they close from there (grain's data
    workers: they would outlive the process). Without `exit_promptly` (a library call), this
    does nothing."""
    watcher = _watcher
    if watcher is None:
        yield
        return
    with watcher.lock:
        watcher.cleanups.extend(cleanups)
    try:
        yield
    finally:
        with watcher.lock:
            for cleanup in cleanups:
                watcher.cleanups.remove(cleanup)


@contextlib.contextmanager
def deferring_interrupts() -> Iterator[None]:
    """Lets the block finish when a Ctrl-C stops the run at once, and raises its
    KeyboardInterrupt after it: for cleanups that must not stop halfway (stopping the data
    workers, which would leave their shared memory behind). The watcher still ends the process
    `CLEANUP_SECONDS` after the Ctrl-C. Without `exit_promptly`, this does nothing."""
    watcher = _watcher
    if watcher is None:
        yield
        return
    with watcher.lock:
        watcher.deferring += 1
    try:
        yield
    finally:
        with watcher.lock:
            watcher.deferring -= 1
            interrupted = watcher.deferred and watcher.deferring == 0
            if interrupted:
                watcher.deferred = False
        if interrupted:
            raise KeyboardInterrupt


@contextlib.contextmanager
def catch_signals() -> Iterator[StopRequest]:
    """Yields a `StopRequest` that becomes true on SIGTERM or SIGINT while the block runs; a
    second SIGINT stops at once (KeyboardInterrupt, or see `exit_promptly`)."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request  # signals reach the main thread only; nothing to install
        return
    watcher = _watcher

    def handler(signum, frame):
        if request and signum == signal.SIGINT:
            _stop_at_once()
        else:
            request.signum = signum

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    if watcher is not None:
        with watcher.lock:
            watcher.stop_signals = 0
    try:
        yield request
    finally:
        if watcher is not None:
            with watcher.lock:
                watcher.stop_signals = None
        for s, h in previous.items():
            signal.signal(s, h)

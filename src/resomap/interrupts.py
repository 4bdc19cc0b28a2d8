"""Ctrl-C (SIGINT) and SIGTERM while a command runs: a clean stop that is never lost.

`handled()` is held by `resomap.cli.main` around every command (and by a local-gpus worker around its trial).
The first signal sets a flag and raises KeyboardInterrupt where the program is, as Python's default Ctrl-C does:
the trial that is training marks its MLflow run KILLED, writes no result.json (its last.pt stays, so a plain rerun
of the sweep resumes it) and the command ends with `resomap: interrupted`, exit 128 + the signal's number (130 for
Ctrl-C, 143 for SIGTERM). A second signal while that clean-up runs ends the process at once, with the same line
and code.

Python runs a signal handler between two steps of the main thread, which may be inside a garbage-collector
callback: an exception raised there is only printed ("Exception ignored in ...") and the program runs on. The flag
keeps such an interrupt: `check()`, called at safe points (every epoch of a fit, between trials, before the summary
phase), raises it again, and `handled()` says it when the command returns (`received()`); the printed notice is left
out. Standard library only: nothing of resomap is imported here.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator

LINE = "resomap: interrupted"
WATCHED = (signal.SIGINT, signal.SIGTERM)
_received: list[int] = []  # the signals received while `handled()` is held, in order


def received() -> int | None:
    """The first signal received while `handled()` is held (its number), else None."""
    return _received[0] if _received else None


def exit_code() -> int:
    """The exit code of a command stopped by the signal received: 128 + its number (130: Ctrl-C)."""
    return 128 + (received() or signal.SIGINT)


def check() -> None:
    """Raise KeyboardInterrupt when a signal came, even one whose exception was lost (see the module's doc)."""
    if _received:
        raise KeyboardInterrupt


def _handler(signum: int, _frame: object) -> None:
    if _received:  # a second one, during the clean-up of the first: end now
        sys.stderr.write(LINE + "\n")
        sys.stderr.flush()
        os._exit(exit_code())
    _received.append(signum)
    raise KeyboardInterrupt


def _unraisable(hook):
    """sys.unraisablehook that leaves out a KeyboardInterrupt lost in a callback: the flag carries it on."""

    def quiet(unraisable) -> None:
        if _received and isinstance(unraisable.exc_value, KeyboardInterrupt):
            return
        hook(unraisable)

    return quiet


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """SIGINT and SIGTERM handled as the module says while held; the handlers before it, and an empty flag, after.
    A signal ignored when it starts stays ignored (`nohup`, a background job of a shell without job control), and
    off the main thread (where Python takes no handler) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {sig: signal.getsignal(sig) for sig in WATCHED}
    hook = sys.unraisablehook
    _received.clear()
    try:
        for sig, old in before.items():
            if old is not signal.SIG_IGN:
                signal.signal(sig, _handler)
        sys.unraisablehook = _unraisable(hook)
        yield
    finally:
        with _held():  # a signal now waits for the handlers before it, not half of them restored
            for sig, old in before.items():
                signal.signal(sig, old if old is not None else signal.SIG_DFL)
            sys.unraisablehook = hook
            _received.clear()


@contextlib.contextmanager
def _held() -> Iterator[None]:
    """SIGINT and SIGTERM blocked while the block runs, then delivered (where the platform can block them)."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, set(WATCHED))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)

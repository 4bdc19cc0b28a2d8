"""Locks between processes: `hold(path)` takes an OS lock on a file (filelock: flock on POSIX, msvcrt on Windows),
which the kernel releases on any exit of the holder, SIGKILL included, so a lock is never left behind by a dead
process. Beside the lock file, `<lock>.owner` records who holds it (pid, host, start, command): a refused caller
names the holder, and a record found by the next holder names the process whose lock it took over."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from resomap.atomic import write_text
from resomap.errors import BusyError, ResoMapError

log = logging.getLogger(__name__)


@contextlib.contextmanager
def hold(
    path: str | os.PathLike,
    what: str,
    *,
    wait: bool | float = False,
    hint: str = "",
    on_wait: Callable[[str], None] | None = None,
) -> Iterator[None]:
    """Hold the lock at `path` for the block. Taken at once, else: `wait` False raises BusyError ("<what> is
    already running: pid N on HOST since T; <hint>"), True waits as long as it takes, a number waits that many
    seconds (then BusyError), and `on_wait` is told once who is waited for."""
    from filelock import FileLock, Timeout

    path = Path(path)
    lock = FileLock(str(path))
    try:
        try:
            lock.acquire(timeout=0)
        except Timeout:
            held_by = _holder_words(path)
            if wait is False:
                busy = f"{what} is already running: {held_by}" + (f"; {hint}" if hint else "")
                raise BusyError(busy) from None
            if on_wait is not None:
                on_wait(f"waiting for {what}: {held_by}")
            try:
                lock.acquire(timeout=-1 if wait is True else float(wait))
            except Timeout:
                raise BusyError(f"{what} still running after {float(wait):.0f} s: {describe_owner(path)}") from None
    except OSError as exc:  # no permission to create the lock file, or a read-only folder
        raise ResoMapError(
            f"cannot lock {path} ({exc.strerror or exc}); run where you can write, or set experiment.output_dir"
        ) from None
    try:
        _record_owner(path)
        yield
    finally:
        _owner_file(path).unlink(missing_ok=True)
        lock.release()


def owner(path: str | os.PathLike) -> dict[str, Any] | None:
    """The holder recorded beside the lock at `path` (pid, host, started, command), or None."""
    try:
        found = json.loads(_owner_file(Path(path)).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def describe_owner(path: str | os.PathLike) -> str:
    found = owner(path)
    if not found:
        return f"held by another process (lock {path})"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(found.get("started", 0)))
    return f"pid {found.get('pid')} on {found.get('host')} since {since} (lock {path})"


_RECORD_WAIT_S = 2.0  # how long a caller finding the lock taken waits for its holder's record


def _holder_words(path: Path) -> str:
    """describe_owner, once the holder has recorded itself: it does so just after taking the lock, so a caller that
    finds the lock taken in that moment (two runs started together) waits up to _RECORD_WAIT_S for the record; a
    record of a process no longer running on this host (a holder killed before) is not the holder's."""
    deadline = time.monotonic() + _RECORD_WAIT_S
    while True:
        found = owner(path)
        if found and _running(found):
            return describe_owner(path)
        if time.monotonic() >= deadline:
            return f"held by another process (lock {path})"
        time.sleep(0.05)


def _running(record: dict[str, Any]) -> bool:
    """False when `record` names a process of this host that is gone; True otherwise (another host's cannot be
    asked)."""
    if record.get("host") != socket.gethostname() or os.name != "posix":  # Windows: os.kill(pid, 0) would end it
        return True
    try:
        os.kill(int(record.get("pid")), 0)
    except ProcessLookupError:
        return False
    except (OSError, TypeError, ValueError):  # another user's process (EPERM), or no pid recorded
        return True
    return True


def _owner_file(path: Path) -> Path:
    return path.with_name(path.name + ".owner")


def _record_owner(path: Path) -> None:
    before = owner(path)
    if before and (before.get("pid"), before.get("host")) != (os.getpid(), socket.gethostname()):
        log.info("took over %s from pid %s on %s, no longer running", path, before.get("pid"), before.get("host"))
    record = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(), "command": sys.argv}
    write_text(_owner_file(path), json.dumps(record))

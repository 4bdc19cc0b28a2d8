"""Atomic file writes: a temp file in the same folder, flushed and fsynced, then renamed over the target, so a
reader (or a process killed mid-write) sees the old file or the new one, never a torn one."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


def write_atomic(path: str | os.PathLike, write: Callable[[IO[bytes]], Any]) -> Path:
    """Write through `write(binary_file)`, then rename over `path` (its folder is created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    return path


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    return write_atomic(path, lambda fh: fh.write(data))


def write_text(path: str | os.PathLike, text: str) -> Path:
    return write_bytes(path, text.encode("utf-8"))


def _fsync_dir(folder: Path) -> None:
    # Makes the rename itself durable; not possible on every platform (Windows), so best effort.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)

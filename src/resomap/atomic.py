"""Atomic file writes: a temp file in the same folder, flushed and fsynced, then renamed over the target, so a
reader (or a process killed mid-write) sees the old file or the new one, never a torn one. Files are created
with the process umask (0644 under umask 022), as open() would make them, so a lab's group can read them.

`replace_dir` does the same for a whole folder (the sweep summary): built in `staging_dir(target)`, then swapped
in. `move_to` moves a file or folder to a new place in one rename that never replaces what is there.

A full disk (ENOSPC, or a quota: EDQUOT) while writing is raised as `DiskFullError`, an OSError naming the file and
the space left, in one line, whatever library wrote (torch.save reports it as "unexpected pos" with the OSError
inside): `disk_full(exc)` finds it in any exception's chain."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import re
import secrets
import shutil
import sys
from collections.abc import Callable, Collection
from pathlib import Path
from typing import IO, Any

_EXCHANGE_FLAGS = {"linux": 2, "darwin": 2}  # renameat2 RENAME_EXCHANGE; renamex_np RENAME_SWAP
_NOREPLACE_FLAGS = {"linux": 1, "darwin": 4}  # renameat2 RENAME_NOREPLACE; renamex_np RENAME_EXCL
_FULL_ERRNOS = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)})
# what libraries say when they report a full disk in words (SQLite's SQLITE_FULL through MLflow and SQLAlchemy)
_FULL_WORDS = ("no space left on device", "database or disk is full", "disk quota exceeded")
_NEARLY_FULL = 1 << 20  # bytes: a write that fails with less than this free failed for want of space


class DiskFullError(OSError):
    """No space left on the disk (ENOSPC) while writing `filename`: one line naming it and the space free there
    (`free`, bytes) and, when known, what the write needed (`needed`, bytes). The temp file of the write is gone
    and the file it was to replace is untouched."""

    free: int | None = None
    needed: int | None = None

    def __str__(self) -> str:
        free = "" if self.free is None else f"{_size(self.free)} free"
        needed = "" if self.needed is None else f"{_size(self.needed)} needed"
        space = "; ".join(p for p in (free, needed) if p)
        where = f" writing {self.filename}" if self.filename else ""
        return f"disk full{where}: no space left on device" + (f" ({space})" if space else "")


def disk_full(exc: BaseException | None, path: str | os.PathLike | None = None) -> DiskFullError | None:
    """The full disk behind `exc` as a DiskFullError (itself when it is one), or None: an OSError with errno ENOSPC
    or EDQUOT, or a library's words for it, anywhere in its chain (__cause__, __context__). It names the file being
    written when the chain does (a copy's destination, not its source), else `path`."""
    seen: set[int] = set()
    found, filename = False, None
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, DiskFullError):
            return exc
        if isinstance(exc, OSError) and exc.errno in _FULL_ERRNOS:
            # a copy names its source first and what it was writing second (shutil's sendfile copy, as MLflow's
            # artifact upload uses): the source is on another disk, maybe one with room
            found, filename = True, filename or exc.filename2 or exc.filename
        elif any(words in str(exc).lower() for words in _FULL_WORDS):
            found = True
        exc = exc.__cause__ or exc.__context__
    if not found:
        return None
    return disk_full_error(filename or path)


def disk_full_error(path: str | os.PathLike | None, needed: int | None = None) -> DiskFullError:
    """A DiskFullError for `path` (None: a file not known), with the space free on its disk now (shutil.disk_usage)
    and `needed`."""
    if path is None:
        return DiskFullError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    error = DiskFullError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
    error.free, error.needed = _free(Path(path)), needed
    return error


def _free(path: Path) -> int | None:
    """Bytes free on the disk holding `path` (its nearest existing folder), or None when it cannot be read."""
    for folder in (path, *path.parents):
        if folder.exists():
            try:
                return shutil.disk_usage(folder).free
            except OSError:
                return None
    return None


def _nearly_full(path: Path) -> bool:
    """Less than _NEARLY_FULL bytes free where `path` goes: a write that failed there without saying why (torch's
    "unexpected pos" from a stream it could not write) failed for want of space."""
    free = _free(path)
    return free is not None and free < _NEARLY_FULL


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"


def write_atomic(path: str | os.PathLike, write: Callable[[IO[bytes]], Any], size: int | None = None) -> Path:
    """Write through `write(binary_file)`, then rename over `path` (its folder is created). A full disk raises
    DiskFullError naming `path` (`size`: the bytes to be written, when known, which it reports as needed)."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = _create_temp(path)
    except OSError as exc:
        if disk_full(exc) is None:
            raise
        raise disk_full_error(path, size) from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        _raise_full(exc, path, size)
        raise
    _fsync_dir(path.parent)
    return path


def save_atomic(path: str | os.PathLike, save: Callable[[Path], Any]) -> Path:
    """`write_atomic` for a library that writes to a path itself (matplotlib's savefig): `save(temp path)`, where
    the temp path has `path`'s name (so its suffix picks the format) inside a hidden folder beside it; then the
    file is fsynced and renamed over `path`, and the folder removed."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        folder = _create_temp_dir(path)
    except OSError as exc:
        _raise_full(exc, path, None)
        raise
    tmp = folder / path.name
    try:
        save(tmp)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException as exc:
        shutil.rmtree(folder, ignore_errors=True)
        _raise_full(exc, path, None)
        raise
    folder.rmdir()
    _fsync_dir(path.parent)
    return path


def _raise_full(exc: BaseException, path: Path, size: int | None) -> None:
    """Raise the DiskFullError for `path` when the failed write `exc` met a full disk; else return (the caller
    raises `exc`)."""
    if not isinstance(exc, Exception) or isinstance(exc, DiskFullError):
        return
    if disk_full(exc) is None and not _nearly_full(path):
        return
    raise disk_full_error(path, size) from exc  # named by the file it was to replace, not its temp file


def _create_temp(path: Path) -> tuple[int, Path]:
    """A new hidden file beside `path`, opened for writing. os.open's mode 0o666 goes through the umask (tempfile's
    mkstemp would make it 0600 whatever the umask, and the rename keeps that mode)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue


def _create_temp_dir(path: Path) -> Path:
    """A new hidden folder beside `path` (save_atomic's)."""
    while True:
        folder = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            continue


_TEMP_NAME = re.compile(r"\.(?P<name>.+)\.[0-9a-f]{8}\.tmp")  # what _create_temp and _create_temp_dir make


def remove_leftovers(folder: str | os.PathLike, of: Collection[str] | None = None) -> list[Path]:
    """Remove the temp files and folders of saves a kill interrupted (`.<name>.<8 hex digits>.tmp`, as made here)
    under `folder`, or with `of` only those in `folder` itself of the files named there; nothing else, and no link
    is followed. Only where no other process saves (under the lock of what writes there). Returns what went."""
    folder, removed = Path(folder), []
    for root, dirs, files in os.walk(folder):
        for name in [*dirs, *files]:
            found = _TEMP_NAME.fullmatch(name)
            if found is None or (of is not None and found["name"] not in of):
                continue
            path = Path(root) / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
            removed.append(path)
        dirs[:] = [] if of is not None else [d for d in dirs if not _TEMP_NAME.fullmatch(d)]
    return removed


def write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    return write_atomic(path, lambda fh: fh.write(data), size=len(data))


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


# ---------------------------------------------------------------- whole folders


def staging_dir(target: str | os.PathLike) -> Path:
    """An empty folder to build `target`'s new content in (a leftover of a killed run is removed first). It has
    the same name and depth as `target` (a/b/c -> a/.b.staging/c), so relative paths and the folder name written
    inside it read the same once it is swapped in, and it is on the same filesystem, so the swap is a rename."""
    staging = _staging_root(Path(target)) / Path(target).name
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    return staging


def replace_dir(new: str | os.PathLike, target: str | os.PathLike) -> Path:
    """Put folder `new` (from `staging_dir(target)`) in place of folder `target` and delete the old content.

    Where the OS swaps two names in one step (Linux renameat2 RENAME_EXCHANGE, macOS RENAME_SWAP), a reader or a
    process killed at any moment finds the old folder or the new one at `target`, whole. Elsewhere `target` is
    renamed aside first; a kill between the two renames leaves it aside, and `recover_dir` (called here before
    anything else) puts it back."""
    new, target = Path(new), Path(target)
    recover_dir(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.exists():
        os.rename(new, target)
    elif _exchange(new, target):
        shutil.rmtree(new)  # now the old content
    else:
        old = _aside(target)
        shutil.rmtree(old, ignore_errors=True)
        os.rename(target, old)
        os.rename(new, target)
        shutil.rmtree(old)
    _fsync_dir(target.parent)
    with contextlib.suppress(OSError):  # the staging root, when no other folder is being built there
        _staging_root(target).rmdir()
    return target


def recover_dir(target: str | os.PathLike) -> None:
    """Undo a `replace_dir` killed between its two renames (platforms without an atomic swap)."""
    target = Path(target)
    old = _aside(target)
    if old.is_dir() and not target.exists():
        os.rename(old, target)


def discard_staging(target: str | os.PathLike) -> None:
    """What a killed build or swap of `target` left: the old folder put back when it was aside, a half-built (or
    swapped-out) staging folder removed. Only where no other process builds `target` (under its lock)."""
    target = Path(target)
    recover_dir(target)
    shutil.rmtree(_staging_root(target) / target.name, ignore_errors=True)
    with contextlib.suppress(OSError):
        _staging_root(target).rmdir()


def move_to(source: str | os.PathLike, target: str | os.PathLike) -> bool:
    """Move `source` (a file or a folder) to `target` in one rename, its parent folders made first, never over
    something at `target` (Linux renameat2 RENAME_NOREPLACE, macOS RENAME_EXCL; elsewhere a check before the
    rename). False, and nothing moved, when `target` exists or `source` is gone (another process moved it)."""
    source, target = Path(source), Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists() or target.is_symlink() or not (source.exists() or source.is_symlink()):
        return False
    done = _rename_noreplace(source, target)
    if done is None:  # no such call here: the check above, then a plain rename
        try:
            os.rename(source, target)
        except FileNotFoundError:
            return False
        except OSError:
            if target.exists():  # made meanwhile (a folder rename fails on a non-empty one)
                return False
            raise
    elif not done:
        return False
    _fsync_dir(source.parent)
    _fsync_dir(target.parent)
    return True


def _rename_noreplace(source: Path, target: Path) -> bool | None:
    """True: renamed; False: `target` exists or `source` is gone; None: the OS or filesystem has no such call."""
    import errno

    done = _rename_with_flag(source, target, _NOREPLACE_FLAGS)
    if done is None:
        return None
    if done == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOENT):
        return False
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):  # this filesystem cannot
        return None
    raise OSError(err, os.strerror(err), str(source), None, str(target))


def _staging_root(target: Path) -> Path:
    return target.parent.with_name(f".{target.parent.name}.staging")


def _aside(target: Path) -> Path:
    return _staging_root(target) / f"{target.name}.old"


def _exchange(a: Path, b: Path) -> bool:
    """Swap the names a and b in one system call; False where the OS or the filesystem cannot."""
    return _rename_with_flag(a, b, _EXCHANGE_FLAGS) == 0


def _rename_with_flag(source: Path, target: Path, flags: dict[str, int]) -> int | None:
    """renameat2 (Linux) / renamex_np (macOS) with this platform's flag from `flags`: the call's return value (0:
    done; errno via ctypes.get_errno), or None where the OS or its libc has no such call."""
    flag = flags.get(sys.platform)
    if flag is None:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if sys.platform == "linux":
            at_fdcwd = -100
            return libc.renameat2(at_fdcwd, os.fsencode(source), at_fdcwd, os.fsencode(target), flag)
        return libc.renamex_np(os.fsencode(source), os.fsencode(target), flag)
    except (OSError, AttributeError):  # no such libc function (old glibc)
        return None

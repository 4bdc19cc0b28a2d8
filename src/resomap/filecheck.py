"""Cheap checks that a file a finished trial left is whole: each says what is wrong in a few words, or None.

They read what they must and nothing more, so a sweep can check every finished trial's files each time it is run
again (resomap.sweep.plan.trial_state): a zip (a torch checkpoint, an .npz of maps) by its central directory and
the extent of each member in the file, without reading the members; a per-image table (csv) by its lines: whole
rows, the rows of each test resolution and, ending in a newline, not cut mid-row. Files written through
resomap.atomic are whole or absent; these find what a full disk, a copy or a hand cut short.
"""

from __future__ import annotations

import csv
import struct
import zipfile
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, ..., file name length, extra field length
_LOCAL_SIGNATURE = b"PK\x03\x04"


def check_zip(path: str | Path) -> str | None:
    """What is wrong with the zip file at `path` (missing, empty, truncated, not a zip), or None when its central
    directory reads and every member lies whole inside the file (local header where the directory says, data
    within the file's size). Members are not decompressed or checksummed: a torn write loses the end of a file,
    which holds the directory."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if size == 0:
        return "empty (0 bytes)"
    try:
        with zipfile.ZipFile(path) as archive, path.open("rb") as fh:
            members = archive.infolist()
            if not members:
                return "holds nothing (an empty archive)"
            for info in members:
                fh.seek(info.header_offset)
                header = fh.read(_LOCAL_HEADER.size)
                if len(header) < _LOCAL_HEADER.size:
                    return f"truncated ({size} bytes: member {info.filename} starts past the end)"
                signature, name_len, extra_len = _LOCAL_HEADER.unpack(header)
                if signature != _LOCAL_SIGNATURE:
                    return f"corrupt (member {info.filename} has no header where the directory says)"
                end = info.header_offset + _LOCAL_HEADER.size + name_len + extra_len + info.compress_size
                if end > size:
                    return f"truncated ({size} bytes, member {info.filename} ends at byte {end})"
    except zipfile.BadZipFile:
        return f"truncated or not a zip archive ({size} bytes, no readable central directory)"
    except (OSError, ValueError, EOFError) as exc:
        return f"cannot be read ({exc})"
    return None


def check_table(path: str | Path, rows: int | None, resolutions: Iterable[int | str] = ()) -> str | None:
    """What is wrong with a per-image table (csv with a header naming `test_resolution` and `index`; one row per
    test image and test resolution; written whole, ending in a newline), or None. `rows`: the test images each
    test resolution must have (None: not checked); `resolutions`: the test resolutions it must hold (none: any)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if not data:
        return "empty (0 bytes)"
    if not data.endswith(b"\n"):
        return f"cut mid-row ({len(data)} bytes, the last line has no end)"
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        return "not text (undecodable bytes)"
    reader = csv.reader(lines)
    header = next(reader, None) or []
    if "test_resolution" not in header or "index" not in header:
        return "no header naming test_resolution and index"
    at = header.index("test_resolution")
    counts: Counter[int] = Counter()
    for number, row in enumerate(reader, start=2):
        if len(row) != len(header):
            return f"line {number} has {len(row)} of {len(header)} fields"
        try:
            counts[int(row[at])] += 1
        except ValueError:
            return f"line {number}: test_resolution {row[at]!r} is not a number"
    wanted = sorted({int(r) for r in resolutions})
    missing = [r for r in wanted if r not in counts]
    if missing:
        return f"no rows at {', '.join(f'{r} px' for r in missing)}"
    if rows is not None:
        for res in sorted(counts):
            if counts[res] != rows:
                return f"{counts[res]} rows at {res} px, expected {rows} (one per test image)"
    return None

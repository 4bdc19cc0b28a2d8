"""Cheap checks that a file a finished trial left is whole: each says what is wrong in a few words, or None.

They read what they must and nothing more, so a sweep can check every finished trial's files each time it is run
again (resomap.sweep.plan.trial_state): a zip (a torch checkpoint, an .npz of maps) by its central directory and
the extent of each member in the file, without reading the members; a per-image table (csv) by its lines: whole
rows, the rows of each test resolution and, ending in a newline, not cut mid-row. Files written through
resomap.atomic are whole or absent; these find what a full disk, a copy or a hand cut short.

A sweep's summary folder is checked the same way on each run (`check_folder`, resomap.summary_check): every file
by what its kind shows at a glance (JSON parses, a zip's directory, a csv's rows, a PNG's end chunk, a PDF's
%%EOF, an HTML page's closing tag) and by the size it was written with.
"""

from __future__ import annotations

import csv
import os
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


# ---------------------------------------------------------------- any file of a sweep's summary folder

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_END = b"\x00\x00\x00\x00IEND\xaeB`\x82"  # the IEND chunk every whole PNG ends with
_TAIL = 1024  # bytes read from a file's end: a PDF's %%EOF, an HTML page's closing tag


def check_file(path: str | Path) -> str | None:
    """What is wrong with a file of a summary folder by what its kind allows to see cheaply, or None: JSON that does
    not parse, a zip (.npz) that fails `check_zip`, a csv cut mid-row or with a row of another width than its
    header, a PNG without its end chunk, a PDF without %%EOF near its end, an HTML page without its closing tag.
    Other kinds (.md, .txt) only when missing; `check_folder` compares their sizes with what was written."""
    path = Path(path)
    kind = path.suffix.lower()
    if kind in (".npz", ".zip"):
        return check_zip(path)
    try:
        size = path.stat().st_size
        if kind in (".png", ".pdf", ".html"):
            with path.open("rb") as fh:
                head = fh.read(len(_PNG_SIGNATURE))
                fh.seek(max(0, size - _TAIL))
                tail = fh.read()
            return _check_ends(kind, size, head, tail)
        if kind in (".json", ".csv"):
            text = path.read_bytes().decode("utf-8")
            return _check_json(text) if kind == ".json" else _check_csv(text)
    except FileNotFoundError:
        return "missing"
    except UnicodeDecodeError:
        return "not text (undecodable bytes)"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    return None


def _check_ends(kind: str, size: int, head: bytes, tail: bytes) -> str | None:
    if size == 0:
        return "empty (0 bytes)"
    if kind == ".png" and not (head == _PNG_SIGNATURE and tail.endswith(_PNG_END)):
        return f"cut short or not a PNG ({size} bytes, no end chunk)"
    if kind == ".pdf" and not (head.startswith(b"%PDF") and b"%%EOF" in tail):
        return f"cut short or not a PDF ({size} bytes, no %%EOF at the end)"
    if kind == ".html" and not tail.rstrip().lower().endswith(b"</html>"):
        return f"cut short ({size} bytes, no closing </html>)"
    return None


def _check_json(text: str) -> str | None:
    import json

    if not text:
        return "empty (0 bytes)"
    try:
        json.loads(text)
    except ValueError as exc:
        return f"not whole JSON ({len(text.encode())} bytes: {exc})"
    return None


def _check_csv(text: str) -> str | None:
    import io

    if not text:
        return "empty (0 bytes)"
    if not text.endswith("\n"):
        return f"cut mid-row ({len(text.encode())} bytes, the last line has no end)"
    rows = csv.reader(io.StringIO(text, newline=""))
    width = len(next(rows, []))
    for row in rows:
        if row and len(row) != width:  # a blank line is no cut
            return f"line {rows.line_num} has {len(row)} of {width} fields"
    return None


def file_sizes(folder: str | Path, skip: Iterable[str] = ()) -> dict[str, int]:
    """{path relative to `folder` (with '/'): size in bytes} of every file under it but `skip` (relative paths)
    and hidden ones (a save's temp file)."""
    folder, skipped = Path(folder), set(skip)
    sizes = {}
    for path in sorted(folder.rglob("*")):
        name = path.relative_to(folder).as_posix()
        if path.is_file() and name not in skipped and not any(p.startswith(".") for p in name.split("/")):
            sizes[name] = path.stat().st_size
    return sizes


def check_folder(
    folder: str | Path, sizes: dict[str, int] | None, skip: Iterable[str] = (), resized: Iterable[str] = ()
) -> list[str]:
    """'<path>: <what is wrong>' for each file of `folder` that is not whole, through `check_file`: each file of
    `sizes` (recorded by `file_sizes` when the folder was written: one gone is missing, one of another size cut
    short or changed, except those in `resized`, which another command writes again in place), or every file
    found there when `sizes` is None; `skip`: relative paths not checked. An empty file is only checked against
    its record, and one this user may not read is left alone (no damage a rebuild here could mend)."""
    folder, skipped, resized = Path(folder), set(skip), set(resized)
    names = sizes if sizes is not None else file_sizes(folder, skipped)
    found = []
    for name in sorted(set(names) - skipped):
        path = folder / name
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            found.append(f"{path}: missing")
            continue
        except OSError:
            continue
        if not os.access(path, os.R_OK):
            continue
        what = None
        if sizes is not None and name not in resized and size != sizes[name]:
            what = f"{size} bytes where {sizes[name]} were written"
        if size:
            what = check_file(path) or what
        if what:
            found.append(f"{path}: {what}")
    return found

"""Whether a sweep's summary folder is whole. Its state.json records the size of every file the summary wrote
(`files`) and the command that ran the sweep (`command`); each run of the sweep checks every file cheaply
(resomap.filecheck.check_folder: its size, and what its kind shows at a glance) and rebuilds a summary with a
damaged file, and `resomap report` refuses one in a line naming the file and that command. Nothing of the sweep is
imported here (`resomap report` starts without torch)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

from resomap.errors import DataError
from resomap.filecheck import check_folder, file_sizes

STATE_FILE = "state.json"
REPORT_FILE = "report.html"  # `resomap report` writes it again in place: checked by its closing tag, not its size


def summary_files(folder: str | Path) -> dict[str, int]:
    """What state.json records of the summary folder's files: {relative path: size}."""
    return file_sizes(folder, skip=[STATE_FILE])


def summary_damage(folder: str | Path, state: dict[str, Any] | None, skip: tuple[str, ...] = ()) -> list[str]:
    """'<path>: <what is wrong>' for each damaged file of the summary folder: those `state` records (every file
    there when it records none: a summary written before it did) checked by kind and size; `skip`: relative paths
    not checked."""
    sizes = (state or {}).get("files")
    sizes = sizes if isinstance(sizes, dict) else None
    return check_folder(folder, sizes, skip=[STATE_FILE, *skip], resized=[REPORT_FILE])


def damage_words(damage: list[str]) -> str:
    """The first damaged file and how many more."""
    more = len(damage) - 1
    return damage[0] + (f" (and {more} more damaged file{'s' if more > 1 else ''})" if more else "")


def sweep_command() -> str | None:
    """This process's command line when it is a `resomap sweep`, as one types it again; else None (a script, a
    test)."""
    argv = sys.argv
    if not argv or Path(argv[0]).name not in ("resomap", "resomap.exe", "__main__.py") or "sweep" not in argv[1:]:
        return None
    return shlex.join(["resomap", *argv[1:]])


def rebuild_words(state: dict[str, Any] | None) -> str:
    """How to rebuild the summary: the command that made it, when state.json recorded it."""
    command = (state or {}).get("command")
    how = (
        f"`{command}`" if command else "the command that ran the sweep (`resomap sweep` with its preset and overrides)"
    )
    return f"rebuild the summary with {how}: no trial is trained again"


def read_state(folder: str | Path) -> dict[str, Any] | None:
    """The summary folder's state.json, or None when it is missing or does not read."""
    try:
        state = json.loads((Path(folder) / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def check_summary(folder: str | Path, skip: tuple[str, ...] = (REPORT_FILE,)) -> None:
    """DataError in one line naming the first damaged file of the summary folder and the command that rebuilds
    it; `skip`: files the caller writes itself (`resomap report`: the page)."""
    state = read_state(folder)
    damage = summary_damage(folder, state, skip)
    if damage:
        raise DataError(f"{damage_words(damage)}; {rebuild_words(state)}")

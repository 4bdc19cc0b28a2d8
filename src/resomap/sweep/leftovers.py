"""What saves a kill interrupted left in a sweep's folders: the hidden temp files and folders of resomap.atomic
(`.confusion_matrix.png.1a2b3c4d.tmp/`, `.result.json.5e6f7a8b.tmp`), which no save looks at again. The next run
of the sweep removes them once it holds the sweep's lock (no other run of it is saving then), in this experiment's
folders only: its trials' summaries and checkpoints, its summary folder and, beside the other experiments' in
`_sweep/`, its own lock record and pending ETA lines."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from resomap.atomic import remove_leftovers
from resomap.config import Config
from resomap.layout import Layout


def remove_interrupted_saves(cfg: Config, report: Callable[[str], None]) -> list[Path]:
    """Remove the leftovers of interrupted saves of this sweep (under its lock), said in one line; returns them."""
    layout = Layout.of(cfg)
    removed = []
    for folder in (layout.summaries / layout.experiment, layout.checkpoints / layout.experiment, layout.sweep_folder()):
        if folder.is_dir():
            removed += remove_leftovers(folder)
    own = {layout.lock_file().name + ".owner", layout.pending_estimates().name}  # _sweep/ is every experiment's
    if layout.sweep_folder().parent.is_dir():
        removed += remove_leftovers(layout.sweep_folder().parent, of=own)
    if removed:
        more = f" and {len(removed) - 1} more" if len(removed) > 1 else ""
        report(f"[sweep] removed what interrupted saves left: {removed[0]}{more}")
    return removed

"""Trial folders of the seed layout without an experiment level moved into their experiment's (resomap.layout).

Until experiments had folders of their own, every experiment of an output folder wrote model_summaries/<model>/
<res>/seed<S>/ and checkpoints/<family>/<model>/<res>/seed<S>/, so two experiments overwrote each other's trials.
The next run of an experiment (the sweep under its lock, `resomap sync`, `resomap train`) moves the folders that
are its own into model_summaries/<experiment>/... and checkpoints/<experiment>/...: one rename per folder that
never replaces anything (`resomap.atomic.move_to`), one line per trial, nothing retrained. Whose a folder is, its
files say: the summary folder's result.json holds the trial key, the checkpoint folder's last.json (or last.pt)
the same key as its config hash, and the key holds the experiment's name, so another experiment's folders never
match and are left where they are. A summary folder without result.json (a trial interrupted in training) goes
with its trial's checkpoints; lr_find.json (keyed by the seed-0 trial key) goes beside the moved seed folders.
result.json's paths into the moved folders (`best_checkpoint`, `explain.maps`) are rewritten to the new places,
every other byte kept. A move killed half-way is finished by the next run: each folder and the rewrite are
checked on their own (the summary's paths are rewritten just before it moves).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from resomap.atomic import move_to, write_text
from resomap.sweep.identity import Trial, checkpoint_key, result_key, trial_key

log = logging.getLogger(__name__)
PATH_FIELDS = (("best_checkpoint",), ("explain", "maps"))  # result.json's paths into the trial's folders


def migrate_trials(trials: Iterable[Trial], report: Callable[[str], None] = log.info) -> int:
    """Move every trial's folders of the seed layout into its experiment's; one line per trial moved (`report`).
    The number of trials moved."""
    moved = 0
    for trial in trials:
        line = migrate_trial(trial)
        if line:
            report(line)
            moved += 1
    return moved


def migrate_trial(trial: Trial) -> str | None:
    """Move this trial's folders of the seed layout into its experiment's (those that are its own and whose new
    place is free); the line saying what moved, or None when nothing did."""
    if trial._in_legacy_folder():
        return None  # a single-seed folder: used where it is
    lay = trial.layout
    old_summary, old_checkpoints = trial.seed_layout_dirs()
    new_summary = lay.trial_summary(trial.model, trial.resolution, trial.seed)
    new_checkpoints = lay.trial_checkpoints(trial.family, trial.model, trial.resolution, trial.seed)
    moves: list[tuple[Path, Path]] = []
    if checkpoint_key(old_checkpoints) == trial.key and _move(old_checkpoints, new_checkpoints):
        moves.append((old_checkpoints, new_checkpoints))
    _move_lr_find(trial, old_checkpoints.parent, new_checkpoints.parent)
    found = result_key(old_summary)
    interrupted = found is None and trial.key in (checkpoint_key(new_checkpoints), checkpoint_key(old_checkpoints))
    if (found == trial.key or (interrupted and old_summary.is_dir())) and not new_summary.exists():
        # paths first (a kill before the move leaves them pointing at the new places; the next run moves)
        _repoint(old_summary / "result.json", {old_summary: new_summary, old_checkpoints: new_checkpoints})
        if _move(old_summary, new_summary):
            moves.append((old_summary, new_summary))
    if not moves:
        return None
    words = ", ".join(f"{old} -> {new}" for old, new in moves)
    return f"[sweep] moved {trial.name} into experiment {trial.cfg.experiment.name}'s folders: {words}"


def _move(old: Path, new: Path) -> bool:
    """`old` renamed to `new` (never over it); its emptied `<res>` folder removed."""
    if not move_to(old, new):
        return False
    with contextlib.suppress(OSError):  # <res>/ with no other seed left: never an experiment's (one level deeper)
        old.parent.rmdir()
    return True


def _move_lr_find(trial: Trial, old_parent: Path, new_parent: Path) -> None:
    """lr_find.json of this experiment's model x resolution (keyed by the seed-0 trial key) beside the moved seed
    folders; another experiment's is left."""
    old = old_parent / "lr_find.json"
    try:
        key = json.loads(old.read_text(encoding="utf-8")).get("key")
    except (OSError, ValueError, AttributeError):
        return
    if key == trial_key(trial.cfg, trial.model, trial.resolution, 0):
        move_to(old, new_parent / "lr_find.json")
        with contextlib.suppress(OSError):
            old_parent.rmdir()


def _repoint(path: Path, olds: dict[Path, Path]) -> None:
    """result.json's paths into a moved folder rewritten to its new place; nothing written when none is."""
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text)
    except (OSError, ValueError):
        return
    if not isinstance(data, dict):
        return
    changed = False
    for field in PATH_FIELDS:
        node = data
        for part in field[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or not isinstance(node.get(field[-1]), str):
            continue
        moved = _moved_path(node[field[-1]], olds)
        if moved is not None:
            node[field[-1]] = moved
            changed = True
    if changed:
        write_text(path, json.dumps(data, indent=2))  # as TrialResult.to_json writes it: every other byte kept


def _moved_path(value: str, olds: dict[Path, Path]) -> str | None:
    """`value` (a path written inside one of the old folders) in its new folder; None when it is in none."""
    given = Path(value)
    for old, new in olds.items():
        for base, path in ((old, given), (old.resolve(), given.resolve())):
            try:
                inside = Path(os.path.normpath(path)).relative_to(os.path.normpath(base))
            except ValueError:
                continue
            return str(new / inside)
    return None

"""`resomap sync`: publish the trial results MLflow does not hold yet (written while the store was unreachable).

A trial whose result.json says `tracked: false`, or whose run is missing or was left open, is published
(resomap.tracking.publish: its run is the one the experiment holds for its trial key, found in one search for all
trials, else a new one under the parent; everything logged once, closed with its status); then result.json is
rewritten with `tracked: true` and the run id (temp file + rename).
Publishing logs only what a run lacks, so sync can run any number of times.

This module knows runs and result files, not sweeps: the sweep layer (`resomap.sweep.sweep.sync_sweep`) plans
the trials and passes them in, so imports stay one-way.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from resomap.atomic import write_text
from resomap.tracking.origin import origin, own_runs
from resomap.tracking.publish import TRIAL_KEY_TAG, LoadModel, PublishTrial, publish

log = logging.getLogger(__name__)

__all__ = ["TRIAL_KEY_TAG", "SyncReport", "needs_sync", "read_result", "sync_results", "write_result"]
TERMINAL = ("FINISHED", "FAILED", "KILLED")


@dataclasses.dataclass
class SyncReport:
    parent_run_id: str | None = None
    synced: list[str] = dataclasses.field(default_factory=list)  # logged now
    already: list[str] = dataclasses.field(default_factory=list)  # tracked before, run closed
    missing: list[str] = dataclasses.field(default_factory=list)  # no result yet (pending or interrupted)
    failed: dict[str, str] = dataclasses.field(default_factory=dict)  # name -> reason; still `tracked: false`

    @property
    def ok(self) -> bool:
        return not self.failed

    def line(self) -> str:
        return (
            f"[sync] {len(self.synced)} logged, {len(self.already)} already tracked, "
            f"{len(self.missing)} without a result, {len(self.failed)} still untracked"
        )


def read_result(trial: PublishTrial) -> dict[str, Any] | None:
    """The trial's result.json as a dict, or None when there is none for this exact key."""
    path = trial.summary_dir / "result.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("key") == trial.key else None


def write_result(folder: Path, data: Mapping[str, Any]) -> None:
    """result.json replaced atomically (temp file, fsync, rename): a reader sees the old or the new file."""
    write_text(folder / "result.json", json.dumps(data, indent=2, default=str))


def needs_sync(trials: Iterable[PublishTrial]) -> bool:
    """Whether some trial's result says `tracked: false` (read from the files only; no MLflow call)."""
    return any(data is not None and not data.get("tracked") for data in map(read_result, trials))


def sync_results(
    trials: Iterable[PublishTrial], tracker: Any, parent_run_id: str | None, load_model: LoadModel | None = None
) -> SyncReport:
    """Make every finished trial's child run complete and closed, exactly once; see the module docstring.
    `load_model` rebuilds a trial's model from its result for mlflow.log_model (publish's `load_model`)."""
    report = SyncReport(parent_run_id)
    try:
        runs = _trial_runs(tracker)
    except Exception as exc:
        reason = f"store unreachable: {type(exc).__name__}: {exc}".splitlines()[0]
        runs = None
    for trial in trials:
        data = read_result(trial)
        mine = own_runs(runs.get(trial.key, []), origin(trial.cfg)) if runs is not None else []
        if data is None:
            report.missing.append(trial.name)
        elif runs is None and data.get("tracked"):
            report.already.append(trial.name)
        elif runs is None:
            report.failed[trial.name] = reason
        elif data.get("tracked") and _closed_once(mine):
            report.already.append(trial.name)
        else:
            data["run_id"] = _held_run(data, mine)
            run_id = publish(data, trial, tracker, parent_run_id, load_model=load_model)
            if run_id is None:
                error = (tracker.failures[-1] if tracker.failures else "not published").splitlines()[0]
                report.failed[trial.name] = error
                log.warning("sync %s: %s (still untracked; run `resomap sync` again)", trial.name, error)
            else:
                write_result(trial.summary_dir, {**data, "tracked": True, "run_id": run_id})
                report.synced.append(trial.name)
    return report


def _trial_runs(tracker: Any) -> dict[str, list[Any]]:
    """Every run of the experiment with a trial-key tag, by key (one search instead of one per trial)."""
    runs: dict[str, list[Any]] = {}
    for run in tracker.find_runs(f"tags.`{TRIAL_KEY_TAG}` != ''"):
        runs.setdefault(run.data.tags.get(TRIAL_KEY_TAG, ""), []).append(run)
    return runs


def _held_run(data: Mapping[str, Any], runs: list[Any]) -> str | None:
    """The run of the store that publish fills: the result's own when the store holds it, else the first run with
    the trial's key (as the tag lookup finds it), else None (publish then makes one)."""
    held = [run.info.run_id for run in runs]
    return data.get("run_id") if data.get("run_id") in held else (held[0] if held else None)


def _closed_once(runs: list[Any]) -> bool:
    return len(runs) == 1 and runs[0].info.status in TERMINAL

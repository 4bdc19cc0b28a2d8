"""Send trial results to MLflow that were written while the tracking store was unreachable (`resomap sync`).

A trial whose result.json says `tracked: false`, or whose run is missing or was left open, gets its child run
(found by its trial-key tag, else created under the sweep's parent), params, per-epoch metrics from `history`
(step = epoch index), test, cross-resolution and explanation metrics, the files of its summary folder, and is
closed with its status; then result.json is rewritten with `tracked: true` (temp file + rename). Metric points a
run already holds (same key and step) are not logged again, so sync can run any number of times.

This module knows runs and result files, not sweeps: the sweep layer (`resomap.sweep.execute.sync_sweep`) plans
the trials and passes them in with the function that finds or creates a trial's run, so imports stay one-way.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from resomap.atomic import write_text
from resomap.config import Config, flatten
from resomap.tracking.mlflow_store import Tracker

log = logging.getLogger(__name__)

TRIAL_KEY_TAG = "resomap.trial_key"
TERMINAL = ("FINISHED", "FAILED", "KILLED")
ARTIFACT_FOLDERS = {".png": "figures", ".pdf": "figures", ".npz": "explanations"}


class SyncTrial(Protocol):
    """What sync needs of a planned trial (resomap.sweep.Trial has it)."""

    @property
    def key(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def summary_dir(self) -> Path: ...

    @property
    def cfg(self) -> Config: ...


# (tracker, trial, family, parent run id) -> the trial's run id; raises when the store cannot be reached
OpenRun = Callable[[Tracker, Any, str, "str | None"], "str | None"]


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


def trial_params(cfg: Config, model: str, family: str, resolution: int, seed: int) -> dict[str, Any]:
    """The params of a trial's run: its resolved config (without sweep.*) plus what identifies the trial."""
    params: dict[str, Any] = {k: v for k, v in flatten(cfg).items() if not k.startswith("sweep.")}
    params.update({"model": model, "family": family, "resolution": resolution, "seed": seed})
    return params


def read_result(trial: SyncTrial) -> dict[str, Any] | None:
    """The trial's result.json as a dict, or None when there is none for this exact key."""
    path = trial.summary_dir / "result.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("key") == trial.key else None


def write_result(folder: Path, data: Mapping[str, Any]) -> None:
    """result.json replaced atomically (temp file, fsync, rename): a reader sees the old or the new file."""
    path = folder / "result.json"
    write_text(path, json.dumps(data, indent=2, default=str))


def sync_results(
    trials: Iterable[SyncTrial], tracker: Tracker, open_run: OpenRun, parent_run_id: str | None
) -> SyncReport:
    """Make every finished trial's child run complete and closed, exactly once; see the module docstring."""
    report = SyncReport(parent_run_id)
    trials = list(trials)
    try:
        runs = _trial_runs(tracker)
    except Exception as exc:
        reason = f"store unreachable: {type(exc).__name__}: {exc}".splitlines()[0]
        runs = None
    for trial in trials:
        data = read_result(trial)
        if data is None:
            report.missing.append(trial.name)
        elif runs is None and data.get("tracked"):
            report.already.append(trial.name)
        elif runs is None:
            report.failed[trial.name] = reason
        elif data.get("tracked") and _closed_once(runs.get(trial.key, [])):
            report.already.append(trial.name)
        else:
            error = _sync_one(tracker, trial, data, open_run, parent_run_id)
            if error:
                report.failed[trial.name] = error
                log.warning("sync %s: %s (still untracked; run `resomap sync` again)", trial.name, error)
            else:
                report.synced.append(trial.name)
    return report


def _trial_runs(tracker: Tracker) -> dict[str, list[Any]]:
    """Every run of the experiment with a trial-key tag, by key (one search instead of one per trial)."""
    runs: dict[str, list[Any]] = {}
    for run in tracker.find_runs(f"tags.`{TRIAL_KEY_TAG}` != ''"):
        runs.setdefault(run.data.tags.get(TRIAL_KEY_TAG, ""), []).append(run)
    return runs


def _closed_once(runs: list[Any]) -> bool:
    return len(runs) == 1 and runs[0].info.status in TERMINAL


def _sync_one(
    tracker: Tracker, trial: SyncTrial, data: dict[str, Any], open_run: OpenRun, parent: str | None
) -> str | None:
    """Log one result into its run; None when every call succeeded (result.json then says tracked)."""
    before = len(tracker.failures)
    try:
        run_id = open_run(tracker, trial, data.get("family", ""), parent)
        if run_id is None:
            return "no run (tracking disabled or store unreachable)"
        run = tracker._call("get run", tracker.client.get_run, run_id)
        _log_content(tracker, run, trial, data, parent)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    if len(tracker.failures) > before:
        return tracker.failures[-1].splitlines()[0]
    write_result(trial.summary_dir, {**data, "tracked": True, "run_id": run_id})
    return None


def _log_content(tracker: Tracker, run: Any, trial: SyncTrial, data: dict[str, Any], parent: str | None) -> None:
    run_id = run.info.run_id
    tags = {TRIAL_KEY_TAG: trial.key}
    if parent and run.data.tags.get("mlflow.parentRunId") != parent:
        tags["mlflow.parentRunId"] = parent  # trained while the parent could not be reached
    if data.get("status") != "FINISHED":
        tags["resomap.failure"] = data.get("error") or "unknown error"
        tracker.log_text(run_id, f"{data.get('error')}\n(logged by resomap sync from result.json)\n", "failure.txt")
    tracker.set_tags(run_id, tags)
    params = trial_params(trial.cfg, data["model"], data.get("family", ""), data["resolution"], data["seed"])
    missing = {k: v for k, v in params.items() if k not in run.data.params}
    if missing:
        tracker.log_params(run_id, missing)
    _log_metrics_once(tracker, run, _metric_points(data))
    _log_files(tracker, run_id, trial, data)
    tracker.log_text(run_id, json.dumps({**data, "tracked": True, "run_id": run_id}, indent=2), "result.json")
    tracker.end_run(run_id, "FINISHED" if data.get("status") == "FINISHED" else "FAILED")


def _metric_points(data: Mapping[str, Any]) -> dict[str, dict[int, float]]:
    """key -> {step: value}: per-epoch history (step = epoch index), then the step-0 summary metrics."""
    points: dict[str, dict[int, float]] = {}
    for i, row in enumerate(data.get("history") or []):
        step = int(row.get("epoch", i))
        for key, value in row.items():
            if _is_number(value):
                points.setdefault(key, {})[step] = float(value)
    flat = dict(data.get("test") or {})
    for res, metrics in (data.get("cross_resolution") or {}).items():
        if "accuracy" in metrics:
            flat[f"test_at_{res}/accuracy"] = metrics["accuracy"]
    explain = data.get("explain") or {}
    flat.update(explain.get("metrics") or {} if isinstance(explain, dict) else {})
    for key, value in flat.items():
        if _is_number(value):
            points.setdefault(key, {})[0] = float(value)
    return points


def _log_metrics_once(tracker: Tracker, run: Any, points: dict[str, dict[int, float]]) -> None:
    """Log the points the run does not hold yet (a metric it has is checked step by step)."""
    run_id = run.info.run_id
    by_step: dict[int, dict[str, float]] = {}
    for key, steps in points.items():
        have: set[int] = set()
        if key in run.data.metrics:
            have = {m.step for m in tracker._call("metric history", tracker.client.get_metric_history, run_id, key)}
        for step, value in steps.items():
            if step not in have:
                by_step.setdefault(step, {})[key] = value
    for step, metrics in sorted(by_step.items()):
        tracker.log_metrics(run_id, metrics, step=step)


def _log_files(tracker: Tracker, run_id: str, trial: SyncTrial, data: Mapping[str, Any]) -> None:
    """The summary folder's files (figures under figures/, maps under explanations/) and the best checkpoint."""
    for path in sorted(trial.summary_dir.iterdir()):
        if path.is_file() and path.name != "result.json" and not path.name.endswith("tmp"):
            tracker.log_artifact(run_id, path, ARTIFACT_FOLDERS.get(path.suffix))
    best = data.get("best_checkpoint")
    if trial.cfg.mlflow.log_checkpoint and best and Path(best).is_file():
        tracker.log_artifact(run_id, best, "checkpoints")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)

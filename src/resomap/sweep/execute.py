"""run_sweep: one MLflow parent run, the pending trials through an executor, then the summary.

Resumable: a trial whose result.json (for its exact key) exists is skipped; an interrupted one resumes from its
last.pt and reuses its MLflow child run (found by the trial-key tag), so a sweep killed at any moment and started
again ends with every trial exactly once.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from pathlib import Path

from resomap.config import Config, flatten
from resomap.reports import summary_rows, sweep_figures, write_tables
from resomap.sweep.plan import describe_plan, load_result, plan, sweep_key
from resomap.sweep.trial import Trial, TrialResult
from resomap.tracking import Tracker

log = logging.getLogger(__name__)
SWEEP_KEY_TAG = "resomap.sweep_key"


@dataclasses.dataclass
class SweepOutcome:
    results: list[TrialResult]
    parent_run_id: str | None
    summary_dir: Path
    figures: list[Path]
    skipped: int

    @property
    def failed(self) -> list[TrialResult]:
        return [r for r in self.results if r.status != "FINISHED"]


def _open_parent(tracker: Tracker | None, cfg: Config, key: str, trials: list[Trial]) -> str | None:
    if tracker is None:
        return None
    found = tracker.find_runs(f"tags.`{SWEEP_KEY_TAG}` = '{key}'")
    if found:
        run_id = found[0].info.run_id
        tracker._soft("reopen run", tracker.client.update_run, run_id, status="RUNNING")
        return run_id
    tags = {SWEEP_KEY_TAG: key, "resomap.kind": "sweep", "resomap.trials": len(trials)}
    run_id = tracker.start_run(f"sweep {cfg.experiment.name}", tags=tags)
    sweep_params = {k: v for k, v in flatten(cfg).items() if k.startswith(("sweep.", "training.", "data."))}
    tracker.log_params(run_id, sweep_params)
    return run_id


class Progress:
    """Sweep-level progress: done / failed / remaining and an ETA from the mean time of trials run so far."""

    def __init__(self, total: int, already: int):
        self.total, self.done, self.failed = total, already, 0
        self.durations: list[float] = []
        self.start = time.perf_counter()

    def line(self, current: str | None = None) -> str:
        remaining = self.total - self.done - self.failed
        eta = ""
        if self.durations and remaining:
            eta = f", ETA {sum(self.durations) / len(self.durations) * remaining / 60:.1f} min"
        now = f"; now: {current}" if current else ""
        return f"[sweep] {self.done} done, {self.failed} failed, {remaining} remaining{eta}{now}"

    def record(self, result: TrialResult, seconds: float) -> None:
        self.durations.append(seconds)
        if result.status == "FINISHED":
            self.done += 1
        else:
            self.failed += 1


def run_sweep(
    cfg: Config,
    *,
    executor: Callable[..., list[TrialResult]] | None = None,
    rerun_failed: bool | None = None,
    report: Callable[[str], None] = log.info,
) -> SweepOutcome:
    from resomap.sweep.executors import get_executor

    trials = plan(cfg)
    key = sweep_key(trials)
    rerun = cfg.sweep.rerun_failed if rerun_failed is None else rerun_failed
    states = describe_plan(trials)
    todo = [t for t, s in states if s in ("pending", "partial") or (s == "failed" and rerun)]
    kept = [load_result(t) for t, s in states if t not in todo]
    tracker = Tracker(cfg) if cfg.mlflow.enabled else None
    parent = _open_parent(tracker, cfg, key, trials)
    progress = Progress(len(trials), sum(1 for _, s in states if s == "done"))
    progress.failed = sum(1 for t, s in states if s == "failed" and t not in todo)
    report(progress.line())
    run = executor or get_executor(cfg.sweep.executor)
    new = run(todo, cfg=cfg, tracker=tracker, parent_run_id=parent, progress=progress, report=report)
    results = [r for r in kept if r is not None] + list(new)
    results.sort(key=lambda r: (r.model, r.resolution, r.seed))
    out_dir = Path(cfg.experiment.output_dir) / cfg.experiment.summary_dir / "_sweep" / cfg.experiment.name
    figures = _summarise(results, out_dir, tracker, parent)
    if tracker and parent:
        status = "FINISHED" if all(r.status == "FINISHED" for r in results) else "FAILED"
        children = {f"resomap.child.{r.name}": r.run_id for r in results if r.run_id}
        tracker.set_tags(parent, children)
        tracker.end_run(parent, status)
    report(progress.line())
    return SweepOutcome(results, parent, out_dir, figures, len(trials) - len(todo))


def _summarise(results: list[TrialResult], out_dir: Path, tracker: Tracker | None, parent: str | None) -> list[Path]:
    dicts = [dataclasses.asdict(r) for r in results]
    rows = summary_rows(dicts)
    tables = write_tables(rows, dicts, out_dir)
    figures = sweep_figures(rows, out_dir / "figures")
    if tracker and parent:
        for path in tables:
            tracker.log_artifact(parent, path, "summary")
        for path in figures:
            tracker.log_artifact(parent, path, "figures")
        best = max((r for r in rows), key=lambda r: r.get("test_accuracy", 0.0), default=None)
        if best:
            tracker.log_metrics(parent, {"best_test_accuracy": best["test_accuracy"]})
            tracker.set_tags(parent, {"resomap.best": f"{best['model']}@{best['resolution']}"})
    return figures

"""run_sweep: one MLflow parent run, the pending trials through an executor, then the summary.

Resumable: a trial whose result.json (for its exact key) exists is skipped; an interrupted one resumes from its
last.pt and reuses its MLflow child run (found by the trial-key tag), so a sweep killed at any moment and started
again ends with every trial exactly once.

The store being unreachable never stops a sweep: the parent and child runs are looked up softly, trials train
untracked (`tracked: false` in result.json), and `sync_sweep` (run at the end of every sweep and by
`resomap sync`) sends those results once the store answers again.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from pathlib import Path

from resomap.config import Config, flatten
from resomap.explain.crossres import compare_sweep, mean_agreement, write_rows
from resomap.reports import summary_rows, sweep_figures, write_tables
from resomap.sweep.plan import describe_plan, load_result, plan, sweep_key
from resomap.sweep.trial import Trial, TrialResult
from resomap.tracking import Tracker
from resomap.tracking.sync import SyncReport, sync_results

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


def _open_parent(
    tracker: Tracker | None, cfg: Config, key: str, trials: list[Trial], reopen: bool = True
) -> str | None:
    """The sweep's run, found by its sweep-key tag or created; None (and a recorded failure) when the store is
    unreachable: the sweep goes on and the parent is found or made again at its end or by `resomap sync`."""
    if tracker is None:
        return None
    try:
        found = tracker.find_runs(f"tags.`{SWEEP_KEY_TAG}` = '{key}'")
        if found:
            run_id = found[0].info.run_id
            if reopen:
                tracker._soft("reopen run", tracker.client.update_run, run_id, status="RUNNING")
            return run_id
        tags = {SWEEP_KEY_TAG: key, "resomap.kind": "sweep", "resomap.trials": len(trials)}
        run_id = tracker.start_run(f"sweep {cfg.experiment.name}", tags=tags)
    except Exception as exc:
        tracker.failures.append(f"open sweep run: {type(exc).__name__}: {exc}")
        log.warning("MLflow unreachable (%s); the sweep runs untracked and `resomap sync` logs it later", exc)
        return None
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
    if tracker:  # results logged while the store was down are sent now that it may be back
        parent = parent or _open_parent(tracker, cfg, key, trials)
        report(_sync(trials, tracker, parent).line())
    by_key = {r.key: r for r in [*kept, *new] if r is not None}
    results = [load_result(t) or by_key[t.key] for t in trials if t.key in by_key]  # disk has the synced run ids
    results.sort(key=lambda r: (r.model, r.resolution, r.seed))
    out_dir = summary_folder(cfg)
    figures = _summarise(results, cfg, out_dir, tracker, parent)
    _close_parent(tracker, parent, results, len(trials))
    report(progress.line())
    return SweepOutcome(results, parent, out_dir, figures, len(trials) - len(todo))


def summary_folder(cfg: Config) -> Path:
    return Path(cfg.experiment.output_dir) / cfg.experiment.summary_dir / "_sweep" / cfg.experiment.name


def _sync(trials: list[Trial], tracker: Tracker, parent: str | None) -> SyncReport:
    from resomap.sweep.runner import _open_run

    return sync_results(trials, tracker, _open_run, parent)


def _close_parent(tracker: Tracker | None, parent: str | None, results: list[TrialResult], planned: int) -> None:
    """Child-run tags on the parent; closed FINISHED / FAILED once every planned trial has a result."""
    if not (tracker and parent):
        return
    children = {f"resomap.child.{r.name.replace('@', ' at ').replace('#', ' ')}": r.run_id for r in results if r.run_id}
    tracker.set_tags(parent, children)
    if len(results) == planned:
        tracker.end_run(parent, "FINISHED" if all(r.status == "FINISHED" for r in results) else "FAILED")


def sync_sweep(cfg: Config) -> SyncReport:
    """`resomap sync`: every result of the planned sweep not yet in MLflow is logged into its child run (found or
    created under the parent), then the sweep summary is logged to the parent again. Creates nothing twice."""
    trials = plan(cfg)
    tracker = Tracker(cfg)
    if not any(load_result(t) for t in trials):
        return SyncReport(missing=[t.name for t in trials])  # nothing trained yet: no run to make
    parent = _open_parent(tracker, cfg, sweep_key(trials), trials, reopen=False)
    outcome = _sync(trials, tracker, parent)
    results = [r for r in map(load_result, trials) if r is not None]
    if parent and results and not outcome.failed:
        _summarise(results, cfg, summary_folder(cfg), tracker, parent)
        _close_parent(tracker, parent, results, len(trials))
    if tracker.failures and not outcome.failed:
        outcome.failed["sweep run"] = tracker.failures[-1].splitlines()[0]
    outcome.parent_run_id = parent
    return outcome


def _compare_explanations(results: list[TrialResult], cfg: Config, out_dir: Path) -> tuple[list[Path], dict]:
    """Cross-resolution agreement of the saved maps (first seed), figures, and mean agreement per model/method."""
    done = [r for r in results if r.status == "FINISHED" and r.explain.get("maps")]
    if not done:
        return [], {}
    seed = min(r.seed for r in done)
    chosen = [r for r in done if r.seed == seed]
    entries = [(r.model, r.resolution, Path(r.explain["maps"])) for r in chosen]
    quality = {(r.model, r.resolution): r.explain.get("metrics", {}) for r in chosen}
    files, rows = compare_sweep(entries, quality, cfg.explainability, out_dir)
    if rows:
        write_rows(rows, out_dir / "agreement.csv")
        files.append(out_dir / "agreement.csv")
    return files, mean_agreement(rows)


def _summarise(
    results: list[TrialResult], cfg: Config, out_dir: Path, tracker: Tracker | None, parent: str | None
) -> list[Path]:
    dicts = [dataclasses.asdict(r) for r in results]
    rows = summary_rows(dicts)
    tables = write_tables(rows, dicts, out_dir)
    figures = sweep_figures(rows, out_dir / "figures")
    explain_files, agreement = _compare_explanations(results, cfg, out_dir / "explanations")
    if tracker and parent:
        for path in tables:
            tracker.log_artifact(parent, path, "summary")
        for path in figures:
            tracker.log_artifact(parent, path, "figures")
        for path in explain_files:
            tracker.log_artifact(parent, path, f"explanations/{path.parent.name}")
        tracker.log_metrics(parent, agreement)
        best = max((r for r in rows), key=lambda r: r.get("test_accuracy", 0.0), default=None)
        if best:
            tracker.log_metrics(parent, {"best_test_accuracy": best["test_accuracy"]})
            tracker.set_tags(parent, {"resomap.best": f"{best['model']}@{best['resolution']}"})
    return figures + explain_files

"""run_sweep: one MLflow parent run, the pending trials through an executor, then the summary; sync_sweep.

Resumable: a trial whose result.json (for its exact key) exists is skipped; an interrupted one resumes from its
last.pt and reuses its MLflow child run (found by the trial-key tag), so a sweep killed at any moment and started
again ends with every trial exactly once.

The store being unreachable never stops a sweep: the parent and child runs are looked up softly, trials train
untracked (`tracked: false` in result.json), and `sync_sweep` (run at the end of a sweep when some result is
untracked, and by `resomap sync`) publishes those results once the store answers again.

A finished sweep run again with nothing to do returns at once: `state.json` beside summary.csv keeps a digest of
the result files the summary was made from and whether MLflow holds everything; when both still hold, nothing is
rewritten and neither MLflow nor the plotting and explanation libraries are imported.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from resomap.atomic import write_text
from resomap.config import Config
from resomap.sweep.plan import check_plan, describe_plan, load_result, plan, sweep_key
from resomap.sweep.trial import Trial, TrialResult
from resomap.tracking import default_tracking_uri, make_tracker
from resomap.tracking.publish import close_parent, open_parent

log = logging.getLogger(__name__)
STATE_FILE = "state.json"


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


class Progress:
    """Sweep-level progress: done / failed / remaining and an ETA from the mean time of trials run so far."""

    def __init__(self, total: int, already: int, task: str | None = None):
        from resomap.tasks import get_task

        self.total, self.done, self.failed = total, already, 0
        self.task = get_task(task)
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

    def trial_line(self, result: TrialResult, seconds: float) -> str:
        """The one line a finished trial gets (after `record`): its outcome, headline figures and the progress."""
        if result.status == "FINISHED":
            figures = self.task.line_figures(result.test)  # the task's headline test metrics
            if result.profile is not None and result.profile.latency_median_ms is not None:
                figures.append(f"latency {result.profile.latency_median_ms:.2f} ms")
            what = ", ".join(figures) or "finished"
        else:
            what = f"FAILED: {result.error}"
        return f"{self.line()} | {result.name} in {seconds:.0f} s: {what}"


def run_sweep(
    cfg: Config,
    *,
    executor: Callable[..., list[TrialResult]] | None = None,
    rerun_failed: bool | None = None,
    report: Callable[[str], None] = log.info,
) -> SweepOutcome:
    trials = plan(cfg, check=False)
    rerun = cfg.sweep.rerun_failed if rerun_failed is None else rerun_failed
    states = describe_plan(trials)
    todo = [t for t, s in states if s in ("pending", "partial") or (s == "failed" and rerun)]
    out_dir = summary_folder(cfg)
    progress = Progress(len(trials), sum(1 for _, s in states if s == "done"), cfg.experiment.task)
    progress.failed = sum(1 for t, s in states if s == "failed" and t not in todo)
    report(progress.line())
    if not todo:
        unchanged = _unchanged(cfg, trials, out_dir)
        if unchanged is not None:
            report("[sweep] nothing to do: every trial has its result and the summary is current")
            return SweepOutcome(unchanged[0], unchanged[1], out_dir, [], len(trials))
    else:
        check_plan(cfg)  # explainer names, before anything is written
    from resomap.sweep.executors import get_executor

    key = sweep_key(trials)
    tracker = make_tracker(cfg)
    parent = open_parent(tracker, cfg, key, len(trials))
    new: list[TrialResult] = []
    if todo:
        run = executor or get_executor(cfg.sweep.executor)
        new = run(todo, cfg=cfg, tracker=tracker, parent_run_id=parent, progress=progress, report=report)
    if tracker.enabled and _needs_sync(trials):  # results logged while the store was down are sent now
        parent = parent or open_parent(tracker, cfg, key, len(trials))
        report(_sync(trials, tracker, parent).line())
    results = _results(trials, new)  # from disk first: they hold the synced run ids
    figures = _summarise(results, cfg, out_dir, tracker, parent, trials)
    closed = close_parent(tracker, parent, results, len(trials))
    _save_state(cfg, trials, out_dir, parent, closed and all(r.tracked for r in results))
    report(progress.line())
    return SweepOutcome(results, parent, out_dir, figures, len(trials) - len(todo))


def summary_folder(cfg: Config) -> Path:
    return Path(cfg.experiment.output_dir) / cfg.experiment.summary_dir / "_sweep" / cfg.experiment.name


def _results(trials: list[Trial], new: list[TrialResult] = ()) -> list[TrialResult]:
    """The planned trials' results on disk, else the one an executor returned (a worker that wrote none)."""
    by_key = {r.key: r for r in new}
    results = [r for r in (load_result(t) or by_key.get(t.key) for t in trials) if r is not None]
    return sorted(results, key=lambda r: (r.model, r.resolution, r.seed))


# ---------------------------------------------------------------- nothing to do


def results_digest(trials: list[Trial]) -> str:
    """A hash of every planned trial's key and result.json bytes (a missing file counts as empty)."""
    h = hashlib.sha256()
    for trial in trials:
        path = trial.summary_dir / "result.json"
        h.update(trial.key.encode())
        h.update(path.read_bytes() if path.is_file() else b"")
    return h.hexdigest()


def _unchanged(cfg: Config, trials: list[Trial], out_dir: Path) -> tuple[list[TrialResult], str | None] | None:
    """(results, parent run id) when the summary was made from exactly these result files and, with MLflow on,
    the store named now holds everything; else None."""
    try:
        state = json.loads((out_dir / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if state.get("digest") != results_digest(trials) or not (out_dir / "summary.csv").is_file():
        return None
    if cfg.mlflow.enabled and not (state.get("published") and state.get("tracking_uri") == default_tracking_uri(cfg)):
        return None
    return _results(trials), state.get("parent_run_id")


def _save_state(cfg: Config, trials: list[Trial], out_dir: Path, parent: str | None, published: bool) -> None:
    state = {
        "digest": results_digest(trials),
        "parent_run_id": parent,
        "published": published,
        "tracking_uri": default_tracking_uri(cfg) if cfg.mlflow.enabled else None,
    }
    write_text(out_dir / STATE_FILE, json.dumps(state, indent=2))


# ---------------------------------------------------------------- MLflow: sync (the parent run: tracking.publish)


def _needs_sync(trials: list[Trial]) -> bool:
    from resomap.tracking.sync import needs_sync

    return needs_sync(trials)


def _sync(trials: list[Trial], tracker: Any, parent: str | None):
    from resomap.tracking.sync import sync_results
    from resomap.training.checkpoint import load_best_model

    return sync_results(trials, tracker, parent, load_model=load_best_model)


def sync_sweep(cfg: Config):
    """`resomap sync`: every result of the planned sweep not yet in MLflow is published into its child run (found
    or created under the parent), then the sweep summary is logged to the parent again. Creates nothing twice."""
    from resomap.tracking import Tracker
    from resomap.tracking.sync import SyncReport

    trials = plan(cfg, check=False)
    tracker = Tracker(cfg)
    if not any(load_result(t) for t in trials):
        return SyncReport(missing=[t.name for t in trials])  # nothing trained yet: no run to make
    parent = open_parent(tracker, cfg, sweep_key(trials), len(trials), reopen=False)
    outcome = _sync(trials, tracker, parent)
    results = _results(trials)
    if parent and results and not outcome.failed:
        out_dir = summary_folder(cfg)
        _summarise(results, cfg, out_dir, tracker, parent, trials)
        closed = close_parent(tracker, parent, results, len(trials))
        _save_state(cfg, trials, out_dir, parent, closed and all(r.tracked for r in results))
    if tracker.failures and not outcome.failed:
        outcome.failed["sweep run"] = tracker.failures[-1].splitlines()[0]
    outcome.parent_run_id = parent
    return outcome


# ---------------------------------------------------------------- summary


def trial_folders(trials: list[Trial]) -> dict[tuple[str, int, int], Path]:
    """{(model, resolution, seed): the trial's summary folder} (where result.json and predictions.csv are)."""
    return {(t.model, t.resolution, t.seed): t.summary_dir for t in trials}


def _summarise(
    results: list[TrialResult],
    cfg: Config,
    out_dir: Path,
    tracker: Any,
    parent: str | None,
    trials: list[Trial] | None = None,
) -> list[Path]:
    """summary.csv/json, paired_tests.csv, recommendation.csv, summary.md/txt, the sweep figures and the
    cross-resolution comparison of explanations; all logged to the parent run (only what it lacks or what changed,
    so publishing again is harmless). ``trials`` locate each result's folder (default: the sweep's plan)."""
    from resomap.reports import build_summary, sweep_figures, write_summary
    from resomap.stages import compare_stage

    folders = trial_folders(trials if trials is not None else plan(cfg, check=False))
    summary = build_summary(results, folders, cfg.stats)
    tables = write_summary(summary, out_dir)
    figures = sweep_figures(summary.rows, out_dir / "figures", summary.paired_tests, summary.recommendations)
    comparison = compare_stage(results, cfg.explainability, out_dir / "explanations", cfg.stats)
    page = _report(out_dir)
    figures += [page] if page else []
    if parent is None:
        return figures + comparison.files
    from resomap.explain.figures import sweep_probe_images
    from resomap.explain.run import MAPS_FILE
    from resomap.tracking.publish import publish_sweep

    shown = {}  # the first seed of each (model, resolution) in the parent's image grid
    for (model, resolution, _seed), folder in sorted(folders.items()):
        shown.setdefault((model, resolution), folder / MAPS_FILE)
    images = sweep_probe_images(shown)
    publish_sweep(
        tracker, parent, summary, tables=tables, figures=figures, page=page, comparison=comparison, images=images
    )
    return figures + comparison.files


def _report(out_dir: Path) -> Path | None:
    """The sweep's one-page HTML report (report.html beside the summary); a failure is logged, never fatal."""
    try:
        from resomap.reports.html import write_report

        return write_report(out_dir)
    except Exception as exc:
        log.warning("HTML report not written: %s: %s", type(exc).__name__, exc)
        return None

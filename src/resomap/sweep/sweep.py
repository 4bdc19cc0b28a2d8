"""run_sweep: one MLflow parent run, the pending trials through an executor, then the summary; sync_sweep.

Resumable: a finished trial whose result.json (for its exact key) and files are whole is skipped; an interrupted
one resumes from its last.pt and reuses its MLflow child run (found by the trial-key tag), so a sweep killed at any
moment and started again ends with every trial exactly once. Ctrl-C or SIGTERM (resomap.interrupts) leaves the
same state as a kill, with the trial's and the sweep's runs closed KILLED instead of left RUNNING. A finished trial
with a damaged file, and one that failed because the disk was full, is run again (resomap.sweep.plan.trial_state,
one warning line each); other failures only with --rerun-failed, which the run says in one line.

The store being unreachable never stops a sweep: the parent and child runs are looked up softly, trials train
untracked (`tracked: false` in result.json), and `sync_sweep` (run at the end of a sweep when some result is
untracked, and by `resomap sync`) publishes those results once the store answers again.

A finished sweep run again with nothing to do returns at once: `state.json` beside summary.csv keeps a digest of
the result files the summary was made from, the statistics settings and the code version of the statistics and
reports it was computed with (`summary_inputs`), and whether MLflow holds everything; when all still hold, nothing
is rewritten and neither MLflow nor the plotting and explanation libraries are imported. A changed `stats.*` (or
statistics code) recomputes the summary, without training.

The summary folder is built beside its place (`.<name>.new`) and swapped in whole (`resomap.atomic.replace_dir`),
state.json with it: a crash or a bad setting leaves the old summary, never a half-updated one.

One sweep at a time per experiment and folder: `run_sweep` and `sync_sweep` hold `_sweep/.<name>.lock`
(`resomap.locks`; released on any exit, SIGKILL included); a second one refuses naming the holder, or waits.
Sweeps of other experiments run beside it: every experiment has folders of its own (resomap.layout), and under
its lock a sweep first moves its own trials' folders of the layout before them (resomap.sweep.migrate).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from resomap import interrupts
from resomap.atomic import discard_staging, write_text
from resomap.config import Config
from resomap.errors import DataError
from resomap.layout import Layout
from resomap.locks import hold
from resomap.records import machine_of, machines, machines_warning
from resomap.sweep.cluster import check_reachable, placed
from resomap.sweep.identity import Trial, pin_precision, sweep_identity
from resomap.sweep.leftovers import remove_interrupted_saves
from resomap.sweep.migrate import migrate_trials
from resomap.sweep.plan import (
    check_data,
    check_memory,
    check_plan,
    describe_plan,
    load_result,
    plan,
    summary_folder,
    sweep_key,
    unreadable_result,
)
from resomap.sweep.summarise import ESTIMATES_HEADER, _results, _save_state, _summarise, _unchanged, summary_line
from resomap.sweep.trial import TrialResult
from resomap.tracking import default_tracking_uri, make_tracker
from resomap.tracking.origin import origin
from resomap.tracking.parent import close_parent, open_parent

log = logging.getLogger(__name__)


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
    """Sweep-level progress: done / failed / remaining and an ETA that weighs each remaining trial by its expected
    cost (resomap.sweep.eta: a probe of each pending model x resolution, calibrated on the trials done). `estimates`
    keeps, per finished trial, its seconds, the seconds since the start, the trials left and the ETA then given
    (None: none)."""

    def __init__(self, total: int, already: int, task: str | None = None, pending: list[Trial] = ()):
        from resomap.sweep.eta import Eta
        from resomap.tasks import get_task

        self.total, self.done, self.failed = total, already, 0
        self.task = get_task(task)
        self.eta = Eta([(t.model, t.resolution) for t in pending])
        self.estimates: list[tuple[str, float, float, int, float | None]] = []
        self.start = time.perf_counter()
        self.ended: float | None = None  # seconds from the start to the last trial's end

    @property
    def remaining(self) -> int:
        return self.total - self.done - self.failed

    def seconds_left(self) -> float | None:
        """The ETA in seconds (None: none yet, or nothing left)."""
        return self.eta.seconds_left() if self.remaining else None

    def line(self, current: str | None = None) -> str:
        left = self.seconds_left()
        eta = f", ETA {left / 60:.1f} min" if left is not None else ""
        now = f"; now: {current}" if current else ""
        return f"[sweep] {self.done} done, {self.failed} failed, {self.remaining} remaining{eta}{now}"

    def record(self, result: TrialResult, seconds: float) -> None:
        finished = result.status == "FINISHED"
        train_s = result.train_time_s if finished else None
        explain_s = (result.explain.seconds if result.explain is not None else 0.0) if finished else None
        self.eta.finished((result.model, result.resolution), seconds, train_s, result.epochs_run, explain_s)
        if finished:
            self.done += 1
        else:
            self.failed += 1
        elapsed = time.perf_counter() - self.start
        self.estimates.append((result.name, seconds, elapsed, self.remaining, self.seconds_left()))

    def trial_line(self, result: TrialResult, seconds: float) -> str:
        """The one line a finished trial gets (after `record`): its outcome, headline figures and the progress."""
        if result.status == "FINISHED":
            figures = self.task.line_figures(result.test)  # the task's headline test metrics
            if result.profile is not None and result.profile.latency_median_ms is not None:
                figures.append(f"latency {result.profile.latency_median_ms:.2f} ms")
            what = ", ".join(figures) or "finished"
        else:
            what = f"FAILED: {result.cause}"
        return f"{self.line()} | {result.name} in {seconds:.0f} s: {what}"


def run_sweep(
    cfg: Config,
    *,
    executor: Callable[..., list[TrialResult]] | None = None,
    rerun_failed: bool | None = None,
    report: Callable[[str], None] = log.info,
    wait: bool = False,
    only: set[tuple[str, int, int]] | None = None,
) -> SweepOutcome:
    """Run the pending trials, then the summary. Another run of this sweep in this folder (holding its lock):
    BusyError naming it, or with `wait` wait for it to end. ``only``: the (model, resolution, seed) of the grid this
    run plans (an adaptive round: the trials its rounds asked for; the others are neither run, summarised nor
    waited for: the parent closes once these have results)."""
    cfg, trials = _planned(cfg, only)
    rerun = cfg.sweep.rerun_failed if rerun_failed is None else rerun_failed
    todo, said = _todo(describe_plan(trials), rerun), []
    if todo:  # bad input fails here, before anything is written (lock included)
        check_plan(cfg)  # explainer names and model input sides (imports and builds: only when something is to run)
        check_memory(todo, _channels(cfg))  # a resolution whose activations cannot fit in memory
        said = check_data(todo)  # missing or corrupt image files, a split that cannot be made: `resomap train`'s
        check_reachable(cfg, default_tracking_uri(cfg))  # a Ray head or tracking server that does not answer
    with sweep_lock(cfg, wait=wait, report=report):
        for line in said:  # the image files' bit depth when deeper than 8 bits
            report(line)
        return _run_sweep(cfg, trials, executor, rerun, report)


def _planned(cfg: Config, only: set[tuple[str, int, int]] | None) -> tuple[Config, list[Trial]]:
    """The config as every trial, the parent run and the summary see it, and the trials this run plans."""
    cfg = pin_precision(cfg)  # auto decided once, for every trial, the parent run and the summary
    cfg = placed(cfg)  # sweep.ray.storage: the sweep's files go there, on the driver and every worker
    # the runs' writer, fixed here: a worker on another host logs as this folder (resomap.tracking.mlflow_store)
    cfg = dataclasses.replace(cfg, mlflow=dataclasses.replace(cfg.mlflow, origin=origin(cfg)))
    return cfg, [t for t in plan(cfg, check=False) if only is None or (t.model, t.resolution, t.seed) in only]


def finished_outcome(
    cfg: Config, only: set[tuple[str, int, int]] | None = None, rerun_failed: bool = False
) -> SweepOutcome | None:
    """The outcome of this sweep (``only``: as run_sweep's) when there is nothing to do: every trial has its
    result (none failed, with ``rerun_failed``), the summary was made from exactly these and is published; else
    None. Reads files only."""
    cfg, trials = _planned(cfg, only)
    states = describe_plan(trials)
    if any(s in ("pending", "partial", "unreadable") or (s == "failed" and rerun_failed) for _, s in states):
        return None
    out_dir = summary_folder(cfg)
    unchanged = _unchanged(cfg, trials, out_dir)
    return None if unchanged is None else SweepOutcome(unchanged[0], unchanged[1], out_dir, [], len(trials))


def planned_states(cfg: Config, only: set[tuple[str, int, int]] | None = None) -> list[tuple[Trial, str]]:
    """Each trial this sweep plans (``only``: as run_sweep's) with its state on disk (plan.trial_state)."""
    return describe_plan(_planned(cfg, only)[1])


def _todo(states: list[tuple[Trial, str]], rerun: bool) -> list[Trial]:
    """The trials to run; a result.json this user cannot read stops the sweep (DataError)."""
    _check_readable(states)
    return [t for t, s in states if s in ("pending", "partial") or (s == "failed" and rerun)]


def _run_sweep(cfg: Config, trials: list[Trial], executor: Any, rerun: bool, report: Any) -> SweepOutcome:
    migrate_trials(trials, report)  # this experiment's folders of the layout before experiment folders
    states = describe_plan(trials)  # again, under the lock: a run that held it may have finished trials
    todo = _todo(states, rerun)
    out_dir = summary_folder(cfg)
    discard_staging(out_dir)  # a summary build or swap a kill interrupted
    remove_interrupted_saves(cfg, report)  # hidden temp files of saves a kill interrupted, under the lock
    progress = Progress(len(trials), sum(1 for _, s in states if s == "done"), cfg.experiment.task, todo)
    progress.failed = sum(1 for t, s in states if s == "failed" and t not in todo)
    report(progress.line())
    kept = [t.name for t, s in states if s == "failed" and t not in todo]
    if kept:
        names = ", ".join(kept[:3]) + (f" and {len(kept) - 3} more" if len(kept) > 3 else "")
        report(f"[sweep] not run again: {names} failed before; run them again with `resomap sweep --rerun-failed`")
    if not todo:
        unchanged = _unchanged(cfg, trials, out_dir)
        if unchanged is not None:
            report("[sweep] nothing to do: every trial has its result and the summary is current")
            return SweepOutcome(unchanged[0], unchanged[1], out_dir, [], len(trials))
    tracker = make_tracker(cfg)
    identity, grid = sweep_identity(cfg), sweep_key(trials)
    parent = open_parent(tracker, cfg, identity, len(trials), legacy_key=grid)
    new: list[TrialResult] = []
    moved = _other_machine(cfg, states) if todo else ""  # said before the training that would mix machines
    if moved:
        log.warning("%s", moved)
    if todo:
        new = _run_trials(cfg, todo, executor, tracker, parent, progress, report)
        progress.ended = time.perf_counter() - progress.start
    estimates = _estimates(progress)
    if estimates is not None:  # kept beside the summary until it holds them: a kill in the summary phase loses none
        pending = Layout.of(cfg).pending_estimates()
        pending.parent.mkdir(parents=True, exist_ok=True)
        write_text(pending, estimates)
    if tracker.enabled and not tracker.disk_full and _needs_sync(trials):  # results logged while it was down
        parent = parent or open_parent(tracker, cfg, identity, len(trials), legacy_key=grid)
        report(_sync(trials, tracker, parent).line())
    results = _results(trials, new)  # from disk first: they hold the synced run ids
    mixed = machines_warning(machines(r.environment for r in results if r.status == "FINISHED"))
    if mixed and not moved:  # one warning line a run: the summary (summary.md, summary.json) lists the machines
        log.warning("%s (summary.md lists them)", mixed)
    seconds: dict[str, float] = {}
    figures = _summarise(results, cfg, out_dir, tracker, parent, trials, seconds, estimates)
    report(summary_line(seconds))
    closed = close_parent(tracker, parent, results, len(trials))
    _save_state(cfg, trials, out_dir, parent, closed and all(r.tracked for r in results))
    report(progress.line())
    return SweepOutcome(results, parent, out_dir, figures, len(trials) - len(todo))


def _run_trials(
    cfg: Config, todo: list[Trial], executor: Any, tracker: Any, parent: str | None, progress: Progress, report: Any
) -> list[TrialResult]:
    """The pending trials through the executor. An interrupt (Ctrl-C, SIGTERM: resomap.interrupts) closes the
    parent run KILLED, as each trial's own run (the next run of the sweep reopens them), and is raised on; one lost
    in a callback is raised here, before the summary phase."""
    from resomap.sweep.executors import get_executor, probed

    try:
        run = executor or get_executor(cfg.sweep.executor)
        first = probed(todo, cfg) if executor is None and cfg.sweep.executor == "local" else []
        if first:
            from resomap.sweep.eta import probe

            progress.eta.probes = probe(first, report)  # trials run here, one after another: priced by a probe here
        new = run(todo, cfg=cfg, tracker=tracker, parent_run_id=parent, progress=progress, report=report)
        interrupts.check()
        return new
    except KeyboardInterrupt:
        if parent is not None:
            tracker.end_run(parent, "KILLED")
        raise


@contextlib.contextmanager
def sweep_lock(
    cfg: Config,
    wait: bool = False,
    report: Callable[[str], None] = log.info,
    hint: str = "wait for it with `resomap sweep --wait`, or stop that process",
) -> Iterator[None]:
    """Held while this sweep (experiment name) runs in this output folder (`lock_path`)."""
    what = f"sweep '{cfg.experiment.name}' in {Path(cfg.experiment.output_dir).resolve()}"
    with hold(lock_path(cfg), what, wait=wait, hint=hint, on_wait=report):
        yield


def lock_path(cfg: Config) -> Path:
    """`_sweep/.<name>.lock` beside the sweep's summary folder (resomap.layout)."""
    return Layout.of(cfg).lock_file()


def _other_machine(cfg: Config, states: list[tuple[Trial, str]]) -> str:
    """The warning line when finished trials of this sweep ran on another machine than this one (CPU model,
    capability, bf16 flags, GPU: resomap.runtime.machine_record), else ''. Not for Ray: its trials run on the
    cluster's nodes, not here (the summary still lists the machines)."""
    if cfg.sweep.executor == "ray":
        return ""
    from collections import Counter

    from resomap.runtime import machine_record, resolve_device

    here = machine_of(machine_record(resolve_device(cfg.system)))
    done = [r for r in (load_result(t) for t, s in states if s == "done") if r is not None]
    elsewhere = Counter(m for m in (machine_of(r.environment) for r in done) if m is not None and m != here)
    if not elsewhere:
        return ""
    where = elsewhere.most_common(1)[0][0] + (f" and {len(elsewhere) - 1} other" if len(elsewhere) > 1 else "")
    return (
        f"this sweep resumes on another machine: {sum(elsewhere.values())} of its {len(done)} finished trials ran "
        f"on {where}, this one is {here}; bf16 results differ between CPUs with the same seeds and code (a resume "
        "on one machine reproduces exactly), so the summary will mix machines (summary.md lists them)"
    )


def _check_readable(states: list[tuple[Trial, str]]) -> None:
    """A trial whose result.json this user cannot read stops the sweep before anything is written."""
    for trial, state in states:
        if state == "unreadable":
            raise DataError(
                f"{unreadable_result(trial)}: no permission to read it; ask its owner to make the sweep "
                "group-readable (chmod -R g+rX), or run in a folder of your own (experiment.output_dir=...)"
            )


def _channels(cfg: Config) -> int:
    """The dataset's input channels when its registry entry says (elpv, synthetic: 1), else 1 (the fewest)."""
    from resomap.data.registry import DATASETS

    return int(DATASETS.meta(cfg.data.dataset).get("channels") or 1)


def _estimates(progress: Progress) -> str | None:
    """eta.csv's text: per finished trial of this run, the ETA the progress line gave and the seconds the remaining
    trials then took (how good the estimate was; scripts/benchmark_eta.py reads it); None when no trial ran."""
    if not progress.estimates or progress.ended is None:
        return None
    lines = [ESTIMATES_HEADER]
    for name, seconds, elapsed, left, eta in progress.estimates:
        actual = progress.ended - elapsed
        known = eta is not None and left and eta > 0 and actual > 0  # a test's instant trials take no time
        ratio = f"{max(eta / actual, actual / eta):.3f}" if known else ""
        shown = "" if eta is None else f"{eta:.1f}"
        lines.append(f"{name},{seconds:.1f},{elapsed:.1f},{left},{shown},{actual:.1f},{ratio}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- MLflow: sync (the parent run: tracking.sweep_run)


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

    cfg = placed(pin_precision(cfg))  # as the sweep did: the parent run is found by the pinned config's identity
    trials = plan(cfg, check=False)
    with sweep_lock(cfg, hint="it syncs its results when it ends; run `resomap sync` after it if needed"):
        _check_readable(describe_plan(trials))
        migrate_trials(trials)
        if not any(load_result(t) for t in trials):
            return SyncReport(missing=[t.name for t in trials])  # nothing trained yet: no run to make
        return _sync_locked(cfg, trials, Tracker(cfg))


def _sync_locked(cfg: Config, trials: list[Trial], tracker: Any):
    parent = open_parent(tracker, cfg, sweep_identity(cfg), len(trials), reopen=False, legacy_key=sweep_key(trials))
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

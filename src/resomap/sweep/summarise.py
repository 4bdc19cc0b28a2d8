"""The sweep's summary phase: the summary folder built from the trials' results in a staging folder and swapped in
whole, its state.json (what it was made from: a sweep with nothing new to do and a current summary stops there),
and its publication on the parent run (resomap.tracking.sweep_run)."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from resomap.atomic import disk_full, disk_full_error, replace_dir, staging_dir, write_text
from resomap.config import Config, to_dict
from resomap.filecheck import check_file
from resomap.layout import Layout
from resomap.summary_check import STATE_FILE, damage_words, summary_damage, summary_files, sweep_command
from resomap.sweep.identity import Trial
from resomap.sweep.plan import load_result, plan
from resomap.sweep.sensitive import SensitiveMaps
from resomap.sweep.trial import TrialResult
from resomap.tracking import default_tracking_uri

log = logging.getLogger(__name__)
_WARNED: set[str] = set()


def _results(trials: list[Trial], new: list[TrialResult] = ()) -> list[TrialResult]:
    """The planned trials' results on disk, else the one an executor returned (a worker that wrote none)."""
    by_key = {r.key: r for r in new}
    results = [r for r in (load_result(t) or by_key.get(t.key) for t in trials) if r is not None]
    return sorted(results, key=lambda r: (r.model, r.resolution, r.seed))


ESTIMATES_FILE = "eta.csv"
ESTIMATES_HEADER = "trial,seconds,elapsed_s,trials_left,eta_s,actual_s,ratio"  # written by sweep._estimates


def results_digest(trials: list[Trial]) -> str:
    """A hash of every planned trial's key, folder (summary.json records it) and result.json bytes (a missing file
    counts as empty)."""
    h = hashlib.sha256()
    for trial in trials:
        path = trial.summary_dir / "result.json"
        h.update(trial.key.encode())
        h.update(trial.summary_dir.as_posix().encode())
        h.update(path.read_bytes() if path.is_file() else b"")
    return h.hexdigest()


def summary_inputs(cfg: Config) -> dict[str, Any]:
    """What the summary depends on besides the result files: the stats settings and a hash of the statistics and
    report code (resomap.stats, resomap.summary, resomap.reports, the sections' blocks and the parent run's
    description), read from the source files, nothing imported."""
    h = hashlib.sha256()
    package = Path(__file__).resolve().parents[1]
    words = [package / "blocks.py", package / "tracking" / "note.py"]
    code = [*(package / "stats").glob("*.py"), *(package / "summary").glob("*.py"), *(package / "reports").glob("*.py")]
    for path in sorted([*code, *words]):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return {"stats": to_dict(cfg)["stats"], "code": h.hexdigest()[:16]}


def _unchanged(cfg: Config, trials: list[Trial], out_dir: Path) -> tuple[list[TrialResult], str | None] | None:
    """(results, parent run id) when the summary was made from exactly these result files and settings, every
    file of it is whole (summary_check: one damaged is named in one warning line) and, with MLflow on, the store
    named now holds everything; else None."""
    try:
        state = json.loads((out_dir / STATE_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        _warn_once(f"{out_dir / STATE_FILE}: does not read ({type(exc).__name__}); the sweep rebuilds the summary")
        return None
    if state.get("digest") != results_digest(trials) or not (out_dir / "summary.csv").is_file():
        return None
    if state.get("inputs") != summary_inputs(cfg):
        return None
    if cfg.mlflow.enabled and not (state.get("published") and state.get("tracking_uri") == default_tracking_uri(cfg)):
        return None
    damage = summary_damage(out_dir, state)
    if damage:  # cut short by a full disk, a copy or a hand: made again from the trials' results
        _warn_once(f"{damage_words(damage)}; the sweep rebuilds the summary (no trial is trained again)")
        return None
    return _results(trials), state.get("parent_run_id")


def _warn_once(line: str) -> None:
    """A warning logged once per process (a sweep may ask whether its summary is current more than once)."""
    if line not in _WARNED:
        _WARNED.add(line)
        log.warning("%s", line)


def _state(cfg: Config, trials: list[Trial], folder: Path, parent: str | None, published: bool) -> str:
    """state.json of the summary in `folder`: what it was made from, its files' sizes, the command that ran it."""
    state = {
        "digest": results_digest(trials),
        "inputs": summary_inputs(cfg),
        "parent_run_id": parent,
        "published": published,
        "tracking_uri": default_tracking_uri(cfg) if cfg.mlflow.enabled else None,
        "files": summary_files(folder),
        "command": sweep_command(),
    }
    return json.dumps(state, indent=2)


def _save_state(cfg: Config, trials: list[Trial], out_dir: Path, parent: str | None, published: bool) -> None:
    """state.json rewritten once the summary is in place, only where it changed (the run published the summary):
    a kill after the swap then leaves no temp file of an identical save."""
    text, path = _state(cfg, trials, out_dir, parent, published), out_dir / STATE_FILE
    with contextlib.suppress(OSError):
        if path.read_text(encoding="utf-8") == text:
            return
    write_text(path, text)


def record_files(out_dir: Path) -> None:
    """state.json's record of the summary's files brought up to date after a step that writes into the folder once
    it is in place (an adaptive sweep's record)."""
    try:
        state = json.loads((out_dir / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    state["files"] = summary_files(out_dir)
    write_text(out_dir / STATE_FILE, json.dumps(state, indent=2))


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
    seconds: dict[str, float] | None = None,
    estimates: str | None = None,
) -> list[Path]:
    """summary.csv/json, paired_tests.csv, recommendation.csv, summary.md/txt, the sweep figures, the
    cross-resolution comparison of explanations, report.html and state.json, built in a staging folder and swapped
    in whole; then all logged to the parent run (only what it lacks or what changed, so publishing again is
    harmless). ``trials`` locate each result's folder (default: the sweep's plan); ``seconds`` (when given)
    receives how long each part took; ``estimates``, this run's eta.csv (else the lines of a run killed before its
    summary, `Layout.pending_estimates`, else the summary's earlier one is kept: part of the folder, swapped in
    with it)."""
    clock = _Clock(seconds if seconds is not None else {})
    trials = trials if trials is not None else plan(cfg, check=False)
    folders = trial_folders(trials)
    staging = staging_dir(out_dir)
    try:
        built = _build_summary(results, cfg, (staging, out_dir), folders, clock, (tracker, parent))
        pending = Layout.of_sweep_folder(out_dir).pending_estimates()
        if estimates is None and pending.is_file():  # a run killed in its summary phase: its lines
            estimates = pending.read_text(encoding="utf-8")
        if estimates is not None:
            write_text(staging / ESTIMATES_FILE, estimates)
        elif (out_dir / ESTIMATES_FILE).is_file():  # the earlier one: kept, or its whole rows when it was cut
            kept = _whole_estimates(out_dir / ESTIMATES_FILE)
            if kept is not None:
                write_text(staging / ESTIMATES_FILE, kept)
        write_text(staging / STATE_FILE, _state(cfg, trials, staging, parent, published=False))
        replace_dir(staging, out_dir)
        pending.unlink(missing_ok=True)
    except Exception as exc:  # a full disk: said in one line naming the summary's file; the old summary stays
        full = disk_full(exc)
        if full is None:
            raise
        raise disk_full_error(_in_place(full.filename, staging, out_dir)) from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        with contextlib.suppress(OSError):  # its staging root, when nothing else is built there
            staging.parent.rmdir()
    summary, tables, figures, comparison, page = _moved(built, staging, out_dir)
    if parent is not None:
        _publish_summary(tracker, parent, summary, tables, figures, comparison, page, clock)
    return figures + ([page] if page else []) + comparison.files


def _whole_estimates(path: Path) -> str | None:
    """The text of the summary's earlier eta.csv: as it is when whole; when cut (a full disk, a copy or a hand),
    rebuilt from its header and whole rows, the cut row left out and said in one warning; None when not even the
    header is left (said the same way)."""
    import csv

    problem = check_file(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        _warn_once(f"{path}: does not read ({type(exc).__name__}); the new summary has no eta.csv")
        return None
    if problem is None:
        return text
    lines = text.splitlines(keepends=True)
    header = next(csv.reader(lines[:1])) if lines and lines[0].endswith("\n") else []
    if header != ESTIMATES_HEADER.split(","):
        _warn_once(f"{path}: {problem}, no header left; the new summary has no eta.csv")
        return None
    rows = [line for line in lines[1:] if line.endswith("\n") and len(next(csv.reader([line]), [])) == len(header)]
    dropped = len(lines) - 1 - len(rows)
    _warn_once(f"{path}: rebuilt from its {len(rows)} whole row(s), {dropped} cut row(s) left out")
    return lines[0] + "".join(rows)


def _in_place(path: str | None, staging: Path, out_dir: Path) -> Path:
    """Where `path`, written in the staging folder, goes in the summary folder (the summary folder itself for a
    path outside it, or none)."""
    try:
        return out_dir / Path(path).relative_to(staging) if path else out_dir
    except ValueError:
        return Path(path)


def _build_summary(
    results: list[TrialResult], cfg: Config, dirs: tuple[Path, Path], folders: dict, clock: _Clock, run: tuple
) -> tuple:
    """The summary's files in `dirs` = (the staging folder, the summary folder it replaces, whose maps on demand
    are reused), through `summary_phase`, with a thread beside it (sweep.sensitive.aside) that draws the parent
    run's probe images (they need no summary file) while the statistics are computed, then makes the sensitive
    images' maps; the probe images are logged to `run` = (tracker, parent run or None) while the maps are made and
    the figure workers finish. (Forking the workers before the statistics, to draw these images on the idle core,
    measured 1.3 s slower: the workers then import what the figures need.)"""
    from resomap.plotstyle import parallel_saves
    from resomap.sweep.sensitive import SensitiveMaps, aside

    (out_dir, previous), (tracker, parent) = dirs, run
    with parallel_saves() as written, aside() as beside:  # figures drawn in worker processes while the next are built
        drawn = beside.submit(_probe_images, folders) if parent is not None else None
        maps = SensitiveMaps(cfg, out_dir, previous, beside)
        built = summary_phase(results, folders, cfg.stats, cfg.explainability, out_dir, clock, maps=maps)
        if drawn is not None:
            _publish_probe_images(tracker, parent, drawn, clock)
        with clock("sensitive maps"):  # what is left of them, then their figures handed to the workers
            built[2].extend(maps.figures())
        with clock("figure files"):  # the drawing still under way
            written()
    with clock("report"):
        page = _report(out_dir)
    return (*built, page)


def summary_phase(
    results: list[TrialResult],
    folders: dict,
    stats: Any,
    explainability: Any,
    out_dir: Path,
    clock: _Clock | None = None,
    maps: SensitiveMaps | None = None,
    summarised: list[Any] | None = None,
    files: bool = True,
) -> tuple[Any, list[Path], list[Path], Any]:
    """The summary phase a sweep and `resomap analyze` share: the summary built once (summary.build_summary), the
    sweep figures drawn from its decided parts while the explanations are compared across resolutions
    (stages.compare_stage, each deterministic model one replicate), the trade-off figure and the summary's files;
    `maps` (sweep.sensitive.SensitiveMaps) is started on the maps of the most sensitive images outside the probe
    set: its checkpoints loaded once the figures are handed over, its images explained as soon as the decided
    parts name them, beside the comparison (the caller waits for them: `maps.figures()`). `summarised`: what the
    summary reads in place of `results` (their dicts with more keys); `files`: write the summary's files
    (summary.csv, summary.json, ...; `resomap analyze` writes its own report). Returns (summary, its files, the
    figures, the comparison)."""
    from resomap.reports import sweep_figures
    from resomap.reports.explain_comparison import draw_comparison
    from resomap.reports.tradeoff import tradeoff_files
    from resomap.stages import compare_stage
    from resomap.summary import build_summary, write_summary
    from resomap.summary.build import Explained
    from resomap.summary.front import front_inputs

    clock = clock or _Clock({})
    figures: list[Path] = []
    held: dict[str, Any] = {}

    def explain(decided: Any) -> Explained:
        with clock("figures"):
            figures.extend(
                sweep_figures(decided.rows, out_dir / "figures", decided.paired_tests, decided.recommendations,
                              decided.trials)
            )  # fmt: skip
        if maps is not None:  # the figure workers are forked: the maps' thread starts beside them, on the
            maps.prepare(decided.trials)  # checkpoints, then on the images the summary names
            maps.start(decided)
        with clock("explanations"):
            only = decided.deterministic_models()  # one replicate each: no seed floor, no relabelling test
            comparison = compare_stage(results, explainability, out_dir / "explanations", stats, only)
            quality, measured = front_inputs(decided, comparison, stats)
            draw_comparison(comparison)
        held["comparison"] = comparison
        return Explained(quality, measured, list(comparison.findings), list(comparison.map_answers))

    with clock.excluding("statistics", ("figures", "explanations")):
        summary = build_summary(summarised or results, folders, stats, explain=explain)
        tables = write_summary(summary, out_dir) if files else []
        figures += tradeoff_files(summary.front3, out_dir / "figures")
    return summary, tables, figures, held["comparison"]


def _moved(built: tuple, staging: Path, out_dir: Path) -> tuple:
    """The paths of what `_build_summary` wrote in `staging`, now under `out_dir`."""
    summary, tables, figures, comparison, page = built

    def move(path: Path) -> Path:
        return out_dir / Path(path).relative_to(staging)

    comparison = dataclasses.replace(comparison, files=[move(p) for p in comparison.files])
    return summary, [move(p) for p in tables], [move(p) for p in figures], comparison, page and move(page)


def _probe_images(folders: dict) -> dict:
    """The parent run's probe images (MLflow's image grid) drawn from the trials' maps (`sweep_probe_images`)."""
    from resomap.explain.run import MAPS_FILE
    from resomap.reports.probe_images import sweep_probe_images

    shown = {}  # the first seed of each (model, resolution) in the parent's image grid
    for (model, resolution, _seed), folder in sorted(folders.items()):
        shown.setdefault((model, resolution), folder / MAPS_FILE)
    return sweep_probe_images(shown)


def _publish_probe_images(tracker: Any, parent: str, drawn: Any, clock: _Clock) -> None:
    """The parent run's probe images, once `drawn` (a Future of `_probe_images`), logged to it."""
    from resomap.tracking.sweep_run import publish_sweep_images

    with clock("probe images"):  # what is left of their drawing
        images = drawn.result()
    with clock("MLflow"):
        publish_sweep_images(tracker, parent, images)


def _publish_summary(tracker, parent, summary, tables, figures, comparison, page, clock) -> None:
    from resomap.tracking.sweep_run import publish_sweep

    with clock("MLflow"):
        publish_sweep(tracker, parent, summary, tables=tables, figures=figures, page=page, comparison=comparison)


class _Clock:
    """`with clock(name):` adds the block's wall time to `seconds[name]`."""

    def __init__(self, seconds: dict[str, float]):
        self.seconds = seconds

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

    @contextlib.contextmanager
    def excluding(self, name: str, inner: tuple[str, ...]) -> Iterator[None]:
        """`seconds[name]` gets the block's wall time less what the `inner` names got inside it (they are timed
        on their own)."""
        before = sum(self.seconds.get(n, 0.0) for n in inner)
        with self(name):
            yield
        self.seconds[name] -= sum(self.seconds.get(n, 0.0) for n in inner) - before


def summary_line(seconds: dict[str, float]) -> str:
    """'[sweep] summary in 12.3 s (statistics 1.0 s, figures 4.1 s, ...)': where the summary phase's time went."""
    parts = ", ".join(f"{name} {value:.1f} s" for name, value in seconds.items())
    return f"[sweep] summary in {sum(seconds.values()):.1f} s ({parts})"


def _report(out_dir: Path) -> Path | None:
    """The sweep's one-page HTML report (report.html beside the summary); a failure is logged, never fatal."""
    try:
        from resomap.reports.html import write_report

        return write_report(out_dir)
    except Exception as exc:
        if disk_full(exc) is not None:  # the rest of the summary cannot be written either
            raise
        log.warning("HTML report not written: %s: %s", type(exc).__name__, exc)
        return None

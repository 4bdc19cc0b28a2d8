"""What a sweep publishes on its parent run (resomap.tracking.parent finds and closes it): the summary's tables,
figures, report and comparison files, headline metrics and recommendation tags, metrics drawn against resolution
and the probe images, each only when the run lacks it or it changed."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from resomap.summary.sweep_summary import SweepSummary
from resomap.tracking.mlflow_store import is_number, log_points, warn_level
from resomap.tracking.note import (
    BEST_TAG,
    NOTE_LIMIT,
    NOTE_TAG,
    best,
    best_row,
    decision_words,
    log_note_figures,
    parent_note,
)
from resomap.tracking.publish import KIND_TAG, _held_images
from resomap.tracking.views import (
    AGREEMENT_CHANCE,
    AGREEMENT_FLOOR,
    AGREEMENT_METRIC,
    RECOMMENDED_TAG,
    SCORE_HIGH,
    SCORE_LOW,
    SCORE_METRIC,
    VIEW_TAG,
    chart_ranges,
    with_ranges,
)

log = logging.getLogger(__name__)

BY_RESOLUTION = "by_resolution/"  # the parent's metrics drawn against resolution (step = resolution)


def resolution_points(rows: list[Any], matrices: Mapping[str, Mapping[str, Any]]) -> dict:
    """key -> {resolution: value} for the parent run, so that MLflow's chart view draws each model's results
    against resolution (step = resolution): the summary rows' columns marked for it (`rows`: SummaryRows, read
    through their `by_resolution()`: accuracy with its interval, macro-F1, latency, memory, GMACs, training time,
    explanation seconds per method), and per method the mean Spearman agreement of the maps at a resolution with
    those at the sweep's other resolutions (main grid of the comparison)."""
    points: dict[str, dict[int, float]] = {}

    def add(model: str, name: str, resolution: Any, value: Any) -> None:
        if is_number(value) and value == value:  # not NaN
            points.setdefault(f"{BY_RESOLUTION}{mlflow_name(model)}/{name}", {})[int(resolution)] = float(value)

    for row in rows:
        for name, value in row.by_resolution().items():
            add(row.model, name, row.resolution, value)
    for (model, resolution), by_method in agreement_at(matrices).items():
        for method, value in by_method.items():
            add(model, f"agreement_{method}", resolution, value)
    return points


def agreement_at(matrices: Mapping[str, Mapping[str, Any]]) -> dict[tuple[str, int], dict[str, float]]:
    """(model, resolution) -> {method: the mean Spearman agreement of the model's maps at that resolution with its
    maps at the sweep's other resolutions} (the comparison's main-grid matrices, `<model>/<method>` ->
    {spearman, resolutions})."""
    out: dict[tuple[str, int], dict[str, float]] = {}
    for name, entry in matrices.items():
        model, method = name.rsplit("/", 1)
        matrix, labels = entry.get("spearman"), entry.get("resolutions") or []
        for i, resolution in enumerate(labels if matrix else []):
            others = [v for j, v in enumerate(matrix[i]) if j != i and v is not None]
            if others:
                out.setdefault((model, int(resolution)), {})[method] = sum(others) / len(others)
    return out


def agreement_floor(matrices: Mapping[str, Mapping[str, Any]]) -> dict[tuple[str, int], dict[str, float]]:
    """(model, resolution) -> {method: the mean Spearman agreement of the model's maps there with their
    shifted-and-undone maps (the floor where it looks is decided against: explain.evaluation.where)}."""
    out: dict[tuple[str, int], dict[str, float]] = {}
    for name, entry in matrices.items():
        model, method = name.rsplit("/", 1)
        for resolution, value in (entry.get("shift_floor") or {}).items():
            if is_number(value) and value == value:
                out.setdefault((model, int(resolution)), {})[method] = float(value)
    return out


def agreement_chance(matrices: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """model -> {method: the chance level of its maps' Spearman agreement across resolutions (maps of different
    probe images, the comparison's main grid)}."""
    out: dict[str, dict[str, float]] = {}
    for name, entry in matrices.items():
        model, method = name.rsplit("/", 1)
        value = (entry.get("chance") or {}).get("spearman")
        if is_number(value) and value == value:
            out.setdefault(model, {})[method] = float(value)
    return out


def log_metric_points(
    tracker: Any, run_id: str, points: dict[str, dict[int, float]], namespace: str | None = None
) -> None:
    """Make the run's points of each key those of ``points`` (key -> {step: value}): missing points are logged,
    and a key whose logged points differ (a value changed, a step gone, a step logged twice) is rewritten
    (Tracker.replace_metrics), so that the run follows its summary with one point per (key, step). With
    ``namespace``, the run's keys under it that ``points`` lacks are removed. A store that cannot rewrite gets the
    missing points only, and one warning."""
    try:
        run = tracker.get_run(run_id)
    except Exception as exc:  # the calls below are soft; without the run, nothing is known to be there
        log.log(warn_level(tracker), "MLflow: run %s not read (%s)", run_id, exc)
        return
    held = set(run.data.metrics)
    stale: dict[str, dict[int, float]] = {}
    missing: dict[str, dict[int, float]] = {}
    for key, steps in points.items():
        history = [(m.step, m.value) for m in tracker.metric_history(run_id, key)] if key in held else []
        if sorted(history) == sorted(steps.items()):
            continue
        steps_held = [step for step, _ in history]
        if len(set(steps_held)) < len(steps_held) or any(steps.get(step) != value for step, value in history):
            stale[key] = steps  # a point changed, gone from the summary, or logged twice: only a rewrite mends it
        missing[key] = {step: value for step, value in steps.items() if step not in dict(history)}
    if namespace:
        stale.update({key: {} for key in held if key.startswith(namespace) and key not in points})
    if stale and tracker.replace_metrics(run_id, stale):
        missing = {key: steps for key, steps in missing.items() if key not in stale}
    elif stale:
        log.warning(
            "MLflow: %s cannot rewrite a logged metric; %d chart(s) of run %s keep earlier values where the summary "
            "changed (summary.csv is current)",
            tracker.uri,
            len(stale),
            run_id,
        )
    log_points(tracker, run_id, missing)


def publish_sweep_images(tracker: Any, run_id: str, images: Mapping[tuple[str, str, int], Mapping[int, Any]]) -> None:
    """In the parent run, each model's probe maps at every resolution as MLflow images at step = resolution
    (key probe/<model>/<method>/<n>), so the image grid's step slider moves one model's maps across resolutions,
    and at step 0 the overview (MLflow's image card opens at step 0: it shows the overview, never an empty card).
    `images`: (model, method, probe position) -> {resolution, or 0 for the overview: RGB uint8 array}, drawn by
    the sweep (resomap.reports.probe_images.sweep_probe_images: one colour scale per model across its resolutions).
    Each (key, step) is logged once: an overview logged before resolutions were added stays as it was (its
    captions say which resolutions it shows); the per-resolution steps are complete."""
    from PIL import Image

    try:
        held = _held_images(tracker.artifact_paths(run_id))
    except Exception as exc:
        log.log(warn_level(tracker), "MLflow: images of run %s not listed (%s)", run_id, exc)
        return
    pending = []
    for (model, method, position), by_step in sorted(images.items()):
        key = f"probe/{mlflow_name(model)}/{method}/{position:02d}"
        pending += [(key, int(step), array) for step, array in sorted(by_step.items()) if (key, int(step)) not in held]
    tracker.log_images(run_id, ((key, step, Image.fromarray(array)) for key, step, array in pending))


def publish_sweep(
    tracker: Any,
    parent: str,
    summary: SweepSummary,
    *,
    tables: Iterable[Path] = (),
    figures: Iterable[Path] = (),
    page: Path | None = None,
    comparison: Any = None,
) -> None:
    """Log what the sweep's summary produced to its parent run, only what the run lacks or what changed (so
    publishing again is harmless): report.html, the tables under summary/, the figures under figures/, the
    comparison's files under explanations/<kind>/, headline metrics and the recommendation tags, the
    per-resolution points (`resolution_points`); the probe images are `publish_sweep_images`'s. `summary`: a
    resomap.reports SweepSummary (rows, recommendations); `comparison`: a resomap.stages Comparison (files,
    agreement, matrices) or None."""
    figures = list(figures)
    if page:
        tracker.log_artifact(parent, page)
    for path in tables:
        tracker.log_artifact(parent, path, "summary")
    for path in figures:
        tracker.log_artifact(parent, path, "figures")
    log_note_figures(tracker, parent, figures)
    files = comparison.files if comparison is not None else []
    for path in files:
        tracker.log_artifact(parent, path, f"explanations/{path.parent.name}")
    metrics = dict(comparison.agreement) if comparison is not None else {}
    tags = headline(summary)
    tags[NOTE_TAG] = parent_note(summary, page, figures, run_id=parent)
    use = best(summary)
    if use is not None:
        tags[BEST_TAG] = use
    tags[RECOMMENDED_TAG] = recommended_words(summary)
    chosen = best_row(summary)
    pooled = chosen.score(chosen.headline)[0] if chosen is not None else None
    if pooled is not None:
        metrics[SCORE_METRIC] = round(float(pooled), 3)
    unrecommended = sufficiency_metrics(summary, metrics)
    for row in summary.rows:  # the columns the row marks for the parent run (summary.rows.SummaryRow)
        where = f"{mlflow_name(row.model)}/{row.resolution}"
        metrics.update({f"{key}/{where}": value for key, value in row.parent_metrics().items()})
    drop = () if use is not None else (BEST_TAG,)
    gone = [*unrecommended, *([] if SCORE_METRIC in metrics else [SCORE_METRIC])]
    log_changed(tracker, parent, metrics, tags, drop=drop, drop_metrics=gone)
    matrices = comparison.matrices if comparison is not None else {}
    tag_children(tracker, parent, child_records(summary, matrices))
    fit_view_ranges(tracker)
    log_metric_points(tracker, parent, resolution_points(summary.rows, matrices), namespace=BY_RESOLUTION)


SUFFICIENT_METRIC = "sufficient_resolution/"  # a model's smallest sufficient resolution (summary.uncertainty)
OLD_METRICS = ("recommended_resolution/",)  # the same, under the name summaries before the answer across models used


def sufficiency_metrics(summary: SweepSummary, metrics: dict[str, float]) -> list[str]:
    """Add to `metrics` each model's `sufficient_resolution/<model>` (only where the summary's rule shows it, with
    its evidence) and `reference_resolution/<model>`; the keys the parent must not hold: the sufficient_resolution
    of the models without one, and the older name of every model's."""
    unrecommended = []
    for rec in summary.recommendations:
        name = mlflow_name(rec["model"])
        unrecommended += [f"{old}{name}" for old in OLD_METRICS]
        if rec["resolution"] is not None and rec.get("sufficient"):
            metrics[f"{SUFFICIENT_METRIC}{name}"] = rec["resolution"]
        else:
            unrecommended.append(f"{SUFFICIENT_METRIC}{name}")
        if rec["resolution"] is not None:
            metrics[f"reference_resolution/{mlflow_name(rec['model'])}"] = rec["reference"]
    return unrecommended


def child_records(
    summary: SweepSummary, matrices: Mapping[str, Mapping[str, Any]]
) -> dict[str, tuple[dict[str, float], dict[str, str]]]:
    """run id -> (metrics, tags) the summary adds to each trial's run: the interval of its model @ resolution's
    headline score pooled over the seeds (the summary row's, summary.rows.SummaryRow.score; 3 decimals), each
    method's map agreement at its resolution (`agreement_at`) with its shift floor there (`agreement_floor`) and
    chance level (`agreement_chance`) and its
    description (`child_note`)."""
    rows = {(r.model, int(r.resolution)): r for r in summary.rows}
    agreement, chance, floor = agreement_at(matrices), agreement_chance(matrices), agreement_floor(matrices)
    decisions = {r["model"]: r for r in summary.recommendations}
    out: dict[str, tuple[dict[str, float], dict[str, str]]] = {}
    for trial in summary.trials:  # result.json trees (resomap.trial_result.TrialResult.to_dict)
        if not trial.get("run_id"):
            continue
        where = (trial.get("model"), int(trial.get("resolution") or 0))
        row = rows.get(where)
        metrics: dict[str, float] = {}
        _, low, high = row.score(row.headline) if row is not None else (None, None, None)
        if low is not None and high is not None:
            metrics.update({SCORE_LOW: round(float(low), 3), SCORE_HIGH: round(float(high), 3)})
        for method, value in agreement.get(where, {}).items():
            metrics[AGREEMENT_METRIC + method] = round(float(value), 3)
            if method in chance.get(where[0], {}):
                metrics[AGREEMENT_CHANCE + method] = round(chance[where[0]][method], 3)
            if method in floor.get(where, {}):
                metrics[AGREEMENT_FLOOR + method] = round(floor[where][method], 3)
        against = summary.baselines_at(*where) if hasattr(summary, "baselines_at") else ""
        note = child_note(trial, row, against, decisions.get(trial.get("model")))
        out[trial["run_id"]] = (metrics, {NOTE_TAG: note})
    return out


def child_note(trial: Mapping[str, Any], row: Any, against: str, decision: Mapping[str, Any] | None) -> str:
    """A trial run's description (markdown): its test score, its model @ resolution's pooled score with interval,
    whether it is undertrained (its own convergence record; a closed-form fit: the penalty it chose), where that
    model @ resolution stands against the baselines (`against`: the summary's words,
    summary.build.SweepSummary.baselines_at) and its model's recommendation."""
    model, resolution, seed = trial.get("model"), trial.get("resolution"), trial.get("seed")
    lines = [f"**{model} at {resolution} px, seed {seed}**", ""]
    if row is not None:
        own = (trial.get("test") or {}).get("test/" + row.headline.removeprefix("test_"))
        if is_number(own):
            lines.append(f"- test {row.say(row.headline)}: {own:.3f} (this seed)")
        mean, low, high = row.score(row.headline)
        if mean is not None and low is not None:
            seeds = f"{row.n_seeds} seed{'s' if row.n_seeds != 1 else ''}"
            interval = f"{mean:.3f} [{low:.3f}, {high:.3f}] (95% interval)"
            lines.append(f"- {model} at {resolution} px over {seeds}: {interval}")
    conv = trial.get("convergence") or {}
    if conv:
        from resomap.summary.convergence import chosen_penalty

        said = f"undertrained: {conv.get('undertrained_reason')}" if conv.get("undertrained") else "not undertrained"
        penalty = chosen_penalty(trial.get("history") or [], conv.get("best_epoch"))  # a closed-form fit's
        if penalty is not None:
            said += f"; penalty chosen on validation: C = {penalty:g}"
        lines.append(f"- training: {said}")
    if against:
        lines.append(f"- baselines: {against}")
    if decision is not None and decision.get("sufficiency"):
        lines.append(f"- {model}'s decision: {decision['sufficiency']}")
    return "\n".join(lines)[:NOTE_LIMIT]


def recommended_words(summary: SweepSummary) -> str:
    """The parent's `recommended` tag: the answer across models in short (summary.answer_text.short_answer: the
    configuration to use with its score, and the cheapest shown as good), or why there is none, cut to 250
    characters."""
    from resomap.summary.answer_text import short_answer

    if not summary.recommendations:
        return "no answer: no finished trial"
    text = short_answer(summary.answer, summary.rows, summary.recommendations)
    return text if len(text) <= 250 else text[:249] + "…"


def fit_view_ranges(tracker: Any) -> None:
    """Give the sweep view's charts y ranges that hold every value of the experiment's trial runs with room above
    (resomap.tracking.views.chart_ranges: plotly's toolbar covers the top of a chart), set when they changed. The
    experiment's runs, not only this sweep's: the view shows them all. A store that cannot be read is left."""
    view = tracker.experiment_tags().get(VIEW_TAG)
    if not view:
        return
    try:
        runs = tracker.find_runs(f"tags.`{KIND_TAG}` = 'trial'")
    except Exception as exc:
        log.log(warn_level(tracker), "MLflow: the sweep view's chart ranges not set (%s)", exc)
        return
    charts = json.loads(view).get("compareRunCharts") or []
    fitted = with_ranges(view, chart_ranges((r.data.metrics for r in runs), charts))
    if fitted != view:
        tracker.tag_experiment({VIEW_TAG: fitted})


ChildRecords = Mapping[str, tuple[Mapping[str, float], Mapping[str, str]]]  # run id -> (metrics, tags)


def tag_children(tracker: Any, parent: str, records: ChildRecords) -> None:
    """Give each child run (run id -> (metrics, tags)) the values it does not hold yet: one search for the parent's
    children, then only the runs found with a change are written (a metric held with another value is rewritten,
    Tracker.replace_metrics; a repeated summary writes nothing; a trial whose run this store lacks, or a store that
    cannot be searched, is left: these are a view)."""
    if not records:
        return
    try:
        have = {r.info.run_id: r.data for r in tracker.find_runs(f"tags.`mlflow.parentRunId` = '{parent}'")}
    except Exception as exc:
        log.log(warn_level(tracker), "MLflow: the children of %s not tagged (%s)", parent, exc)
        return
    for run_id, (metrics, tags) in records.items():
        if run_id in have:
            log_changed(tracker, run_id, dict(metrics), dict(tags), held=have[run_id])


def headline(summary: SweepSummary) -> dict[str, str]:
    """Tags of the parent run: the decision per model in a few words (`decision.<model>`), and each resolution's
    verdict with its margin and the margin the design could detect (`verdict.<model>.<resolution>`)."""
    tags = {DECISION_TAG + mlflow_name(r["model"]): decision_words(r) for r in summary.recommendations}
    for row in summary.rows:
        if row.verdict:
            text = f"{row.verdict} (margin {row.margin:g}"
            if row.detectable_margin is not None:
                text += f"; detectable {row.detectable_margin:.3f}"
            tags[f"{VERDICT_TAG}{mlflow_name(row.model)}.{row.resolution}"] = text + ")"
    return tags


# short keys, short values: MLflow's run page draws each tag in a box of fixed width, and cuts the key first
DECISION_TAG, VERDICT_TAG = "decision.", "verdict."  # + model; + model.resolution


def log_changed(
    tracker: Any,
    run_id: str,
    metrics: dict[str, float],
    tags: dict[str, str],
    drop: Iterable[str] = (),
    drop_metrics: Iterable[str] = (),
    held: Any = None,
) -> None:
    """Log only the metrics and tags whose value the run does not hold yet (a repeated summary adds nothing): a
    metric the run holds with another value is rewritten at step 0 (Tracker.replace_metrics: one point, the
    current value; a store that cannot rewrite gets a second point); delete the tags in ``drop`` and the metrics
    in ``drop_metrics`` that the run holds (an earlier summary's `resomap.best` once nothing is recommended).
    ``held``: the run's data (metrics, tags) when the caller has it already (a search), else it is read."""
    if held is None:
        try:
            held = tracker.get_run(run_id).data
        except Exception:  # unreachable: log everything (the calls themselves are soft)
            held = None
    have_m = dict(held.metrics) if held is not None else {}
    have_t = dict(held.tags) if held is not None else {}
    metrics = {k: float(v) for k, v in metrics.items() if have_m.get(k) != float(v)}
    tags = {k: str(v) for k, v in tags.items() if have_t.get(k) != str(v)}
    changed = {k: {0: v} for k, v in metrics.items() if k in have_m}
    changed.update({k: {} for k in drop_metrics if k in have_m and k not in metrics})
    if changed and tracker.replace_metrics(run_id, changed):
        metrics = {k: v for k, v in metrics.items() if k not in changed}
    if metrics:
        tracker.log_metrics(run_id, metrics)
    if tags:
        tracker.set_tags(run_id, tags)
    for key in drop:
        if key in have_t and key not in tags:
            tracker.delete_tag(run_id, key)


def mlflow_name(text: str) -> str:
    """A name usable in an MLflow metric, tag or image key (letters, digits, _ - . / and space)."""
    return "".join(c if c.isalnum() or c in "_-. /" else "_" for c in str(text))

"""Sweep summary: one row per model x resolution with intervals on its headline numbers, the paired tests between
resolutions and the decision per model (recommended only with the evidence: summary.uncertainty.recommendation);
written as summary.csv / summary.json / paired_tests.csv / recommendation.csv / sensitive_images.csv / summary.md /
summary.txt; per model the test images whose correctness changes with the resolution (summary.sensitivity).

Takes TrialResults (anything with to_dict()) or their dicts, and optionally where each trial's folder is (its
per-image records, read by the trial's task, give the intervals and tests: classification's predictions.csv,
segmentation's seg_predictions.csv), so it never touches models or training code.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from resomap.atomic import write_text
from resomap.blocks import Section, render
from resomap.config.schema import StatsConfig
from resomap.records import machines, machines_warning
from resomap.results import (
    ANSWER_COLUMNS,
    PAIRED_COLUMNS,
    RECOMMENDATION_COLUMNS,
    SENSITIVE_IMAGE_COLUMNS,
    SENSITIVE_IMAGES_FILE,
)
from resomap.schema import Adaptive, Answer, PairedTest, Recommendation, Stats, Trial
from resomap.summary.aligned import TrialId, TrialRecord, group_records
from resomap.summary.aligned import load_records as _load_records
from resomap.summary.answer import cross_model_answer
from resomap.summary.convergence import convergence_columns
from resomap.summary.decision import compare_models
from resomap.summary.front import Measured, estimate_front, timing_columns, tradeoffs
from resomap.summary.groups import group_decisions
from resomap.summary.per_class import class_decisions
from resomap.summary.rows import EXPLAIN_COST, ROW_COLUMNS, SEED_COLUMNS, SummaryRow
from resomap.summary.sensitivity import sensitivity
from resomap.summary.sweep_summary import SweepSummary, deterministic_models, json_safe
from resomap.summary.text import baseline_caveat, decision_sentence
from resomap.summary.train_test import train_test_decisions
from resomap.summary.uncertainty import baseline_columns, interval_columns, named_best, reference_flaw, sufficiency

log = logging.getLogger(__name__)

SUMMARY_CSV, SUMMARY_JSON = "summary.csv", "summary.json"
PAIRED_CSV, RECOMMENDATION_CSV, ANSWER_CSV = "paired_tests.csv", "recommendation.csv", "answer.csv"
SUMMARY_MD, SUMMARY_TXT = "summary.md", "summary.txt"

__all__ = [
    "Decided",
    "Explained",
    "SweepSummary",
    "assemble",
    "baseline_caveat",
    "build_summary",
    "json_safe",
    "write_summary",
]


@dataclasses.dataclass(frozen=True)
class Decided:
    """The summary's decided parts before the explanations are compared (what `build_summary`'s `explain` gets):
    the rows, the paired tests, each model's decision, the trials and the images that need the pixels (so the
    caller can start explaining them beside the comparison)."""

    rows: list[SummaryRow]
    paired_tests: list[PairedTest]
    recommendations: list[Recommendation]
    trials: list[Trial]
    stats: Stats
    answer: Answer | None = None
    sensitive_images: list[Any] = dataclasses.field(default_factory=list)

    def deterministic_models(self) -> dict[str, int]:
        """model -> its seed count, for each deterministic model (sweep_summary.deterministic_models)."""
        return deterministic_models(self.rows, self.recommendations)


@dataclasses.dataclass(frozen=True)
class Explained:
    """What the comparison of the sweep's maps gives the summary: quality.csv's rows and what the front's tests read
    (summary.front.front_inputs), and a finding per model x method."""

    quality: list[dict[str, Any]]
    measured: Measured
    findings: list[str]
    map_answers: list[str] = dataclasses.field(default_factory=list)


def assemble(**parts: Any) -> SweepSummary:
    """The summary of `parts` (SweepSummary's fields but the sections) with its sections built on it
    (summary.sections.build_sections): the one place a complete SweepSummary is made, from the trials
    (`build_summary`) or from parts read back from summary.json (`SweepSummary.parts`)."""
    from resomap.summary.sections import build_sections

    bare = SweepSummary(**parts)
    sections, errors = build_sections(bare)
    return dataclasses.replace(bare, sections=sections, section_errors=errors)


def _get(result: Mapping[str, Any], path: tuple[str, ...]) -> float:
    value: Any = result
    for part in path:
        if not isinstance(value, Mapping) or part not in value:
            return math.nan
        value = value[part]
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _as_dicts(results: Iterable[Any]) -> list[dict[str, Any]]:
    return [dict(r) if isinstance(r, Mapping) else r.to_dict() for r in results]


def _rows(records: list[TrialRecord], cfg: StatsConfig) -> list[SummaryRow]:
    groups = group_records(records)
    rows = [_row(model, res, members, cfg) for (model, res), members in groups.items()]
    best = named_best(groups, cfg)  # the named baselines' best resolutions, once for every row
    for row in rows:
        found = baseline_columns(row.model, row.resolution, groups, cfg, best)
        for key, value in found.items():
            if key == "note":
                row.note = "; ".join(filter(None, [row.note, value]))
            else:
                setattr(row, key, value)
    return rows


def _row(model: str, res: int, members: list[TrialRecord], cfg: StatsConfig) -> SummaryRow:
    results = [m.result for m in members]
    over_seeds: dict[str, float | None] = {}
    for name, path in SEED_COLUMNS:
        values = np.array([_get(m, path) for m in results], dtype=float)
        finite = values[np.isfinite(values)]
        over_seeds[name] = float(finite.mean()) if finite.size else None
        over_seeds[f"{name}_std"] = float(finite.std(ddof=1)) if finite.size > 1 else None
    intervals = interval_columns(members, cfg)
    timing = timing_columns(results, cfg.level)
    note = "; ".join(filter(None, [intervals.pop("note"), timing.pop("note", "")]))
    task_metrics = _task_metrics(members[0].task.headline, results)
    noisy = sum(bool((m.get("profile") or {}).get("noisy")) for m in results)
    if noisy:
        mark = f"latency/throughput noisy ({noisy} of {len(results)} profiles disturbed; see profile.json)"
        note = f"{note}; {mark}" if note else mark
    return SummaryRow(
        model=model,
        family=results[0].get("family", ""),
        resolution=res,
        **over_seeds,
        **convergence_columns(results),
        task_metrics=task_metrics,
        profile_noisy=noisy > 0,
        **intervals,
        **timing,
        note=note,
        cross_resolution=_mean_cross(results),
        explain_costs=explain_costs(results),
    )


def _task_metrics(headline: tuple[str, ...], results: list[Mapping[str, Any]]) -> dict[str, float | None]:
    """The seeds' mean and std of each headline test metric of the task that is not a column of its own
    (segmentation: test_miou, test_boundary_f1)."""
    out: dict[str, float | None] = {}
    for name in headline:
        column = f"test_{name}"
        if column in ROW_COLUMNS:
            continue
        values = np.array([_get(m, ("test", f"test/{name}")) for m in results], dtype=float)
        finite = values[np.isfinite(values)]
        out[column] = float(finite.mean()) if finite.size else None
        out[f"{column}_std"] = float(finite.std(ddof=1)) if finite.size > 1 else None
    return out


def explain_costs(results: list[Mapping[str, Any]]) -> dict[str, float | None]:
    """Each explanation method's cost at this model x resolution, mean over seeds: `explain_seconds/<method>` (wall
    time of its maps of the probe set) and `explain_peak_memory_mb/<method>` from the trials' explain metrics
    (`explain/<method>/seconds`, `.../peak_memory_mb`); absent for results written before costs were kept."""
    acc: dict[str, list[float]] = {}
    for result in results:
        for key, value in ((result.get("explain") or {}).get("metrics") or {}).items():
            parts = key.split("/")
            if len(parts) == 3 and parts[0] == "explain" and parts[2] in EXPLAIN_COST:
                acc.setdefault(f"{EXPLAIN_COST[parts[2]]}/{parts[1]}", []).append(_get({"v": value}, ("v",)))
    out: dict[str, float | None] = {}
    for column, values in sorted(acc.items()):
        finite = [v for v in values if math.isfinite(v)]
        out[column] = float(np.mean(finite)) if finite else None
    return out


def _mean_cross(members: list[Mapping[str, Any]]) -> dict[str, float | None]:
    acc: dict[str, list[float]] = {}
    for m in members:
        for res, metrics in (m.get("cross_resolution") or {}).items():
            acc.setdefault(str(res), []).append(_get(metrics, ("accuracy",)))
    out = {}
    for res, vals in acc.items():
        finite = [v for v in vals if math.isfinite(v)]
        out[res] = float(np.mean(finite)) if finite else None
    return out


def _sufficiency(rows: list[SummaryRow], recs: list[dict[str, Any]], paired: list[dict[str, Any]]) -> None:
    """Whether each model's decided resolution is its smallest sufficient one with the evidence beside it
    (summary.uncertainty.sufficiency, the one rule) into its recommendation row (`sufficient`, `sufficiency`, and
    `reference_flaw`: what makes its reference a poor yardstick, '' when nothing does) and the summary rows
    (`sufficient`)."""
    by_key = {(row.model, row.resolution): row for row in rows}
    for rec in recs:
        model = rec["model"]
        mine = {row.resolution: row for row in rows if row.model == model}
        rec["reference_flaw"] = reference_flaw(rec, mine, [t for t in paired if t.get("model") == model])
        found = sufficiency(rec, by_key.get((model, rec.get("resolution"))))
        rec["sufficient"], rec["sufficiency"], rec["evidence"] = found.sufficient, found.reason, found.evidence
    chosen = {(rec["model"], rec["resolution"]) for rec in recs if rec["sufficient"]}
    for row in rows:
        row.sufficient = (row.model, row.resolution) in chosen


def summary_rows(
    results: Iterable[Any], folders: Mapping[TrialId, Path] | None = None, stats: StatsConfig | None = None
) -> list[SummaryRow]:
    """One row per (model, resolution): mean and std over seeds of every column and the seed count, with the
    intervals of :mod:`resomap.summary.uncertainty` when ``folders`` ({(model, resolution, seed): folder}) locate
    the trials' predictions.csv (otherwise the intervals are None and ``note`` says why)."""
    return _rows(_load_records(_as_dicts(results), folders), stats or StatsConfig())


def build_summary(
    results: Iterable[Any],
    folders: Mapping[TrialId, Path] | None = None,
    stats: StatsConfig | None = None,
    *,
    explain: Callable[[Decided], Explained | None] | None = None,
    adaptive: Adaptive | None = None,
) -> SweepSummary:
    """The whole summary, built once: the rows, every model's paired tests between resolutions, its decision and
    whether its decided resolution is its smallest sufficient one (summary.uncertainty.sufficiency), per class, per
    group, the images that need the pixels, the answer across models (summary.answer), then `explain(decided)`: the
    caller's comparison of the maps (it may draw the figures of the decided parts meanwhile), whose quality makes
    the three-way front; `adaptive`, an adaptive sweep's record; the sections last (`assemble`)."""
    cfg = stats or StatsConfig()
    dicts = _as_dicts(results)
    records = _load_records(dicts, folders)
    rows = _rows(records, cfg)
    paired, recs = compare_models(records, cfg)
    _verdicts(rows, recs)
    _sufficiency(rows, recs, paired)
    for rec in recs:
        rec["sentence"] = decision_sentence(rec, [r for r in rows if r.model == rec["model"]])
    trials = []
    for result in dicts:
        folder = (folders or {}).get((str(result["model"]), int(result["resolution"]), int(result.get("seed") or 0)))
        trials.append({**result, "folder": str(folder) if folder is not None else None})
    classes = class_decisions(records, cfg)
    answer = cross_model_answer(records, recs, rows, classes, cfg)
    found = sensitivity(records, recs, cfg)
    decided = Decided(rows, paired, recs, trials, dataclasses.asdict(cfg), answer, found.images)
    explained = explain(decided) if explain is not None else None
    ran_on = machines(d.get("environment") for d in dicts if d.get("status") == "FINISHED")
    grouped = group_decisions(records, cfg)
    return assemble(
        rows=rows,
        paired_tests=paired,
        recommendations=recs,
        trials=trials,
        stats=decided.stats,
        machines=ran_on,
        machines_warning=machines_warning(ran_on),
        class_decisions=classes,
        train_test=train_test_decisions(records, cfg),
        sensitivity=found.rows,
        sensitive_images=found.images,
        front3=tradeoffs(rows, explained.quality, explained.measured) if explained is not None else [],
        group_decisions=grouped.rows,
        group_differ=grouped.differ,
        group_interactions=grouped.interactions,
        explanation_findings=list(explained.findings) if explained is not None else [],
        map_answers=list(explained.map_answers) if explained is not None else [],
        adaptive=adaptive,
        answer=answer,
    )


def _verdicts(rows: list[SummaryRow], recs: list[dict[str, Any]]) -> None:
    """Each row's verdict against its model's reference (the decision's), and whether it lies on the score x
    latency front of estimates (summary.front.estimate_front)."""
    verdicts = {(r["model"], v["resolution"]): v for r in recs for v in r.get("verdicts") or []}
    on_front = {p.name for p in estimate_front(rows)}
    for row in rows:
        row.on_estimate_front = f"{row.model}@{row.resolution}" in on_front
        v = verdicts.get((row.model, row.resolution))
        if v is not None:
            row.verdict, row.margin, row.verdict_p = v["verdict"], v["margin"], v["p_value"]
            row.reference_difference, row.reference_low, row.reference_high = v["difference"], v["low"], v["high"]
            row.detectable_margin = v["detectable"]
            if v["difference"] is None and v.get("reason"):  # a verdict kept from an earlier look, not retested
                row.note = "; ".join(filter(None, [row.note, f"{v['verdict']}: {v['reason']}"]))


# ------------------------------------------------------------------------------------------------ files


def _csv(rows: list[dict[str, Any]], columns: Iterable[str] | None = None) -> str:
    import pandas as pd

    frame = pd.DataFrame(rows, columns=list(columns) if columns is not None else None)
    for name in frame.columns:  # whole numbers stay whole where some rows have none (64, not 64.0)
        values = [v for v in frame[name] if v is not None and not (isinstance(v, float) and math.isnan(v))]
        if values and all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in values):
            frame[name] = frame[name].astype("Int64")
    return frame.to_csv(index=False, float_format="%.6g")


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    """Every row's columns in one order: a column some rows lack (a baseline's over_<name> on a classical model's
    row, an explanation method's cost) goes after the column before it in the first row that has it."""
    columns: list[str] = []
    for row in rows:
        at = 0
        for name in row:
            if name in columns:
                at = columns.index(name) + 1
            else:
                columns.insert(at, name)
                at += 1
    return columns


def _relative(folder: str | None, out_dir: Path) -> str | None:
    """A trial folder as written in summary.json: relative to the summary folder (so the tree can move)."""
    if folder is None:
        return None
    try:
        return Path(os.path.relpath(Path(folder).resolve(), out_dir.resolve())).as_posix()
    except ValueError:  # another drive (Windows)
        return str(Path(folder).resolve())


def section_texts(sections: Iterable[Section]) -> dict[str, str]:
    """summary.md and summary.txt: the sections in Markdown and in plain text."""
    sections = list(sections)
    return {
        SUMMARY_MD: render(sections, markdown=True, heading="Sweep summary"),
        SUMMARY_TXT: render(sections, markdown=False, heading="Sweep summary"),
    }


def write_summary(summary: SweepSummary, out_dir: Path) -> list[Path]:
    """summary.csv (a line per model x resolution), summary.json (everything, each trial's folder relative to
    out_dir), paired_tests.csv, recommendation.csv, sensitive_images.csv (the lost and gained images,
    summary.sensitivity), summary.md and summary.txt, each written atomically."""
    out_dir.mkdir(parents=True, exist_ok=True)
    flat = [row.to_dict(csv=True) for row in summary.rows]
    payload = summary.to_dict()
    for trial in payload["trials"]:
        trial["folder"] = _relative(trial["folder"], out_dir)
    files = {
        SUMMARY_CSV: _csv(flat, _columns(flat)),
        SUMMARY_JSON: json.dumps(payload, indent=2, allow_nan=False, default=str),
        PAIRED_CSV: _csv(summary.paired_tests, PAIRED_COLUMNS),
        RECOMMENDATION_CSV: _csv(summary.recommendations, RECOMMENDATION_COLUMNS),
        SENSITIVE_IMAGES_FILE: _csv(summary.sensitive_images, SENSITIVE_IMAGE_COLUMNS),
        ANSWER_CSV: _csv(list((summary.answer or {}).get("steps") or []), ANSWER_COLUMNS),
        **section_texts(summary.sections or []),
    }
    paths = []
    for name, text in files.items():
        write_text(out_dir / name, text)
        paths.append(out_dir / name)
    return paths

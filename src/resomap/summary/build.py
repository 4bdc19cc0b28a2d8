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
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from resomap.atomic import write_text
from resomap.blocks import Section, render, section_from_dict, section_to_dict
from resomap.config.schema import StatsConfig
from resomap.records import machines, machines_warning
from resomap.results import (
    PAIRED_COLUMNS,
    RECOMMENDATION_COLUMNS,
    SENSITIVE_IMAGE_COLUMNS,
    SENSITIVE_IMAGES_FILE,
)
from resomap.schema import (
    Adaptive,
    ClassDecision,
    Front,
    GroupDecision,
    GroupInteraction,
    Machine,
    PairedTest,
    Recommendation,
    SensitiveImage,
    Sensitivity,
    Stats,
    Trial,
)
from resomap.summary.aligned import TrialId, TrialRecord, group_records, one_replicate
from resomap.summary.aligned import load_records as _load_records
from resomap.summary.convergence import convergence_columns
from resomap.summary.decision import compare_models
from resomap.summary.front import estimate_front, timing_columns
from resomap.summary.groups import group_decisions
from resomap.summary.per_class import class_decisions
from resomap.summary.rows import EXPLAIN_COST, ROW_COLUMNS, SEED_COLUMNS, SummaryRow, baseline_label, baseline_names
from resomap.summary.sensitivity import sensitivity
from resomap.summary.uncertainty import (
    NO_RECOMMENDATION,
    baseline_columns,
    interval_columns,
    named_best,
    recommendation,
    reference_flaw,
)

log = logging.getLogger(__name__)

SUMMARY_CSV, SUMMARY_JSON = "summary.csv", "summary.json"
PAIRED_CSV, RECOMMENDATION_CSV = "paired_tests.csv", "recommendation.csv"
SUMMARY_MD, SUMMARY_TXT = "summary.md", "summary.txt"


@dataclasses.dataclass
class SweepSummary:
    """What a sweep (or an analysis) summary holds; every value JSON-safe (None, never NaN). Each part is typed by
    its record (resomap.schema: the keys summary.json and the CSV files hold)."""

    rows: list[SummaryRow]  # one per model x resolution
    paired_tests: list[PairedTest]  # one per pair of resolutions of a model
    recommendations: list[Recommendation]  # one per model
    trials: list[Trial]  # every trial's result.json tree, plus its folder ("folder")
    stats: Stats  # the settings the statistics used (config `stats`)
    # the machines the finished trials ran on (resomap.records.machines: its line, CPU, capability, bf16 flags,
    # GPU, trial count) and, when more than one, the warning that their bf16 results are not comparable exactly
    machines: list[Machine] = dataclasses.field(default_factory=list)
    machines_warning: str = ""
    # per classification model and class, the minority class first: the decision on the class's recall at the
    # Bonferroni alpha over the model's classes (summary.per_class; results.CLASS_DECISION_COLUMNS)
    class_decisions: list[ClassDecision] = dataclasses.field(default_factory=list)
    # per model x resolution below its reference: the images lost, gained and seed-dependent with Wilson intervals
    # (summary.sensitivity; results.SENSITIVITY_COLUMNS); the lost and gained images are `sensitive_images`, written
    # to sensitive_images.csv rather than summary.json
    sensitivity: list[Sensitivity] = dataclasses.field(default_factory=list)
    sensitive_images: list[SensitiveImage] = dataclasses.field(default_factory=list)
    # the three-way trade-off per model (summary.front.tradeoffs: score x cost x explanation quality, each with
    # its interval; a resolution dropped only when another is shown better on one axis and worse on none); set
    # once the explanation quality is known (after the comparison of the sweep's maps)
    front3: list[Front] = dataclasses.field(default_factory=list)
    # per model x group the dataset declares (stats.groups) x value: the score at every resolution with its interval
    # and the decision on that value's images at the Bonferroni alpha over the group's values (summary.groups;
    # results.GROUP_DECISION_COLUMNS); `group_differ`: a sentence per model x group whose values were decided apart
    group_decisions: list[GroupDecision] = dataclasses.field(default_factory=list)
    group_differ: list[str] = dataclasses.field(default_factory=list)
    # per model x group decided apart x step: the test of whether that step's difference to the reference differs
    # between the group's values (summary.groups._interactions: means, sizes, p, Holm p, alpha, shown)
    group_interactions: list[GroupInteraction] = dataclasses.field(default_factory=list)
    # the comparison of the sweep's maps in short, a finding per model x method (its measure and decision); set once
    # the comparison ran
    explanation_findings: list[str] = dataclasses.field(default_factory=list)
    # an adaptive sweep's record (sweep.adaptive: rounds, looks, seeds; summary.json's "adaptive"); None otherwise
    adaptive: Adaptive | None = None
    # the sections every view renders, in order (summary.sections.build_sections; set by write_summary), and one
    # line per plugin section that raised and was left out
    sections: list[Section] | None = None
    section_errors: list[str] = dataclasses.field(default_factory=list)

    def standing(self) -> dict[str, list[str]]:
        """model -> its training and baselines lines (summary.standing), shown beside its decision."""
        from resomap.summary.standing import standing

        return standing(self.rows)

    def baselines_at(self, model: str, resolution: int) -> str:
        """Where one model @ resolution stands against the majority class and the baselines, in words
        (summary.standing.baseline_words); '' without such a row."""
        from resomap.summary.standing import baseline_words

        row = next((r for r in self.rows if r.model == model and int(r.resolution) == int(resolution)), None)
        return baseline_words([row], self.rows) if row is not None else ""

    def deterministic_models(self) -> dict[str, int]:
        """model -> its seed count, for each model whose seeds are one fit (its recommendation row's
        ``deterministic``, summary.aligned.identical_seeds at every resolution): one replicate, no cross-seed
        floor or relabelling test of its explanations."""
        seeds: dict[str, int] = {}
        for row in self.rows:
            seeds[row.model] = max(seeds.get(row.model, 0), int(row.n_seeds or 0))
        return {r["model"]: seeds.get(r["model"], 0) for r in self.recommendations if r.get("deterministic")}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SweepSummary:
        """A summary read back from summary.json (`to_dict`'s inverse): a part summary.json lacks keeps its default,
        and `sections` stays None for a summary.json written before them."""
        parts = {f.name for f in dataclasses.fields(cls)} - {"rows", "sections"}
        given = {name: data[name] for name in parts if data.get(name) is not None}
        sections = data.get("sections")
        return cls(
            **{"paired_tests": [], "recommendations": [], "trials": [], "stats": {}, **given},
            rows=[SummaryRow.from_dict(r) for r in data.get("rows") or []],
            sections=None if sections is None else [section_from_dict(s) for s in sections],
        )

    def to_dict(self) -> dict[str, Any]:
        skip = ("sensitive_images", "sections", "adaptive")  # the adaptive record is the adaptive sweep's to write
        plain = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in skip}
        sections = [section_to_dict(s) for s in self.sections or []]
        return json_safe({**plain, "rows": [row.to_dict() for row in self.rows], "sections": sections})


def json_safe(value: Any) -> Any:
    """NaN/inf -> None, numpy -> Python, tuples -> lists, Paths -> str (recursively): valid JSON, always."""
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return json_safe(value.tolist())
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


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


def baseline_caveat(rows: list[SummaryRow]) -> str:
    """What a model's decision should be read with: the resolutions where it is not shown above the task's trivial
    predictor (the majority class, all background) or one of the sweep's classical baselines; '' when it is shown
    above them everywhere (or there is nothing to compare with). "Shown above" is the one-sided sign-flip test of
    the per-image differences at alpha = 1 - level (:meth:`SummaryRow.shown_above`; exact on 0/1 outcomes, so no
    bootstrap seed changes it), not the lower bound of the interval beside it (that only for a summary from
    before the test)."""
    trivial = next((r.words.get("trivial") for r in rows if r.words.get("trivial")), "the trivial predictor")
    compared: list[tuple[str, str | None]] = [(trivial, None)]
    for name in baseline_names(rows):
        label = baseline_label(rows, name)
        kind = "the baseline" if label != name else "the classical baseline"  # a named one: stats.baselines
        compared.append((f"{kind} {label}", name))
    parts = []
    for label, baseline in compared:
        shown = {r.resolution: r.shown_above(baseline) for r in rows}
        shown = {res: v for res, v in shown.items() if v is not None}
        below = sorted(res for res, v in shown.items() if not v)
        if below:
            where = "any resolution" if len(below) == len(shown) else ", ".join(f"{res} px" for res in below)
            parts.append(f"not shown above {label} at {where}")
    return f"Read with care: {'; '.join(parts)}." if parts else ""


def _recommend(rows: list[SummaryRow], recs: list[dict[str, Any]], paired: list[dict[str, Any]]) -> None:
    """Each model's decided resolution recommended or not (summary.uncertainty.recommendation, the one rule) into
    its recommendation row (`recommended`, `recommendation`, and `reference_flaw`: what makes its reference a poor
    yardstick, '' when nothing does) and the summary rows (`recommended`)."""
    by_key = {(row.model, row.resolution): row for row in rows}
    for rec in recs:
        model = rec["model"]
        mine = {row.resolution: row for row in rows if row.model == model}
        rec["reference_flaw"] = reference_flaw(rec, mine, [t for t in paired if t.get("model") == model])
        found = recommendation(rec, by_key.get((model, rec.get("resolution"))))
        rec["recommended"], rec["recommendation"] = found.recommended, found.reason
    chosen = {(rec["model"], rec["resolution"]) for rec in recs if rec["recommended"]}
    for row in rows:
        row.recommended = (row.model, row.resolution) in chosen


def _say_recommendation(rec: dict[str, Any]) -> None:
    """The decision's sentence followed by the recommendation ('...; no recommendation: 32 px is not shown above
    pixel_logreg'); where the sentence already says why (no decision, undecided), 'no recommendation' alone."""
    sentence, text = str(rec.get("sentence") or ""), str(rec.get("recommendation") or "")
    if not sentence or not text or NO_RECOMMENDATION + ":" in sentence:
        return
    detail = text.split(": ", 1)[1] if ": " in text else ""
    if not rec.get("recommended") and (not rec.get("available") or (detail and detail in sentence)):
        text = NO_RECOMMENDATION
    rec["sentence"] = f"{sentence.rstrip('.')}; {text}"


def summary_rows(
    results: Iterable[Any], folders: Mapping[TrialId, Path] | None = None, stats: StatsConfig | None = None
) -> list[SummaryRow]:
    """One row per (model, resolution): mean and std over seeds of every column and the seed count, with the
    intervals of :mod:`resomap.summary.uncertainty` when ``folders`` ({(model, resolution, seed): folder}) locate
    the trials' predictions.csv (otherwise the intervals are None and ``note`` says why)."""
    return _rows(_load_records(_as_dicts(results), folders), stats or StatsConfig())


def build_summary(
    results: Iterable[Any], folders: Mapping[TrialId, Path] | None = None, stats: StatsConfig | None = None
) -> SweepSummary:
    """The rows, every model's paired tests between resolutions, its decided resolution and whether it is
    recommended (summary.uncertainty.recommendation)."""
    cfg = stats or StatsConfig()
    dicts = _as_dicts(results)
    records = _load_records(dicts, folders)
    rows = _rows(records, cfg)
    paired, recs = compare_models(records, cfg)
    verdicts = {(r["model"], v["resolution"]): v for r in recs for v in r.get("verdicts") or []}
    _recommend(rows, recs, paired)
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
    for rec in recs:
        mine = [r for r in rows if r.model == rec["model"]]
        _say_recommendation(rec)
        flaw = rec.get("reference_flaw")
        if flaw and rec.get("sentence") and flaw not in rec["sentence"]:  # an undecided step on it: said too
            rec["sentence"] = f"{rec['sentence'].rstrip('.')}. Read with care: {flaw}"
        caveat = baseline_caveat(mine)
        if caveat and rec.get("sentence"):
            rec["sentence"] = f"{rec['sentence'].rstrip('.')}. {caveat}"
        if rec.get("deterministic") and rec.get("sentence"):  # said once per model, wherever the sentence goes
            rec["sentence"] = f"{rec['sentence'].rstrip('.')}. {one_replicate(max(r.n_seeds for r in mine))}"
    trials = []
    for result in dicts:
        folder = (folders or {}).get((str(result["model"]), int(result["resolution"]), int(result.get("seed") or 0)))
        trials.append({**result, "folder": str(folder) if folder is not None else None})
    ran_on = machines(d.get("environment") for d in dicts if d.get("status") == "FINISHED")
    found = sensitivity(records, recs, cfg)
    grouped = group_decisions(records, cfg)
    return SweepSummary(
        rows,
        paired,
        recs,
        trials,
        dataclasses.asdict(cfg),
        ran_on,
        machines_warning(ran_on),
        class_decisions(records, cfg),
        found.rows,
        found.images,
        group_decisions=grouped.rows,
        group_differ=grouped.differ,
        group_interactions=grouped.interactions,
    )


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
    from resomap.summary.sections import build_sections

    out_dir.mkdir(parents=True, exist_ok=True)
    summary.sections, summary.section_errors = build_sections(summary)
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
        **section_texts(summary.sections),
    }
    paths = []
    for name, text in files.items():
        write_text(out_dir / name, text)
        paths.append(out_dir / name)
    return paths

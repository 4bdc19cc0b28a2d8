"""The summary row: one model x resolution of a sweep (or an analysis), typed.

The fields of :class:`SummaryRow`, in order, are the columns of summary.csv and of summary.json's rows (plus the
explanation costs, one column per method, and summary.json's ``cross_resolution``; ``baselines``, one entry per
classical baseline in summary.json, is four columns per baseline in summary.csv). Each field says where it comes
from and where it goes in its metadata, so a new column is one field here (and its statistic in
:mod:`resomap.stats`):

- ``over_seeds(*path)``: the mean over seeds of each trial's result.json value at ``path``; the next field,
  ``<name>_std``, holds its std across seeds (None with one seed);
- ``parent=True``: logged to the sweep's MLflow parent run as ``<name>/<model>/<resolution>``;
- ``by_resolution="<key>"``: drawn against resolution in the parent run (``by_resolution/<model>/<key>``);
- ``per_seed=True``: a list of one dict per seed (summary.json), spread over summary.csv columns ``<name>/<key>``,
  each a JSON list of the seeds' values (``convergence``: each seed's convergence record, summary.convergence).

The task's per-image scores (resomap.tasks: accuracy for classification, mIoU and boundary F1 per image for
segmentation) are flat columns ``<column>_pooled``, ``<column>_ci_low``, ``<column>_ci_high`` of ``image_scores``
(classification's are the historical ``test_accuracy_pooled`` ...): all three are logged to the parent run and the
bounds drawn against resolution. ``score_columns`` names them (the first is the headline score) and ``words`` says
what each column is in words, so tables and figures need not know the task.

Every value is JSON-safe: None where a number is not available, never NaN.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from resomap.summary.convergence import RECORD_KEYS

EXPLAIN_COST = {"seconds": "explain_seconds", "peak_memory_mb": "explain_peak_memory_mb"}  # metric -> column prefix


def over_seeds(*path: str, by_resolution: str | None = None) -> Any:
    """A column averaged over seeds from ``path`` in each trial's result.json."""
    meta: dict[str, Any] = {"result": path}
    if by_resolution:
        meta["by_resolution"] = by_resolution
    return field(default=None, metadata=meta)


def statistic(*, parent: bool = False, by_resolution: str | None = None) -> Any:
    """A column computed by :mod:`resomap.stats` (through :mod:`resomap.summary.uncertainty`)."""
    meta: dict[str, Any] = {"parent": True} if parent else {}
    if by_resolution:
        meta["by_resolution"] = by_resolution
    return field(default=None, metadata=meta)


@dataclass
class SummaryRow:
    """One model x resolution: means and spreads over seeds, intervals, the smallest sufficient mark, notes, costs."""

    model: str
    family: str
    resolution: int
    n_seeds: int
    test_accuracy: float | None = over_seeds("test", "test/accuracy", by_resolution="test_accuracy")
    test_accuracy_std: float | None = None
    test_macro_f1: float | None = over_seeds("test", "test/macro_f1", by_resolution="test_macro_f1")
    test_macro_f1_std: float | None = None
    test_macro_precision: float | None = over_seeds("test", "test/macro_precision")
    test_macro_precision_std: float | None = None
    test_macro_recall: float | None = over_seeds("test", "test/macro_recall")
    test_macro_recall_std: float | None = None
    latency_ms: float | None = over_seeds("profile", "latency_median_ms", by_resolution="latency_p50_ms")
    latency_ms_std: float | None = None
    # the latency's interval over the seeds' trials from each trial's timed calls at ci_level (summary.front.
    # timing_columns, stats.timing_interval: the lowest to the highest of the trials' order-statistic intervals of
    # their median call), never below zero; None where a trial kept too few calls (the note says so) or none
    latency_ms_ci_low: float | None = statistic(by_resolution="latency_p50_ms_ci_low")
    latency_ms_ci_high: float | None = statistic(by_resolution="latency_p50_ms_ci_high")
    throughput_ips: float | None = over_seeds("profile", "throughput_inference_ips")
    throughput_ips_std: float | None = None
    # the inference throughput's interval from the same calls (images per second of each call)
    throughput_ips_ci_low: float | None = statistic()
    throughput_ips_ci_high: float | None = statistic()
    train_throughput_ips: float | None = over_seeds("profile", "throughput_train_ips")
    train_throughput_ips_std: float | None = None
    peak_memory_mb: float | None = over_seeds("profile", "peak_memory_mb", by_resolution="peak_memory_mb")
    peak_memory_mb_std: float | None = None
    gmacs: float | None = over_seeds("profile", "gmacs", by_resolution="gmacs")
    gmacs_std: float | None = None
    params_m: float | None = over_seeds("profile", "params_m")
    params_m_std: float | None = None
    train_time_s: float | None = over_seeds("train_time_s", by_resolution="train_time_s")
    train_time_s_std: float | None = None
    epochs_run: float | None = over_seeds("epochs_run")
    epochs_run_std: float | None = None
    # did it train enough (summary.convergence): any seed flagged undertrained (None: no seed has a record), why
    # ('seed 43: <reason>; ...'), and each seed's convergence record (best epoch, epochs run, stop reason, lr_found,
    # a closed-form fit's chosen penalty)
    undertrained: bool | None = None
    undertrained_reason: str | None = None
    convergence: list[dict[str, Any]] = field(default_factory=list, metadata={"per_seed": True})
    # the seeds' mean and std of the task's other headline test metrics ('test_miou', 'test_miou_std', ...)
    task_metrics: dict[str, float | None] = field(default_factory=dict, metadata={"flat": True})
    profile_noisy: bool = False  # a profile's timing stayed disturbed: its latency/throughput are suspect
    # no other model x resolution of the sweep has both a higher headline score and a lower latency, by their
    # estimates (summary.front.estimate_front): the line the score x latency figure draws, descriptive
    on_estimate_front: bool = False
    # pooled over seeds with a bootstrap interval over test images (from the trials' predictions.csv)
    n_test_images: int | None = None
    # '<column>_pooled', '<column>_ci_low', '<column>_ci_high' of each per-image score of the task
    image_scores: dict[str, float | None] = field(default_factory=dict, metadata={"flat": True})
    test_macro_f1_pooled: float | None = statistic(parent=True)
    test_macro_f1_ci_low: float | None = statistic()
    test_macro_f1_ci_high: float | None = statistic()
    ci_level: float | None = None
    ci_method: str | None = None
    # the task's trivial predictor (resomap.tasks: the majority class; all background) on the same test images, its
    # headline score, and the model's above it: per image, the model's score (seeds averaged) minus the trivial
    # one, with an image-bootstrap interval (descriptive) and the one-sided p of the sign-flip test of those
    # differences (exact on 0/1 outcomes), which decides "shown above" (p <= 1 - ci_level: shown_above);
    # words["trivial"] names it
    trivial_score: float | None = statistic(parent=True)
    over_trivial: float | None = statistic(parent=True)
    over_trivial_ci_low: float | None = statistic()
    over_trivial_ci_high: float | None = statistic()
    over_trivial_p: float | None = statistic()
    # the classical baseline of the sweep at this resolution (a model of family "classical", e.g. pixel_logreg) and
    # the headline score above it on the same test images: per image, this model's score minus the baseline's, each
    # averaged over its seeds, with an image-bootstrap interval and the one-sided sign-flip p, as over_trivial
    baseline_model: str | None = None
    baseline_score: float | None = statistic()
    over_baseline: float | None = statistic(parent=True)
    over_baseline_ci_low: float | None = statistic()
    over_baseline_ci_high: float | None = statistic()
    over_baseline_p: float | None = statistic()
    # the same against every classical baseline of the sweep at this resolution, by name (sorted; the first is the
    # one above): {"score", "over", "ci_low", "ci_high", "p"}; summary.csv has over_<name>, over_<name>_ci_low,
    # over_<name>_ci_high and over_<name>_p, the parent run over_<name>; and against each model of stats.baselines
    # at its best resolution, whose entry adds that "resolution" (summary.csv: over_<name>_at_px)
    baselines: dict[str, dict[str, float | None]] = field(default_factory=dict, metadata={"baselines": True})
    # the headline score's interval over test images and training seeds together (stats.twoway_bootstrap; needs
    # >= 3 seeds, and none for a deterministic fit)
    twoway_ci_low: float | None = statistic(parent=True)
    twoway_ci_high: float | None = statistic(parent=True)
    # the seeds are one fit (summary.aligned.one_fit: deterministic by the model's spec, or identical per-image
    # predictions): they are one replicate, their variance exactly zero
    deterministic: bool = False
    # its model's smallest sufficient resolution, with the evidence (summary.uncertainty.sufficiency)
    sufficient: bool = False
    # the decision against the model's reference resolution at `margin` (stats.decide.noninferiority)
    verdict: str | None = None  # reference | non-inferior | inferior | undecided | not reached | above reference
    margin: float | None = None
    reference_difference: float | None = statistic(parent=True)  # headline score: this resolution - the reference
    reference_low: float | None = statistic(parent=True)  # one-sided bounds at the level
    reference_high: float | None = statistic()
    verdict_p: float | None = statistic()  # one-sided p of "more than margin below the reference"
    detectable_margin: float | None = statistic(parent=True, by_resolution="detectable_margin")
    note: str = ""  # what is not available and why, "; "-separated
    # test resolution -> accuracy, mean over seeds (summary.json only: not a CSV column)
    cross_resolution: dict[str, float | None] = field(default_factory=dict, metadata={"csv": False})
    # 'explain_seconds/<method>', 'explain_peak_memory_mb/<method>' -> mean over seeds: one column each
    explain_costs: dict[str, float | None] = field(default_factory=dict, metadata={"flat": True})
    # the per-image score columns (headline first) and column -> words (summary.json only)
    score_columns: list[str] = field(default_factory=lambda: ["test_accuracy"], metadata={"csv": False})
    words: dict[str, str] = field(default_factory=dict, metadata={"csv": False})

    # ---------------------------------------------------------------------------------------- reading

    @property
    def accuracy(self) -> float | None:
        """Test accuracy pooled over seeds, else the mean over seeds (no per-image predictions)."""
        return self.score("test_accuracy")[0]

    @property
    def headline(self) -> str:
        """The column of the headline score (test_accuracy, image_miou, ...)."""
        return self.score_columns[0] if self.score_columns else "test_accuracy"

    @property
    def seed_column(self) -> str:
        """The task's first headline test metric, as the seeds' mean (test_accuracy, test_miou, ...)."""
        return next((k for k in self.task_metrics if not k.endswith("_std")), "test_accuracy")

    def score(self, column: str) -> tuple[float | None, float | None, float | None]:
        """(estimate, interval low, high) of a per-image score column: pooled over seeds where the per-image
        records allowed it, else the mean over seeds with no interval."""
        pooled = self.value(f"{column}_pooled")
        if pooled is None:
            return self.value(column), None, None
        return pooled, self.value(f"{column}_ci_low"), self.value(f"{column}_ci_high")

    def say(self, column: str) -> str:
        """A column in words ('accuracy', 'mIoU per image'); the column name where the row has no words for it."""
        return self.words.get(column) or column.removeprefix("test_").replace("_", " ")

    @property
    def macro_f1(self) -> float | None:
        return self.test_macro_f1_pooled if self.test_macro_f1_pooled is not None else self.test_macro_f1

    @property
    def explain_seconds(self) -> dict[str, float | None]:
        """method -> seconds of its maps of the probe set (mean over seeds)."""
        prefix = f"{EXPLAIN_COST['seconds']}/"
        return {k[len(prefix) :]: v for k, v in self.explain_costs.items() if k.startswith(prefix)}

    def value(self, column: str) -> Any:
        """The value of a column by its name (a field, an explanation cost column, or a baseline's over_<name>
        columns); None when absent."""
        for flat in (self.image_scores, self.task_metrics, self.explain_costs):
            if column in flat:
                return flat[column]
        if column in _FIELD_NAMES:
            return None if column in _NESTED else getattr(self, column)
        return self.baseline_columns().get(column)

    def compared_baselines(self) -> dict[str, dict[str, float | None]]:
        """name -> {"score", "over", "ci_low", "ci_high", "p"} of each classical baseline this row is compared
        with; a row of a summary written before `baselines` existed gives its one baseline from the first-baseline
        columns."""
        if self.baselines or not self.baseline_model:
            return self.baselines
        first = (
            self.baseline_score,
            self.over_baseline,
            self.over_baseline_ci_low,
            self.over_baseline_ci_high,
            self.over_baseline_p,
        )
        return {self.baseline_model: dict(zip(BASELINE_KEYS, first, strict=True))}

    def shown_above(self, baseline: str | None = None) -> bool | None:
        """Is the headline score shown above the task's trivial predictor (``baseline`` None) or the classical
        baseline ``baseline``? The one-sided sign-flip test of the per-image differences decides (p <= (1 -
        ci_level) / 2; exact on 0/1 outcomes, so the answer does not depend on the bootstrap's seed), not the interval
        beside it; a summary written before the test: the interval's lower bound above 0. None when not compared."""
        if baseline is None:
            p, low = self.over_trivial_p, self.over_trivial_ci_low
        else:
            found = self.compared_baselines().get(baseline, {})
            p, low = found.get("p"), found.get("ci_low")
        return shown_above(p, low, self.ci_level)

    def baseline_label(self, name: str) -> str:
        """The baseline `name` in words: its name, with the resolution it is compared at where that is its best
        rather than this row's ('small_resnet10 (its best, 64 px)'; stats.baselines)."""
        at = self.compared_baselines().get(name, {}).get("resolution")
        return name if at is None else f"{name} (its best, {int(at)} px)"

    def baseline_columns(self) -> dict[str, float | None]:
        """summary.csv's columns of the baselines: over_<name>, over_<name>_ci_low, over_<name>_ci_high,
        over_<name>_p."""
        out: dict[str, float | None] = {}
        for name, found in self.baselines.items():
            out.update({f"over_{name}{end}": found.get(key) for key, end in BASELINE_CSV})
            if found.get("resolution") is not None:  # a named baseline (stats.baselines): the resolution compared at
                out[f"over_{name}_at_px"] = found["resolution"]
        return out

    def parent_metrics(self) -> dict[str, float]:
        """The columns logged to the sweep's parent run (``<name>/<model>/<resolution>``), where available."""
        out = {f.name: getattr(self, f.name) for f in _FIELDS if f.metadata.get("parent") and _has(self, f.name)}
        out.update({k: v for k, v in self.image_scores.items() if v is not None})
        out.update({f"over_{name}": b["over"] for name, b in self.baselines.items() if b.get("over") is not None})
        return out

    def by_resolution(self) -> dict[str, Any]:
        """key -> value drawn against resolution in the parent run: the marked columns and each method's
        explanation seconds (``explain_seconds_<method>``)."""
        out = {f.metadata["by_resolution"]: getattr(self, f.name) for f in _FIELDS if "by_resolution" in f.metadata}
        out.update({k: v for k, v in self.image_scores.items() if k.endswith(("_ci_low", "_ci_high"))})
        out.update({f"explain_seconds_{method}": v for method, v in self.explain_seconds.items()})
        return out

    # ---------------------------------------------------------------------------------------- writing

    def to_dict(self, csv: bool = False) -> dict[str, Any]:
        """summary.json's row (``csv=False``) or summary.csv's (no ``cross_resolution``), columns in order."""
        out: dict[str, Any] = {}
        for f in _FIELDS:
            value = getattr(self, f.name)
            if f.metadata.get("flat"):
                out.update(value)
            elif csv and f.metadata.get("baselines"):
                out.update(self.baseline_columns())
            elif f.metadata.get("per_seed"):
                out.update(_per_seed_columns(f.name, value) if csv else {f.name: [dict(v) for v in value]})
            elif not (csv and f.metadata.get("csv") is False):
                out[f.name] = dict(value) if isinstance(value, dict) else value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SummaryRow:
        """A row read back from summary.json (columns it lacks, from an older summary, are None)."""
        known = {k: v for k, v in data.items() if k in _FIELD_NAMES and k not in _NESTED}
        known.setdefault("family", "")
        known.setdefault("n_seeds", 1)
        known["cross_resolution"] = dict(data.get("cross_resolution") or {})
        known["score_columns"] = list(data.get("score_columns") or ["test_accuracy"])
        known["words"] = dict(data.get("words") or {})
        known["baselines"] = {str(k): dict(v) for k, v in (data.get("baselines") or {}).items()}
        prefixes = tuple(f"{p}/" for p in EXPLAIN_COST.values())
        costs = {k: v for k, v in data.items() if k.startswith(prefixes)}
        stems = tuple(f"{c}{end}" for c in known["score_columns"] for end in SCORE_ENDS)
        scores = {k: v for k, v in data.items() if k in stems}
        others = {k: v for k, v in data.items() if k.startswith("test_") and k not in _FIELD_NAMES and k not in scores}
        return cls(**known, explain_costs=costs, image_scores=scores, task_metrics=others)


def shown_above(p: float | None, low: float | None, level: float | None) -> bool | None:
    """The verdict "shown above": the one-sided p of the sign-flip test at alpha = (1 - level) / 2 (level 0.95
    when unknown), the one-sided share of the two-sided interval shown beside it, so a verdict and its interval
    ask the same strength of evidence; the interval's lower bound ``low`` above 0 only where there is no p (a
    summary from before the test). None: neither is known."""
    if p is not None:
        return p <= (1 - (level if level is not None else 0.95)) / 2
    return None if low is None else low > 0


def baseline_names(rows: Iterable[SummaryRow]) -> list[str]:
    """The baselines the rows are compared with (classical ones and those of stats.baselines), sorted by name (the
    first classical one is the one of the first-baseline columns: baseline_model, over_baseline, ...)."""
    return sorted({name for r in rows for name in r.compared_baselines()})


def baseline_label(rows: Iterable[SummaryRow], name: str) -> str:
    """The baseline `name` in words as the rows compare with it (SummaryRow.baseline_label of the first that does)."""
    return next((r.baseline_label(name) for r in rows if name in r.compared_baselines()), name)


def _per_seed_columns(name: str, records: list[dict[str, Any]]) -> dict[str, str | None]:
    """summary.csv's ``<name>/<key>`` columns of a per-seed field: the seeds' values as a JSON list (None without
    records); RECORD_KEYS always, a record's other keys after them."""
    keys = [*RECORD_KEYS, *sorted({k for r in records for k in r} - set(RECORD_KEYS))]

    def cell(values: list[Any]) -> str:
        finite = [None if isinstance(v, float) and not math.isfinite(v) else v for v in values]
        return json.dumps(finite, default=str)

    return {f"{name}/{k}": cell([r.get(k) for r in records]) if records else None for k in keys}


def _has(row: SummaryRow, name: str) -> bool:
    return getattr(row, name) is not None


_FIELDS = dataclasses.fields(SummaryRow)
_FIELD_NAMES = frozenset(f.name for f in _FIELDS)
ROW_COLUMNS = _FIELD_NAMES  # the typed columns (a flat dict's keys are columns too, but not these)
_NESTED = frozenset(
    {"cross_resolution", "explain_costs", "image_scores", "task_metrics", "score_columns", "words", "baselines"}
)
BASELINE_KEYS = ("score", "over", "ci_low", "ci_high", "p")  # what `baselines` holds per classical baseline
BASELINE_CSV = (("over", ""), ("ci_low", "_ci_low"), ("ci_high", "_ci_high"), ("p", "_p"))  # key -> over_<name><end>
SCORE_ENDS = ("_pooled", "_ci_low", "_ci_high")  # the columns of a per-image score
TWOWAY_WORDS = "interval over test images and training seeds"  # twoway_ci_low/high in words
# (column, path in a result.json) of the columns averaged over seeds; each is followed by its `_std` column
SEED_COLUMNS = tuple((f.name, f.metadata["result"]) for f in _FIELDS if "result" in f.metadata)

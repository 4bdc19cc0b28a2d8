"""SweepSummary: what a sweep (or an analysis) summary holds, typed part by part (resomap.schema). Frozen: it is made
complete in one place (summary.build.assemble, which build_summary calls; also for parts read back from
summary.json) and never changed after. Its own module, so that the sections (summary.sections) can name the type
without importing summary.build, which imports them."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from resomap.blocks import Section, section_from_dict, section_to_dict
from resomap.schema import (
    Adaptive,
    Answer,
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
    TrainTest,
    Trial,
)
from resomap.summary.rows import SummaryRow


@dataclasses.dataclass(frozen=True)
class SweepSummary:
    """What a sweep (or an analysis) summary holds; every value JSON-safe (None, never NaN). Each part is typed by
    its record (resomap.schema: the keys summary.json and the CSV files hold)."""

    rows: list[SummaryRow]  # one per model x resolution
    paired_tests: list[PairedTest]  # one per pair of resolutions of a model
    recommendations: list[Recommendation]  # one per model: its decision and smallest sufficient resolution
    trials: list[Trial]  # every trial's result.json tree, plus its folder ("folder")
    stats: Stats  # the settings the statistics used (config `stats`)
    # the machines the finished trials ran on (resomap.records.machines: its line, CPU, capability, bf16 flags,
    # GPU, trial count) and, when more than one, the warning that their bf16 results are not comparable exactly
    machines: list[Machine] = dataclasses.field(default_factory=list)
    machines_warning: str = ""
    # per classification model and class, the minority class first: the decision on the class's recall at the
    # Bonferroni alpha over the model's classes (summary.per_class; results.CLASS_DECISION_COLUMNS)
    class_decisions: list[ClassDecision] = dataclasses.field(default_factory=list)
    # per model tested above a resolution it was trained at: each (trained, tested) pair decided better, non-inferior,
    # worse or undecided at the Bonferroni alpha over the model's pairs (summary.train_test)
    train_test: list[TrainTest] = dataclasses.field(default_factory=list)
    # per model x resolution below its reference: the images lost, gained and seed-dependent with Wilson intervals
    # (summary.sensitivity; results.SENSITIVITY_COLUMNS); the lost and gained images are `sensitive_images`, written
    # to sensitive_images.csv rather than summary.json
    sensitivity: list[Sensitivity] = dataclasses.field(default_factory=list)
    sensitive_images: list[SensitiveImage] = dataclasses.field(default_factory=list)
    # the three-way trade-off per model (summary.front.tradeoffs: score x cost x explanation quality, each with
    # its interval; a resolution dropped only when another is shown better on one axis and worse on none)
    front3: list[Front] = dataclasses.field(default_factory=list)
    # per model x group the dataset declares (stats.groups) x value: the score at every resolution with its interval
    # and the decision on that value's images at the Bonferroni alpha over the group's values (summary.groups;
    # results.GROUP_DECISION_COLUMNS); `group_differ`: a sentence per model x group whose values were decided apart
    group_decisions: list[GroupDecision] = dataclasses.field(default_factory=list)
    group_differ: list[str] = dataclasses.field(default_factory=list)
    # per model x group decided apart x step: the test of whether that step's difference to the reference differs
    # between the group's values (summary.groups._interactions: means, sizes, p, Holm p, alpha, shown)
    group_interactions: list[GroupInteraction] = dataclasses.field(default_factory=list)
    # the comparison of the sweep's maps in short, a finding per model x method (its measure and decision)
    explanation_findings: list[str] = dataclasses.field(default_factory=list)
    # where each model looks, decided against its maps' shift floor: one sentence per model (the Answer's)
    map_answers: list[str] = dataclasses.field(default_factory=list)
    # an adaptive sweep's record (sweep.adaptive: rounds, looks, seeds; summary.json's "adaptive"); None otherwise
    adaptive: Adaptive | None = None
    # the answer across models (summary.answer: the configuration to use, chosen on validation, and the cheaper
    # configurations of any model decided against it); None for a summary.json written before it
    answer: Answer | None = None
    # the sections every view renders, in order (summary.sections.build_sections), and one line per plugin section
    # that raised and was left out
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
        """model -> its seed count, for each deterministic model (its recommendation row's ``deterministic``):
        one replicate, no cross-seed floor or relabelling test of its explanations."""
        return deterministic_models(self.rows, self.recommendations)

    def parts(self) -> dict[str, Any]:
        """Every part but the sections (what `assemble` builds them from)."""
        skip = {"sections", "section_errors"}
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in skip}

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


def deterministic_models(rows: list[SummaryRow], recommendations: list[Recommendation]) -> dict[str, int]:
    """model -> its seed count, for each model whose recommendation row says it is deterministic (its spec says so,
    or its seeds gave one fit: summary.aligned)."""
    seeds: dict[str, int] = {}
    for row in rows:
        seeds[row.model] = max(seeds.get(row.model, 0), int(row.n_seeds or 0))
    return {r["model"]: seeds.get(r["model"], 0) for r in recommendations if r.get("deterministic")}


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

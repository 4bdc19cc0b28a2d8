"""The summary's sections, decided and worded once, in the order every view shows them: the answer first, the
methods last.

Each registered section is `fn(summary) -> blocks` (resomap.blocks: Text, Bullets, Table) with a title and an
order; a section with no blocks has no data in this sweep and is left out. `build_sections` runs them all in their
order; summary.md, summary.txt, summary.json's `sections`, report.html, the MLflow parent's description and `resomap
analyze` render that one list (report.html adds its figures and maps to sections by name).

A new section is one registration, in a plugin module or here:

    @register_section("my_part", title="My part", order=65)
    def my_part(summary):
        return [Text("...")]

A section registered outside this module that raises while building is left out of every view with one line
naming it and the error (logged, and under Notes); the rest of the summary is written as usual.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from resomap.blocks import Block, Bullets, Section, Table, Text, bullets, nested, table
from resomap.records import machine_lines
from resomap.registry import Registry
from resomap.summary.front import tradeoff_cells, tradeoff_lines
from resomap.summary.groups import group_cells, group_note
from resomap.summary.per_class import class_cells, class_note
from resomap.summary.rows import SummaryRow
from resomap.summary.sensitivity import DEFINITIONS, SECTION_TITLE, sensitivity_line
from resomap.summary.text import (
    RECOMMENDED_RULE,
    describe_stats,
    detail_cells,
    headline_cells,
    notes_lines,
    paired_cells,
    recipe_line,
    recommendation_lines,
    training_cells,
    training_note,
)

log = logging.getLogger(__name__)
SectionFn = Callable[[Any], Iterable[Block]]
SECTIONS: Registry[SectionFn] = Registry("summary section", "resomap sweep --help")


def register_section(name: str, *, title: str, order: int) -> Callable[[SectionFn], SectionFn]:
    """Decorator on `fn(summary) -> [Block]`; `order`: where the section stands (the answer 0, the methods 100)."""
    return SECTIONS.register(name, title=title, order=int(order))


def section_names() -> list[str]:
    """The registered sections in their order."""
    return sorted(SECTIONS.names(), key=lambda n: (SECTIONS.meta(n)["order"], n))


def in_order(sections: Iterable[Section]) -> list[Section]:
    """Sections in the registered order (one no longer registered after the others)."""
    order = {name: i for i, name in enumerate(section_names())}
    return sorted(sections, key=lambda s: order.get(s.name, len(order)))


def build_section(name: str, summary: Any) -> Section | None:
    """One registered section built on its own (None: no data for it)."""
    blocks = tuple(SECTIONS.get(name)(summary) or ())
    return Section(name, str(SECTIONS.meta(name)["title"]), blocks) if blocks else None


def build_sections(summary: Any) -> tuple[list[Section], list[str]]:
    """(the sections with data, in order; one line per plugin section that raised: its name and the error)."""
    built, failed = [], []
    for name in section_names():
        try:
            section = build_section(name, summary)
        except Exception as exc:
            if SECTIONS.get(name).__module__ == __name__:
                raise  # a built-in section's error is a bug to see, not a line to read past
            failed.append(f"section '{name}' not written: {type(exc).__name__}: {exc}")
            log.warning("summary %s", failed[-1])
            continue
        if section is not None:
            built.append(section)
    if failed:
        notes = next((s for s in built if s.name == "notes"), None)
        extra = bullets(failed)
        if notes is None:
            built.insert(max(len(built) - 1, 0), Section("notes", "Notes", (extra,)))
        else:
            built[built.index(notes)] = Section("notes", notes.title, (*notes.blocks, extra))
    return built, failed


def _rows(summary: Any) -> list[SummaryRow]:
    return list(getattr(summary, "rows", None) or [])


@register_section("answer", title="Answer", order=0)
def answer(summary: Any) -> list[Block]:
    """Per model in a few lines: the decision (or why none), its score with interval at the decided resolution
    (the reference when none is decided), whether the model learned there and the one caution that matters most;
    the reasons in full are under the decision."""
    rows = _rows(summary)
    found = []
    for rec in getattr(summary, "recommendations", None) or []:
        row = next((r for r in rows if r.model == rec["model"] and r.resolution == rec.get("resolution")), None)
        words = str(rec.get("recommendation") or rec.get("reason") or "no decision")
        parts = [f"{rec['model']}: {words}."]
        if row is not None:
            parts.append(_score_words(row, rec))
            parts.append(_learned_words(row, rows))
        caution = _caution(rec, row)
        if caution:
            parts.append(f"Caution: {caution}.")
        found.append(" ".join(p for p in parts if p))
    return [bullets(found)] if found else []


def _score_words(row: SummaryRow, rec: dict) -> str:
    from resomap.summary.text import fmt_interval

    where = "the reference" if not rec.get("decided") else "decided"
    cell = fmt_interval(*row.score(row.headline))
    return f"At {row.resolution} px ({where}): {row.say(row.headline)} {cell}." if cell != "-" else ""


def _learned_words(row: SummaryRow, rows: list[SummaryRow]) -> str:
    """'Learned: not undertrained; shown above the majority class and pixel_logreg' (or 'not shown above ...')."""
    from resomap.summary.rows import baseline_label, baseline_names
    from resomap.summary.text import trivial_label

    said = {True: "undertrained", False: "not undertrained", None: ""}[row.undertrained]
    above, not_above = [], []
    names = [(trivial_label([row]), None)] + [
        (baseline_label(rows, n), n) for n in baseline_names(rows) if n != row.model
    ]
    for label, name in names:
        shown = row.shown_above(name) if label else None
        (above if shown else not_above if shown is False else []).append(label)
    parts = [said] if said else []
    parts += [f"shown above {' and '.join(above)}"] if above else []
    parts += [f"not shown above {' and '.join(not_above)}"] if not_above else []
    return f"Learned: {'; '.join(parts)}." if parts else ""


def _caution(rec: dict, row: SummaryRow | None) -> str:
    """The caution that matters most: an undertrained trial, then an undecided step's detectable margin, then
    seeds that are one replicate or too few to speak of the model."""
    if row is not None and row.undertrained and row.undertrained_reason:
        return f"undertrained: {row.undertrained_reason}"
    if not rec.get("decided") and rec.get("detectable") is not None:
        return f"undecided is not the same: this design detects margins of {float(rec['detectable']):.3f} and larger"
    seeds = int(rec.get("n_seeds") or 0)
    if rec.get("deterministic"):
        return f"a deterministic fit: its {seeds} seeds are one replicate (no seed-to-seed spread)"
    if 0 < seeds < 3 and rec.get("scope") == "model":
        return f"{seeds} seed(s): a claim about the model wants 3 to 5"
    return ""


@register_section("decision", title="Decision per model (non-inferiority to the reference)", order=10)
def decision(summary: Any) -> list[Block]:
    recs = getattr(summary, "recommendations", None) or []
    if not recs:
        return []
    standing = summary.standing() if hasattr(summary, "standing") else {}
    return [nested(recommendation_lines(recs, verdicts=True, standing=standing)), Text(RECOMMENDED_RULE)]


@register_section("adaptive", title="Adaptive sweep", order=15)
def adaptive(summary: Any) -> list[Block]:
    """How an adaptive sweep reached its decisions (sweep.adaptive's record): the alpha spent per look, the rounds,
    each model's look and seeds; paragraphs, then the rounds and models as a list."""
    from resomap.summary.text import adaptive_lines

    record = getattr(summary, "adaptive", None)
    if not record:
        return []
    lines = [x for x in adaptive_lines(record) if x.strip()]
    paragraphs = [x for x in lines if not x.lstrip().startswith("- ")]
    return [*map(Text, paragraphs), nested(x for x in lines if x.lstrip().startswith("- "))]


@register_section("results", title="Results per model and resolution", order=20)
def results(summary: Any) -> list[Block]:
    rows = _rows(summary)
    if not rows:
        return []
    recs = getattr(summary, "recommendations", None) or []
    head = table(*headline_cells(rows, recs))
    return [head, table(*detail_cells(rows), title="In detail (means ± std over seeds; costs per image)")]


@register_section("training", title="Training", order=30)
def training(summary: Any) -> list[Block]:
    rows = _rows(summary)
    found: list[Block] = []
    recipe = recipe_line(getattr(summary, "trials", None) or [])
    if recipe:
        found.append(Text(f"Recipe: {recipe}"))
    checked = [r for r in rows if r.undertrained is not None]
    if checked:  # whether each model learned, before the table of every seed
        flagged = [f"{r.model} @ {r.resolution} px: {r.undertrained_reason}" for r in checked if r.undertrained]
        found.append(bullets(flagged or ["no seed flagged undertrained"]))
    if any(r.convergence for r in rows):
        found += [table(*training_cells(rows), title="Convergence per seed"), Text(training_note(rows))]
    return found


@register_section("per_class", title="Per class (recall of each class, the minority class first)", order=40)
def per_class(summary: Any) -> list[Block]:
    found = getattr(summary, "class_decisions", None) or []
    return [table(*class_cells(found)), Text(class_note(found))] if found else []


@register_section("per_group", title="Per group (each group value's test images decided on their own)", order=50)
def per_group(summary: Any) -> list[Block]:
    found = getattr(summary, "group_decisions", None) or []
    if not found:
        return []
    head, body = group_cells(found)
    return [table(head, body), Text(group_note(found, getattr(summary, "group_differ", None) or []))]


@register_section("front", title="Score x cost x explanation quality (the front per model)", order=60)
def front(summary: Any) -> list[Block]:
    found = getattr(summary, "front3", None) or []
    if not found:
        return []
    head, body = tradeoff_cells(found)
    return [table(head, [cells for cells, _ in body]), bullets(tradeoff_lines(found))]


@register_section("sensitive", title=f"{SECTION_TITLE} (test images lost or gained against the reference)", order=70)
def sensitive(summary: Any) -> list[Block]:
    found = getattr(summary, "sensitivity", None) or []
    return [bullets(sensitivity_line(r) for r in found), Text(DEFINITIONS)] if found else []


@register_section("explanations", title="Explanations across resolutions", order=80)
def explanations(summary: Any) -> list[Block]:
    """The comparison's finding per model x method (its measure and decision); each in full with its references
    in report.html and explanations/agreement.txt."""
    found = getattr(summary, "explanation_findings", None) or []
    return [bullets(found)] if found else []


@register_section("paired", title="Paired tests between resolutions (B - A)", order=90)
def paired(summary: Any) -> list[Block]:
    found = getattr(summary, "paired_tests", None) or []
    return [table(*paired_cells(found))] if found else []


@register_section("notes", title="Notes", order=95)
def notes(summary: Any) -> list[Block]:
    found = notes_lines(_rows(summary))
    return [bullets(found)] if found else []


@register_section("machines", title="Machines (CPU model, torch's CPU capability, native-bf16 flags: trials)", order=97)
def machines(summary: Any) -> list[Block]:
    ran_on = getattr(summary, "machines", None) or []
    if not ran_on:
        return []
    warning = getattr(summary, "machines_warning", "")
    return [bullets(machine_lines(ran_on)), *([Text(f"Warning: {warning}.")] if warning else [])]


@register_section("methods", title="Methods", order=100)
def methods(summary: Any) -> list[Block]:
    stats = getattr(summary, "stats", None) or {}
    return [Text(describe_stats(stats, getattr(summary, "paired_tests", None) or []))] if stats else []


__all__ = ["SECTIONS", "Bullets", "Section", "Table", "Text", "build_sections", "register_section", "section_names"]

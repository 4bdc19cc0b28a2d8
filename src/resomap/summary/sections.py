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

from resomap.blocks import Block, Bullets, Section, Table, Text, bullets, nested, table
from resomap.records import machine_lines
from resomap.registry import Registry
from resomap.summary.answer_text import ANSWER_METHOD, MAP_METHOD, answer_line, model_line
from resomap.summary.front import tradeoff_cells, tradeoff_lines
from resomap.summary.groups import group_cells, group_note
from resomap.summary.per_class import class_cells, class_note
from resomap.summary.sensitivity import DEFINITIONS, SECTION_TITLE, sensitivity_line
from resomap.summary.sweep_summary import SweepSummary
from resomap.summary.text import (
    SUFFICIENT_RULE,
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
from resomap.summary.train_test import SECTION_TITLE as TRAIN_TEST_TITLE
from resomap.summary.train_test import TRAIN_TEST_NOTE

log = logging.getLogger(__name__)
SectionFn = Callable[[SweepSummary], Iterable[Block]]
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


def build_section(name: str, summary: SweepSummary) -> Section | None:
    """One registered section built on its own (None: no data for it)."""
    blocks = tuple(SECTIONS.get(name)(summary) or ())
    return Section(name, str(SECTIONS.meta(name)["title"]), blocks) if blocks else None


def build_sections(summary: SweepSummary) -> tuple[list[Section], list[str]]:
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


@register_section("answer", title="Answer", order=0)
def answer(summary: SweepSummary) -> list[Block]:
    """The answer across models first (summary.answer: the configuration to use, chosen on validation, with the class
    that matters, and the cheapest configuration shown as good within the margin, or that none is), then a line per
    model: its own smallest sufficient resolution, its score there against the configuration to use, whether it
    learned, and its one caution; the reasons in full are under the decision."""
    lines = [model_line(rec, summary.rows, summary.answer) for rec in summary.recommendations]
    where = [bullets(summary.map_answers)] if summary.map_answers else []
    if summary.answer is None:  # a summary.json written before the answer across models
        return [*([bullets(lines)] if lines else []), *where]
    return [Text(answer_line(summary.answer, summary.rows)), *([bullets(lines)] if lines else []), *where]


@register_section("decision", title="Decision per model (non-inferiority to the reference)", order=10)
def decision(summary: SweepSummary) -> list[Block]:
    recs = summary.recommendations
    if not recs:
        return []
    return [nested(recommendation_lines(recs, verdicts=True, standing=summary.standing())), Text(SUFFICIENT_RULE)]


@register_section("adaptive", title="Adaptive sweep", order=15)
def adaptive(summary: SweepSummary) -> list[Block]:
    """How an adaptive sweep reached its decisions (sweep.adaptive's record): the alpha spent per look, the rounds,
    each model's look and seeds; paragraphs, then the rounds and models as a list."""
    from resomap.summary.text import adaptive_lines

    record = summary.adaptive
    if not record:
        return []
    lines = [x for x in adaptive_lines(record) if x.strip()]
    paragraphs = [x for x in lines if not x.lstrip().startswith("- ")]
    return [*map(Text, paragraphs), nested(x for x in lines if x.lstrip().startswith("- "))]


@register_section("results", title="Results per model and resolution", order=20)
def results(summary: SweepSummary) -> list[Block]:
    rows, recs = summary.rows, summary.recommendations
    if not rows:
        return []
    head = table(*headline_cells(rows, recs))
    return [head, table(*detail_cells(rows), title="In detail (means ± std over seeds; costs per image)")]


@register_section("train_test", title=TRAIN_TEST_TITLE, order=25)
def train_test(summary: SweepSummary) -> list[Block]:
    """One sentence per model tested above a resolution it was trained at (summary.train_test)."""
    found = summary.train_test
    return [bullets(r["sentence"] for r in found), Text(TRAIN_TEST_NOTE)] if found else []


@register_section("training", title="Training", order=30)
def training(summary: SweepSummary) -> list[Block]:
    rows = summary.rows
    found: list[Block] = []
    recipe = recipe_line(summary.trials)
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
def per_class(summary: SweepSummary) -> list[Block]:
    found = summary.class_decisions
    return [table(*class_cells(found)), Text(class_note(found))] if found else []


@register_section("per_group", title="Per group (each group value's test images decided on their own)", order=50)
def per_group(summary: SweepSummary) -> list[Block]:
    found = summary.group_decisions
    if not found:
        return []
    head, body = group_cells(found)
    return [table(head, body), Text(group_note(found, summary.group_differ))]


@register_section("front", title="Score x cost x explanation quality (the front per model)", order=60)
def front(summary: SweepSummary) -> list[Block]:
    found = summary.front3
    if not found:
        return []
    head, body = tradeoff_cells(found)
    return [table(head, [cells for cells, _ in body]), bullets(tradeoff_lines(found))]


@register_section("sensitive", title=f"{SECTION_TITLE} (test images lost or gained against the reference)", order=70)
def sensitive(summary: SweepSummary) -> list[Block]:
    found = summary.sensitivity
    return [bullets(sensitivity_line(r) for r in found), Text(DEFINITIONS)] if found else []


@register_section("explanations", title="Explanations across resolutions", order=80)
def explanations(summary: SweepSummary) -> list[Block]:
    """The comparison's finding per model x method (its measure and decision); each in full with its references
    in report.html and explanations/agreement.txt."""
    found = summary.explanation_findings
    return [bullets(found)] if found else []


@register_section("paired", title="Paired tests between resolutions (B - A)", order=90)
def paired(summary: SweepSummary) -> list[Block]:
    found = summary.paired_tests
    return [table(*paired_cells(found))] if found else []


@register_section("notes", title="Notes", order=95)
def notes(summary: SweepSummary) -> list[Block]:
    found = notes_lines(summary.rows)
    return [bullets(found)] if found else []


@register_section("machines", title="Machines (CPU model, torch's CPU capability, native-bf16 flags: trials)", order=97)
def machines(summary: SweepSummary) -> list[Block]:
    ran_on = summary.machines
    if not ran_on:
        return []
    warning = summary.machines_warning
    return [bullets(machine_lines(ran_on)), *([Text(f"Warning: {warning}.")] if warning else [])]


@register_section("methods", title="Methods", order=100)
def methods(summary: SweepSummary) -> list[Block]:
    stats = summary.stats
    if not stats:
        return []
    across = [Text(ANSWER_METHOD)] if (summary.answer or {}).get("available") else []
    maps = [Text(MAP_METHOD)] if summary.map_answers else []
    return [Text(describe_stats(stats, summary.paired_tests)), *across, *maps]


__all__ = ["SECTIONS", "Bullets", "Section", "Table", "Text", "build_sections", "register_section", "section_names"]

"""The sweep parent run's description (MLflow's "note", markdown, shown above the run's details): the answer across
models (the configuration to use, or why there is none) and then the summary's sections in the order every view
shows them (resomap.summary.sections: the answer first, the methods last), each shortened to what a run page can
hold; the figures against resolution follow the results; where the report and the files are come last."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from resomap.blocks import Bullets, Section, Table, Text, markdown_table
from resomap.summary.rows import SummaryRow
from resomap.summary.sweep_summary import SweepSummary

NOTE_TAG = "mlflow.note.content"  # a run's description in the MLflow UI (markdown)
NOTE_LIMIT = 8000  # characters of a tag value MLflow stores
LINE_LIMIT = 300  # characters of a paragraph or list item in the description (the rest: summary.md)
ITEMS_LIMIT = 6  # list items of a section beyond the answer and the decision (the rest: summary.md)
FULL = ("answer", "decision")  # sections shown whole; of the others, the results' first table is the only table
KEPT_LONGEST = ("answer", "decision", "results", "explanations", "training")  # the last to be cut, the first last
WHOLE_ITEMS = ("explanations",)  # sections whose list items are shown whole (a finding each), sub-items left out
# the figures the parent's description shows (its Overview in the MLflow UI), in this order, with their alt text:
# the evidence against resolution with intervals, which MLflow's own charts draw against "Step" without them
NOTE_FIGURES = {
    "accuracy_vs_resolution.png": "test score against resolution, with intervals",
    "cost_vs_resolution.png": "inference cost against resolution",
    "pareto_accuracy_latency.png": "score against latency",
}


NOTE_FIGURE_DIR = "figures/overview"  # where the description's copies of NOTE_FIGURES are logged
NOTE_FIGURE_WIDTH = 720  # px: MLflow's description keeps an image's own width (it strips width attributes), and a
# wider one widens the whole run page past a 1400 px window; the figures are written at 200 dpi, up to 2200 px


def log_note_figures(tracker: Any, run_id: str, figures: Iterable[Path]) -> None:
    """Log to `run_id` under NOTE_FIGURE_DIR a copy of each NOTE_FIGURES file among `figures`, no wider than
    NOTE_FIGURE_WIDTH (Lanczos-resampled; the full-size file stays under figures/)."""
    import tempfile

    from PIL import Image

    chosen = [Path(p) for p in figures if Path(p).name in NOTE_FIGURES]
    if not chosen:
        return
    with tempfile.TemporaryDirectory(prefix="resomap-note-") as tmp:
        for path in chosen:
            with Image.open(path) as image:
                if image.width > NOTE_FIGURE_WIDTH:
                    height = round(image.height * NOTE_FIGURE_WIDTH / image.width)
                    image = image.resize((NOTE_FIGURE_WIDTH, height), Image.Resampling.LANCZOS)
                image.save(Path(tmp) / path.name, optimize=False)
            tracker.log_artifact(run_id, Path(tmp) / path.name, NOTE_FIGURE_DIR)


def figure_link(run_id: str, artifact: str) -> str:
    """The address of a run's artifact as MLflow's server answers it, relative to its UI's page (so it holds under
    a --static-prefix too): the server's get-artifact route, the one its own artifact viewer uses."""
    from urllib.parse import quote

    return f"get-artifact?path={quote(artifact, safe='')}&run_uuid={quote(run_id, safe='')}"


def parent_note(summary: SweepSummary, page: Path | None, figures: Iterable[Path], run_id: str | None = None) -> str:
    """The description: the best line (`answer_lines`), every section of the summary in order (`section_lines`;
    built here for a summary not yet written), the NOTE_FIGURES among `figures` drawn after the results (with
    `run_id`, the run that holds them under figures/), and where the report and the figures are."""
    sections = summary.sections or []
    lines = answer_lines(summary)
    pngs = [Path(p).name for p in figures if Path(p).suffix == ".png"]
    shown = [name for name in NOTE_FIGURES if name in pngs] if run_id else []
    # the answer's items right under the "Answer" line (MLflow shows the first lines before "Show more"); every
    # other section under its title
    parts = [_answer(summary) if s.name == "answer" else [f"**{s.title}**", "", *section_lines(s)] for s in sections]
    for at, section in enumerate(sections):
        if section.name == "results" and shown:
            parts[at] += ["", "**Figures** (the report's; every figure is under Files)", ""]
            for name in shown:  # a paragraph each: images in one paragraph sit side by side, each too small to read
                link = figure_link(run_id or "", f"{NOTE_FIGURE_DIR}/{name}")
                full = figure_link(run_id or "", f"figures/{name}")  # the copy links to the full-size file
                alt = NOTE_FIGURES[name]
                parts[at] += [f"*{alt}* (click for full size)", "", f"[![{alt}]({link})]({full})", ""]
    files = [f"- report: artifact `{page.name}` (one self-contained page; on disk `{page}`)"] if page else []
    files += [f"- figure: artifact `figures/{name}`" for name in pngs]
    tail = ["", "**Files**", "", *files] if files else []

    def text() -> str:
        return "\n".join([*lines, *(x for part in parts for x in ["", *part]), *tail])

    # over MLflow's limit: sections keep their title and point to summary.md, the least needed first (KEPT_LONGEST
    # last, then from the last section back), so that every section is named in its place
    kept = {name: i for i, name in enumerate(KEPT_LONGEST)}
    order = sorted(range(len(parts)), key=lambda i: (kept.get(sections[i].name, len(kept)), i), reverse=True)
    for at in (i for i in order if sections[i].name != "answer"):
        if len(text()) <= NOTE_LIMIT:
            break
        parts[at] = [parts[at][0], "", "*in summary.md and the report*"]
    note = text()
    if len(note) > NOTE_LIMIT:
        note = note[: NOTE_LIMIT - 40].rsplit("\n", 1)[0] + "\n- ... (the rest: summary/summary.md)"
    return note


def _answer(summary: SweepSummary) -> list[str]:
    """The answer as MLflow's folded description shows it (its first five lines or so): the answer across models in
    full (the configuration to use, how it was chosen, the class that matters, the cheapest configuration shown as
    good), then a line per model, its own smallest sufficient resolution in a few words (`decision_words`) and its
    score with interval there, and where each model looks, decided (`map_answers`); the lines per model in full,
    with whether the model learned and its caution, are the first section of summary.md and the report."""
    from resomap.summary.answer_text import answer_line
    from resomap.summary.text import fmt_interval

    rows = {(r.model, r.resolution): r for r in summary.rows}
    lines = [answer_line(summary.answer, summary.rows), ""] if summary.answer is not None else []
    for rec in summary.recommendations:
        row = rows.get((rec["model"], rec.get("resolution")))
        score = fmt_interval(*row.score(row.headline)) if row is not None else "-"
        said = f", {row.say(row.headline)} {score} at {row.resolution} px" if score != "-" else ""
        seeds = max((int(r.n_seeds or 0) for r in summary.rows if r.model == rec["model"]), default=0)
        one = f"its {seeds} seed{'s are' if seeds != 1 else ' is'} one replicate"
        said += f"; deterministic: {one}" if rec.get("deterministic") else ""
        lines.append(f"- {rec['model']}: {decision_words(rec)}{said}")
    if summary.map_answers:  # where each model looks, decided: in full, as the Answer of summary.md says it
        lines += ["", *(f"- {said}" for said in summary.map_answers)]
    if not lines:
        return []
    return [*lines, "", "*The answer in full: summary.md and the report.*"]


def _short(text: str) -> str:
    """A paragraph or item cut at LINE_LIMIT characters, at a sentence's or clause's end where there is one."""
    if len(text) <= LINE_LIMIT:
        return text
    cut = text[:LINE_LIMIT]
    end = max(cut.rfind(". "), cut.rfind("; "))
    return (cut[: end + 1] if end > LINE_LIMIT // 3 else cut.rsplit(" ", 1)[0]) + " ... (summary.md)"


def section_lines(section: Section) -> list[str]:
    """One section in markdown for the description: the answer and the decision whole; any other section's
    paragraphs and items shortened (`_short`, at most ITEMS_LIMIT items), the results' first table, and a pointer
    in place of every other table."""
    whole = section.name in FULL
    sentences = section.name in WHOLE_ITEMS  # each item whole, without its sub-items
    lines: list[str] = []
    tables = 0
    for block in section.blocks:
        if isinstance(block, Text):
            lines += [block.text if whole else _short(block.text), ""]
        elif isinstance(block, Bullets):
            items = block.items if whole or sentences else block.items[:ITEMS_LIMIT]
            for item in items:
                lines.append(f"- {item.text if whole or sentences else _short(item.text)}")
                lines += [f"  - {s}" for s in item.sub] if whole else []
            if len(block.items) > len(items):
                lines.append(f"- ... ({len(block.items) - len(items)} more in summary.md)")
            lines.append("")
        elif isinstance(block, Table):
            tables += 1
            if section.name == "results" and tables == 1:
                lines += [markdown_table(block.header, block.rows).rstrip("\n"), ""]
            else:
                lines += [f"*{block.title or 'a table'}: in summary.md and the report*", ""]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def answer_lines(summary: SweepSummary) -> list[str]:
    """The description's first line, the one MLflow shows before "Show more": the answer across models in short
    (summary.answer_text.short_answer: the configuration to use with its score, chosen on validation, and the
    cheapest shown as good within the margin, or that none is); the answer's lines follow it."""
    from resomap.summary.answer_text import short_answer

    return [f"**Answer**: {short_answer(summary.answer, summary.rows, summary.recommendations)}"]


BEST_TAG = "resomap.best"  # the parent's configuration to use (the answer across models); absent without one


def best(summary: SweepSummary) -> str | None:
    """'<model>@<res>' of the configuration to use (summary.answer, chosen on validation; not recomputed here); in
    a sweep of one model, its smallest sufficient resolution where it is shown; None otherwise."""
    answer = summary.answer or {}
    if answer.get("available"):
        return str(answer["use"])
    recs = summary.recommendations
    if len(recs) == 1 and recs[0].get("sufficient") and recs[0].get("resolution") is not None:
        return f"{recs[0]['model']}@{recs[0]['resolution']}"
    return None


def best_row(summary: SweepSummary) -> SummaryRow | None:
    """The summary row of the configuration to use (`best`), or None without one."""
    found = best(summary)
    return next((r for r in summary.rows if f"{r.model}@{r.resolution}" == found), None) if found else None


def decision_words(rec: Mapping[str, Any]) -> str:
    """A model's own result in a few words (its `decision.<model>` tag): '64 px is enough', 'needs 128 px',
    '128 px until shown otherwise' or 'no decision', with 'evidence missing' where the decided resolution lacks
    the evidence of a smallest sufficient one; the sentence with its reasons is in the parent's description."""
    res, ref = rec.get("resolution"), rec.get("reference")
    if not rec.get("available") or res is None:
        return "no decision"
    if not rec.get("decided"):
        return f"{ref} px until shown otherwise"
    said = f"{res} px is enough" if res != ref else f"needs {ref} px"
    return said if rec.get("sufficient") else f"{said} (evidence missing: see its decision)"

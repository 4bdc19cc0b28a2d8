"""The one-page HTML report of a finished sweep (`resomap report`, and the end of every sweep).

One self-contained file: every image is a PNG data: URI, the style and the few lines of script are inline, nothing
is fetched, so it opens from disk (file://) and inside MLflow's artifact viewer. It reads only what a sweep leaves
on disk: summary.json (rows with intervals, the decisions, the answer, each trial's folder), the figures/ the sweep drew
(drawn again from the rows when absent), explanations/ (agreement matrices and statements) and each trial's
explanations.npz (probe maps with what the model said). With JavaScript off every resolution of a probe map is
shown in a row; the script turns each row into a slider (<input type=range>). All text is escaped (html.escape).
Right after the summary, a Training section shows each model's learning curves (figures/learning_curves_<model>.png,
drawn from summary.json's trial histories when absent) and each row's convergence records (summary.convergence).

Whatever the task, the page is the same: the rows name their per-image scores and say them in words (accuracy for
classification; mIoU and boundary F1 per image for segmentation), the paired tests carry the metric they compared,
and the figures each task's trials write for the report (resomap.tasks `report_figures`, e.g. segmentation's
true and predicted masks) are shown per model and resolution.

Written by hand: no report library does "data: URIs + a range slider per strip" without a server or a JS
framework; the figures themselves come from the existing matplotlib code (reports.figures, reports.explain_figures) and
the probe overlays from explain_figures.probe_overlays. The page's pieces (style, script, escaping, PNG data: URIs
with Pillow) are reports.html_parts; the probe maps and agreement sections are reports.html_explain; the images that
need the pixels (lost against the reference, with their maps side by side) reports.html_sensitivity.
"""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import re
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from resomap.atomic import write_text
from resomap.errors import DataError
from resomap.reports.html_explain import agreement_section, explanation_statements, probe_section, quality_section
from resomap.reports.html_parts import CSS as _CSS
from resomap.reports.html_parts import JS as _JS
from resomap.reports.html_parts import escape as _e
from resomap.reports.html_parts import figure_img
from resomap.reports.html_parts import file_uri as _file_uri
from resomap.reports.html_parts import num as _num
from resomap.reports.html_sections import ordered_parts, sections_of
from resomap.reports.html_sensitivity import sensitivity_section
from resomap.summary.convergence import CURVES_STEM, undertrained_cell
from resomap.summary.front import tradeoff_cells, tradeoff_lines
from resomap.summary.groups import group_cells, group_note
from resomap.summary.per_class import class_cells, class_note
from resomap.summary.rows import SummaryRow, baseline_label, baseline_names
from resomap.summary.text import (
    ABOVE_P,
    above_baseline,
    above_trivial,
    training_cells,
    training_note,
    trivial_words,
)

log = logging.getLogger(__name__)

REPORT_FILE = "report.html"
FIGURE_ORDER = (
    "accuracy_vs_resolution",
    "cost_vs_resolution",
    "explain_cost_vs_resolution",
    "pareto_accuracy_latency",
    "tradeoff_score_cost_quality",
)

# ------------------------------------------------------------------------------------------------ the page


class ReportNotWritable(DataError):
    """The report's file cannot be written there (a read-only folder or file system); args: (message, path)."""

    def __str__(self) -> str:
        return str(self.args[0])


def write_report(sweep_dir: Path, out: Path | None = None) -> Path:
    """Write the sweep's one-page HTML report (default <sweep_dir>/report.html) and return its path."""
    sweep_dir = Path(sweep_dir)
    try:
        data = json.loads((sweep_dir / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        why = f"{sweep_dir} holds no readable summary.json ({type(exc).__name__}); is it a sweep folder?"
        raise DataError(why) from None
    out = Path(out) if out is not None else sweep_dir / REPORT_FILE
    rows = [SummaryRow.from_dict(r) for r in data.get("rows") or []]
    trials = data.get("trials") or []
    models = sorted({str(r.model) for r in rows} | {str(t.get("model")) for t in trials if t.get("model")})
    resolutions = sorted({int(r.resolution) for r in rows} | {int(t["resolution"]) for t in trials})
    seeds = sorted({int(t.get("seed") or 0) for t in trials})
    sections = _parts(sweep_dir, data, rows, trials)
    if not rows:
        sections.insert(0, ("results", "Results", '<p class="muted">No finished trial.</p>'))
    nav = " ".join(f'<a href="#{key}">{_e(title)}</a>' for key, title, _ in sections)
    head = (
        f"<h1>ResoMap sweep {_e(sweep_dir.name)}</h1>"
        f'<p class="muted">models: {_e(", ".join(models))} · resolutions: {_e(", ".join(map(str, resolutions)))} px'
        f" · seeds: {_e(', '.join(map(str, seeds)))} · {len(trials)} trials · report written"
        f" {_e(time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime()))}</p><nav>{nav}</nav>"
    )
    body = "".join(f'<section id="{key}"><h2>{_e(title)}</h2>{content}</section>' for key, title, content in sections)
    page = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>ResoMap report: {_e(sweep_dir.name)}</title><style>{_CSS}</style></head>"
        f"<body><main>{head}{body}</main><script>{_JS}</script></body></html>\n"
    )
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_text(out, page)
    except OSError as exc:  # a read-only folder (another user's, a read-only mount): the page is fine, the place not
        if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
        raise ReportNotWritable(f"cannot write {out} ({os.strerror(exc.errno).lower()})", out) from None
    log.info("report written: %s (%.1f MB)", out, out.stat().st_size / 2**20)
    return out


def _parts(sweep_dir: Path, data: dict, rows: list[SummaryRow], trials: list[dict]) -> list[tuple[str, str, str]]:
    """(anchor, title, HTML) of the page's sections in the summary's order (reports.html_sections): the rich view
    of each section that has one, the page's own parts after the section they belong to."""
    explained = [
        lambda: ("probes", "What the models saw", probe_section(sweep_dir, trials)),
        lambda: ("agreement", "Agreement of explanations across resolutions", agreement_section(sweep_dir)),
        lambda: ("quality", "Explanation quality against resolution", quality_section(sweep_dir)),
    ]
    outputs = _outputs_section(sweep_dir, trials)
    sections = ordered_parts(
        sections_of(data, explanation_statements(sweep_dir, short=True)),  # findings: an old summary.json's
        rich={
            "results": lambda s: _results_section(data, rows),
            "training": lambda s: _training_section(sweep_dir, rows, trials),
            "per_class": lambda s: _class_section(data["class_decisions"]),
            "per_group": lambda s: _group_section(data),
            "front": lambda s: _tradeoff_section(data["front3"]),
            "sensitive": lambda s: sensitivity_section(sweep_dir, data, trials),
            "paired": lambda s: _paired_part(data.get("paired_tests") or [], rows[0]),
        },
        extras={
            "results": [
                lambda: ("figures", "Quality and cost against resolution", _figures_section(sweep_dir, rows, data)),
                lambda: ("matrix", "Train x test resolution", _matrix_section(rows)),
            ],
            "sensitive": [lambda: ("outputs", "Test outputs", outputs) if outputs else None],
            "explanations": explained,
        },
    )
    return sections


def _results_section(data: dict, rows: list[SummaryRow]) -> str:
    """Per model x resolution: the scores with their intervals, above the trivial predictor and each baseline, the
    verdict, each model's smallest sufficient resolution starred and shaded; then the costs."""
    methods = sorted({m for r in rows for m in r.explain_seconds})
    level = next((r.ci_level for r in rows if r.ci_level), None)
    first = rows[0]
    scores = [*first.score_columns, "test_macro_f1"]
    heads = [f"{first.say(c)} ({_num(level, '{:.0%}')} CI)" if level else first.say(c) for c in scores]
    trivial = trivial_words(rows)
    heads += [f"above {trivial} (its score; {ABOVE_P})"] if trivial else []
    baselines = baseline_names(rows)
    ci = f" [{_num(level, '{:.0%}')} CI]" if level else ""
    heads += [f"above {baseline_label(rows, name)}{ci} (its score; {ABOVE_P})" for name in baselines]
    head = ["model", "px", "seeds", *heads, "vs reference", "detectable", "undertrained"]
    cost_head = ["model", "px", "latency ms", "peak MB", "train s", *(f"explain {m} s, probe set" for m in methods)]
    # each model's smallest sufficient resolution, as its decision row says (summary.uncertainty.sufficiency)
    chosen = {(c["model"], c["resolution"]) for c in data.get("recommendations") or [] if c.get("sufficient")}
    lines, costs = [], []
    for r in sorted(rows, key=lambda r: (str(r.model), int(r.resolution))):
        starred = (r.model, r.resolution) in chosen
        vals = (
            [_score_cell(r, c) for c in scores]
            + ([above_trivial(r)] if trivial else [])
            + [above_baseline(r, name) for name in baselines]
            + [r.verdict or "-", _num(r.detectable_margin), undertrained_cell(r.undertrained)]
        )
        name = f"{r.model}{' ★' if starred else ''}"
        lines.append(([name, str(r.resolution), str(r.n_seeds), *vals], starred))
        cost = [_num(r.latency_ms, "{:.2f}"), _num(r.peak_memory_mb, "{:.3g}"), _num(r.train_time_s, "{:.1f}")]
        costs.append(([name, str(r.resolution), *cost, *(_num(r.explain_seconds.get(m), "{:.3g}") for m in methods)],
                      starred))  # fmt: skip
    notes = list(dict.fromkeys(part.strip() for r in rows for part in str(r.note or "").split(";")))
    margin = next((r.margin for r in rows if r.margin is not None), None)
    labels = [baseline_label(rows, n) for n in baselines]
    foot = '<p class="small muted">' + _recommended_words(bool(chosen), trivial, labels)
    foot += (
        f" vs reference: the decision at margin {_num(margin, '{:g}')} on the headline score;"
        " detectable: the smallest margin this design shows at the stated power (undecided is not the same)."
    )
    foot += "".join(f" {_e(n)}." for n in notes if n) + "</p>"
    cost = '<h3>Cost</h3><p class="small muted">Means over seeds: inference latency at batch 1, peak memory,'
    cost += " training time, and each explanation method's seconds for the whole probe set (not per image).</p>"
    cost += _table(cost_head, costs)
    return _table(head, lines) + foot + cost


def _tradeoff_section(front3: list[dict]) -> str:
    """Per model its resolutions on the three-way front or dropped, and why (summary.front); rows on the front
    shaded; the rule and each model's axes in words under the table (the figure is with the others above)."""
    head, body = tradeoff_cells(front3)
    notes = "".join(f"<li>{_e(line)}</li>" for line in tradeoff_lines(front3))
    return _table(head, body) + f'<ul class="small muted">{notes}</ul>'


def _recommended_words(starred: bool, trivial: str | None, baselines: list[str]) -> str:
    """What the star means, where a row has one (the summary's rule, summary.uncertainty.sufficiency); else that no
    smallest sufficient resolution is shown and where the reasons are. Which configuration to use is the answer's."""
    if not starred:
        return "No model's smallest sufficient resolution is shown: each decision above says what is missing."
    above = " and ".join([trivial or "the trivial predictor", *baselines])
    return (
        f"★ the model's smallest sufficient resolution: the decided resolution of a decision about the model (model"
        f" scope), shown above {above} at that resolution, no trial undertrained (which configuration to use is the"
        " answer's)."
    )


def _group_section(data: dict) -> str:
    """Each model decided within each group value the dataset declares (summary.groups): the score at every
    resolution with its interval and verdict, undecided and not-decided rows shaded, and what it says in words
    (with a sentence where a group's values were decided apart)."""
    found = data["group_decisions"]
    head, body = group_cells(found)
    lines = [(cells, not r.get("decided")) for cells, r in zip(body, found, strict=True)]
    note = group_note(found, data.get("group_differ") or [])
    return _table(head, lines, "warn") + f'<p class="small muted">{_e(note)}</p>'


def _class_section(found: list[dict]) -> str:
    """Each classification model's decision per class (summary.per_class), the minority class first: a compact
    table, undecided and not-decided rows shaded, and what it says in words."""
    head, body = class_cells(found)
    lines = [(cells, not r.get("decided")) for cells, r in zip(body, found, strict=True)]
    return _table(head, lines, "warn") + f'<p class="small muted">{_e(class_note(found))}</p>'


def _score_cell(r: SummaryRow, column: str) -> str:
    """'0.912 [0.880, 0.940]'; the seeds' mean ± std where there is no pooled interval."""
    estimate, low, high = r.score(column)
    text = _num(estimate)
    if low is not None and high is not None:
        return f"{text} [{_num(low)}, {_num(high)}]"
    std = r.value(f"{column}_std")
    return f"{text} ± {_num(std)}" if std is not None else text


def _paired_part(paired: list[dict], first: SummaryRow) -> str:
    """The paired tests between resolutions (every metric the task compares), significant rows shaded."""
    if not paired:
        return ""
    words = {c.removeprefix("image_").removeprefix("test_"): first.say(c) for c in first.score_columns}
    lines = [
        (
            [
                str(p["model"]),
                words.get(str(p.get("metric")), str(p.get("metric") or "accuracy")),
                f"{p['resolution_a']} → {p['resolution_b']}",
                f"{_num(p.get('effect'), '{:+.3f}')} [{_num(p.get('ci_low'), '{:+.3f}')}, "
                f"{_num(p.get('ci_high'), '{:+.3f}')}]",
                _num(p.get("p_value")),
                _num(p.get("p_adjusted")),
                "yes" if p.get("significant") else "no",
                _num(p.get("n_images"), "{:.0f}"),
            ],
            bool(p.get("significant")),
        )
        for p in paired
    ]
    head = ["model", "metric", "px a → b", "effect b - a (CI)", "p", "p adjusted", "significant", "images"]
    tests = sorted({str(p.get("method")) for p in paired if p.get("method")})
    note = f"Same test images, seeds paired: {'; '.join(tests)}; p adjusted over each model's pairs of a metric."
    return _table(head, lines) + f'<p class="small muted">{_e(note)}</p>'


def _figures_section(sweep_dir: Path, rows: list[SummaryRow], data: dict) -> str:
    folder = sweep_dir / "figures"
    if folder.is_dir() and any(folder.glob("*.png")):
        return _figures_from(folder)
    import tempfile

    from resomap.reports.figures import sweep_figures

    with tempfile.TemporaryDirectory(prefix="resomap-report-") as tmp:  # a summary without its figures/: draw them
        paired, recs = data.get("paired_tests") or [], data.get("recommendations") or []
        sweep_figures(rows, Path(tmp), paired, recs, front3=data.get("front3") or [])
        return _figures_from(Path(tmp))


def _figures_from(folder: Path) -> str:
    own = ("train_test_resolution_", f"{CURVES_STEM}_")  # shown in their own sections
    pngs = {p.stem: p for p in sorted(folder.glob("*.png")) if not p.stem.startswith(own)}
    order = [s for s in FIGURE_ORDER if s in pngs] + [s for s in pngs if s not in FIGURE_ORDER]
    if not order:
        return '<p class="muted">No figure (no finished trial with metrics).</p>'
    figs = "".join(
        f"<figure>{figure_img(pngs[s], s)}<figcaption>{_e(s.replace('_', ' '))}</figcaption></figure>" for s in order
    )
    return f'<div class="figs">{figs}</div>'


def _training_section(sweep_dir: Path, rows: list[SummaryRow], trials: list[dict]) -> str:
    """Did the models learn: each model's learning curves (figures/learning_curves_<model>.png, drawn from the
    trials' histories when the folder lacks them) and the convergence table per model x resolution."""
    if not rows:
        return '<p class="muted">No finished trial.</p>'
    figs = _curve_figures(sweep_dir / "figures", trials)
    head, body = training_cells(rows)
    table = _table(head, [(cells, bool(r.undertrained)) for cells, r in zip(body, rows, strict=True)], "warn")
    closed = sorted({str(r.model) for r in rows if r.family == "classical"})
    words = training_note(rows) + " Shaded rows: a seed is undertrained."
    if closed:
        words += f" No learning curve for {', '.join(closed)}: fitted in closed form, it has no epochs."
    return figs + table + f'<p class="small muted">{_e(words)}</p>'


def _curve_figures(folder: Path, trials: list[dict]) -> str:
    """The learning-curve figures as <figure>s; drawn into a temporary folder when `folder` has none."""
    pngs = sorted(folder.glob(f"{CURVES_STEM}_*.png")) if folder.is_dir() else []
    if not pngs:
        import tempfile

        from resomap.reports.curves import learning_curve_figures

        with tempfile.TemporaryDirectory(prefix="resomap-report-") as tmp:
            drawn = [p for p in learning_curve_figures(trials, Path(tmp)) if p.suffix == ".png"]
            return _curve_html(drawn)
    return _curve_html(pngs)


def _curve_html(pngs: list[Path]) -> str:
    if not pngs:
        return '<p class="muted">No learning curve (no trial with a per-epoch history).</p>'
    caption = "learning curves: loss and validation score by epoch, seeds overlaid, each seed's best epoch starred"
    figs = "".join(
        f'<figure class="wide">{figure_img(p, p.stem)}<figcaption>'
        f"{_e(p.stem.removeprefix(CURVES_STEM + '_'))}: {_e(caption)}</figcaption></figure>"
        for p in pngs
    )
    return f'<div class="figs">{figs}</div>'


def _matrix_section(rows: list[SummaryRow]) -> str:
    """Train x test accuracy as a table per model (the numbers of the heatmaps, readable without images)."""
    parts = []
    for model in sorted({str(r.model) for r in rows}):
        mine = sorted((r for r in rows if str(r.model) == model), key=lambda r: int(r.resolution))
        tests = sorted({int(k) for r in mine for k in r.cross_resolution})
        if not tests:
            continue
        head = '<tr><th class="l">train \\ test px</th>' + "".join(f"<th>{t}</th>" for t in tests) + "</tr>"
        body = ""
        values = [_float(v) for r in mine for v in r.cross_resolution.values()]
        values = [v for v in values if math.isfinite(v)]
        low, high = (min(values), max(values)) if values else (0.0, 1.0)
        for r in mine:
            cross = {int(k): v for k, v in r.cross_resolution.items()}
            tds = "".join(_matrix_cell(_float(cross.get(t)), low, high, t == int(r.resolution)) for t in tests)
            body += f'<tr><td class="l">{_e(r.resolution)}</td>{tds}</tr>'
        parts.append(f'<h3>{_e(model)}</h3><table class="mat">{head}{body}</table>')
    if not parts:
        return '<p class="muted">No cross-resolution test results.</p>'
    what = f"Test {rows[0].say('test_accuracy')}"
    note = f"{what} (mean over seeds), shaded from the model's lowest to its highest; bold: the train resolution."
    return "".join(parts) + f'<p class="small muted">{note}</p>'


def _float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _matrix_cell(value: float, low: float, high: float, own: bool) -> str:
    style = "font-weight:700;" if own else ""
    if math.isfinite(value):
        share = (value - low) / (high - low) if high > low else 1.0
        style += f"background:rgba(33,145,140,{0.1 + 0.5 * share:.2f})"  # viridis' middle green, light to strong
    return f'<td style="{style}">{_e(_num(value))}</td>'


# ------------------------------------------------------------------------------------------------ test outputs


def _trial_folder(sweep_dir: Path, trial: dict) -> Path | None:
    from resomap.results import trial_folder

    return trial_folder(sweep_dir, trial)


def _table(head: list[str], lines: list[tuple[list[str], bool]], shade: str = "rec") -> str:
    """An HTML table: the first column left-aligned; a True flag shades the row (class `shade`: rec, green for a
    recommendation; warn, amber for a warning)."""
    top = "".join(f'<th class="{"l" if i == 0 else ""}">{_e(h)}</th>' for i, h in enumerate(head))
    body = "".join(
        (f'<tr class="{shade}">' if mark else "<tr>")
        + "".join(f'<td class="l">{_cell(c)}</td>' if i == 0 else f"<td>{_cell(c)}</td>" for i, c in enumerate(cells))
        + "</tr>"
        for cells, mark in lines
    )
    return f"<table><tr>{top}</tr>{body}</table>"


_INTERVAL = re.compile(r"(\S+ \[[^\]]*\])")


def _cell(text: str) -> str:
    """A table cell: an estimate with its interval ('0.799 [0.767, 0.828]') kept on one line, and what follows it
    in brackets ('(0.688; p <0.001)': the compared score and p) on a smaller line under it."""
    html = _INTERVAL.sub(r'<span class="nw">\1</span>', _e(text))
    return re.sub(r"</span> \((.*)\)$", r'</span><br><span class="sub">\1</span>', html)


def _outputs_section(sweep_dir: Path, trials: list[dict]) -> str:
    """The figures the trials' task writes for the report (`report_figures`), per model and training resolution
    (the model's lowest seed), captioned with the trial's headline test figures; "" when the task has none."""
    from resomap.tasks import of_result

    chosen: dict[str, dict[int, dict]] = defaultdict(dict)
    seed_of: dict[str, int] = {}
    for t in sorted(trials, key=lambda t: int(t.get("seed") or 0)):
        if t.get("status") == "FINISHED" and seed_of.setdefault(str(t["model"]), int(t.get("seed") or 0)) == int(
            t.get("seed") or 0
        ):
            chosen[str(t["model"])][int(t["resolution"])] = t
    parts = []
    for model, per_res in sorted(chosen.items()):
        task = of_result(next(iter(per_res.values())))
        for name, _key, caption in task.report_figures:
            figs, missing = [], []
            for res, t in sorted(per_res.items()):
                folder = _trial_folder(sweep_dir, t)
                path = folder / name if folder is not None else None
                if path is None or not path.is_file():
                    missing.append(f"{res} px")
                    continue
                words = f"{res} px · " + ", ".join(task.line_figures(t.get("test") or {}))
                figs.append(
                    f'<figure><img alt="{_e(f"{model} {res} px {caption}")}" src="{_file_uri(path, 900)}">'
                    f"<figcaption>{_e(words)}</figcaption></figure>"
                )
            seed = f'<span class="small muted">(seed {seed_of[model]})</span>'
            parts.append(f"<h3>{_e(model)}: {_e(caption)} {seed}</h3>")
            if figs:
                parts.append(f'<div class="figs">{"".join(figs)}</div>')
            if missing:
                parts.append(f'<p class="small muted">No {_e(name)} for {_e(", ".join(missing))}.</p>')
    return "".join(parts)

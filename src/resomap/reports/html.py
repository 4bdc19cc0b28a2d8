"""The one-page HTML report of a finished sweep (`resomap report`, and the end of every sweep).

One self-contained file: every image is a PNG data: URI, the style and the few lines of script are inline, nothing
is fetched, so it opens from disk (file://) and inside MLflow's artifact viewer. It reads only what a sweep leaves
on disk: summary.json (rows with intervals, recommendations, each trial's folder), the figures/ the sweep drew
(drawn again from the rows when absent), explanations/ (agreement matrices and statements) and each trial's
explanations.npz (probe maps with what the model said). With JavaScript off every resolution of a probe map is
shown in a row; the script turns each row into a slider (<input type=range>). All text is escaped (html.escape).

A segmentation sweep (trials with test/miou) gets a segmentation section instead of the probe maps: the mIoU and
boundary F1 table with the per-image bootstrap intervals and the paired tests between resolutions
(seg_summary.csv / seg_paired_tests.csv, computed again with reports.seg_summary when absent), the figures
seg_quality_vs_resolution and seg_pareto, and each trial's prediction overlays (seg_overlays.png, lowest seed);
the summary and matrix then name pixel accuracy and mean Dice for what a classifier's columns call accuracy and
macro-F1.

Written by hand: no report library does "data: URIs + a range slider per strip" without a server or a JS
framework; the figures themselves come from the existing matplotlib code (reports.figures, explain.figures) and
the probe overlays from explain.figures.probe_overlays. The page's pieces (style, script, escaping, PNG data: URIs
with Pillow) are reports.html_parts; the probe maps and agreement sections are reports.html_explain.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from resomap.atomic import write_text
from resomap.errors import DataError
from resomap.records import SEG_OVERLAYS_FILE
from resomap.reports.html_explain import agreement_section, probe_section
from resomap.reports.html_parts import CSS as _CSS
from resomap.reports.html_parts import JS as _JS
from resomap.reports.html_parts import escape as _e
from resomap.reports.html_parts import file_uri as _file_uri
from resomap.reports.html_parts import num as _num
from resomap.reports.rows import SummaryRow

log = logging.getLogger(__name__)

REPORT_FILE = "report.html"
SEG_FIGURES = ("seg_quality_vs_resolution", "seg_pareto")  # shown in the segmentation section
SEG_NOT_APPLICABLE = "predictions.csv"  # summary notes about classification's per-image records: not for segmentation
FIGURE_ORDER = (
    "accuracy_vs_resolution",
    "cost_vs_resolution",
    "explain_cost_vs_resolution",
    "pareto_accuracy_latency",
)

# ------------------------------------------------------------------------------------------------ finding sweeps


def find_sweep(name: str | None, root: str | Path = "model_summaries") -> Path:
    """The folder of sweep `name` (a name under <root>/_sweep/ or a folder holding summary.json); None: the only
    or most recently summarised sweep. An unknown name raises DataError listing the known sweeps."""
    from resomap.results import SWEEP_DIR, known_sweeps

    base = Path(root) / SWEEP_DIR
    known = known_sweeps(root)
    if name is None:
        if not known:
            raise DataError(f"no finished sweep under {base} (run `resomap sweep` first, or pass --sweep)")
        return max((base / k for k in known), key=lambda p: (p / "summary.json").stat().st_mtime)
    if (Path(name) / "summary.json").is_file():
        return Path(name)
    if name in known:
        return base / name
    listed = ", ".join(known) if known else f"none under {base}"
    raise DataError(f"no sweep {name!r}; known sweeps: {listed}")


# ------------------------------------------------------------------------------------------------ the page


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
    seg = is_segmentation(trials)
    sections = [("summary", "Summary", _summary_section(data, rows, seg))]
    if seg:
        sections.append(("segmentation", "Segmentation: mIoU and boundary F1", _seg_section(sweep_dir, data, trials)))
    sections += [
        ("figures", "Accuracy and cost against resolution", _figures_section(sweep_dir, rows, data)),
        ("matrix", "Train x test resolution", _matrix_section(rows, seg)),
    ]
    if seg:
        sections.append(("predictions", "Predicted masks", _overlay_section(sweep_dir, trials)))
    sections.append(("probes", "What the models saw", probe_section(sweep_dir, trials)))
    sections.append(("agreement", "Agreement of explanations across resolutions", agreement_section(sweep_dir)))
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
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, page)
    log.info("report written: %s (%.1f MB)", out, out.stat().st_size / 2**20)
    return out


def is_segmentation(trials: list[dict]) -> bool:
    """True for a segmentation sweep: a trial's test metrics hold test/miou (resomap.tasks.seg_metrics)."""
    return any("test/miou" in (t.get("test") or {}) for t in trials)


def _summary_section(data: dict, rows: list[SummaryRow], seg: bool = False) -> str:
    if not rows:
        return '<p class="muted">No finished trial.</p>'
    recs = [r for r in data.get("recommendations") or [] if r.get("sentence")]
    if seg:  # the classification recommendation needs predictions.csv; segmentation's tests are in its section
        recs = [r for r in recs if SEG_NOT_APPLICABLE not in str(r["sentence"])]
    parts = ["<ul>" + "".join(f"<li>{_e(r['sentence'])}</li>" for r in recs) + "</ul>"] if recs else []
    methods = sorted({m for r in rows for m in r.explain_seconds})
    level = next((r.ci_level for r in rows if r.ci_level), None)
    acc_name, f1_name = ("pixel accuracy", "mean Dice") if seg else ("accuracy", "macro-F1")
    acc_head = f"{acc_name} ({_num(level, '{:.0%}')} CI)" if level else acc_name
    head = ["model", "px", "seeds", acc_head, f1_name, "latency ms", "peak MB", "train s"]
    head += [f"explain {m} s" for m in methods]
    cells = ["".join(f'<th class="{"l" if i == 0 else ""}">{_e(h)}</th>' for i, h in enumerate(head))]
    for r in sorted(rows, key=lambda r: (str(r.model), int(r.resolution))):
        acc = _num(r.accuracy)
        if r.test_accuracy_ci_low is not None:
            acc += f" [{_num(r.test_accuracy_ci_low)}, {_num(r.test_accuracy_ci_high)}]"
        elif r.test_accuracy_std is not None:
            acc += f" ± {_num(r.test_accuracy_std)}"
        vals = [
            _num(r.macro_f1),
            _num(r.latency_ms, "{:.2f}"),
            _num(r.peak_memory_mb, "{:.3g}"),
            _num(r.train_time_s, "{:.1f}"),
        ] + [_num(r.explain_seconds.get(m), "{:.3g}") for m in methods]
        mark = " ★" if r.recommended else ""
        cls = ' class="rec"' if r.recommended else ""
        line = f'<td class="l">{_e(r.model)}{mark}</td><td>{_e(r.resolution)}</td><td>{_e(r.n_seeds)}</td>'
        line += f"<td>{_e(acc)}</td>" + "".join(f"<td>{_e(v)}</td>" for v in vals)
        cells.append(f"<tr{cls}>{line}</tr>")
    notes = list(dict.fromkeys(part.strip() for r in rows for part in str(r.note or "").split(";")))
    if seg:
        notes = [n for n in notes if SEG_NOT_APPLICABLE not in n]
    foot = '<p class="small muted">★ recommended resolution (paired tests, see summary.md).'
    if seg:
        foot += " Pixel accuracy and mean Dice on the reference masks; mIoU and boundary F1 in the next section."
    foot += "".join(f" {_e(n)}." for n in notes if n) + "</p>"
    return (
        "".join(parts)
        + "<table>"
        + "".join(f"<tr>{c}</tr>" if i == 0 else c for i, c in enumerate(cells))
        + ("</table>" + foot)
    )


def _figures_section(sweep_dir: Path, rows: list[SummaryRow], data: dict) -> str:
    folder = sweep_dir / "figures"
    if folder.is_dir() and any(folder.glob("*.png")):
        return _figures_from(folder)
    import tempfile

    from resomap.reports.figures import sweep_figures

    with tempfile.TemporaryDirectory(prefix="resomap-report-") as tmp:  # a summary without its figures/: draw them
        sweep_figures(rows, Path(tmp), data.get("paired_tests") or [], data.get("recommendations") or [])
        return _figures_from(Path(tmp))


def _figures_from(folder: Path) -> str:
    pngs = {
        p.stem: p
        for p in sorted(folder.glob("*.png"))
        if not p.stem.startswith("train_test_resolution_") and p.stem not in SEG_FIGURES
    }
    order = [s for s in FIGURE_ORDER if s in pngs] + [s for s in pngs if s not in FIGURE_ORDER]
    if not order:
        return '<p class="muted">No figure (no finished trial with metrics).</p>'
    figs = "".join(
        f'<figure><img alt="{_e(s)}" src="{_file_uri(pngs[s])}"><figcaption>{_e(s.replace("_", " "))}</figcaption>'
        "</figure>"
        for s in order
    )
    return f'<div class="figs">{figs}</div>'


def _matrix_section(rows: list[SummaryRow], seg: bool = False) -> str:
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
    what = "Test pixel accuracy on the reference masks" if seg else "Test accuracy"
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


# ------------------------------------------------------------------------------------------------ segmentation


def _trial_folder(sweep_dir: Path, trial: dict) -> Path | None:
    folder = trial.get("folder")
    if not folder:
        return None
    base = Path(folder)
    return base if base.is_absolute() else sweep_dir / base


def _csv_value(text: str) -> Any:
    if text == "":
        return None
    if text in ("True", "False"):
        return text == "True"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _read_csv(path: Path) -> list[dict]:
    import csv

    with path.open(newline="", encoding="utf-8") as fh:
        return [{k: _csv_value(v or "") for k, v in row.items()} for row in csv.DictReader(fh)]


def _seg_tables(sweep_dir: Path, data: dict, trials: list[dict]) -> tuple[list[dict], list[dict]]:
    """seg_summary's (rows, paired tests): the sweep's seg_summary.csv / seg_paired_tests.csv, else computed again
    from the trials' seg_predictions.csv."""
    from resomap.reports import seg_summary as ss

    rows_csv, paired_csv = sweep_dir / ss.SEG_SUMMARY_CSV, sweep_dir / ss.SEG_PAIRED_CSV
    if rows_csv.is_file():
        return _read_csv(rows_csv), (_read_csv(paired_csv) if paired_csv.is_file() else [])
    resolved = [{**t, "folder": str(_trial_folder(sweep_dir, t))} for t in trials if t.get("folder")]
    return ss.seg_summary(resolved, data.get("stats") or {})


def _ci(row: dict, name: str) -> str:
    text = _num(row.get(name))
    if row.get(f"{name}_ci_low") is not None and row.get(f"{name}_ci_high") is not None:
        text += f" [{_num(row[f'{name}_ci_low'])}, {_num(row[f'{name}_ci_high'])}]"
    return text


def _table(head: list[str], lines: list[tuple[list[str], bool]]) -> str:
    """An HTML table: the first column left-aligned; a True flag shades the row (class rec)."""
    top = "".join(f'<th class="{"l" if i == 0 else ""}">{_e(h)}</th>' for i, h in enumerate(head))
    body = "".join(
        ('<tr class="rec">' if mark else "<tr>")
        + "".join(f'<td class="l">{_e(c)}</td>' if i == 0 else f"<td>{_e(c)}</td>" for i, c in enumerate(cells))
        + "</tr>"
        for cells, mark in lines
    )
    return f"<table><tr>{top}</tr>{body}</table>"


def _seg_section(sweep_dir: Path, data: dict, trials: list[dict]) -> str:
    rows, paired = _seg_tables(sweep_dir, data, trials)
    if not rows:
        return '<p class="muted">No segmentation records (no finished trial wrote seg_predictions.csv).</p>'
    level = (data.get("stats") or {}).get("level", 0.95)
    head = ["model", "px", "seeds", "mIoU", "boundary F1", f"image mIoU ({_num(level, '{:.0%}')} CI)",
            "image boundary F1 (CI)", "test images", "reference px", "tolerance px", "latency ms", "GMACs"]  # fmt: skip
    lines = [
        (
            [
                str(r["model"]),
                str(r["resolution"]),
                str(r.get("n_seeds") or 1),
                _num(r.get("test_miou")),
                _num(r.get("test_boundary_f1")),
                _ci(r, "image_miou"),
                _ci(r, "image_boundary_f1"),
                _num(r.get("n_test_images"), "{:.0f}"),
                _num(r.get("reference_resolution"), "{:.0f}"),
                _num(r.get("boundary_tolerance_px"), "{:.0f}"),
                _num(r.get("latency_ms"), "{:.2f}"),
                _num(r.get("gmacs"), "{:.3g}"),
            ],
            False,
        )
        for r in sorted(rows, key=lambda r: (str(r["model"]), int(r["resolution"])))
    ]
    parts = [
        _table(head, lines),
        '<p class="small muted">mIoU and boundary F1 on the reference masks (logits resampled bilinearly to them),'
        " pooled over the test set and averaged over seeds; the image columns are the mean per test image with a"
        " bootstrap (BCa) interval over test images (seg_summary.csv).</p>",
    ]
    if paired:
        plines = [
            (
                [
                    str(p["model"]),
                    str(p["metric"]).replace("_", " "),
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
        head = ["model", "metric", "px a → b", "effect b - a (CI)", "p", "p (Holm)", "significant", "images"]
        parts += [
            "<h3>Paired tests between resolutions</h3>",
            _table(head, plines),
            '<p class="small muted">Per-image differences on the same test images: paired bootstrap interval and'
            " sign-flip permutation test, Holm-adjusted over each model's pairs (seg_paired_tests.csv).</p>",
        ]
    parts.append(_seg_figures(sweep_dir, rows))
    return "".join(parts)


def _seg_figures(sweep_dir: Path, rows: list[dict]) -> str:
    folder = sweep_dir / "figures"
    found = {s: folder / f"{s}.png" for s in SEG_FIGURES if (folder / f"{s}.png").is_file()}
    if len(found) < len(SEG_FIGURES):  # a summary without them: draw them from the rows
        import tempfile

        from resomap.reports.seg_summary import seg_figures

        with tempfile.TemporaryDirectory(prefix="resomap-report-") as tmp:
            drawn = {p.stem: p for p in seg_figures(rows, Path(tmp))}
            return _figure_row({**drawn, **found})
    return _figure_row(found)


def _figure_row(paths: dict[str, Path]) -> str:
    figs = "".join(
        f'<figure><img alt="{_e(stem)}" src="{_file_uri(paths[stem])}"><figcaption>{_e(stem.replace("_", " "))}'
        "</figcaption></figure>"
        for stem in SEG_FIGURES
        if stem in paths
    )
    return f'<div class="figs">{figs}</div>' if figs else ""


def _overlay_section(sweep_dir: Path, trials: list[dict]) -> str:
    """Each model's seg_overlays.png at every resolution (its lowest seed): true and predicted masks."""
    chosen: dict[str, dict[int, dict]] = defaultdict(dict)
    seed_of: dict[str, int] = {}
    for t in sorted(trials, key=lambda t: int(t.get("seed") or 0)):
        if t.get("status") != "FINISHED":
            continue
        model, seed = str(t["model"]), int(t.get("seed") or 0)
        if seed_of.setdefault(model, seed) == seed:
            chosen[model][int(t["resolution"])] = t
    parts = [
        '<p class="small muted">The first test images with their true (top) and predicted (bottom) masks at the'
        " reference side, per training resolution (each trial's seg_overlays.png).</p>"
    ]
    for model, per_res in sorted(chosen.items()):
        figs, missing = [], []
        for res, t in sorted(per_res.items()):
            folder = _trial_folder(sweep_dir, t)
            path = folder / SEG_OVERLAYS_FILE if folder is not None else None
            if path is None or not path.is_file():
                missing.append(f"{res} px")
                continue
            test = t.get("test") or {}
            scores = f"mIoU {_num(test.get('test/miou'))} · boundary F1 {_num(test.get('test/boundary_f1'))}"
            caption = f"{res} px · {scores}"
            figs.append(
                f'<figure><img alt="{_e(f"{model} {res} px predicted masks")}" src="{_file_uri(path, 900)}">'
                f"<figcaption>{_e(caption)}</figcaption></figure>"
            )
        parts.append(f'<h3>{_e(model)} <span class="small muted">(seed {seed_of[model]})</span></h3>')
        if figs:
            parts.append(f'<div class="figs">{"".join(figs)}</div>')
        if missing:
            parts.append(f'<p class="small muted">No prediction overlays for {_e(", ".join(missing))}.</p>')
    return "".join(parts) if chosen else '<p class="muted">No finished trial.</p>'

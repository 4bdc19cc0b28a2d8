"""Sweep figures (PNG + PDF, paper-size fonts): the task's per-image scores (accuracy; mIoU and boundary F1 per
image for segmentation) and macro-F1 against resolution with their intervals, the significant differences and a
recommended resolution (where the summary recommends one) marked; costs against resolution; the accuracy-latency
Pareto front with error bars; the train x test resolution heatmap per model; the learning curves per model
(reports.curves); the score x cost x explanation quality trade-off per model (reports.tradeoff)."""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from resomap.plotstyle import MATRIX_CMAP, fit_text, label_points, method_colour, resolution_axis, save_figure
from resomap.plotstyle import STYLE as BASE_STYLE
from resomap.reports.tradeoff import from_zero
from resomap.summary.rows import SummaryRow
from resomap.summary.text import trivial_label

log = logging.getLogger(__name__)

STYLE = {**BASE_STYLE, "axes.grid": True, "grid.alpha": 0.3, "axes.spines.top": False, "axes.spines.right": False}
HEATMAP_CMAP = MATRIX_CMAP
save = save_figure


def _f(value: Any) -> float:
    """A finite float, or NaN for None / missing / non-numbers (rows hold None where a value is not available)."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return math.nan
    return value if math.isfinite(value) else math.nan


def _by_model(rows: list[SummaryRow]) -> dict[str, list[SummaryRow]]:
    groups: dict[str, list[SummaryRow]] = defaultdict(list)
    for row in rows:
        groups[row.model].append(row)
    return {m: sorted(rs, key=lambda r: r.resolution) for m, rs in sorted(groups.items())}


def _colours(rows: list[SummaryRow]) -> dict[str, str]:
    """One colour per model, the same in every figure (models in sorted order)."""
    return {m: f"C{i % 10}" for i, m in enumerate(sorted({r.model for r in rows}))}


def _seeds(row: SummaryRow) -> int:
    return int(row.n_seeds or 1)


def _column(rows: list[SummaryRow], column: str) -> np.ndarray:
    """float [len(rows)] of a column, NaN where a row has no value."""
    return np.array([_f(r.value(column)) for r in rows])


def _level(rows: list[SummaryRow]) -> float:
    """The confidence level of the rows' intervals (0.95 when none says)."""
    return next((_f(r.ci_level) for r in rows if math.isfinite(_f(r.ci_level))), 0.95)


def _resolution_axis(ax: plt.Axes, rows: list[SummaryRow]) -> None:
    resolution_axis(ax, [r.resolution for r in rows])


def _dodge(n_models: int, i: int) -> float:
    """Multiplicative x offset (log axis) so the error bars of several models do not overlap."""
    return 2 ** (0.06 * (i - (n_models - 1) / 2)) if n_models > 1 else 1.0


TIMING_BAND = "{level:.0%} CI of the median call (the seeds' intervals, lowest to highest)"


def metric_vs_resolution(rows: list[SummaryRow], panels: list[tuple[str, str]], title: str) -> plt.Figure | None:
    """One panel per (column, label) of a nonnegative cost; a line per model with the band of its interval (the
    rows' ``<column>_ci_low`` / ``_ci_high``: latency and throughput from the trials' timed calls) where it has one.
    No band of ± one std: for a skewed cost over two seeds it runs below zero. The axis starts at zero or above."""
    panels = [(c, lab) for c, lab in panels if any(math.isfinite(_f(r.value(c))) for r in rows)]
    if not panels:
        return None
    banded = False
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 2.8), squeeze=False)
        for ax, (col, label) in zip(axes[0], panels):
            for model, rs in _by_model(rows).items():
                x = np.array([r.resolution for r in rs])
                y = _column(rs, col)
                low, high = _column(rs, f"{col}_ci_low"), _column(rs, f"{col}_ci_high")
                colour = _colours(rows)[model]
                ax.plot(x, y, marker="o", label=model, color=colour)
                has = np.isfinite(low) & np.isfinite(high)
                if has.any():
                    banded = True
                    ax.fill_between(x, low, high, where=has, alpha=0.2, color=colour, lw=0, interpolate=False)
            _resolution_axis(ax, rows)
            values = _column(rows, col)
            values = values[np.isfinite(values)]
            if values.size and values.min() > 0 and values.max() / values.min() > 20:  # spans decades: log scale
                ax.set_yscale("log")
                label += " (log scale)"
            ax.set_ylabel(label)
            from_zero(ax, "y")
        handles, labels = axes[0][0].get_legend_handles_labels()
        if banded:
            handles.append(Patch(color="grey", alpha=0.3, lw=0))
            labels.append(fit_text(TIMING_BAND.format(level=_level(rows)), 2.2, 7))
        fig.legend(handles, labels, loc="outside right upper", frameon=False)
        fig.suptitle(title)
    return fig


def _shown_inferior(rows: list[SummaryRow]) -> dict[str, set[int]]:
    """{model: resolutions shown inferior to its reference (more than the margin below; stats.decide)}."""
    out: dict[str, set[int]] = defaultdict(set)
    for r in rows:
        if r.verdict == "inferior":
            out[r.model].add(r.resolution)
    return out


def _margin(rows: list[SummaryRow]) -> float | None:
    return next((r.margin for r in rows if r.margin is not None), None)


def quality_figure(
    rows: list[SummaryRow],
    paired: list[Mapping[str, Any]] = (),
    recommendations: list[Mapping[str, Any]] = (),
) -> plt.Figure | None:
    """Each per-image score of the task and macro-F1 against resolution: the estimate pooled over seeds with its
    bootstrap interval over test images (error bars), the seeds' spread (band of +/- one std, >= 2 seeds), '*' over
    a resolution shown inferior to its model's reference (headline score, at the margin: the summary's decision),
    and each model's smallest sufficient resolution ringed (only where the summary shows it: a recommendation row's
    `sufficient`, summary.uncertainty.sufficiency; the legend names the ring only when one is drawn). Without per-image
    predictions: the mean over seeds, no error bar.

    The t-interval across seeds is in the tables, not drawn: with two or three seeds it is too wide to read."""
    if not rows:
        return None
    panels = [(c, f"test {rows[0].say(c)}") for c in (*rows[0].score_columns, "test_macro_f1")]
    has = {c: any(math.isfinite(_f(r.value(f"{c}_pooled") or r.value(c))) for r in rows) for c, _ in panels}
    panels = [p for p in panels if has[p[0]]]
    if not panels:
        return None
    marks = _Marks(
        _shown_inferior(rows),
        {(r["model"], r["resolution"]) for r in recommendations if r.get("sufficient")},
    )
    colours = _colours(rows)
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, len(panels), figsize=(3.4 * len(panels), 3.0), squeeze=False)
        for ax, (col, label) in zip(axes[0], panels):
            _quality_panel(ax, col, _by_model(rows), colours, marks, col == rows[0].headline)
            if col == rows[0].headline:
                marks.trivial = _trivial_line(ax, rows)
            _resolution_axis(ax, rows)
            ax.set_ylabel(label)
            lo, hi = ax.get_ylim()
            ax.set_ylim(lo, hi + 0.06 * (hi - lo))  # room for the asterisks
        handles = _quality_legend(colours, marks, _level(rows), _margin(rows))
        fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 3), frameon=False)
        title = "test quality vs input resolution"
        scopes = sorted({str(r["scope"]) for r in recommendations if r.get("scope")})
        if scopes:  # whose decision the ring marks: the model's (training seeds as replicates) or these checkpoints'
            title += f" (decisions at {' and '.join(scopes)} scope)"
        withheld = _withheld(recommendations)
        if withheld:
            note = f"no sufficient resolution shown: {withheld} (summary.md says why)"
            size = float(STYLE.get("figure.titlesize", STYLE.get("font.size", 10)))
            title += "\n" + fit_text(note, 0.85 * 3.4 * len(panels), size)  # a margin for the estimate
        fig.suptitle(title)
    return fig


def _withheld(recommendations: list[Mapping[str, Any]]) -> str:
    """The models with a decision row but no smallest sufficient resolution shown, as the figure names them."""
    names = [str(r["model"]) for r in recommendations if "sufficient" in r and not r.get("sufficient")]
    return ", ".join(names)


@dataclass
class _Marks:
    """What quality_figure marks, and what its panels drew (for the legend)."""

    significant: dict[str, set[int]]  # model -> resolutions shown inferior to its reference
    chosen: set[tuple[str, int]]  # (model, resolution): the model's smallest sufficient resolution
    any_ci: bool = False
    any_band: bool = False
    any_ring: bool = False
    trivial: str = ""  # the trivial predictor's line, as the legend names it ("" when none is drawn)


def _trivial_line(ax: plt.Axes, rows: list[SummaryRow]) -> str:
    """The task's trivial predictor (the majority class) on the headline panel: a dashed line through its score at
    each resolution (the same test images at every resolution: a flat line; test sets that differ by model: the
    lowest and highest of them, each a line). Returns the legend's words, "" when no row has its score."""
    label = trivial_label(rows)
    by_res: dict[int, list[float]] = defaultdict(list)
    for r in rows:
        if math.isfinite(_f(r.trivial_score)):
            by_res[r.resolution].append(_f(r.trivial_score))
    if label is None or not by_res:
        return ""
    x = np.array(sorted(by_res), dtype=float)
    low, high = (np.array([f(by_res[int(v)]) for v in x]) for f in (min, max))
    for y in {tuple(low), tuple(high)}:
        ax.plot(x, y, color="0.35", ls="--", lw=1, zorder=2)
    return label


def _quality_panel(
    ax: plt.Axes, col: str, models: dict[str, list[SummaryRow]], colours: dict[str, str], marks: _Marks, tested: bool
) -> None:
    """One panel of quality_figure: per model the pooled estimate (else the mean) with its interval, the seeds'
    band, the recommended ring and the significance asterisks."""
    for i, (model, rs) in enumerate(models.items()):
        x = np.array([r.resolution for r in rs], dtype=float) * _dodge(len(models), i)
        pooled, mean = _column(rs, f"{col}_pooled"), _column(rs, col)
        y = np.where(np.isfinite(pooled), pooled, mean)
        low, high = _column(rs, f"{col}_ci_low"), _column(rs, f"{col}_ci_high")
        has_ci = np.isfinite(low) & np.isfinite(high)
        colour = colours[model]
        ax.plot(x, y, marker="o", ms=4, label=model, zorder=3, color=colour)
        if has_ci.any():
            marks.any_ci = True
            yerr = np.vstack([y - low, high - y])[:, has_ci]
            ax.errorbar(x[has_ci], y[has_ci], yerr=yerr, fmt="none", ecolor=colour, capsize=3, lw=1, zorder=3)
        std = _column(rs, f"{col}_std")
        band = np.isfinite(std) & np.array([_seeds(r) > 1 for r in rs])
        if band.any():
            marks.any_band = True
            spread = np.where(band, std, 0.0)
            ax.fill_between(x, y - spread, y + spread, color=colour, alpha=0.15, lw=0, zorder=1)
        for j, r in enumerate(rs):
            if (model, r.resolution) in marks.chosen and np.isfinite(y[j]):
                marks.any_ring = True
                ax.plot(x[j], y[j], marker="o", ms=11, mfc="none", mec=colour, mew=1.6, zorder=4)
            if tested and r.resolution in marks.significant.get(model, ()):
                top = high[j] if has_ci[j] else y[j]
                ax.annotate("*", (x[j], top), xytext=(0, 1), textcoords="offset points", ha="center", va="bottom",
                            fontsize=12, fontweight="bold", color=colour)  # fmt: skip


def _quality_legend(colours: dict[str, str], marks: _Marks, level: float, margin: float | None) -> list[Any]:
    handles: list[Any] = [Line2D([], [], color=c, marker="o", ms=4, label=m) for m, c in colours.items()]
    if marks.any_ci:
        ci_label = f"{level:.0%} CI (bootstrap over test images)"
        handles.append(Line2D([], [], color="grey", marker="|", ms=8, lw=1, label=ci_label))
    if marks.any_band:
        handles.append(Patch(color="grey", alpha=0.3, lw=0, label="± 1 std across seeds"))
    if marks.any_ring:
        handles.append(
            Line2D([], [], ls="none", marker="o", ms=9, mfc="none", mec="black", label="smallest sufficient")
        )
    if marks.trivial:
        handles.append(Line2D([], [], color="0.35", ls="--", lw=1, label=marks.trivial))
    if any(marks.significant.values()):
        sig_label = f"shown more than {margin:g} below the reference (one-sided, α = {1 - level:.2g})"
        handles.append(Line2D([], [], ls="none", marker="$*$", ms=8, color="black", label=sig_label))
    return handles


def pareto_figure(rows: list[SummaryRow]) -> plt.Figure | None:
    """Accuracy (pooled, with its bootstrap interval) against inference latency (mean over seeds, with its interval
    from the trials' timed calls where the rows have one) for every model x resolution; the front of the estimates
    (the rows' `on_estimate_front`, decided by the summary: no point is both faster and more accurate) drawn as a
    step line through its points."""
    pts = [r for r in rows if math.isfinite(_f(r.latency_ms)) and math.isfinite(_f(r.score(r.headline)[0]))]
    if not pts:
        return None
    words = pts[0].say(pts[0].headline)
    front = sorted((r for r in pts if r.on_estimate_front), key=lambda r: (_f(r.latency_ms), -r.score(r.headline)[0]))
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(4.6, 3.4))
        any_ci, any_timed, points = _pareto_points(ax, pts, _colours(rows))
        if front:
            fx = [_f(r.latency_ms) for r in front]
            fy = [_f(r.score(r.headline)[0]) for r in front]
            ax.step(fx, fy, where="post", color="black", ls="--", lw=1, label="Pareto front", zorder=0)
        costs = [_f(r.latency_ms) for r in pts]
        if min(costs) > 0 and max(costs) / min(costs) > 20:
            ax.set_xscale("log")
        from_zero(ax, "x")
        from_zero(ax, "y")
        ax.set_xlabel("inference latency, batch 1 (ms)")
        ax.set_ylabel(f"test {words}")
        ax.set_title(f"{words} vs latency (labels: resolution in px)")
        handles, labels = ax.get_legend_handles_labels()
        notes = []
        if any_ci:
            notes.append(f"{words}: {_level(rows):.0%} CI over test images")
        if any_timed:
            notes.append("latency: " + TIMING_BAND.format(level=_level(rows)))
        caption = ["error bars: " + "; ".join(notes)] if notes else []
        if any(r.profile_noisy for r in pts):
            caption.append("circled, '?': latency measured on a disturbed machine (noisy)")
        fig.legend(handles, labels, loc="outside right center", frameon=False)  # level with the data, not the title
        if caption:
            fig.supxlabel("\n".join(caption), fontsize=7, x=0.02, ha="left")
        label_points(ax, points)  # last, where the layout puts the axes: no two labels overlap
    return fig


def _pareto_points(ax: plt.Axes, pts: list[SummaryRow], colours: dict[str, str]) -> tuple[bool, bool, list]:
    """Each model's points with their error bars, noisy ones circled; returns (any accuracy interval drawn, any
    latency interval drawn, the points' labels (text, x, y, colour): the resolution)."""
    labels = []
    any_ci = any_timed = False
    for model, rs in _by_model(pts).items():
        x = _column(rs, "latency_ms")
        y = np.array([_f(r.score(r.headline)[0]) for r in rs])
        low, high = _column(rs, f"{rs[0].headline}_ci_low"), _column(rs, f"{rs[0].headline}_ci_high")
        xlow, xhigh = _column(rs, "latency_ms_ci_low"), _column(rs, "latency_ms_ci_high")
        yerr = np.vstack([np.nan_to_num(y - low), np.nan_to_num(high - y)])
        any_ci |= bool(np.isfinite(low).any())
        any_timed |= bool(np.isfinite(xlow).any())
        colour = colours[model]
        xerr = np.vstack([np.nan_to_num(x - xlow), np.nan_to_num(xhigh - x)])
        ax.errorbar(x, y, yerr=yerr, xerr=xerr, fmt="o", ms=4, capsize=2, lw=1, label=model, color=colour)
        noisy = np.array([bool(r.profile_noisy) for r in rs])
        if noisy.any():  # disturbed latency: an open marker around the point
            ax.scatter(x[noisy], y[noisy], s=90, facecolors="none", edgecolors=colour, lw=1, ls=":")
        labels += [(f"{r.resolution}{'?' if r.profile_noisy else ''}", xi, yi, colour) for r, xi, yi in zip(rs, x, y)]
    return any_ci, any_timed, labels


def cross_resolution_heatmap(model: str, rows: list[SummaryRow]) -> plt.Figure | None:
    """Train resolution (rows) x test resolution (columns) accuracy for one model (FixRes-style)."""
    rs = [r for r in rows if r.model == model and r.cross_resolution]
    if not rs:
        return None
    train_res = sorted(r.resolution for r in rs)
    test_res = sorted({int(k) for r in rs for k in r.cross_resolution})
    grid = np.full((len(train_res), len(test_res)), np.nan)
    for r in rs:
        for k, v in r.cross_resolution.items():
            grid[train_res.index(r.resolution), test_res.index(int(k))] = _f(v)
    if not np.isfinite(grid).any():
        return None
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(1.0 + 0.8 * len(test_res), 0.9 + 0.7 * len(train_res)))
        im = ax.imshow(grid, cmap=HEATMAP_CMAP, vmin=np.nanmin(grid), vmax=np.nanmax(grid))
        for i in range(len(train_res)):
            for j in range(len(test_res)):
                if np.isfinite(grid[i, j]):
                    colour = "white" if grid[i, j] < np.nanmean(grid) else "black"
                    ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", fontsize=8, color=colour)
        ax.set_xticks(range(len(test_res)), [str(t) for t in test_res])
        ax.set_yticks(range(len(train_res)), [str(t) for t in train_res])
        ax.set_xlabel("test resolution (px)")
        ax.set_ylabel("train resolution (px)")
        words = rs[0].say("test_accuracy")
        ax.set_title(f"{model}: test {words}")
        ax.grid(False)
        for side in ("top", "right"):
            ax.spines[side].set_visible(True)
        fig.colorbar(im, ax=ax, label=words, shrink=0.8)
    return fig


def explain_cost_figure(rows: list[SummaryRow]) -> plt.Figure | None:
    """Explanation seconds per method vs resolution: a panel per model, a line per method (the rows'
    `explain_seconds/<method>` columns, mean over seeds); log scale when the times span more than 20x."""
    by_model = {
        m: rs for m, rs in _by_model(rows).items() if any(_f(v) > 0 for r in rs for v in r.explain_seconds.values())
    }
    if not by_model:
        return None
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, len(by_model), figsize=(3.4 * len(by_model), 2.8), squeeze=False)
        for ax, (model, rs) in zip(axes[0], by_model.items()):
            methods = sorted({m for r in rs for m in r.explain_seconds})
            values = []
            for method in methods:
                pts = [(r.resolution, _f(r.explain_seconds.get(method))) for r in rs]
                pts = [(x, y) for x, y in pts if math.isfinite(y) and y > 0]
                if pts:
                    ax.plot(*zip(*pts), marker="o", label=method, color=method_colour(method))
                    values += [y for _, y in pts]
            _resolution_axis(ax, rs)
            if values and max(values) / min(values) > 20:
                ax.set_yscale("log")
            ax.set_ylabel("seconds for the probe set")
            ax.set_title(model)
        handles = {}
        for ax in axes[0]:
            handles.update({label: h for h, label in zip(*ax.get_legend_handles_labels(), strict=True)})
        fig.legend(list(handles.values()), list(handles), loc="outside right upper", frameon=False)
        fig.suptitle("explanation seconds per method vs resolution")
    return fig


def sweep_figures(
    rows: list[SummaryRow],
    out_dir: Path,
    paired: list[Mapping[str, Any]] = (),
    recommendations: list[Mapping[str, Any]] = (),
    trials: Iterable[Mapping[str, Any]] = (),
    front3: list[Mapping[str, Any]] = (),
) -> list[Path]:
    """Every summary figure that the rows have data for; returns the written files. ``paired`` and
    ``recommendations`` (a SweepSummary's) add the significance marks and the ring of a smallest sufficient one;
    ``trials`` (its result.json trees) the learning curves per model (reports.curves); ``front3`` (its
    three-way trade-off, known once the explanations are compared: the sweep draws it then) the trade-off figure
    (reports.tradeoff)."""
    from resomap.reports.curves import learning_curve_figures
    from resomap.reports.tradeoff import tradeoff_files

    written: list[Path] = []
    cost = [
        ("latency_ms", "latency, batch 1 (ms)"),
        ("throughput_ips", "inference throughput (images/s)"),
        ("peak_memory_mb", "peak memory (MB)"),
    ]
    for stem, fig in (
        ("accuracy_vs_resolution", quality_figure(rows, paired, recommendations)),
        ("cost_vs_resolution", metric_vs_resolution(rows, cost, "inference cost vs input resolution")),
        ("pareto_accuracy_latency", pareto_figure(rows)),
        ("explain_cost_vs_resolution", explain_cost_figure(rows)),
    ):
        if fig is not None:
            written += save(fig, out_dir, stem)
    for model in sorted({r.model for r in rows}):
        fig = cross_resolution_heatmap(model, rows)
        if fig is not None:
            written += save(fig, out_dir, f"train_test_resolution_{model}")
    return written + tradeoff_files(front3, out_dir) + learning_curve_figures(trials, out_dir)

"""Sweep figures (PNG + PDF, paper-size fonts): metrics and costs against resolution, the accuracy-latency
Pareto front, and the train x test resolution heatmap per model."""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from resomap.plotstyle import MATRIX_CMAP, save_figure
from resomap.plotstyle import STYLE as BASE_STYLE
from resomap.reports.summary import pareto_front

log = logging.getLogger(__name__)

STYLE = {**BASE_STYLE, "axes.grid": True, "grid.alpha": 0.3}
HEATMAP_CMAP = MATRIX_CMAP
save = save_figure


def _by_model(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[row["model"]].append(row)
    return {m: sorted(rs, key=lambda r: r["resolution"]) for m, rs in sorted(groups.items())}


def metric_vs_resolution(rows: list[dict[str, Any]], panels: list[tuple[str, str]], title: str) -> plt.Figure | None:
    """One panel per (column, label); a line per model with +/- std bands where seeds > 1."""
    panels = [(c, lab) for c, lab in panels if any(math.isfinite(r.get(c, math.nan)) for r in rows)]
    if not panels:
        return None
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 2.8), squeeze=False)
        for ax, (col, label) in zip(axes[0], panels):
            for model, rs in _by_model(rows).items():
                x = np.array([r["resolution"] for r in rs])
                y = np.array([r.get(col, math.nan) for r in rs], dtype=float)
                err = np.array([r.get(f"{col}_std", 0.0) for r in rs], dtype=float)
                ax.plot(x, y, marker="o", label=model)
                if any(r.get("seeds", 1) > 1 for r in rs):
                    ax.fill_between(x, y - err, y + err, alpha=0.2)
            ax.set_xscale("log", base=2)
            ax.set_xticks(sorted({r["resolution"] for r in rows}))
            ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
            ax.set_xlabel("input resolution (px)")
            ax.set_ylabel(label)
        axes[0][0].legend(loc="best")
        fig.suptitle(title)
        fig.tight_layout()
    return fig


def pareto_figure(rows: list[dict[str, Any]]) -> plt.Figure | None:
    points = [(r.get("latency_ms", math.nan), r.get("test_accuracy", math.nan)) for r in rows]
    if not any(math.isfinite(c) and math.isfinite(s) for c, s in points):
        return None
    front = pareto_front(points)
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(4.2, 3.2))
        for model, rs in _by_model(rows).items():
            ax.scatter([r["latency_ms"] for r in rs], [r["test_accuracy"] for r in rs], label=model)
            for r in rs:
                ax.annotate(
                    str(r["resolution"]),
                    (r["latency_ms"], r["test_accuracy"]),
                    fontsize=7,
                    xytext=(3, 3),
                    textcoords="offset points",
                )
        ax.plot([points[i][0] for i in front], [points[i][1] for i in front], "k--", lw=1, label="Pareto front")
        ax.set_xlabel("inference latency, batch 1 (ms)")
        ax.set_ylabel("test accuracy")
        ax.set_title("accuracy vs latency (labels: resolution)")
        ax.legend(loc="best")
        fig.tight_layout()
    return fig


def cross_resolution_heatmap(model: str, rows: list[dict[str, Any]]) -> plt.Figure | None:
    """Train resolution (rows) x test resolution (columns) accuracy for one model (FixRes-style)."""
    rs = [r for r in rows if r["model"] == model and r.get("cross_resolution")]
    if not rs:
        return None
    train_res = sorted(r["resolution"] for r in rs)
    test_res = sorted({int(k) for r in rs for k in r["cross_resolution"]})
    grid = np.full((len(train_res), len(test_res)), np.nan)
    for r in rs:
        for k, v in r["cross_resolution"].items():
            grid[train_res.index(r["resolution"]), test_res.index(int(k))] = v
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
        ax.set_title(f"{model}: test accuracy")
        ax.grid(False)
        fig.colorbar(im, ax=ax, label="accuracy", shrink=0.8)
        fig.tight_layout()
    return fig


def sweep_figures(rows: list[dict[str, Any]], out_dir: Path) -> list[Path]:
    """Every summary figure that the rows have data for; returns the written files."""
    written: list[Path] = []
    quality = [("test_accuracy", "test accuracy"), ("test_macro_f1", "test macro-F1")]
    cost = [
        ("latency_ms", "latency, batch 1 (ms)"),
        ("throughput_ips", "inference images/s"),
        ("peak_memory_mb", "peak memory (MB)"),
    ]
    for stem, fig in (
        ("accuracy_vs_resolution", metric_vs_resolution(rows, quality, "quality vs resolution")),
        ("cost_vs_resolution", metric_vs_resolution(rows, cost, "cost vs resolution")),
        ("pareto_accuracy_latency", pareto_figure(rows)),
    ):
        if fig is not None:
            written += save(fig, out_dir, stem)
    for model in sorted({r["model"] for r in rows}):
        fig = cross_resolution_heatmap(model, rows)
        if fig is not None:
            written += save(fig, out_dir, f"train_test_resolution_{model}")
    return written

"""The three-way trade-off's figure (figures/tradeoff_score_cost_quality): a panel per model, drawn from summary.json's
``front3`` (resomap.summary.front decides it), nothing recomputed."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from resomap.summary.front import ON_FRONT
from resomap.summary.front import finite as _finite

FIGURE_STEM = "tradeoff_score_cost_quality"


def tradeoff_figure(front3: Sequence[Mapping[str, Any]]) -> Any:
    """A panel per model: score against cost, each point with its intervals as error bars, coloured by its
    explanation quality (a colour bar per panel names it; grey where the model has none), on the front filled and
    dropped hollow, labelled with its resolution. None when no model has a front."""
    entries = [e for e in front3 if any(p.get("cost") for p in e["points"])]
    if not entries:
        return None
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from resomap.plotstyle import STYLE, fit_text, label_points

    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, len(entries), figsize=(4.2 * len(entries), 3.4), squeeze=False)
        labels = [_tradeoff_panel(ax, entry, fig, fit_text) for ax, entry in zip(axes[0], entries, strict=True)]
        level = float(entries[0].get("level") or 0.95)
        dropped = "dropped: shown worse on one axis and better on none"
        handles = [
            Line2D([], [], ls="none", marker="o", ms=6, color="0.3", label=ON_FRONT),
            Line2D([], [], ls="none", marker="o", ms=6, mfc="none", mec="0.3", label=dropped),
            Line2D([], [], color="0.3", marker="|", ms=8, lw=1, label=f"{level:.0%} intervals (none: one value)"),
        ]
        width = fig.get_figwidth()
        fig.legend(handles=handles, loc="outside lower center", ncol=3 if len(entries) > 1 else 1, frameon=False,
                   fontsize=7)  # fmt: skip
        title = "score x cost x explanation quality per model (labels: resolution in px)"
        fig.suptitle(fit_text(title, width - 0.3, float(STYLE.get("figure.titlesize", 10))))
        for ax, found in zip(axes[0], labels, strict=True):
            label_points(ax, found)  # last, where the layout puts the axes
    return fig


def _tradeoff_panel(ax: Any, entry: Mapping[str, Any], fig: Any, fit_text: Any) -> list[tuple[str, float, float, str]]:
    """One model's points (error bars, quality as colour, front filled and dropped hollow); returns their labels."""
    import matplotlib as mpl

    axes = {a["name"]: a for a in entry["axes"]}
    points = [p for p in entry["points"] if p.get("cost")]
    quality = [p["quality"][0] if p.get("quality") else math.nan for p in points]
    finite = [q for q in quality if _finite(q)]
    norm = mpl.colors.Normalize(min(finite), max(finite)) if finite else None
    if norm is not None and norm.vmin == norm.vmax:
        norm = mpl.colors.Normalize(norm.vmin - 0.5, norm.vmax + 0.5)
    cmap = mpl.colormaps["viridis"]
    labels = []
    for p, q in zip(points, quality, strict=True):
        colour = cmap(norm(q)) if norm is not None and _finite(q) else (0.5, 0.5, 0.5, 1.0)
        (x, xlo, xhi), (y, ylo, yhi) = p["cost"], p["score"]
        xerr = [[x - xlo], [xhi - x]] if _finite(xlo) and _finite(xhi) else None
        yerr = [[y - ylo], [yhi - y]] if _finite(ylo) and _finite(yhi) else None
        ax.errorbar([x], [y], xerr=xerr, yerr=yerr, fmt="none", ecolor=colour, capsize=2, lw=1, zorder=2)
        face = colour if p["on_front"] else "none"
        ax.scatter([x], [y], s=36, facecolors=[face], edgecolors=[colour], linewidths=1.4, zorder=3,
                   gid="front" if p["on_front"] else "dropped")  # fmt: skip
        labels.append((str(p["resolution"]), x, y, "0.2"))
    if norm is not None:
        bar = fig.colorbar(mpl.cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, shrink=0.85)
        bar.set_label(fit_text(f"quality: {axes['quality']['words']}", 2.6, 7), fontsize=7)
    from_zero(ax, "x")  # a cost and a score: neither below zero
    from_zero(ax, "y")
    ax.set_xlabel(axes["cost"]["words"])
    ax.set_ylabel(f"test {axes['score']['words']}")
    ax.set_title(entry["model"] if norm is not None else f"{entry['model']} (no explanation quality: grey)")
    return labels


def from_zero(ax: Any, which: str) -> None:
    """A linear axis (``which``: "x" or "y") of a nonnegative quantity starts at zero where its automatic limits
    (the margin around the data and its error bars) would start below it."""
    x = which == "x"
    low, high = ax.get_xlim() if x else ax.get_ylim()
    if (ax.get_xscale() if x else ax.get_yscale()) == "linear" and low < 0 <= high:
        (ax.set_xlim if x else ax.set_ylim)(0, high)


def tradeoff_files(front3: Sequence[Mapping[str, Any]], out_dir: Path) -> list[Path]:
    """figures/tradeoff_score_cost_quality.png/.pdf (plotstyle.save_figure); nothing when no model has a front."""
    if not any(p.get("cost") for e in front3 for p in e["points"]):  # tradeoff_figure's None
        return []
    from resomap.plotstyle import save_drawn

    return save_drawn(tradeoff_figure, (list(front3),), out_dir, FIGURE_STEM)  # drawn by a worker when in parallel

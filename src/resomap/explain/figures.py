"""Explanation figures (PNG + PDF, paper-size fonts), from plain arrays and dicts.

Conventions: attribution maps use MAP_CMAP over the grayscale image, each panel scaled to its own [min, max]
for display only (the colour bar reads 'low -> high'); agreement matrices use MATRIX_CMAP on a fixed range
([-1, 1] for Spearman, [0, 1] otherwise) with the value written in each cell; a resolution matrix with >= 2
seeds has the cross-seed agreement (the noise floor) on its outlined diagonal.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from resomap.plotstyle import MAP_CMAP, MATRIX_CMAP, STYLE, save_figure

__all__ = [
    "MAP_CMAP",
    "OVERLAY_ALPHA",
    "STYLE",
    "agreement_matrix",
    "probe_grid",
    "quality_vs_resolution",
    "save_figure",
]

log = logging.getLogger(__name__)

OVERLAY_ALPHA = 0.55


def _gray(image: np.ndarray) -> np.ndarray:
    img = np.asarray(image, dtype=np.float64)
    img = img.mean(axis=0) if img.ndim == 3 else img  # [C,H,W] -> [H,W]
    return (img - img.min()) / max(np.ptp(img), 1e-12)


def _unit(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float64)
    return (m - m.min()) / max(np.ptp(m), 1e-12)


def probe_grid(
    images: Mapping[int, np.ndarray], maps: Mapping[str, Mapping[int, np.ndarray]], title: str = ""
) -> plt.Figure:
    """One probe image: rows = methods, columns = resolutions; images[res] is [H,W] or [C,H,W], maps[m][res] [H,W]."""
    resolutions = sorted(images)
    methods = list(maps)
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(
            len(methods), len(resolutions), figsize=(1.4 * len(resolutions) + 0.8, 1.4 * len(methods)), squeeze=False
        )
        im = None
        for i, method in enumerate(methods):
            for j, res in enumerate(resolutions):
                ax = axes[i, j]
                ax.imshow(_gray(images[res]), cmap="gray", interpolation="nearest")
                if res in maps[method]:
                    im = ax.imshow(_unit(maps[method][res]), cmap=MAP_CMAP, alpha=OVERLAY_ALPHA, vmin=0, vmax=1)
                ax.set_xticks([])
                ax.set_yticks([])
                if i == 0:
                    ax.set_title(f"{res} px")
                if j == 0:
                    ax.set_ylabel(method)
        if im is not None:
            bar = fig.colorbar(im, ax=axes, fraction=0.03, ticks=[0, 1])
            bar.ax.set_yticklabels(["low", "high"])
        if title:
            fig.suptitle(title, y=1.03)
    return fig


def agreement_matrix(
    matrix: np.ndarray, labels: Sequence, metric: str, title: str = "", *, floor_diagonal: bool = False
) -> plt.Figure:
    """A labels x labels agreement heatmap (resolutions or methods) with values in the cells (nan: 'n.a.').

    `floor_diagonal`: the diagonal holds the cross-seed agreement at each resolution (the noise floor), not 1.0;
    its cells are outlined and the figure says so under the title.
    """
    from matplotlib.patches import Rectangle

    matrix = np.asarray(matrix, dtype=np.float64)
    vmin = -1.0 if metric == "spearman" else 0.0
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(0.5 * len(labels) + 2.4, 0.5 * len(labels) + 1.8))
        im = ax.imshow(np.ma.masked_invalid(matrix), cmap=MATRIX_CMAP, vmin=vmin, vmax=1.0)
        ax.set_xticks(range(len(labels)), [str(x) for x in labels], rotation=45)
        ax.set_yticks(range(len(labels)), [str(x) for x in labels])
        for (i, j), v in np.ndenumerate(matrix):
            text = f"{v:.2f}" if np.isfinite(v) else "n.a."
            colour = "w" if np.isfinite(v) and v < (vmin + 1) / 2 else "k"
            ax.text(j, i, text, ha="center", va="center", color=colour, fontsize=7)
        if floor_diagonal:
            for i in range(len(labels)):
                ax.add_patch(Rectangle((i - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="k", linewidth=1.2))
            ax.set_xlabel("diagonal (outlined): agreement of two seeds at the same resolution")
        fig.colorbar(im, ax=ax, fraction=0.046, label=metric)
        ax.set_title(title or metric)
    return fig


def quality_vs_resolution(values: Mapping[str, Mapping[int, float]], metric: str, title: str = "") -> plt.Figure:
    """values[method][resolution] -> one line per method against resolution."""
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(3.4, 2.4))
        for method, per_res in values.items():
            res = sorted(per_res)
            ax.plot(res, [per_res[r] for r in res], marker="o", label=method)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("resolution (px)")
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
        ax.legend(frameon=False)
        if title:
            ax.set_title(title)
    return fig

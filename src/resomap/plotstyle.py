"""One look for every ResoMap figure: paper-size fonts, one colour map for matrices, PNG + PDF output."""

from __future__ import annotations

import logging
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

log = logging.getLogger(__name__)

STYLE = {
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "figure.dpi": 100,
    "savefig.dpi": 200,
}
MATRIX_CMAP = "viridis"  # every matrix figure: agreement matrices, train x test heatmaps
MAP_CMAP = "inferno"  # attribution maps over the grayscale image


def save_figure(fig: plt.Figure, out_dir: str | Path, stem: str) -> list[Path]:
    """Write `stem`.png and `stem`.pdf under out_dir and close the figure."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{stem}.png", out / f"{stem}.pdf"]
    for path in paths:
        fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    log.debug("figure written: %s", paths[0])
    return paths

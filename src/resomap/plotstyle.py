"""One look for every ResoMap figure: paper-size fonts, one colour map for matrices, PNG + PDF output."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from resomap.atomic import save_atomic

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
    # every label, legend and colour bar inside the canvas (bbox_inches="tight" then only trims the margin)
    "figure.constrained_layout.use": True,
}
# Okabe & Ito's colour-blind-safe palette: one colour per explanation method across every figure
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
METHODS = ("gradcam", "gradcam++", "layercam", "eigencam", "integrated_gradients", "saliency", "shap", "lime")
MATRIX_CMAP = "viridis"  # every matrix figure: agreement matrices, train x test heatmaps
MAP_CMAP = "inferno"  # attribution maps over the grayscale image


def fit_text(text: str, width_in: float, fontsize: float) -> str:
    """`text` wrapped (line by line) to about `width_in` inches of `fontsize`-pt type, so a title never runs off a
    narrow figure (a character is about 0.55 of the font size wide)."""
    import textwrap

    chars = max(12, int(width_in * 72 / (0.55 * fontsize)))
    return "\n".join(textwrap.fill(line, chars) for line in str(text).splitlines())


def method_colour(method: str) -> str:
    """The colour of an explanation method in every figure (a method not listed gets a fixed one by its name)."""
    name = str(method).lower()
    i = METHODS.index(name) if name in METHODS else sum(name.encode()) % len(PALETTE)
    return PALETTE[i % len(PALETTE)]


def resolution_axis(ax: plt.Axes, resolutions: Iterable[int], label: str = "input resolution (px)") -> None:
    """A log2 x axis ticked at exactly the sweep's resolutions, written as plain numbers of px."""
    from matplotlib.ticker import FixedFormatter, FixedLocator, NullLocator

    ticks = sorted({int(r) for r in resolutions})
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FixedFormatter([str(t) for t in ticks]))
    ax.xaxis.set_minor_locator(NullLocator())
    if len(ticks) == 1:
        ax.set_xlim(ticks[0] / 1.5, ticks[0] * 1.5)
    else:
        ax.set_xlim(ticks[0] / 2**0.25, ticks[-1] * 2**0.25)
    ax.set_xlabel(label)


def save_figure(fig: plt.Figure, out_dir: str | Path, stem: str, formats: Iterable[str] = ("png", "pdf")) -> list[Path]:
    """Write `stem`.png and `stem`.pdf (or the ``formats`` given: a picture of images gains nothing as a vector
    file) under out_dir (atomically: resomap.atomic) and close the figure."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{stem}.{suffix}" for suffix in formats]
    for path in paths:
        # the style's dpi given here: rc_context's savefig.dpi ends with the block that drew the figure
        save_atomic(path, lambda tmp: fig.savefig(tmp, bbox_inches="tight", dpi=STYLE["savefig.dpi"]))
    plt.close(fig)
    log.debug("figure written: %s", paths[0])
    return paths

"""The one-model explanation figure: probe images (top row) and one method's map over each (bottom row)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from resomap.reports.explain_figures import MAP_CMAP, OVERLAY_ALPHA, STYLE, plt


def _unit(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    return (a - a.min()) / max(float(np.ptp(a)), 1e-12)


def method_overlays(images: np.ndarray, maps: np.ndarray, captions: Sequence[str], title: str) -> plt.Figure:
    """images uint8 [N,C,r,r] (or [N,r,r]), maps [N,r,r]: one column per probe image, the map over the image."""
    n = len(maps)
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(2, n, figsize=(1.4 * n + 0.8, 3.0), squeeze=False)
        im = None
        for i in range(n):
            gray = _unit(images[i].mean(axis=0) if images[i].ndim == 3 else images[i])
            for row in (0, 1):
                ax = axes[row, i]
                ax.imshow(gray, cmap="gray", interpolation="nearest")
                ax.set_xticks([])
                ax.set_yticks([])
            im = axes[1, i].imshow(_unit(maps[i]), cmap=MAP_CMAP, alpha=OVERLAY_ALPHA, vmin=0, vmax=1)
            axes[0, i].set_title(captions[i] if i < len(captions) else f"#{i}")
        axes[0, 0].set_ylabel("image")
        axes[1, 0].set_ylabel("map")
        if im is not None:
            bar = fig.colorbar(im, ax=axes, fraction=0.03, ticks=[0, 1])
            bar.ax.set_yticklabels(["low", "high"])
        fig.suptitle(title, y=1.02)
    return fig

"""Where the maps sit, drawn: per model, its mean maps over the probe images (|map| with mass 1 on the common grid,
explain.evaluation.placement) side by side across resolutions, a row per method and explained class, each panel
titled with its step's verdict against the reference (explain.evaluation.where), its share of mass in the region
and its centre of mass marked."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from resomap.explain.evaluation.placement import REGION_WORDS
from resomap.explain.evaluation.where import VERDICT_WORDS
from resomap.plotstyle import MAP_CMAP, STYLE, class_labels, fit_text, glyph_fonts, plt, save_drawn

Panel = tuple[str, np.ndarray, tuple[float, float]]  # title, mean map [g,g], centre of mass (y, x) in fractions


def mean_maps(rows: Sequence[tuple[str, Sequence[Panel | None]]], columns: Sequence[str], title: str) -> Any:
    """A grid of mean maps: one row per (label, panels), one column per resolution (None: no map there)."""
    n_rows, n_cols = len(rows), len(columns)
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(n_rows, n_cols, figsize=(2.0 * n_cols + 1.2, 2.0 * n_rows + 0.6), squeeze=False)
        for i, (label, panels) in enumerate(rows):
            for j, panel in enumerate(panels):
                ax = axes[i][j]
                ax.set_xticks([])
                ax.set_yticks([])
                if panel is None:
                    ax.set_axis_off()
                    continue
                words, mean, (cy, cx) = panel
                side = mean.shape[-1]
                ax.imshow(mean, cmap=MAP_CMAP, interpolation="nearest")
                ax.plot([cx * side - 0.5], [cy * side - 0.5], marker="+", color="cyan", ms=9, mew=1.6)
                ax.set_title(fit_text(f"{columns[j]}: {words}", 1.9, 7), fontsize=7)
                if j == 0:
                    ax.set_ylabel(fit_text(label, 1.9, 7), fontsize=7)
        fig.suptitle(fit_text(title, fig.get_figwidth() - 0.2, 9), fontsize=9)
        glyph_fonts(fig)
    return fig


def where_figures(placements: Sequence[Any], decisions: Sequence[Mapping[str, Any]], out_dir: Path) -> list[Path]:
    """Per model one figure, <model>_where.png (and .pdf), of its placements with the decisions' verdicts."""
    files: list[Path] = []
    verdict = {(r["model"], r["method"], int(r["resolution"])): r for r in decisions}
    for model in sorted({p.model for p in placements}):
        mine = [p for p in placements if p.model == model]
        resolutions = sorted({r for p in mine for r in p.mean})
        if not resolutions:  # no placement measured (e.g. no probe image of a class with a mask): nothing to draw
            continue
        reference = next((int(r["reference"]) for r in decisions if r["model"] == model), max(resolutions))
        rows = []
        for p in mine:
            names = class_labels(p.classes)
            for cls in sorted({c for by in p.mean.values() for c in by}):
                panels: list[Panel | None] = []
                for res in resolutions:
                    if cls not in p.mean.get(res, {}):
                        panels.append(None)
                        continue
                    step = verdict.get((model, p.method, res))
                    said = "reference" if res == reference else VERDICT_WORDS.get(step["verdict"], "") if step else ""
                    words = f"{said}; share {p.share[res][cls]:.2f}"
                    panels.append((words, p.mean[res][cls], p.centre[res][cls]))
                name = names[cls] if 0 <= cls < len(names) else str(cls)
                rows.append(
                    (f"{p.method}, class {name} ({p.count.get(resolutions[-1], {}).get(cls, 0)} images)", panels)
                )
        if not rows:
            continue
        region = REGION_WORDS.get(mine[0].region, "the region")
        title = (
            f"{model}: mean maps over the probe images (|map| of mass 1 on the common grid; + its centre of mass;"
            f" share: mass in {region}), each step's verdict against {reference} px"
        )
        files += save_drawn(mean_maps, (rows, [f"{r} px" for r in resolutions], title), out_dir, f"{model}_where")
    return files

"""Explanation figures (PNG + PDF, paper-size fonts), from plain arrays and dicts, and the probe overlays of
the HTML report and MLflow (`probe_overlays`: RGB arrays, no figure; reports.probe_images captions them as PNGs).

Conventions: attribution maps use MAP_CMAP over the grayscale image. Colour scale: a method whose maps are raw
magnitudes (the captum methods) gets one scale per probe image across resolutions, on the attribution per unit
image area (`per_area`: a map times its pixel count, since per-pixel attribution shrinks as the pixel count grows),
[0, the 99th percentile of those maps at every resolution], so a map that is weaker at one resolution looks weaker
and one that is the same up to resolution looks the same; a CAM method (registered with needs_spatial_layer:
grad-cam's maps are each scaled to [0, 1] by the library) is shown per map, [min, max]. The caption names the
scale. Agreement matrices use MATRIX_CMAP on a fixed range ([-1, 1] for Spearman, [0, 1]
otherwise) with the value written in each cell; a resolution matrix with >= 2 seeds has the cross-seed agreement
(the noise floor) on its outlined diagonal.

matplotlib is imported by the functions that draw (and by the names MAP_CMAP, STYLE, save_figure, plt, read
from resomap.plotstyle on first use), so `probe_overlays` can be imported without it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from resomap.explain.evaluation.measures import per_area
from resomap.explain.methods.registry import per_map_scaled
from resomap.results import QUALITY_SCORES

__all__ = [  # and, read from resomap.plotstyle on first use: MAP_CMAP, STYLE, save_figure, plt
    "OVERLAY_ALPHA",
    "ProbeOverlay",
    "agreement_matrices",
    "agreement_matrix",
    "probe_grid",
    "probe_overlays",
    "quality_vs_resolution",
    "shared_scales",
]

log = logging.getLogger(__name__)

OVERLAY_ALPHA = 0.55
SCALE_PERCENTILE = 99.0  # upper end of a shared colour scale: robust to a few extreme pixels
_LAZY = {"MAP_CMAP", "MATRIX_CMAP", "STYLE", "save_figure"}


def __getattr__(name: str) -> Any:  # the plotting names, imported (with matplotlib) on first use
    if name in _LAZY:
        from resomap import plotstyle

        return getattr(plotstyle, name)
    if name == "plt":
        return _plt()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


SHARED_SCALE = "attribution per unit image area (map x pixel count)"  # what a shared colour scale measures


def scale_words(method: str, shared: bool) -> str:
    if shared:
        return f"{method}: one colour scale across resolutions ({SHARED_SCALE}, 0 to the {SCALE_PERCENTILE:g}th pct)"
    return f"{method}: each map scaled to its own [min, max] (CAM maps are normalised per image)"


def _gray(image: np.ndarray) -> np.ndarray:
    img = np.asarray(image, dtype=np.float64)
    img = img.mean(axis=0) if img.ndim == 3 else img  # [C,H,W] -> [H,W]
    return (img - img.min()) / max(np.ptp(img), 1e-12)


def _unit(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, dtype=np.float64)
    return (m - m.min()) / max(np.ptp(m), 1e-12)


def _scaled(m: np.ndarray, top: float | None) -> np.ndarray:
    """A map in [0, 1] for display: per unit area divided by a shared `top` (clipped), or its own [min, max] when
    top is None."""
    if top is None:
        return _unit(m)
    return np.clip(per_area(m) / max(float(top), 1e-30), 0.0, 1.0)


def _top(maps: Iterable[np.ndarray]) -> float:
    """The shared scale's top: the SCALE_PERCENTILE of |map| per unit area over the maps, each map weighted by the
    area its pixels cover (every resolution counts once; a map repeated at a finer grid gives the same top)."""
    maps = [np.abs(per_area(m)).ravel() for m in maps]
    if not maps or not sum(m.size for m in maps):
        return 1.0
    weights = np.concatenate([np.full(m.size, 1.0 / m.size) for m in maps])
    values = np.concatenate(maps)
    return float(np.percentile(values, SCALE_PERCENTILE, method="inverted_cdf", weights=weights))


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What the model said about one probe image at one resolution."""

    true: str
    pred: str
    prob: float

    @property
    def correct(self) -> bool:
        return self.true == self.pred

    def words(self) -> str:
        mark = "correct" if self.correct else "WRONG"
        return f"pred {self.pred} {self.prob:.0%} ({mark})"


def probe_grid(
    images: Mapping[int, np.ndarray],
    maps: Mapping[str, Mapping[int, np.ndarray]],
    title: str = "",
    *,
    verdicts: Mapping[Any, Mapping[int, Verdict]] | None = None,
    shared: Iterable[str] | None = None,
) -> Any:
    """One probe image: rows = methods (or models), columns = resolutions; images[res] is [H,W] or [C,H,W],
    maps[row][res] [H,W]. `verdicts[row][res]` (what that row's model said at that resolution) go under each
    panel, green when correct, red when not; rows named in `shared` get one colour scale across resolutions
    (raw magnitudes), the others a scale per map; the figure's foot says which."""
    plt = _plt()
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    from resomap.plotstyle import MAP_CMAP, STYLE, fit_text

    resolutions = sorted(images)
    rows = list(maps)
    shared = set(shared or ())
    verdicts = verdicts or {}
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(
            len(rows), len(resolutions), figsize=(1.5 * len(resolutions) + 0.9, 1.75 * len(rows)), squeeze=False
        )
        drawn = False
        for i, row in enumerate(rows):
            top = _top(maps[row].values()) if row in shared and maps[row] else None
            for j, res in enumerate(resolutions):
                ax = axes[i, j]
                if res in maps[row]:  # the map over the image, blended here: one picture per panel to draw
                    heat = _scaled(maps[row][res], top)
                    size = max(heat.shape[-1], np.shape(images[res])[-1])
                    ax.imshow(overlay_rgb(images[res], heat, size), interpolation="nearest")
                    drawn = True
                else:
                    ax.imshow(_gray(images[res]), cmap="gray", interpolation="nearest")
                ax.set_xticks([])
                ax.set_yticks([])
                verdict = verdicts.get(row, {}).get(res)
                if verdict is not None:
                    ax.set_xlabel(verdict.words(), fontsize=6.5, color="#1a7f37" if verdict.correct else "#c62828")
                if i == 0:
                    ax.set_title(f"{res} px")
                if j == 0:
                    ax.set_ylabel(str(row))
        if drawn:
            scale = ScalarMappable(Normalize(0, 1), MAP_CMAP)
            bar = fig.colorbar(scale, ax=axes, fraction=0.03, ticks=[0, 1], alpha=OVERLAY_ALPHA)
            bar.ax.set_yticklabels(["low", "high"])
        true = next((v.true for per in verdicts.values() for v in per.values()), None)
        width = fig.get_figwidth() - 0.2
        if title or true:
            fig.suptitle(fit_text(title + (f" (true class: {true})" if true else ""), width, STYLE["axes.titlesize"]))
        foot = "colour: " + "; ".join(scale_words(str(r), str(r) in shared or r in shared) for r in rows)
        fig.supxlabel(fit_text(foot, width, 6), fontsize=6, x=0.02, ha="left")
    return fig


def agreement_matrix(
    matrix: np.ndarray, labels: Sequence, metric: str, title: str = "", *, floor_diagonal: bool = False
) -> Any:
    """One labels x labels agreement heatmap (`agreement_matrices` with one panel)."""
    return agreement_matrices(labels, [(matrix, metric, "")], title or metric, floor_diagonal=floor_diagonal)


def agreement_matrices(
    labels: Sequence, panels: Sequence[tuple[np.ndarray, str, str]], title: str, *, floor_diagonal: bool = False
) -> Any:
    """Labels x labels agreement heatmaps (resolutions or methods) side by side, values in the cells (nan: 'n.a.'):
    `panels` = (matrix, metric, panel title) each, every panel with its metric's colour scale (spearman from -1,
    the others from 0, to 1). One figure for what is read together (a method's measures across resolutions, or a
    model's methods at each resolution): also one layout and one file to write instead of one per panel.

    `floor_diagonal`: each diagonal holds the cross-seed agreement at each resolution (the noise floor), not 1.0;
    its cells are outlined and the figure says so under the panels.
    """
    from matplotlib.patches import Rectangle

    from resomap.plotstyle import MATRIX_CMAP, STYLE, fit_text

    plt = _plt()
    n = len(labels)
    what = "resolution (px)" if all(isinstance(x, (int, np.integer)) for x in labels) else "method"
    with plt.rc_context(STYLE):
        size = (len(panels) * (0.5 * n + 1.9) + 0.5, 0.5 * n + 1.9 + (0.2 if any(p[2] for p in panels) else 0.0))
        fig, axes = plt.subplots(1, len(panels), figsize=size, squeeze=False)
        one_scale = len({metric for _, metric, _ in panels}) == 1  # then one colour bar, the labels on the left only
        for k, (ax, (matrix, metric, panel_title)) in enumerate(zip(axes[0], panels)):
            matrix = np.asarray(matrix, dtype=np.float64)
            vmin = -1.0 if metric == "spearman" else 0.0
            im = ax.imshow(np.ma.masked_invalid(matrix), cmap=MATRIX_CMAP, vmin=vmin, vmax=1.0)
            ax.set_xticks(range(n), [str(x) for x in labels], rotation=45)
            ax.set_yticks(range(n), [str(x) for x in labels] if k == 0 or not one_scale else [])
            ax.set_xlabel(what)
            if k == 0 or not one_scale:
                ax.set_ylabel(what)
            for (i, j), v in np.ndenumerate(matrix):
                text = f"{v:.2f}" if np.isfinite(v) else "n.a."
                colour = "w" if np.isfinite(v) and v < (vmin + 1) / 2 else "k"
                ax.text(j, i, text, ha="center", va="center", color=colour, fontsize=7)
            if floor_diagonal:
                for i in range(n):
                    ax.add_patch(Rectangle((i - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="k", linewidth=1.2))
            if panel_title:
                ax.set_title(fit_text(panel_title, size[0] / len(panels) - 0.3, 8), fontsize=8)
            if not one_scale:
                fig.colorbar(im, ax=ax, fraction=0.046, label=metric)
        if one_scale:
            fig.colorbar(im, ax=axes[0].tolist(), fraction=0.046 / len(panels), label=panels[0][1])
        if floor_diagonal:
            note = "outlined diagonal: agreement of two seeds at the same resolution (the noise floor)"
            fig.supxlabel(fit_text(note, fig.get_figwidth() - 0.2, 7), fontsize=7)
        fig.suptitle(fit_text(title, fig.get_figwidth() - 0.2, 8), fontsize=8)
    return fig


def quality_vs_resolution(rows: Sequence[Mapping[str, Any]], title: str = "", resolutions: Iterable[int] = ()) -> Any:
    """One model's explanation quality against resolution: one panel per score of QUALITY_SCORES found in `rows`
    (explanations/quality.csv rows: score, method, resolution, estimate, low, high, level, images, seeds), each
    method in its colour of every figure with its bootstrap interval over the probe images (methods side by side
    at each resolution), and the baseline every score is measured from, random maps, as the line at 0."""
    from resomap.plotstyle import STYLE, fit_text, method_colour, resolution_axis

    plt = _plt()
    scores = [s for s in QUALITY_SCORES if any(r["score"] == s for r in rows)]
    methods = sorted({str(r["method"]) for r in rows if r["score"] in scores})
    ticks = sorted({int(r) for r in resolutions} or {int(r["resolution"]) for r in rows})
    level = next((float(r["level"]) for r in rows if r.get("level")), 0.95)
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, max(len(scores), 1), figsize=(2.9 * max(len(scores), 1) + 1.6, 2.8), squeeze=False)
        for ax, score in zip(axes[0], scores, strict=False):
            ax.axhline(0.0, color="0.35", lw=0.9, ls="--", zorder=1)
            for k, method in enumerate(methods):
                mine = sorted((r for r in rows if r["score"] == score and r["method"] == method),
                              key=lambda r: int(r["resolution"]))  # fmt: skip
                if not mine:
                    continue
                shift = 2 ** (0.07 * (k - (len(methods) - 1) / 2))  # side by side on the log2 axis
                x = [int(r["resolution"]) * shift for r in mine]
                y = np.array([float(r["estimate"]) for r in mine])
                lo, hi = (np.array([float(r[b]) for r in mine]) for b in ("low", "high"))
                known = np.isfinite(lo) & np.isfinite(hi)
                err = np.where(known, [y - lo, hi - y], 0.0)
                ax.errorbar(x, y, yerr=err, marker="o", ms=3.5, capsize=2.5, lw=1.2, color=method_colour(method),
                            label=method)  # fmt: skip
            resolution_axis(ax, ticks, "resolution (px)")
            ax.set_ylabel(fit_text(QUALITY_SCORES[score], 2.6, 8), fontsize=8)
            ax.grid(alpha=0.3)
        handles, labels = axes[0][0].get_legend_handles_labels()
        from matplotlib.lines import Line2D

        handles.append(Line2D([], [], color="0.35", lw=0.9, ls="--"))
        labels.append("random maps (baseline)")
        fig.legend(handles, labels, loc="outside right upper", frameon=False, title=f"{level:.0%} interval",
                   title_fontsize=8)  # fmt: skip
        if title:
            fig.suptitle(fit_text(title, fig.get_figwidth() - 0.2, 9), fontsize=9)
    return fig


# ------------------------------------------------------------------------------------------------ probe overlays


@dataclasses.dataclass
class ProbeOverlay:
    """One probe image's map of one method at one resolution, drawn over the image (for MLflow and the report):
    `image` uint8 [size, size, 3] RGB; `position` its place in the probe set, `index` its raw dataset index;
    what the model said (`pred` with probability `prob`, `true_prob` the true class's) and `caption` in words."""

    method: str
    position: int
    index: int
    true: str
    pred: str
    prob: float
    correct: bool
    caption: str
    image: np.ndarray
    resolution: int = 0
    true_prob: float = float("nan")
    shared_scale: bool = False


MapsSource = str | Path | tuple[Mapping[str, np.ndarray], Mapping[str, Any]]  # an explanations.npz, or its contents


def _contents(source: MapsSource) -> tuple[Mapping[str, np.ndarray], Mapping[str, Any]]:
    """(arrays, meta) of an explanations.npz, or of maps in its form already loaded (explain.on_demand's)."""
    if isinstance(source, tuple):
        return source
    from resomap.explain.methods.probe import load_maps

    return load_maps(source)


def shared_scales(paths: Iterable[MapsSource]) -> dict[str, list[float]]:
    """The shared colour scale of every raw-magnitude method (not the per-map CAMs) over several explanations.npz
    (or their loaded contents) of one model (its resolutions, one seed): method -> per probe position the 99th
    percentile of the maps at every resolution. Pass it to `probe_overlays(..., scales=)`."""
    found: dict[str, dict[int, list[np.ndarray]]] = {}
    for path in paths:
        arrays, meta = _contents(path)
        for method in meta.get("methods", []):
            if method in arrays and not per_map_scaled(method):
                for pos, m in enumerate(arrays[method]):
                    found.setdefault(method, {}).setdefault(pos, []).append(m)
    return {method: [_top(per[p]) for p in sorted(per)] for method, per in found.items()}


def _nearest(a: np.ndarray, size: int) -> np.ndarray:
    """[H,W(,3)] resized to [size,size(,3)] by nearest neighbour: the pixels the model saw stay visible."""
    rows = np.arange(size) * a.shape[0] // size
    cols = np.arange(size) * a.shape[1] // size
    return a[rows][:, cols]


def overlay_rgb(image: np.ndarray, heat: np.ndarray, size: int) -> np.ndarray:
    """uint8 [size,size,3]: the grayscale image (from uint8 [C,H,W] or [H,W]) with `heat` in [0,1] over it."""
    from matplotlib import colormaps

    from resomap.plotstyle import MAP_CMAP

    gray = _nearest(_gray(image), size)[..., None].repeat(3, axis=2)
    colour = colormaps[MAP_CMAP](_nearest(np.asarray(heat, dtype=np.float64), size))[..., :3]
    out = (1 - OVERLAY_ALPHA) * gray + OVERLAY_ALPHA * colour
    return np.clip(np.round(out * 255), 0, 255).astype(np.uint8)


def _name(names: Sequence[str], label: Any) -> str:
    try:
        return str(names[int(label)])
    except (IndexError, TypeError, ValueError):
        return str(label)


def probe_overlays(
    maps_path: MapsSource, size: int = 128, scales: Mapping[str, float | Sequence[float]] | None = None
) -> list[ProbeOverlay]:
    """Every probe image x method of one explanations.npz (or its loaded contents: maps on demand) as a map over
    its image, `size` px a side, with what the model said in the caption. `scales` (method -> the top of its colour
    scale, one value or one per probe position; `shared_scales` of the model's resolutions) puts a method's maps on
    one scale across resolutions; without it, or for a CAM method, each map is scaled to its own [min, max]. The
    caption says which."""
    from resomap.explain.methods.probe import PROBE_KEY
    from resomap.plotstyle import class_labels

    arrays, meta = _contents(maps_path)
    images = arrays.get(PROBE_KEY)
    if images is None:
        return []
    names = class_labels(meta.get("class_names") or [])  # by index where no installed font draws one
    targets = meta.get("targets") or []
    preds, probs, true_probs = meta.get("pred") or [], meta.get("prob") or [], meta.get("true_prob") or []
    index = meta.get("index") or list(range(len(images)))
    res = int(meta.get("resolution") or images.shape[-1])
    out: list[ProbeOverlay] = []
    for method in meta.get("methods", []):
        if method not in arrays:
            continue
        top_of = (scales or {}).get(method)
        shared = top_of is not None and not per_map_scaled(method)
        for pos, heat in enumerate(arrays[method]):
            top = None
            if shared:
                top = float(top_of[pos] if isinstance(top_of, Sequence) else top_of)  # type: ignore[index]
            true = _name(names, targets[pos]) if pos < len(targets) else "?"
            pred = _name(names, preds[pos]) if pos < len(preds) else "?"
            prob = float(probs[pos]) if pos < len(probs) else float("nan")
            correct = pos < len(preds) and pos < len(targets) and int(preds[pos]) == int(targets[pos])
            said = f"predicted {pred} ({prob:.0%}), {'correct' if correct else 'wrong'}" if pos < len(preds) else ""
            caption = f"{method} at {res} px, image #{index[pos]} (true {true}): {said or 'prediction not recorded'}"
            caption += "; " + (f"colour: {SHARED_SCALE}, shared across resolutions" if shared else "colour per map")
            out.append(
                ProbeOverlay(
                    method=method,
                    position=pos,
                    index=int(index[pos]),
                    true=true,
                    pred=pred,
                    prob=prob,
                    correct=bool(correct),
                    caption=caption,
                    image=overlay_rgb(images[pos], _scaled(heat, top), size),
                    resolution=res,
                    true_prob=float(true_probs[pos]) if pos < len(true_probs) else float("nan"),
                    shared_scale=shared,
                )
            )
    return out


# ---------------------------------------------------------------- captioned probe maps (what MLflow shows)

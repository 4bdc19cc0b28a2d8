"""The pieces of the agreement study (`compare.study`) that keep it fair across resolutions and calibrated:

- `comparable`: gradient maps on a common scale before any comparison (attribution per unit image area,
  `measures.per_area`; grad-cam's CAMs are normalised per map by the library and left as they are);
- `reference_maps`: the model-free references of the probe images on a grid: the edge map (gradient magnitude of
  the grey-level image) and the centre prior (one centred Gaussian for every image: it ignores model and image);
  each is scored against its OWN chance level (its maps of different images), as the model's maps are, so that
  "agrees across resolutions" is read beyond what maps of unrelated images already share (all cells share busbars);
- `map_rows` / `left_out`: the maps every measure must leave out (constant, e.g. all zero, or non-finite), counted
  per trial in agreement.csv (kind `maps`) and said in the sentence, never dropped silently;
- `grid_effect`: the same agreement on the main and the second grid side by side, so that the grid's own effect on
  the numbers is shown apart from the resolution effect.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from resomap.explain.evaluation.measures import (
    Prepared,
    centre_maps,
    edge_maps,
    nanmean,
    per_area,
    resample,
    unusable,
)
from resomap.explain.methods.registry import per_map_scaled

PRIMARY = "spearman"  # the metric the sentences speak of
REFERENCES = ("model_free", "centre")  # map sets of the probe images that need no model (kinds of agreement.csv)
REFERENCE_WORDS = {"model_free": "model-free edge map", "centre": "centre prior", "random": "pixel-shuffled maps"}


def comparable(maps: np.ndarray, method: str) -> np.ndarray:
    """`method`'s maps [N,H,W] on the scale they are compared on across resolutions: attribution per unit image
    area for raw-magnitude methods, as drawn (resomap.reports.explain_figures); per-map scaled CAMs unchanged."""
    return np.asarray(maps, dtype=np.float32) if per_map_scaled(method) else per_area(maps).astype(np.float32)


def reference_maps(
    imgs: Mapping[int, Mapping[int, np.ndarray]], grid: int, top_k: float
) -> dict[str, dict[int, Prepared]]:
    """kind -> resolution -> the reference maps of the probe images on the grid (the lowest seed's images)."""
    out: dict[str, dict[int, Prepared]] = {kind: {} for kind in REFERENCES}
    for seed in sorted(imgs):
        for res, batch in imgs[seed].items():
            if res not in out["model_free"]:
                out["model_free"][res] = Prepared(resample(edge_maps(batch), grid), top_k)
                out["centre"][res] = Prepared(resample(centre_maps(len(batch), int(batch.shape[-1])), grid), top_k)
    return out


def map_rows(base: dict[str, Any], raw: Mapping[tuple[int, int], np.ndarray]) -> list[dict]:
    """One `maps` row per (seed, resolution): how many of its maps every measure can use, and why not the others."""
    rows = []
    for (seed, res), maps in sorted(raw.items()):
        constant, nonfinite = unusable(maps)
        n = len(maps)
        rows.append(
            {**base, "kind": "maps", "a": res, "b": res, "seeds": str(seed), "value": float(n - constant - nonfinite)}
            | {"images": n, "constant": constant, "nonfinite": nonfinite}
        )
    return rows


def left_out(rows: list[dict], model: str, method: str) -> str:
    """The sentence's words on the maps left out (from the `maps` rows of one model and method)."""
    mine = [r for r in rows if r.get("kind") == "maps" and r.get("model") == model and r.get("method") == method]
    total = sum(int(r["images"]) for r in mine)
    constant = sum(int(r["constant"]) for r in mine)
    nonfinite = sum(int(r["nonfinite"]) for r in mine)
    if not constant and not nonfinite:
        return f"Every map usable ({total} of {total})."
    where = ", ".join(
        f"{r['a']} px seed {r['seeds']}: {int(r['constant']) + int(r['nonfinite'])}"
        for r in mine
        if int(r["constant"]) + int(r["nonfinite"])
    )
    return (
        f"Maps left out of every measure: {constant + nonfinite} of {total} ({constant} constant or all zero,"
        f" {nonfinite} non-finite; {where})."
    )


def fmt_value(v: float) -> str:
    return "n.a." if not math.isfinite(v) else f"{v:.2f}"


def fmt(v: float, sign: bool = False) -> str:
    return "n.a." if not math.isfinite(v) else (f"{v:+.2f}" if sign else f"{v:.2f}")


def reference_words(rows: list[dict]) -> str:
    """Each reference with its own chance level and chance-corrected value (mean over the resolution pairs)."""
    parts = []
    for kind in (*REFERENCES, "random"):
        mine = [r for r in rows if r.get("kind") == kind]
        if mine:
            v, ch = nanmean([r["value"] for r in mine]), nanmean([r["chance"] for r in mine])
            parts.append(f"{REFERENCE_WORDS[kind]} {fmt(v)} (its chance {fmt(ch)}, corrected {fmt(v - ch, True)})")
    return "references, each against its own chance level: " + "; ".join(parts) if parts else ""


def grid_effect(rows: list[dict], model: str, method: str) -> str:
    """The cross-resolution agreement, floor and ratio on every grid of the rows (the grid's own effect)."""
    by_grid: dict[int, dict[str, list[float]]] = {}
    for r in rows:
        if r.get("model") != model or r.get("method") != method or r.get("metric") != PRIMARY:
            continue
        if r.get("kind") == "resolution":
            slot = by_grid.setdefault(int(r["grid"]), {"value": [], "floor": [], "corrected": []})
            slot["value"].append(r["value"])
            slot["floor"].append(r.get("floor", math.nan))
            slot["corrected"].append(r.get("corrected", math.nan))
    if len(by_grid) < 2:
        return ""
    parts, values, ratios = [], {}, {}
    for grid in sorted(by_grid, reverse=True):
        values[grid], f = nanmean(by_grid[grid]["value"]), nanmean(by_grid[grid]["floor"])
        ratios[grid] = values[grid] / f if math.isfinite(f) and f > 0 else math.nan
        words = f"grid {grid}: {fmt(values[grid])} (chance-corrected {fmt(nanmean(by_grid[grid]['corrected']), True)})"
        parts.append(words + (f", floor {fmt(f)}, ratio {fmt(ratios[grid])}" if math.isfinite(f) else ""))
    fine, coarse = max(values), min(values)
    moved = f"the coarser grid moves the agreement by {fmt(values[coarse] - values[fine], True)}"
    if math.isfinite(ratios[coarse] - ratios[fine]):
        moved += f" and its ratio to the floor by {fmt(ratios[coarse] - ratios[fine], True)}"
    return f"Grid effect ({PRIMARY}): {'; '.join(parts)}; {moved}."

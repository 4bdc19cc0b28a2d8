"""Uncertainty and calibration of the explanation-quality numbers (issue 23):

- per probe image, each score's excess over its random-map level (`<metric>_vs_random`, > 0 = better than random
  maps) and the pointing game itself, with a bootstrap interval over the probe images (`resomap.stats`), in a trial
  (`interval_metrics`) and pooled over the seeds of a sweep, each image keeping its scores under every seed
  (`quality_table`, explanations/quality.csv);
- each localisation reference (random maps, the centre prior, the model-free edge map, the randomised model's maps)
  and the method itself beside its OWN chance level: the same score against the masks of other probe images
  (`own_chance`), and chance-corrected (score - its chance). A map that ignores the image (the centre prior) scores
  its chance level exactly: corrected 0.

Why the probe set holds 32 images by default (explainability.probe_size): the pointing game is a hit rate, and at 32
images its 95% interval is at most about +-0.17 wide (+-0.25 at 16, +-0.28 at 12), narrow enough to tell a map that
hits half the objects from random maps that hit a fifth; a deletion/insertion excess with a per-image spread s gets
about +-0.35 s (+-0.57 s at 12 images). Each probe image costs one explanation per method and draw, so the default
stops there; the quickstart keeps 12 for its time budget. Fewer than `resomap.stats.MIN_BOOTSTRAP_IMAGES` images give
no interval (said, never a bare number).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from resomap.stats import bootstrap_scores

CHANCE_SHIFTS = 8  # pairings of each map with the mask of another probe image for its own chance level
PER_IMAGE = ("deletion_auc_vs_random", "insertion_auc_vs_random", "road_vs_random", "pointing_game")
PER_IMAGE += ("pointing_game_vs_random", "energy_in_mask_vs_random")


def own_chance(score, maps: np.ndarray, masks: np.ndarray, tolerance: float) -> float:
    """A localisation score's own chance level for these maps: the mean of `score(maps, masks of other images)`
    over up to CHANCE_SHIFTS cyclic pairings (image i with the mask of image i + k)."""
    n = len(maps)
    if n < 2:
        return math.nan
    shifts = range(1, min(n, CHANCE_SHIFTS + 1))
    return float(np.mean([score(maps, np.roll(masks, k, axis=0), tolerance).mean() for k in shifts]))


def chance_corrected(name: str, score, sets: Mapping[str, np.ndarray], masks: np.ndarray, tol: float):
    """{'<name>[_<ref>]_chance', '..._corrected'} for the method ('' key) and each reference map set."""
    out: dict[str, float] = {}
    for ref, maps in sets.items():
        key = f"{name}_{ref}" if ref else name
        value = float(score(maps, masks, tol).mean())
        out[f"{key}_chance"] = chance = own_chance(score, maps, masks, tol)
        out[f"{key}_corrected"] = value - chance
    return out


def interval_metrics(
    per_image: Mapping[str, np.ndarray], *, level: float = 0.95, resamples: int = 2000, seed: int = 0
) -> dict[str, float]:
    """'<name>_low', '<name>_high' of every per-image score (bootstrap over probe images; NaN when unavailable)."""
    out: dict[str, float] = {}
    for name, values in per_image.items():
        found = bootstrap_scores(np.asarray(values, dtype=np.float64), level=level, resamples=resamples, seed=seed)
        out[f"{name}_low"] = found.low if found.available else math.nan
        out[f"{name}_high"] = found.high if found.available else math.nan
    return out


def _words(name: str, low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return "no interval"
    if name == "pointing_game":
        return "hit rate"
    if low > 0:
        return "better than random maps"
    if high < 0:
        return "worse than random maps"
    return "not distinguishable from random maps"


def quality_table(
    per_trial: Iterable[tuple[str, int, int, Mapping[str, Mapping[str, list[float]]]]],
    *,
    level: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Rows of explanations/quality.csv: per model, resolution, method and per-image score, the mean pooled over
    the seeds with a bootstrap interval over the probe images (seeds inside: an image keeps its scores under every
    seed). `per_trial`: (model, resolution, seed, {method: {score: per-image values}}) from each trial's npz meta."""
    rows = []
    for (model, res, method, name), table in sorted(_tables(per_trial).items()):
        seeds = table.shape[0]
        table = table[:, np.isfinite(table).all(axis=0)]
        iv = bootstrap_scores(table, level=level, resamples=resamples, seed=seed) if table.size else None
        ok = iv is not None and iv.available
        rows.append(
            {"model": model, "resolution": res, "method": method, "score": name}
            | {"estimate": float(table.mean()) if table.size else math.nan, "low": iv.low if ok else math.nan}
            | {"high": iv.high if ok else math.nan, "level": level, "images": table.shape[1], "seeds": seeds}
            | {"reading": _words(name, iv.low if ok else None, iv.high if ok else None)}
            | {"reason": (iv.reason if iv is not None else "no finite per-image scores") or ""}
        )
    return rows


def seed_means(
    per_trial: Iterable[tuple[str, int, int, Mapping[str, Mapping[str, list[float]]]]],
) -> dict[tuple[str, int, str, str], np.ndarray]:
    """Per (model, resolution, method, score) each probe image's score averaged over the seeds (NaN where a seed's
    is not finite), the images in probe order: what the front's paired tests of quality compare between
    resolutions (summary.front; the probe set is the same images at every resolution and seed)."""
    return {key: table.mean(axis=0) for key, table in _tables(per_trial).items()}


def _tables(
    per_trial: Iterable[tuple[str, int, int, Mapping[str, Mapping[str, list[float]]]]],
) -> dict[tuple[str, int, str, str], np.ndarray]:
    """Per (model, resolution, method, score) the per-image values [seeds, images], seeds in order. Seeds with
    another probe set size cannot be pooled image by image: the lowest seed alone."""
    found: dict[tuple[str, int, str, str], dict[int, list[float]]] = defaultdict(dict)
    for model, res, seed_, scores in per_trial:
        for method, per_name in scores.items():
            for name, values in per_name.items():
                found[(model, int(res), method, name)][int(seed_)] = list(values)
    out = {}
    for key, by_seed in found.items():
        seeds = sorted(by_seed)
        if len({len(v) for v in by_seed.values()}) > 1:
            seeds = seeds[:1]
        out[key] = np.array([by_seed[s] for s in seeds], dtype=np.float64)
    return out


def quality_lines(rows: list[dict[str, Any]]) -> list[str]:
    """explanations/quality.txt: one line per row, the interval beside the estimate and what it allows."""
    lines = []
    for r in rows:
        interval = (
            f"[{r['low']:+.3f}, {r['high']:+.3f}]" if math.isfinite(r["low"]) else f"(no interval: {r['reason']})"
        )
        lines.append(
            f"{r['model']} @ {r['resolution']} px / {r['method']}: {r['score']} {r['estimate']:+.3f} {interval}"
            f" ({r['images']} probe images x {r['seeds']} seeds): {r['reading']}."
        )
    return lines

"""Agreement of explanation maps across resolutions (same model and method) and across methods.

Maps are resampled to a common grid (area interpolation) and compared per image, then averaged:
- spearman: Spearman rank correlation of the map values (scipy.stats.spearmanr);
- topk_iou: IoU of the top-k% pixels (k = cfg.top_k_percent);
- mass: 1 - total variation distance between |map| / sum|map| of the two maps, in [0, 1]; unlike the two rank
  measures it sees where the attribution *mass* sits (1 = identical distribution of mass, 0 = disjoint).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from scipy.stats import spearmanr

from resomap.config.schema import ExplainabilityConfig
from resomap.errors import ExplainError

METRICS = ("spearman", "topk_iou", "mass")


def resample(maps: np.ndarray, grid: int) -> np.ndarray:
    """[N,H,W] -> float32 [N,grid,grid] by area interpolation (averages when shrinking)."""
    x = torch.as_tensor(np.asarray(maps, dtype=np.float32))[:, None]
    if x.shape[-2:] == (grid, grid):
        return x[:, 0].numpy()
    return F.interpolate(x, size=(grid, grid), mode="area")[:, 0].numpy()


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Mean over images of the Spearman correlation of two [N,H,W] maps (constant maps are skipped)."""
    values = []
    for x, y in zip(a, b):
        if np.ptp(x) == 0 or np.ptp(y) == 0:
            continue
        values.append(spearmanr(x.ravel(), y.ravel()).statistic)
    return float(np.mean(values)) if values else float("nan")


def top_mask(maps: np.ndarray, percent: float) -> np.ndarray:
    """bool [N,H,W]: the top `percent`% pixels of each map (exactly that many, ties broken by position)."""
    flat = maps.reshape(len(maps), -1)
    k = max(1, round(flat.shape[1] * float(percent) / 100.0))
    top = np.argsort(-flat, axis=1, kind="stable")[:, :k]
    mask = np.zeros_like(flat, dtype=bool)
    np.put_along_axis(mask, top, True, axis=1)
    return mask.reshape(maps.shape)


def topk_iou(a: np.ndarray, b: np.ndarray, percent: float) -> float:
    ma, mb = top_mask(a, percent), top_mask(b, percent)
    inter = (ma & mb).sum(axis=(1, 2))
    union = (ma | mb).sum(axis=(1, 2))
    return float(np.mean(inter / np.maximum(union, 1)))


def mass_agreement(a: np.ndarray, b: np.ndarray) -> float:
    """Mean of 1 - 0.5 * || |a|/sum|a| - |b|/sum|b| ||_1 over images."""
    pa = np.abs(a).reshape(len(a), -1)
    pb = np.abs(b).reshape(len(b), -1)
    pa = pa / np.maximum(pa.sum(axis=1, keepdims=True), 1e-12)
    pb = pb / np.maximum(pb.sum(axis=1, keepdims=True), 1e-12)
    return float(np.mean(1.0 - 0.5 * np.abs(pa - pb).sum(axis=1)))


@dataclass
class Agreement:
    """labels (resolutions or methods) and metric -> [L, L] matrix; rows: one dict per (a, b, metric)."""

    labels: list
    matrices: dict[str, np.ndarray]
    rows: list[dict] = field(default_factory=list)


def pairwise_agreement(
    maps: Mapping[Hashable, np.ndarray], *, grid: int, top_k_percent: float, context: Mapping | None = None
) -> Agreement:
    """Every pair of the maps ([N,H,W] each, the same N images, any H,W) on a common grid."""
    labels = list(maps)
    sizes = {len(np.asarray(m)) for m in maps.values()}
    if len(sizes) > 1:
        raise ExplainError(f"maps to compare must hold the same images; got counts {sorted(sizes)}")
    grids = {k: resample(v, grid) for k, v in maps.items()}
    n = len(labels)
    mats = {m: np.eye(n) for m in METRICS}
    rows = []
    for i, a in enumerate(labels):
        for j in range(i + 1, n):
            b = labels[j]
            values = {
                "spearman": spearman(grids[a], grids[b]),
                "topk_iou": topk_iou(grids[a], grids[b], top_k_percent),
                "mass": mass_agreement(grids[a], grids[b]),
            }
            for metric, value in values.items():
                mats[metric][i, j] = mats[metric][j, i] = value
                rows.append({**(context or {}), "a": a, "b": b, "metric": metric, "value": value})
    return Agreement(labels, mats, rows)


def compare_resolutions(
    maps_by_resolution: Mapping[int, np.ndarray], cfg: ExplainabilityConfig, *, model: str = "", method: str = ""
) -> Agreement:
    """resolution x resolution agreement of one model and method."""
    ordered = dict(sorted(maps_by_resolution.items()))
    ctx = {"model": model, "method": method, "kind": "resolution"}
    return pairwise_agreement(ordered, grid=cfg.common_grid, top_k_percent=cfg.top_k_percent, context=ctx)


def compare_methods(
    maps_by_method: Mapping[str, np.ndarray], cfg: ExplainabilityConfig, *, model: str = "", resolution: int = 0
) -> Agreement:
    """method x method agreement of one model at one resolution."""
    ctx = {"model": model, "resolution": resolution, "kind": "method"}
    return pairwise_agreement(maps_by_method, grid=cfg.common_grid, top_k_percent=cfg.top_k_percent, context=ctx)


def compare_all(
    maps: Mapping[str, Mapping[int, Mapping[str, np.ndarray]]], cfg: ExplainabilityConfig
) -> tuple[dict[tuple[str, str], Agreement], dict[tuple[str, int], Agreement], list[dict]]:
    """maps[model][resolution][method] -> (by (model, method), by (model, resolution), tidy rows of both)."""
    by_method: dict[tuple[str, str], Agreement] = {}
    by_res: dict[tuple[str, int], Agreement] = {}
    rows: list[dict] = []
    for model, per_res in maps.items():
        methods = sorted({m for per_method in per_res.values() for m in per_method})
        for method in methods:
            have = {r: pm[method] for r, pm in per_res.items() if method in pm}
            if len(have) > 1:
                by_method[(model, method)] = agg = compare_resolutions(have, cfg, model=model, method=method)
                rows += agg.rows
        for res, per_method in per_res.items():
            if len(per_method) > 1:
                by_res[(model, res)] = agg = compare_methods(per_method, cfg, model=model, resolution=res)
                rows += agg.rows
    return by_method, by_res, rows

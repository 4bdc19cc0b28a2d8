"""Where the maps sit: the mean map over the probe images per model, method, resolution and explained class, and per
image the share of its map's mass in a region and its centre of mass.

Each map is taken as |map| resampled to the common grid and scaled to a total mass of 1, so maps of every method
and resolution are on one scale. The region is the one the data names: the probe images' object masks where the
dataset has them (at the reference resolution, on the grid), else the central quarter of the image (the centred
square of half the side), so that "the mass moved from the centre to the edge" can be said of any data. A centre
of mass is in fractions of the image side (y down, x right, from the top-left corner).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from resomap.explain.evaluation.measures import mass_normalised, resample

REGION_WORDS = {"mask": "the object mask", "centre": "the central quarter"}


def normalised(maps: np.ndarray, grid: int) -> np.ndarray:
    """float64 [N,g,g]: |maps| on the grid, each scaled to mass 1 (a map with no mass or a non-finite value: nan)."""
    on_grid = resample(np.nan_to_num(np.asarray(maps, dtype=np.float32), nan=np.inf), grid)
    return mass_normalised(on_grid).reshape(on_grid.shape)


def centre_of_mass(norm: np.ndarray) -> np.ndarray:
    """[N,2] (y, x) of each normalised map's centre of mass, in fractions of the side."""
    g = norm.shape[-1]
    pos = (np.arange(g) + 0.5) / g
    return np.stack([(norm.sum(axis=2) * pos).sum(axis=1), (norm.sum(axis=1) * pos).sum(axis=1)], axis=1)


def region_of(masks: np.ndarray | None, n: int, grid: int) -> tuple[np.ndarray, str]:
    """(bool [N,g,g] region per image, its kind: 'mask' or 'centre')."""
    if masks is not None and len(masks) == n:
        return resample(np.asarray(masks, dtype=np.float32), grid) >= 0.5, "mask"
    idx = (np.arange(grid) + 0.5) / grid
    inner = (idx >= 0.25) & (idx < 0.75)
    return np.broadcast_to(inner[:, None] & inner[None, :], (n, grid, grid)), "centre"


def step_placement(here: np.ndarray, there: np.ndarray, region: np.ndarray) -> dict[str, np.ndarray]:
    """Per image: the share of mass in the region at the resolution and at the reference, and how far the centre
    of mass moved between them (fraction of the side); nan where a map has no mass."""
    return {
        "share": (here * region).sum(axis=(1, 2)),
        "share_reference": (there * region).sum(axis=(1, 2)),
        "centre_shift": np.linalg.norm(centre_of_mass(here) - centre_of_mass(there), axis=1),
    }


@dataclass
class Placement:
    """One model and method: per resolution and explained class the mean normalised map (the figure's), the mean
    share of mass in the region and the mean centre of mass, over the probe images of that class."""

    model: str
    method: str
    region: str  # 'mask' or 'centre'
    classes: list[str]
    mean: dict[int, dict[int, np.ndarray]] = field(default_factory=dict)  # resolution -> class -> [g,g]
    share: dict[int, dict[int, float]] = field(default_factory=dict)
    centre: dict[int, dict[int, tuple[float, float]]] = field(default_factory=dict)
    count: dict[int, dict[int, int]] = field(default_factory=dict)


def placements(
    maps: Mapping[int, Mapping[str, np.ndarray]],
    targets: np.ndarray,
    class_names: list[str],
    masks: np.ndarray | None,
    model: str,
    grid: int,
) -> list[Placement]:
    """The placements of one model's maps (one seed: maps[resolution][method]), classes by `targets`."""
    out = []
    methods = sorted({m for pm in maps.values() for m in pm})
    targets = np.asarray(targets, dtype=np.int64)
    for method in methods:
        found = None
        for res in sorted(maps):
            if method not in maps[res]:
                continue
            norm = normalised(maps[res][method], grid)
            region, kind = region_of(masks, len(norm), grid)
            if found is None:
                found = Placement(model, method, kind, list(class_names))
            shares = (norm * region).sum(axis=(1, 2))
            com = centre_of_mass(norm)
            for cls in sorted(set(targets.tolist())):
                rows = (targets == cls) & np.isfinite(shares)
                if not rows.any():
                    continue
                found.mean.setdefault(res, {})[cls] = norm[rows].mean(axis=0)
                found.share.setdefault(res, {})[cls] = float(shares[rows].mean())
                found.centre.setdefault(res, {})[cls] = (float(com[rows, 0].mean()), float(com[rows, 1].mean()))
                found.count.setdefault(res, {})[cls] = int(rows.sum())
        if found is not None:
            out.append(found)
    return out


def placement_words(row: Mapping[str, Any]) -> str:
    """'mass in the central quarter 0.40 (0.45 at 128 px), its centre moved 0.05 of the side' from a decision row."""
    share, ref = float(row.get("share", math.nan)), float(row.get("share_reference", math.nan))
    shift = float(row.get("centre_shift", math.nan))
    if not (math.isfinite(share) and math.isfinite(ref)):
        return ""
    where = REGION_WORDS.get(str(row.get("region")), "the region")
    return f"mass in {where} {share:.2f} ({ref:.2f} at {row['reference']} px), its centre moved {shift:.2f} of the side"

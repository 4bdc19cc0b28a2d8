"""The measures of agreement between two sets of explanation maps of the same probe images.

Maps are resampled to a common grid (area interpolation) and compared image by image, then averaged:
- spearman: Spearman rank correlation of the map values (constant maps are skipped);
- topk_iou: IoU of the top-k% pixel sets (k = top_k_percent) under a tie rule with no position bias: the top set
  is every pixel strictly above the k-th largest value, plus the pixels equal to it only when that whole tied
  group fits inside the k (no tie straddles the boundary). A tie that straddles the boundary is left out whole,
  so the set never holds more than k pixels and no pixel is chosen by its position: two maps that are zero
  except on disjoint blobs score 0, identical maps 1, and the score is unchanged when both maps are permuted the
  same way (mirrored, rotated). A map whose top set is empty (its top k% is one tied value, e.g. a constant map)
  is skipped, as in spearman;
- mass: 1 - total variation distance between |map| / sum|map| of the two maps. Its raw value is high for any two
  maps (two independent uniform-noise maps get 2/3), so it is REPORTED RESCALED against the random level of the
  maps compared: mass = (raw - random) / (1 - random), where random is the raw value of the same maps with their
  pixels shuffled (same values, no spatial structure): 0 = no better than random placement of the same values,
  1 = identical distribution of mass. The raw value is kept in the `raw` column.

Each measure comes with its chance level (image i against image j != i) and its random level (pixel-shuffled maps):
`score_pair`. Model-free reference maps of the images: `edge_maps`. The comparison across resolutions and seeds
with its noise floor is `explain.evaluation.compare`.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from resomap.errors import ExplainError

METRICS = ("spearman", "topk_iou", "mass")
RANDOM_SHUFFLES = 2  # pixel shuffles per image for the random level
CENTRE_SIGMA = 1 / 4  # centre-prior map: Gaussian of sigma = side * this


# ------------------------------------------------------------------------------------------------ the measures


def resample(maps: np.ndarray, grid: int) -> np.ndarray:
    """[N,H,W] -> float32 [N,grid,grid] by area interpolation (averages when shrinking)."""
    x = torch.as_tensor(np.asarray(maps, dtype=np.float32))[:, None]
    if x.shape[-2:] == (grid, grid):
        return x[:, 0].numpy()
    return F.interpolate(x, size=(grid, grid), mode="area")[:, 0].numpy()


def second_grid(grid: int) -> int | None:
    """The second grid every agreement is also reported at (half the main one; None below 8)."""
    return grid // 2 if grid // 2 >= 4 else None


def top_mask(maps: np.ndarray, percent: float) -> np.ndarray:
    """bool [N,H,W]: the top `percent`% pixels of each map under the tie rule of the module doc (no position bias:
    a tied group straddling the k-th place is left out whole, so a set may hold fewer than k pixels)."""
    maps = np.asarray(maps)
    flat = maps.reshape(len(maps), -1)
    k = max(1, round(flat.shape[1] * float(percent) / 100.0))
    kth = -np.partition(-flat, k - 1, axis=1)[:, k - 1 : k]  # the k-th largest value of each map
    above = flat > kth
    at_or_above = flat >= kth
    fits = at_or_above.sum(axis=1, keepdims=True) <= k  # the tied group at the k-th value fits inside the k
    return np.where(fits, at_or_above, above).reshape(maps.shape)


def _ranks(maps: np.ndarray) -> np.ndarray:
    """Per map: z-scored average ranks [N,P] (rows of constant maps are nan)."""
    from scipy.stats import rankdata

    r = rankdata(maps.reshape(len(maps), -1), axis=1).astype(np.float64)
    r -= r.mean(axis=1, keepdims=True)
    sd = r.std(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(sd > 0, r / sd, np.nan)


def mass_normalised(maps: np.ndarray) -> np.ndarray:
    """float64 [N,P]: each map's |values| scaled to mass 1; a map with no mass or a non-finite value: all nan."""
    a = np.abs(np.asarray(maps, dtype=np.float64)).reshape(len(maps), -1)
    s = a.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(np.isfinite(s) & (s > 0), a / s, np.nan)


class Prepared:
    """A map set [N,g,g] with what each measure needs, computed once, when a measure first asks (`arrays`):
    z-scored ranks, tie-safe top-k% masks, normalised |mass|. All three are permutation-equivariant per map, so
    pixel-shuffled maps are shuffles of them. (The maps' decision reads only the mass: ranking every map was
    most of its time.)"""

    def __init__(self, maps: np.ndarray, top_k_percent: float) -> None:
        maps = np.asarray(maps, dtype=np.float32)
        self.n = len(maps)
        self.arrays = _Arrays(
            {
                "spearman": lambda: _ranks(maps),
                "topk_iou": lambda: top_mask(maps, top_k_percent).reshape(len(maps), -1).astype(np.float64),
                "mass": lambda: mass_normalised(maps),
            }
        )


class _Arrays(dict):
    """metric -> its prepared array, made by its maker on first access."""

    def __init__(self, makers: Mapping[str, Callable[[], np.ndarray]]) -> None:
        super().__init__()
        self._makers = makers

    def __missing__(self, metric: str) -> np.ndarray:
        self[metric] = value = self._makers[metric]()
        return value


def _cross(metric: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """[N,M] measure between every row of x [N,P] and every row of y [M,P] (prepared arrays of `metric`)."""
    if metric == "spearman":
        return x @ y.T / x.shape[1]
    if metric == "topk_iou":
        inter = x @ y.T
        sx, sy = x.sum(1)[:, None], y.sum(1)[None, :]
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where((sx == 0) | (sy == 0), np.nan, inter / np.maximum(sx + sy - inter, 1))
    if metric == "mass":
        return 1.0 - 0.5 * np.abs(x[:, None, :] - y[None, :, :]).sum(axis=2)
    raise ExplainError(f"unknown agreement metric '{metric}'; use one of {', '.join(METRICS)}")


def _matched(metric: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """[N] measure between row i of x and row i of y."""
    if metric == "spearman":
        return (x * y).sum(1) / x.shape[1]
    if metric == "topk_iou":
        inter = (x * y).sum(1)
        sx, sy = x.sum(1), y.sum(1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where((sx == 0) | (sy == 0), np.nan, inter / np.maximum(sx + sy - inter, 1))
    if metric == "mass":
        return 1.0 - 0.5 * np.abs(x - y).sum(1)
    raise ExplainError(f"unknown agreement metric '{metric}'; use one of {', '.join(METRICS)}")


def per_image(a: Prepared, b: Prepared, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """(the measure between image i's maps [N], its chance: image i's map in `a` against every other image's map in
    `b`, averaged [N]); raw values (mass not rescaled); nan where a map cannot be ranked (constant, non-finite)."""
    x, y = a.arrays[metric], b.arrays[metric]
    m = _cross(metric, x, y)
    if len(m) < 2:
        return np.diag(m).copy(), np.full(len(m), np.nan)
    off = np.where(np.eye(len(m), dtype=bool), np.nan, m)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a row of nan (a constant map) has no chance level
        chance = np.nanmean(off, axis=1)
    return np.diag(m).copy(), chance


def pair_matrix(a: np.ndarray, b: np.ndarray, metric: str, top_k_percent: float) -> np.ndarray:
    """[N,M] matrix of `metric` (raw) between every map of `a` [N,g,g] and every map of `b` [M,g,g] (nan:
    undefined: a constant map for spearman, an empty top set for topk_iou, an all-zero map for mass)."""
    if metric not in METRICS:
        raise ExplainError(f"unknown agreement metric '{metric}'; use one of {', '.join(METRICS)}")
    return _cross(metric, Prepared(a, top_k_percent).arrays[metric], Prepared(b, top_k_percent).arrays[metric])


def nanmean(values: Any) -> float:
    arr = np.asarray(values, dtype=np.float64)
    arr = arr[np.isfinite(arr)]
    return float(arr.mean()) if arr.size else float("nan")


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Mean over images of the Spearman correlation of two [N,H,W] maps (constant maps are skipped)."""
    return nanmean(np.diag(pair_matrix(a, b, "spearman", 10.0)))


def topk_iou(a: np.ndarray, b: np.ndarray, percent: float) -> float:
    """Mean over images of the tie-safe top-k% IoU (maps with an empty top set are skipped)."""
    return nanmean(np.diag(pair_matrix(a, b, "topk_iou", percent)))


def mass_agreement(a: np.ndarray, b: np.ndarray) -> float:
    """RAW mean of 1 - 0.5 * || |a|/sum|a| - |b|/sum|b| ||_1 over images (not rescaled; all-zero maps skipped)."""
    return nanmean(np.diag(pair_matrix(a, b, "mass", 10.0)))


def _off_diagonal(m: np.ndarray) -> np.ndarray:
    return m[~np.eye(len(m), dtype=bool)] if len(m) > 1 else np.full(1, np.nan)


def _random(metric: str, x: np.ndarray, y: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """(the raw measure between pixel-shuffled maps of the same image, and of different images: its own chance)."""
    rng = np.random.default_rng([seed, 4099])
    shuffled = [(rng.permuted(x, axis=1), rng.permuted(y, axis=1)) for _ in range(RANDOM_SHUFFLES)]
    matched = nanmean([_matched(metric, sx, sy) for sx, sy in shuffled])
    return matched, nanmean([_off_diagonal(_cross(metric, sx, sy)) for sx, sy in shuffled])


def random_level(a: np.ndarray, b: np.ndarray, metric: str, top_k_percent: float, seed: int = 0) -> float:
    """The raw measure between the maps with their pixels shuffled (independently per map; seeded, so repeatable)."""
    pa, pb = Prepared(a, top_k_percent), Prepared(b, top_k_percent)
    return _random(metric, pa.arrays[metric], pb.arrays[metric], seed)[0]


def rescale(value: float, random: float) -> float:
    """(value - random) / (1 - random): 0 at the random level, 1 at perfect agreement."""
    if not (math.isfinite(value) and math.isfinite(random)) or random >= 1.0:
        return float("nan")
    return (value - random) / (1.0 - random)


@dataclass(frozen=True)
class PairScore:
    """One metric between two sets of maps of the same N probe images (on one grid)."""

    value: float  # mean over images of the matched pairs (image i vs image i); mass: rescaled
    chance: float  # mean over image i vs image j != i; mass: rescaled
    random: float  # raw measure between pixel-shuffled maps
    raw: float  # value before rescaling (== value except for mass)
    random_chance: float = math.nan  # raw measure between shuffled maps of different images: `random`'s own chance
    images: int = 0  # images whose two maps could be compared (a constant or non-finite map cannot)

    @property
    def corrected(self) -> float:
        """The value beyond its chance level (value - chance): 0 = no more agreement than maps of other images."""
        return self.value - self.chance


def score_pair(
    a: np.ndarray | Prepared, b: np.ndarray | Prepared, metric: str, top_k_percent: float = 10.0
) -> PairScore:
    """`metric` between two map sets [N,g,g] (same images, same grid; or their `Prepared` forms) with its chance
    and random levels."""
    pa = a if isinstance(a, Prepared) else Prepared(a, top_k_percent)
    pb = b if isinstance(b, Prepared) else Prepared(b, top_k_percent)
    x, y = pa.arrays[metric], pb.arrays[metric]
    m = _cross(metric, x, y)
    raw, images = nanmean(np.diag(m)), int(np.isfinite(np.diag(m)).sum())
    chance = nanmean(_off_diagonal(m))
    rnd, rnd_chance = _random(metric, x, y)
    if metric == "mass":  # rescaled against the random level (module doc); raw kept
        return PairScore(rescale(raw, rnd), rescale(chance, rnd), rnd, raw, rnd_chance, images)
    return PairScore(raw, chance, rnd, raw, rnd_chance, images)


def unusable(maps: np.ndarray) -> tuple[int, int]:
    """(maps with no ranking: every pixel equal, e.g. all zero; maps with a NaN or infinite value) of [N,H,W]: the
    images every measure leaves out, counted so that none is dropped silently."""
    flat = np.asarray(maps, dtype=np.float64).reshape(len(maps), -1)
    bad = ~np.isfinite(flat).all(axis=1)
    constant = ~bad & (np.ptp(np.where(np.isfinite(flat), flat, 0.0), axis=1) == 0)
    return int(constant.sum()), int(bad.sum())


def centre_maps(n: int, side: int) -> np.ndarray:
    """float32 [n, side, side]: the centre prior, a Gaussian centred on the image with sigma = side * CENTRE_SIGMA
    (the same map for every image: it ignores both model and image)."""
    c = np.arange(side, dtype=np.float64) + 0.5 - side / 2
    r2 = c[:, None] ** 2 + c[None, :] ** 2
    g = np.exp(-r2 / (2 * (side * CENTRE_SIGMA) ** 2)).astype(np.float32)
    return np.broadcast_to(g, (n, side, side)).copy()


# ------------------------------------------------------------------------------------------- model-free maps


def edge_maps(images: np.ndarray) -> np.ndarray:
    """Model-free reference maps: gradient magnitude (Sobel) of the grey-level images, uint8 [N,C,r,r] or [N,r,r]
    -> float32 [N,r,r]. Anything that agrees across resolutions only as much as these needs no model."""
    from scipy import ndimage

    x = np.asarray(images, dtype=np.float32)
    gray = x.mean(axis=1) if x.ndim == 4 else x
    gx = ndimage.sobel(gray, axis=1, mode="nearest")
    gy = ndimage.sobel(gray, axis=2, mode="nearest")
    return np.hypot(gx, gy).astype(np.float32)


def per_area(m: np.ndarray) -> np.ndarray:
    """A map [.., H, W] as attribution per unit image area: times its pixel count H x W (the image's area is 1), so
    maps of the same image at different resolutions are on one scale (explain.evaluation.compare uses it too)."""
    m = np.asarray(m, dtype=np.float64)
    return m * (m.shape[-1] * m.shape[-2])

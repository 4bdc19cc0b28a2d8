"""Agreement of explanation maps across resolutions, seeds and methods, each number with its references.

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

References (`study`) beside every number:
- chance: the same measure between maps of DIFFERENT probe images (image i vs image j != i, same map sets),
  averaged: the agreement any two maps of this method get through shared structure (centre bias, borders);
- random: the same measure between pixel-shuffled maps (the level of the raw measure with no spatial structure;
  mass is rescaled against it);
- model_free: the same measure on a model-free map of the same probe images (gradient magnitude of the
  grey-level image, `edge_maps`) at the same resolutions: agreement that needs no model at all;
- seed (the noise floor, >= 2 seeds): agreement of two seeds' maps at the same resolution; cross-resolution
  agreement is given as a ratio to it and tested against it (`resomap.stats.relabel_test`).
A cross-resolution row's value is the mean over every pair (seed s at r1, seed t at r2), same-seed pairs included
(`same_seed` holds those alone); its floor is the mean of the cross-seed agreement at r1 and at r2.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections import defaultdict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from resomap.config.schema import ExplainabilityConfig
from resomap.errors import ExplainError
from resomap.stats import RelabelTest, relabel_test

log = logging.getLogger(__name__)

METRICS = ("spearman", "topk_iou", "mass")
PRIMARY_METRIC = "spearman"  # the metric the per model x method sentence decides on
ALPHA = 0.05  # one-sided level of the relabelling test
KINDS = ("resolution", "seed", "chance", "model_free", "random", "method")
RANDOM_SHUFFLES = 2  # pixel shuffles per image for the random level


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


def _mass(maps: np.ndarray) -> np.ndarray:
    a = np.abs(np.asarray(maps, dtype=np.float64)).reshape(len(maps), -1)
    s = a.sum(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(s > 0, a / s, np.nan)


class Prepared:
    """A map set [N,g,g] with what each measure needs, computed once: z-scored ranks, tie-safe top-k% masks,
    normalised |mass|. All three are permutation-equivariant per map, so pixel-shuffled maps are shuffles of them."""

    def __init__(self, maps: np.ndarray, top_k_percent: float) -> None:
        maps = np.asarray(maps, dtype=np.float32)
        self.n = len(maps)
        self.arrays = {
            "spearman": _ranks(maps),
            "topk_iou": top_mask(maps, top_k_percent).reshape(len(maps), -1).astype(np.float64),
            "mass": _mass(maps),
        }


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


def pair_matrix(a: np.ndarray, b: np.ndarray, metric: str, top_k_percent: float) -> np.ndarray:
    """[N,M] matrix of `metric` (raw) between every map of `a` [N,g,g] and every map of `b` [M,g,g] (nan:
    undefined: a constant map for spearman, an empty top set for topk_iou, an all-zero map for mass)."""
    if metric not in METRICS:
        raise ExplainError(f"unknown agreement metric '{metric}'; use one of {', '.join(METRICS)}")
    return _cross(metric, Prepared(a, top_k_percent).arrays[metric], Prepared(b, top_k_percent).arrays[metric])


def _nanmean(values: Any) -> float:
    arr = np.asarray(values, dtype=np.float64)
    arr = arr[np.isfinite(arr)]
    return float(arr.mean()) if arr.size else float("nan")


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Mean over images of the Spearman correlation of two [N,H,W] maps (constant maps are skipped)."""
    return _nanmean(np.diag(pair_matrix(a, b, "spearman", 10.0)))


def topk_iou(a: np.ndarray, b: np.ndarray, percent: float) -> float:
    """Mean over images of the tie-safe top-k% IoU (maps with an empty top set are skipped)."""
    return _nanmean(np.diag(pair_matrix(a, b, "topk_iou", percent)))


def mass_agreement(a: np.ndarray, b: np.ndarray) -> float:
    """RAW mean of 1 - 0.5 * || |a|/sum|a| - |b|/sum|b| ||_1 over images (not rescaled; all-zero maps skipped)."""
    return _nanmean(np.diag(pair_matrix(a, b, "mass", 10.0)))


def _random(metric: str, x: np.ndarray, y: np.ndarray, seed: int = 0) -> float:
    rng = np.random.default_rng([seed, 4099])
    shuffled = [(rng.permuted(x, axis=1), rng.permuted(y, axis=1)) for _ in range(RANDOM_SHUFFLES)]
    return _nanmean([_matched(metric, sx, sy) for sx, sy in shuffled])


def random_level(a: np.ndarray, b: np.ndarray, metric: str, top_k_percent: float, seed: int = 0) -> float:
    """The raw measure between the maps with their pixels shuffled (independently per map; seeded, so repeatable)."""
    pa, pb = Prepared(a, top_k_percent), Prepared(b, top_k_percent)
    return _random(metric, pa.arrays[metric], pb.arrays[metric], seed)


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


def score_pair(
    a: np.ndarray | Prepared, b: np.ndarray | Prepared, metric: str, top_k_percent: float = 10.0
) -> PairScore:
    """`metric` between two map sets [N,g,g] (same images, same grid; or their `Prepared` forms) with its chance
    and random levels."""
    pa = a if isinstance(a, Prepared) else Prepared(a, top_k_percent)
    pb = b if isinstance(b, Prepared) else Prepared(b, top_k_percent)
    x, y = pa.arrays[metric], pb.arrays[metric]
    m = _cross(metric, x, y)
    n = len(m)
    raw = _nanmean(np.diag(m))
    chance = _nanmean(m[~np.eye(n, dtype=bool)]) if n > 1 else float("nan")
    rnd = _random(metric, x, y)
    if metric == "mass":  # rescaled against the random level (module doc); raw kept
        return PairScore(rescale(raw, rnd), rescale(chance, rnd), rnd, raw)
    return PairScore(raw, chance, rnd, raw)


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


# ------------------------------------------------------------------------------- the plain pairwise matrices


@dataclass
class Agreement:
    """labels (resolutions or methods) and metric -> [L, L] matrix; rows: one dict per (a, b, metric)."""

    labels: list
    matrices: dict[str, np.ndarray]
    rows: list[dict] = field(default_factory=list)


def pairwise_agreement(
    maps: Mapping[Hashable, np.ndarray], *, grid: int, top_k_percent: float, context: Mapping | None = None
) -> Agreement:
    """Every pair of the maps ([N,H,W] each, the same N images, any H,W) on a common grid (no references: see
    `study` for the comparison with its chance level, model-free reference and noise floor)."""
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
            for metric in METRICS:
                s = score_pair(grids[a], grids[b], metric, top_k_percent)
                mats[metric][i, j] = mats[metric][j, i] = s.value
                rows.append({**(context or {}), "grid": grid, "a": a, "b": b, "metric": metric, "value": s.value})
    return Agreement(labels, mats, rows)


def compare_resolutions(
    maps_by_resolution: Mapping[int, np.ndarray], cfg: ExplainabilityConfig, *, model: str = "", method: str = ""
) -> Agreement:
    """resolution x resolution agreement of one model and method (one seed, no references)."""
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
    """maps[model][resolution][method] (one seed) -> (by (model, method), by (model, resolution), tidy rows)."""
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


# ------------------------------------------------------------------------------ the test against the floor


def verdict(test: RelabelTest, n_seeds: int) -> str:
    """'yes' (p <= ALPHA), 'no', or 'n.a.' (one seed, or too few seeds/resolutions for p <= ALPHA)."""
    if n_seeds < 2 or not math.isfinite(test.p_value):
        return "n.a."
    if test.min_p > ALPHA:
        return "n.a."
    return "yes" if test.p_value <= ALPHA else "no"


# --------------------------------------------------------------------------------------------- the study


@dataclass
class Study:
    """Every agreement of a sweep's maps with its references (`rows`), per main grid the resolution x resolution
    matrices with the cross-seed floor on the diagonal, the floors, and one sentence per model x method."""

    rows: list[dict] = field(default_factory=list)
    matrices: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # (model, method) -> see below
    method_matrices: dict[tuple[str, int], Agreement] = field(default_factory=dict)
    floors: dict[str, dict[str, float]] = field(default_factory=dict)  # '<model>/<method>/<metric>' -> {res: v}
    statements: list[str] = field(default_factory=list)
    grid: int = 0


Maps = Mapping[str, Mapping[int, Mapping[int, Mapping[str, np.ndarray]]]]  # [model][seed][resolution][method]
Images = Mapping[str, Mapping[int, Mapping[int, np.ndarray]]]  # [model][seed][resolution] -> uint8 [N,C,r,r]


def fmt_value(v: float) -> str:
    return "n.a." if not math.isfinite(v) else f"{v:.2f}"


def study(maps: Maps, images: Images, cfg: ExplainabilityConfig) -> Study:
    """The comparison of a sweep: maps[model][seed][resolution][method] ([N,H,W], the same probe images for every
    seed and resolution of a model) and the probe images (for the model-free reference), at cfg.common_grid and
    at `second_grid` of it."""
    grids = [cfg.common_grid] + [g for g in [second_grid(cfg.common_grid)] if g]
    out = Study(grid=cfg.common_grid)
    for model in sorted(maps):
        per_seed = {s: maps[model][s] for s in sorted(maps[model])}
        imgs = images.get(model, {})
        methods = sorted({m for pr in per_seed.values() for pm in pr.values() for m in pm})
        for grid in grids:
            main = grid == cfg.common_grid
            edges = _edge_grids(imgs, grid, cfg.top_k_percent)
            for method in methods:
                try:
                    _study_method(out, model, method, per_seed, edges, grid, cfg.top_k_percent, main)
                except ExplainError as exc:  # one unusable map set must not stop the comparison of the others
                    log.warning("agreement of %s/%s not computed: %s", model, method, exc)
                    if main:
                        out.statements.append(f"{model} / {method}: not compared ({exc}).")
            if main:
                _method_rows(out, model, per_seed, grid, cfg.top_k_percent)
    return out


def _edge_grids(imgs: Mapping[int, Mapping[int, np.ndarray]], grid: int, top_k: float) -> dict[int, Prepared]:
    """resolution -> model-free maps on the grid (the probe images of the lowest seed that has them)."""
    out: dict[int, np.ndarray] = {}
    for seed in sorted(imgs):
        for res, batch in imgs[seed].items():
            if res not in out:
                out[res] = Prepared(resample(edge_maps(batch), grid), top_k)
    return out


def _study_method(
    out: Study,
    model: str,
    method: str,
    per_seed: Mapping[int, Mapping[int, Mapping[str, np.ndarray]]],
    edges: Mapping[int, Prepared],
    grid: int,
    top_k: float,
    main: bool,
) -> None:
    trials = {
        (s, r): Prepared(resample(pm[method], grid), top_k)
        for s, pr in per_seed.items()
        for r, pm in pr.items()
        if method in pm
    }
    if not trials:
        return
    sizes = {v.n for v in trials.values()}
    if len(sizes) > 1:
        raise ExplainError(f"{model}/{method}: maps to compare must hold the same probe images; got {sorted(sizes)}")
    resolutions = sorted({r for _, r in trials})
    seeds = sorted({s for s, _ in trials})
    cache: dict[tuple, dict[str, PairScore]] = {}

    def pair(x: tuple[int, int], y: tuple[int, int]) -> dict[str, PairScore]:
        key = (x, y) if x <= y else (y, x)
        if key not in cache:
            cache[key] = {m: score_pair(trials[key[0]], trials[key[1]], m, top_k) for m in METRICS}
        return cache[key]

    base = {"model": model, "method": method, "grid": grid}
    floors: dict[str, dict[int, float]] = defaultdict(dict)
    for r in resolutions:  # cross-seed agreement at the same resolution: the noise floor
        have = [s for s in seeds if (s, r) in trials]
        if len(have) < 2:
            continue
        scores = [pair((s, r), (t, r)) for s, t in itertools.combinations(have, 2)]
        names = ",".join(map(str, have))
        for metric in METRICS:
            v = _nanmean([sc[metric].value for sc in scores])
            floors[metric][r] = v
            common = {**base, "metric": metric, "a": r, "b": r, "seeds": names}
            out.rows.append({**common, "kind": "seed", "value": v, "raw": _nanmean([sc[metric].raw for sc in scores])})
            ch = _nanmean([sc[metric].chance for sc in scores])
            out.rows.append({**common, "kind": "chance", "of": "seed", "value": ch, "raw": ch})
    tests: dict[str, RelabelTest] = {}
    complete = [s for s in seeds if all((s, r) in trials for r in resolutions)]
    for metric in METRICS:  # all resolutions at once: the test behind the sentence
        values = {(x, y): pair(x, y)[metric].value for x in trials for y in trials if x[0] != y[0] and x < y}
        tests[metric] = relabel_test(values, complete, resolutions)
    pair_rows: dict[str, list[dict]] = defaultdict(list)
    for r1, r2 in itertools.combinations(resolutions, 2):
        both = [s for s in seeds if (s, r1) in trials and (s, r2) in trials]
        combos = [(s, t) for s in seeds for t in seeds if (s, r1) in trials and (t, r2) in trials]
        scores = [pair((s, r1), (t, r2)) for s, t in combos]
        edge = {m: score_pair(edges[r1], edges[r2], m) for m in METRICS} if r1 in edges and r2 in edges else {}
        names = ",".join(map(str, sorted({x for c in combos for x in c})))
        for metric in METRICS:
            values = {(x, y): pair(x, y)[metric].value for x in trials for y in trials if x[0] != y[0] and x < y}
            test = relabel_test(values, both, [r1, r2]) if len(both) >= 2 else None
            v = _nanmean([sc[metric].value for sc in scores])
            floor = _nanmean([floors[metric].get(r1, math.nan), floors[metric].get(r2, math.nan)])
            if not (r1 in floors[metric] and r2 in floors[metric]):
                floor = math.nan
            common = {**base, "metric": metric, "a": r1, "b": r2, "seeds": names}
            row = {
                **common,
                "kind": "resolution",
                "value": v,
                "raw": _nanmean([sc[metric].raw for sc in scores]),
                "same_seed": _nanmean([pair((s, r1), (s, r2))[metric].value for s in both]) if both else math.nan,
                "floor": floor,
                "ratio_to_floor": v / floor if math.isfinite(floor) and floor > 0 else math.nan,
                "p_value": test.p_value if test else math.nan,
                "min_p": test.min_p if test else math.nan,
                "effect_beyond_noise": verdict(test, len(both)) if test else "n.a.",
            }
            ch = _nanmean([sc[metric].chance for sc in scores])
            rnd = _nanmean([sc[metric].random for sc in scores])
            refs = [
                {**common, "kind": "chance", "of": "resolution", "value": ch, "raw": ch},
                {**common, "kind": "random", "value": rnd, "raw": rnd},
            ]
            if edge:
                e = edge[metric]
                refs.append({**common, "kind": "model_free", "value": e.value, "raw": e.raw, "chance": e.chance})
            row["chance"], row["random"] = ch, rnd
            row["model_free"] = edge[metric].value if edge else math.nan
            out.rows += [row, *refs]
            pair_rows[metric].append(row)
    if not main:
        return
    key = f"{model}/{method}"
    for metric in METRICS:
        if floors[metric]:
            out.floors[f"{key}/{metric}"] = {str(r): v for r, v in sorted(floors[metric].items())}
    out.matrices[(model, method)] = _matrix(resolutions, pair_rows, floors, tests, len(complete))
    out.statements.append(_sentence(model, method, grid, seeds, complete, pair_rows, floors, tests))


def _matrix(resolutions, pair_rows, floors, tests, n_complete) -> dict[str, Any]:
    """{'resolutions', '<metric>': [R,R] (diagonal: cross-seed floor, or 1.0 with one seed), 'floor_on_diagonal',
    'chance': {metric: mean chance}, 'p_value': {metric: p}}."""
    index = {r: i for i, r in enumerate(resolutions)}
    entry: dict[str, Any] = {"resolutions": list(resolutions), "floor_on_diagonal": bool(floors.get(PRIMARY_METRIC))}
    entry["chance"], entry["p_value"], entry["effect_beyond_noise"] = {}, {}, {}
    for metric in METRICS:
        m = np.eye(len(resolutions))
        for r, v in floors.get(metric, {}).items():
            m[index[r], index[r]] = v
        for row in pair_rows.get(metric, []):
            m[index[row["a"]], index[row["b"]]] = m[index[row["b"]], index[row["a"]]] = row["value"]
        entry[metric] = m
        entry["chance"][metric] = _nanmean([row["chance"] for row in pair_rows.get(metric, [])])
        entry["p_value"][metric] = tests[metric].p_value
        entry["effect_beyond_noise"][metric] = verdict(tests[metric], n_complete)
    return entry


def _sentence(model, method, grid, seeds, complete, pair_rows, floors, tests) -> str:
    metric = PRIMARY_METRIC
    rows = pair_rows.get(metric, [])
    cross = _nanmean([r["value"] for r in rows])
    chance = _nanmean([r["chance"] for r in rows])
    free = _nanmean([r["model_free"] for r in rows])
    refs = f"chance {fmt_value(chance)}, model-free edge map {fmt_value(free)}"
    head = f"{model} / {method} ({metric}, grid {grid}):"
    if not rows:
        return f"{head} one resolution: nothing compared across resolutions."
    if len(seeds) < 2 or len(complete) < 2:
        return (
            f"{head} cross-resolution agreement {fmt_value(cross)} ({refs}); one seed: no noise floor, so no resolution"
            " effect can be told from seed noise."
        )
    floor = _nanmean(list(floors.get(metric, {}).values()))
    test = tests[metric]
    ratio = cross / floor if math.isfinite(floor) and floor > 0 else math.nan
    base = (
        f"{head} cross-resolution agreement {fmt_value(cross)} vs cross-seed floor {fmt_value(floor)}"
        f" (ratio {fmt_value(ratio)}; {refs}; {len(complete)} seeds)"
    )
    answer = verdict(test, len(complete))
    if answer == "yes":
        return f"{base}: a resolution effect beyond seed noise (relabelling test p = {test.p_value:.3f})."
    if answer == "no":
        return f"{base}: no resolution effect beyond seed noise (relabelling test p = {test.p_value:.3f})."
    n_res = len({x for r in rows for x in (r["a"], r["b"])})
    return (
        f"{base}: no resolution effect can be shown beyond seed noise; {len(complete)} seeds x {n_res} resolutions"
        f" are too few for the relabelling test (smallest attainable p = {test.min_p:.3f} > {ALPHA})."
    )


def _method_rows(
    out: Study, model: str, per_seed: Mapping[int, Mapping[int, Mapping[str, np.ndarray]]], grid: int, top_k: float
) -> None:
    """method x method agreement at each resolution, averaged over the seeds (main grid only)."""
    resolutions = sorted({r for pr in per_seed.values() for r in pr})
    for res in resolutions:
        found = [(s, per_seed[s][res]) for s in per_seed if res in per_seed[s] and len(per_seed[s][res]) > 1]
        if not found:
            continue
        methods = sorted({m for _, pm in found for m in pm})
        prepared = {(s, m): Prepared(resample(pm[m], grid), top_k) for s, pm in found for m in pm}
        mats = {m: np.eye(len(methods)) for m in METRICS}
        for i, a in enumerate(methods):
            for j in range(i + 1, len(methods)):
                b = methods[j]
                both = [(s, pm) for s, pm in found if a in pm and b in pm]
                if not both:
                    continue
                seeds = ",".join(str(s) for s, _ in both)
                for metric in METRICS:
                    scores = [score_pair(prepared[(s, a)], prepared[(s, b)], metric) for s, _ in both]
                    v = _nanmean([sc.value for sc in scores])
                    mats[metric][i, j] = mats[metric][j, i] = v
                    ch = _nanmean([sc.chance for sc in scores])
                    out.rows.append(
                        {
                            "model": model,
                            "resolution": res,
                            "kind": "method",
                            "grid": grid,
                            "a": a,
                            "b": b,
                            "metric": metric,
                            "seeds": seeds,
                            "value": v,
                            "raw": _nanmean([sc.raw for sc in scores]),
                            "chance": ch,
                        }
                    )
        out.method_matrices[(model, res)] = Agreement(methods, mats)

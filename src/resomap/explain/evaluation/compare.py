"""Agreement of explanation maps across resolutions, seeds and methods, each number with its references.

Maps are resampled to a common grid and compared image by image with the measures of `explain.evaluation.measures`
(spearman, tie-safe top-k% IoU, mass rescaled against its random level), then averaged.

References (`study`) beside every number:
- chance: the same measure between maps of DIFFERENT probe images (image i vs image j != i, same map sets),
  averaged: the agreement any two maps of this method get through shared structure (centre bias, borders);
- random: the same measure between pixel-shuffled maps (the level of the raw measure with no spatial structure;
  mass is rescaled against it);
- model_free: the same measure on a model-free map of the same probe images (gradient magnitude of the
  grey-level image, `edge_maps`) at the same resolutions: agreement that needs no model at all;
- seed (the noise floor, >= 2 seeds): agreement of two seeds' maps at the same resolution; cross-resolution
  agreement is given as a ratio to it and tested against it (`resomap.stats.relabel_test`). A deterministic model
  (its seeds one fit, `study`'s ``deterministic``) is one replicate: only its first seed's maps are compared, with
  no seed floor and no relabelling test; where it looks is decided for every model against its shift floor
  (`explain.evaluation.where`).
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

from resomap.config.schema import ExplainabilityConfig
from resomap.errors import ExplainError
from resomap.explain.evaluation.measures import METRICS, PairScore, Prepared, nanmean, resample, score_pair, second_grid
from resomap.explain.evaluation.references import (
    REFERENCES,
    comparable,
    fmt,
    fmt_value,
    grid_effect,
    left_out,
    map_rows,
    reference_maps,
    reference_words,
)
from resomap.explain.evaluation.where import FloorInputs, answer_sentence, decided, method_words
from resomap.stats import RelabelTest, relabel_seeds_needed, relabel_test

log = logging.getLogger(__name__)

PRIMARY_METRIC = "spearman"  # the metric the per model x method sentence decides on
ALPHA = 0.05  # one-sided level of the relabelling test
KINDS = ("resolution", "seed", "chance", "model_free", "random", "method")


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
    findings: list[str] = field(default_factory=list)  # the statements in short: measure and decision only
    grid: int = 0
    map_rows: list[dict] = field(default_factory=list)  # where it looks, decided (explain.evaluation.where)
    map_answers: list[str] = field(default_factory=list)  # one sentence per model (the Answer's)


Maps = Mapping[str, Mapping[int, Mapping[int, Mapping[str, np.ndarray]]]]  # [model][seed][resolution][method]
Images = Mapping[str, Mapping[int, Mapping[int, np.ndarray]]]  # [model][seed][resolution] -> uint8 [N,C,r,r]


def study(
    maps: Maps,
    images: Images,
    cfg: ExplainabilityConfig,
    deterministic: Mapping[str, int] | None = None,
    where: FloorInputs | None = None,
) -> Study:
    """The comparison of a sweep: maps[model][seed][resolution][method] ([N,H,W], the same probe images for every
    seed and resolution of a model) and the probe images (for the model-free references), at cfg.common_grid and
    at `second_grid` of it; one sentence per model x method with the grid effect and the maps left out.
    ``deterministic``: model -> seed count of the models whose seeds are one fit (the summary's
    ``deterministic_models``): one replicate, compared on their first seed with no floor and no relabelling test.
    ``where``: what deciding where it looks needs beside the maps (explain.evaluation.where.decided)."""
    grids = [cfg.common_grid] + [g for g in [second_grid(cfg.common_grid)] if g]
    out = Study(grid=cfg.common_grid)
    if where is not None:
        out.map_rows, floor_rows = decided(maps, where, cfg, deterministic)
        out.rows += floor_rows
    for model in sorted(maps):
        per_seed = {s: maps[model][s] for s in sorted(maps[model])}
        one_fit = (deterministic or {}).get(model, 0)
        if one_fit and per_seed:  # one replicate: its other seeds' maps are copies, not noise
            per_seed = dict(list(per_seed.items())[:1])
        refs = {grid: reference_maps(images.get(model, {}), grid, cfg.top_k_percent) for grid in grids}
        methods = sorted({m for pr in per_seed.values() for pm in pr.values() for m in pm})
        for method in methods:
            try:
                said = [
                    _study_method(out, model, method, per_seed, refs[g], g, cfg.top_k_percent, g == grids[0], one_fit)
                    for g in grids
                ]
            except ExplainError as exc:  # one unusable map set must not stop the comparison of the others
                log.warning("agreement of %s/%s not computed: %s", model, method, exc)
                out.statements.append(f"{model} / {method}: not compared ({exc}).")
                out.findings.append(out.statements[-1])
                continue
            if said[0]:
                full, short = said[0]
                where = method_words(out.map_rows, model, method)
                extra = [where, grid_effect(out.rows, model, method), left_out(out.rows, model, method)]
                out.statements.append(" ".join([full, *[e for e in extra if e]]))
                out.findings.append(" ".join(x for x in (short, where) if x))
        _method_rows(out, model, per_seed, grids[0], cfg.top_k_percent)
    out.map_answers = [said for said in (answer_sentence(out.map_rows, m) for m in sorted(maps)) if said]
    return out


def _study_method(
    out: Study,
    model: str,
    method: str,
    per_seed: Mapping[int, Mapping[int, Mapping[str, np.ndarray]]],
    refs: Mapping[str, Mapping[int, Prepared]],
    grid: int,
    top_k: float,
    main: bool,
    one_fit: int = 0,
) -> tuple[str, str] | None:
    """One method of one model on one grid: the cross-seed floors, the cross-resolution rows with their references
    and tests (appended to ``out.rows``) and, on the main grid, the `maps` rows, its matrix, floors and sentences
    (returned: the full one and the short finding). ``one_fit``: the seed count of a deterministic model (0: not
    one), whose maps come from one seed."""
    raw = {(s, r): pm[method] for s, pr in per_seed.items() for r, pm in pr.items() if method in pm}
    trials = {key: Prepared(resample(comparable(m, method), grid), top_k) for key, m in raw.items()}
    if not trials:
        return None
    sizes = {v.n for v in trials.values()}
    if len(sizes) > 1:
        raise ExplainError(f"{model}/{method}: maps to compare must hold the same probe images; got {sorted(sizes)}")
    pairs = _Pairs(trials, top_k)
    resolutions = sorted({r for _, r in trials})
    seeds = sorted({s for s, _ in trials})
    base = {"model": model, "method": method, "grid": grid}
    floors = _seed_floors(out, pairs, base, resolutions, seeds)
    complete = [s for s in seeds if all((s, r) in trials for r in resolutions)]
    cross = {metric: pairs.cross_seed(metric) for metric in METRICS}
    tests = {metric: relabel_test(cross[metric], complete, resolutions) for metric in METRICS}  # behind the sentence
    pair_rows = _resolution_pairs(out, pairs, base, seeds, refs, floors, cross)
    if not main:
        return None
    out.rows += map_rows(base, raw)
    key = f"{model}/{method}"
    for metric in METRICS:
        if floors[metric]:
            out.floors[f"{key}/{metric}"] = {str(r): v for r, v in sorted(floors[metric].items())}
    out.matrices[(model, method)] = _matrix(resolutions, pair_rows, floors, tests, len(complete))
    out.matrices[(model, method)]["deterministic"] = bool(one_fit)
    ref_rows = [r for r in out.rows if r.get("metric") == PRIMARY_METRIC and r["kind"] in (*REFERENCES, "random")]
    ref_rows = [r for r in ref_rows if r.get("model") == model and r.get("method") == method and r["grid"] == grid]
    words = reference_words(ref_rows)
    return _sentence(model, method, grid, seeds, complete, pair_rows, floors, tests, words, one_fit)


class _Pairs:
    """One method's prepared map sets by (seed, resolution), and the scores of a pair of them, each computed once."""

    def __init__(self, trials: dict[tuple[int, int], Prepared], top_k: float) -> None:
        self.trials, self.top_k = trials, top_k
        self.cache: dict[tuple, dict[str, PairScore]] = {}

    def __call__(self, x: tuple[int, int], y: tuple[int, int]) -> dict[str, PairScore]:
        key = (x, y) if x <= y else (y, x)
        if key not in self.cache:
            a, b = self.trials[key[0]], self.trials[key[1]]
            self.cache[key] = {m: score_pair(a, b, m, self.top_k) for m in METRICS}
        return self.cache[key]

    def cross_seed(self, metric: str) -> dict[tuple, float]:
        """((seed, res), (seed', res')) -> value for every pair of different seeds (the relabelling test's input)."""
        trials = self.trials
        return {(x, y): self(x, y)[metric].value for x in trials for y in trials if x[0] != y[0] and x < y}


def _seed_floors(
    out: Study, pairs: _Pairs, base: dict[str, Any], resolutions: list[int], seeds: list[int]
) -> dict[str, dict[int, float]]:
    """metric -> {resolution: cross-seed agreement at that resolution} (the noise floor), with its rows."""
    floors: dict[str, dict[int, float]] = defaultdict(dict)
    for r in resolutions:
        have = [s for s in seeds if (s, r) in pairs.trials]
        if len(have) < 2:
            continue
        scores = [pairs((s, r), (t, r)) for s, t in itertools.combinations(have, 2)]
        names = ",".join(map(str, have))
        for metric in METRICS:
            v = nanmean([sc[metric].value for sc in scores])
            floors[metric][r] = v
            common = {**base, "metric": metric, "a": r, "b": r, "seeds": names}
            out.rows.append({**common, "kind": "seed", "value": v, "raw": nanmean([sc[metric].raw for sc in scores])})
            ch = nanmean([sc[metric].chance for sc in scores])
            out.rows.append({**common, "kind": "chance", "of": "seed", "value": ch, "raw": ch})
    return floors


def _resolution_pairs(
    out: Study,
    pairs: _Pairs,
    base: dict[str, Any],
    seeds: list[int],
    refs: Mapping[str, Mapping[int, Prepared]],
    floors: dict[str, dict[int, float]],
    cross: dict[str, dict[tuple, float]],
) -> dict[str, list[dict]]:
    """Every pair of resolutions: the row (value, its chance and chance-corrected value, floor, test) and its
    references (pixel-shuffled maps, the model-free edge map and centre prior), each with its own chance level."""
    trials = pairs.trials
    pair_rows: dict[str, list[dict]] = defaultdict(list)
    for r1, r2 in itertools.combinations(sorted({r for _, r in trials}), 2):
        both = [s for s in seeds if (s, r1) in trials and (s, r2) in trials]
        combos = [(s, t) for s in seeds for t in seeds if (s, r1) in trials and (t, r2) in trials]
        scores = [pairs((s, r1), (t, r2)) for s, t in combos]
        found = {k: v for k, v in refs.items() if r1 in v and r2 in v}
        ref_scores = {k: {m: score_pair(v[r1], v[r2], m) for m in METRICS} for k, v in found.items()}
        names = ",".join(map(str, sorted({x for c in combos for x in c})))
        for metric in METRICS:
            test = relabel_test(cross[metric], both, [r1, r2]) if len(both) >= 2 else None
            same = [pairs((s, r1), (s, r2))[metric].value for s in both]
            common = {**base, "metric": metric, "a": r1, "b": r2, "seeds": names}
            row = _resolution_row(common, [sc[metric] for sc in scores], same, floors[metric], test, len(both))
            rnd_chance = nanmean([sc[metric].random_chance for sc in scores])
            extra = [
                {**common, "kind": "chance", "of": "resolution", "value": row["chance"], "raw": row["chance"]},
                {**common, "kind": "random", "value": row["random"], "raw": row["random"], "chance": rnd_chance}
                | {"corrected": row["random"] - rnd_chance},
            ]
            for kind, by_metric in ref_scores.items():
                e = by_metric[metric]
                extra.append({**common, "kind": kind, "value": e.value, "raw": e.raw, "chance": e.chance})
                extra[-1].update(corrected=e.corrected, images=e.images)
            row["model_free"] = ref_scores["model_free"][metric].value if "model_free" in ref_scores else math.nan
            out.rows += [row, *extra]
            pair_rows[metric].append(row)
    return pair_rows


def _resolution_row(
    common: dict[str, Any],
    scores: list[PairScore],
    same_seed: list[float],
    floor_at: dict[int, float],
    test: RelabelTest | None,
    n_both: int,
) -> dict[str, Any]:
    """The cross-resolution row of one metric: mean over the seed pairs, against the floor at both resolutions."""
    r1, r2 = common["a"], common["b"]
    v = nanmean([sc.value for sc in scores])
    floor = nanmean([floor_at.get(r1, math.nan), floor_at.get(r2, math.nan)])
    if not (r1 in floor_at and r2 in floor_at):
        floor = math.nan
    row = {
        **common,
        "kind": "resolution",
        "value": v,
        "raw": nanmean([sc.raw for sc in scores]),
        "same_seed": nanmean(same_seed) if same_seed else math.nan,
        "floor": floor,
        "ratio_to_floor": v / floor if math.isfinite(floor) and floor > 0 else math.nan,
        "p_value": test.p_value if test else math.nan,
        "min_p": test.min_p if test else math.nan,
        "detectable": test.detectable if test else math.nan,  # the drop these seeds show with power test.power
        "effect_beyond_noise": verdict(test, n_both) if test else "n.a.",
    }
    row["chance"] = nanmean([sc.chance for sc in scores])
    row["corrected"] = v - row["chance"]  # beyond what maps of different probe images share
    row["random"] = nanmean([sc.random for sc in scores])
    row["images"] = min((sc.images for sc in scores), default=0)  # images compared in the worst pair of maps
    return row


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
        entry["chance"][metric] = nanmean([row["chance"] for row in pair_rows.get(metric, [])])
        entry["p_value"][metric] = tests[metric].p_value
        entry["effect_beyond_noise"][metric] = verdict(tests[metric], n_complete)
    return entry


NO_FLOOR = "no seed floor"  # a deterministic model's maps: its seeds are one fit
NOT_RUN = "no relabelling test"


def _sentence(
    model, method, grid, seeds, complete, pair_rows, floors, tests, references: str = "", one_fit: int = 0
) -> tuple[str, str]:
    """(the full sentence for agreement.txt, the short finding for the report's first screen and MLflow): the same
    measure and decision, the short one without the references' details. ``one_fit``: a deterministic model's seed
    count (its seeds are one fit: no floor, no test)."""
    metric = PRIMARY_METRIC
    rows = pair_rows.get(metric, [])
    cross = nanmean([r["value"] for r in rows])
    chance = nanmean([r["chance"] for r in rows])
    refs = f"its chance {fmt_value(chance)}, chance-corrected {fmt(cross - chance, True)}"
    refs += f"; {references}" if references else ""
    head = f"{model} / {method} ({metric}, grid {grid}):"
    if not rows:
        text = f"{head} one resolution: nothing compared across resolutions."
        return text, text
    if one_fit:
        one = f"{NO_FLOOR} and {NOT_RUN}: its {one_fit} seeds are one fit."
        return (
            f"{head} cross-resolution agreement {fmt_value(cross)} ({refs}); {one}",
            f"{head} agreement across resolutions {fmt_value(cross)} (chance {fmt_value(chance)}); {one}",
        )
    if len(seeds) < 2 or len(complete) < 2:
        one = "one seed: no noise floor, so no resolution effect can be told from seed noise."
        return (
            f"{head} cross-resolution agreement {fmt_value(cross)} ({refs}); {one}",
            f"{head} agreement across resolutions {fmt_value(cross)} (chance {fmt_value(chance)}); {one}",
        )
    floor = nanmean(list(floors.get(metric, {}).values()))
    test = tests[metric]
    ratio = cross / floor if math.isfinite(floor) and floor > 0 else math.nan
    base = (
        f"{head} cross-resolution agreement {fmt_value(cross)} vs cross-seed floor {fmt_value(floor)}"
        f" (ratio {fmt_value(ratio)}; {refs}; {len(complete)} seeds)"
    )
    short = f"{head} agreement across resolutions {fmt_value(cross)} vs cross-seed floor {fmt_value(floor)}"
    short += f" (chance {fmt_value(chance)})"
    answer = verdict(test, len(complete))
    if answer == "yes":
        said = f"a resolution effect beyond seed noise shown (relabelling test p = {test.p_value:.3f})."
        return f"{base}: {said}", f"{short}: {said}"
    if answer == "no":
        shown = f"no resolution effect beyond seed noise shown (relabelling test p = {test.p_value:.3f})"
        if math.isfinite(test.detectable):
            size = (
                f"these seeds would show an agreement drop of {test.detectable:.3f} or more with power "
                f"{test.power:g}, so a smaller effect is not ruled out"
            )
            brief = f"a drop under {test.detectable:.3f} is not ruled out"
        else:
            size = brief = "the relabellings tie, so no detectable drop can be stated"
        return f"{base}: {shown}; {size}.", f"{short}: {shown}; {brief}."
    n_res = len({x for r in rows for x in (r["a"], r["b"])})
    needed = relabel_seeds_needed(n_res, ALPHA)
    return (
        f"{base}: no decision: {len(complete)} seeds x {n_res} resolutions are too few for the relabelling test "
        f"(smallest attainable p = {test.min_p:.3f} > {ALPHA}); it needs >= {needed} seeds.",
        f"{short}: no decision: the relabelling test needs >= {needed} seeds (this sweep has {len(complete)}).",
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
                    v = nanmean([sc.value for sc in scores])
                    mats[metric][i, j] = mats[metric][j, i] = v
                    ch = nanmean([sc.chance for sc in scores])
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
                            "raw": nanmean([sc.raw for sc in scores]),
                            "chance": ch,
                        }
                    )
        out.method_matrices[(model, res)] = Agreement(methods, mats)

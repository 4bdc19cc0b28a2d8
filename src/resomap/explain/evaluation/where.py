"""Where it looks, decided: does a model look at the same places at a smaller resolution as at its reference?

Per model x method x step (a resolution against the reference), with probe images as the unit, every agreement the
mass agreement of two maps on a grid of explainability.map_grid cells a side: 1 - the total variation distance of
their |map| normalised to mass 1, the share of the attribution mass that sits in the same cells (raw, not rescaled):
where a map puts its mass, not how it ranks the many pixels of low attribution (Spearman over every pixel fell
with a CAM's coarser grid at a smaller input even where the mass stayed on the same object:
tests/test_where_known.py measured 0.68 against a cross-seed floor of 0.86 there, mass agreement 0.84 against 0.91);
- f_i: the floor, what the map moves anyway: the mean of each map's agreement with the map of the same image moved
  `explainability.floor_shift` pixels and moved back (resomap.explain.methods.nuisance), at the resolution and at
  the reference (the shift floor). Every model has it, deterministic ones too;
- a_i: the agreement across resolutions with the same nuisance in it: the mean of (the map at the resolution against
  the shifted map at the reference) and (the shifted map at the resolution against the map at the reference). Its
  map and its shifted map play the two fits of the seed pairs below: swapping the shifted and the plain map at one
  resolution, which changes nothing where the resolution changes nothing beyond the nuisance, swaps a_i and f_i,
  so a_i - f_i is symmetric under that null and the sign-flip test over images holds its level (comparing the
  plain maps instead, a_i - f_i was skewed: "elsewhere" 6.9% of 1000 simulated runs at alpha 0.05);
- c_i: chance, image i's map at the resolution against the other images' maps at the reference, averaged (said
  beside the agreement); and s_i, the same at one resolution (image i's map against the other images' maps there),
  averaged over the two resolutions: what the floor must beat for the maps to follow the image at all.
A deterministic model's seeds are one fit, so its first seed alone counts, against the shift floor. A model whose
fits depend on the training seed (trained per resolution) is decided, with 2 or more seeds, against the cross-seed
floor instead: a shift moves one fit's map, while two fits differ more than that even where they look at the same
places. The seeds are taken in disjoint pairs (s, t) (an odd one left out): per pair and image, the agreement
across resolutions is the mean of (s at the resolution, t at the reference) and (t, s), the floor the mean of (s, t)
at the resolution and at the reference, so that swapping one seed's resolution labels, which changes nothing when
resolution changes nothing, swaps the two and flips the sign of their difference: each pair's difference is
symmetric under that null, the pairs' mean too (independent fits), and the sign-flip test over images holds its
level (tests/test_where.py; with all pairs of 3 seeds averaged it did not: 7.2% at alpha 0.05). With one seed such
a model has only the shift floor, and "elsewhere" is not said (two fits may differ more than one fit shifted).
Images whose maps cannot be ranked (constant, e.g. all zero, or non-finite) at either resolution are counted and
left out.

The decision (one-sided sign-flip tests over the images, Holm over the model's methods and steps, per direction):
first whether the floor is shown above s_i (else "at chance": a map agrees with other images' maps as much as with
its own shifted map, so the maps are not shown to follow the image, and nothing is said of where it looks; a
linear model's saliency, its weights for every image, is one); then a_i - f_i against -margin
(resomap.stats.margin): "looks at the same places" (shown above -margin: within the margin of its floor), "looks
elsewhere" (shown below it), or "undecided" with the one-sided bounds of the difference (the smallest margin these
images show it within). What it shows is about this fit (or these seeds) on
these probe images, and the sentences say so.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from resomap.explain.evaluation.measures import Prepared, nanmean, per_image, resample
from resomap.explain.evaluation.placement import normalised, placement_words, region_of, step_placement
from resomap.explain.evaluation.references import comparable
from resomap.stats import holm
from resomap.stats.margin import BEYOND, MIN_UNITS, UNDECIDED, WITHIN, margin_test, margin_verdicts, units_needed

SPEARMAN = "spearman"  # the agreement rows' metric (agreement.csv), which the shift_floor rows sit beside
METRIC = "mass"  # raw 1 - total variation distance (measures.per_image): the share of mass in the same cells
CHANCE = "chance"
NO_FLOOR = "no floor"
ONE_SEED = (
    "below its shift floor, but this model's fits depend on the training seed and one seed gives no fit-to-fit"
    " floor: needs 2 or more seeds (sweep.seeds)"
)
POWER = 0.8
VERDICT_WORDS = {
    WITHIN: "the same places",
    BEYOND: "elsewhere",
    UNDECIDED: "undecided",
    CHANCE: "at chance",
    NO_FLOOR: "not decided",
}

Maps = Mapping[str, Mapping[int, Mapping[int, Mapping[str, np.ndarray]]]]  # [model][seed][resolution][method]


@dataclass(frozen=True)
class FloorInputs:
    """What the decision needs beside the maps: the shift floor's maps (in the form of the maps), the probe
    images' object masks per model (at its reference; None or absent: the central quarter is the region), the
    reference resolution (stats.reference; None: each model's largest) and the one-sided alpha."""

    floors: Maps
    masks: Mapping[str, np.ndarray] | None = None
    reference: int | None = None
    alpha: float = 0.05
    # (model, resolution, method, score) -> each probe image's faithfulness score against random maps, the seeds
    # averaged (explain.evaluation.intervals.seed_means): deletion and insertion decided per resolution
    quality: Mapping[tuple, np.ndarray] | None = None
    failed: Mapping[tuple, str] | None = None  # (model, resolution, method) -> why the trial has no maps of it


FAITHFUL = {"deletion_auc_vs_random": "deletion", "insertion_auc_vs_random": "insertion"}


def faithfulness(quality: Mapping[tuple, np.ndarray], model: str, alpha: float) -> dict[tuple[str, int], dict]:
    """(method, resolution) -> {'<score>': Holm-adjusted p of "its maps beat random maps" (each image's excess over
    random maps, one-sided sign-flip over the images), 'shown': the scores shown}, Holm over the model's methods,
    resolutions and both scores: a map that moved but stayed faithful is another finding than one that became
    noise."""
    keys = [k for k in sorted(quality) if k[0] == model and k[3] in FAITHFUL]
    values = [np.asarray(quality[k], dtype=np.float64) for k in keys]
    raw = [margin_test(v[np.isfinite(v)], 0.0, alpha=alpha).p_within for v in values]
    out: dict[tuple[str, int], dict] = {}
    for (_, res, method, score), p in zip(keys, holm(raw) if raw else [], strict=True):
        entry = out.setdefault((method, int(res)), {"shown": []})
        entry[FAITHFUL[score]] = float(p)
        if p <= alpha:
            entry["shown"].append(FAITHFUL[score])
    return out


def decided(maps: Maps, where: FloorInputs, cfg: Any, deterministic: Mapping[str, int] | None) -> tuple[list, list]:
    """(decide_maps' rows at cfg's map_grid (at most its common_grid), margin and floor_shift; agreement.csv's
    shift_floor rows)."""
    rows = decide_maps(
        maps, where.floors, grid=min(cfg.map_grid, cfg.common_grid), top_k=cfg.top_k_percent, margin=cfg.map_margin,
        reference=where.reference, alpha=where.alpha, deterministic=deterministic, pixels=cfg.floor_shift,
        masks=where.masks, quality=where.quality, failed=where.failed,
    )  # fmt: skip
    return rows, shift_floor_rows(maps, where.floors, cfg, deterministic)


def reference_of(resolutions: list[int], reference: int | None) -> int:
    """The step's reference: stats.reference where the model has it, else its largest resolution."""
    return int(reference) if reference in resolutions else max(resolutions)


def decide_maps(
    maps: Maps,
    floors: Maps,
    *,
    grid: int,
    top_k: float,
    margin: float,
    reference: int | None = None,
    alpha: float = 0.05,
    deterministic: Mapping[str, int] | None = None,
    pixels: int = 1,
    masks: Mapping[str, np.ndarray] | None = None,
    quality: Mapping[tuple, np.ndarray] | None = None,
    failed: Mapping[tuple, str] | None = None,
) -> list[dict[str, Any]]:
    """One row per model x method x step (map_decisions.csv): the per-image means (agreement, floor, chance), the
    images used and left out, the tests' Holm-adjusted p values, the verdict and the smallest detectable margin,
    and where the maps sit (explain.evaluation.placement: the share of mass in the region, `masks`[model] the
    probe images' object masks where the data has them, else the central quarter, and the centre's move)."""
    rows: list[dict[str, Any]] = []
    for model in sorted(maps):
        seeds = sorted(maps[model])
        if (deterministic or {}).get(model):
            seeds = seeds[:1]  # one fit: its other seeds' maps are copies
        resolutions = sorted({r for s in seeds for r in maps[model][s]})
        if len(resolutions) < 2:
            continue
        ref = reference_of(resolutions, reference)
        methods = sorted({m for s in seeds for r in maps[model][s] for m in maps[model][s][r]})
        where = (maps[model], floors.get(model, {}), (masks or {}).get(model))
        one_fit = bool((deterministic or {}).get(model))
        family = [
            _step(model, method, res, ref, seeds, where, grid, top_k, margin, alpha, one_fit)
            for method in methods
            for res in sorted((r for r in resolutions if r != ref), reverse=True)
        ]
        _decide(family, alpha)
        faithful = faithfulness(quality or {}, model, alpha)
        for row in family:
            row["pixels"] = int(pixels)
            if not row["seeds"]:  # a method without maps at one of the two: the trial's reason where it gave one
                reasons = [(failed or {}).get((model, r, row["method"])) for r in (row["resolution"], row["reference"])]
                said = [
                    f"{r} px: {w}" for r, w in zip((row["resolution"], row["reference"]), reasons, strict=True) if w
                ]
                row["why"] = f"no {row['method']} maps at both resolutions" + (f" ({'; '.join(said)})" if said else "")
            for key, at in (("faithful", row["resolution"]), ("faithful_reference", row["reference"])):
                found = faithful.get((row["method"], int(at)))
                if found is not None:
                    row[key] = "+".join(found["shown"]) or "none"
                    row[f"{key}_p"] = min(found.get("deletion", 1.0), found.get("insertion", 1.0))
        rows += family
    return rows


def _step(model, method, res, ref, seeds, where, grid, top_k, margin, alpha, one_fit) -> dict[str, Any]:
    """One step's per-image values over the seeds that have both maps (and, where saved, both floors). The floor
    is the shift floor for one fit (a deterministic model, or one seed); for a model with random seeds and 2 or
    more of them it is the cross-seed floor (two fits' maps of the image at the same resolution), the agreement
    across resolutions then taken between different seeds' fits too, so both compare two fits."""
    per_seed, floor_seed, masks = where
    used = [s for s in seeds if method in per_seed[s].get(res, {}) and method in per_seed[s].get(ref, {})]
    row: dict[str, Any] = {"model": model, "method": method, "resolution": res, "reference": ref, "grid": grid}
    row.update(metric=METRIC, margin=float(margin), seeds=len(used), alpha=float(alpha), deterministic=bool(one_fit))
    if not used:
        return row | {"images": 0, "left_out": 0, "verdict": NO_FLOOR, "why": "no maps at both resolutions"}
    prep = {(s, r): _prep(per_seed[s][r][method], method, grid, top_k) for s in used for r in (res, ref)}
    a, c, same, shift_r, shift_ref, crossed, placed = [], [], [], [], [], [], []
    region, region_kind = region_of(masks, prep[used[0], ref].n, grid)  # the same probe images at every seed
    for s in used:
        agree, chance = per_image(prep[s, res], prep[s, ref], METRIC)
        a.append(agree)
        c.append(chance)
        same.append(0.5 * (per_image(*[prep[s, res]] * 2, METRIC)[1] + per_image(*[prep[s, ref]] * 2, METRIC)[1]))
        here, there = per_seed[s][res][method], per_seed[s][ref][method]
        placed.append(step_placement(normalised(here, grid), normalised(there, grid), region))
        fl_here = floor_seed.get(s, {}).get(res, {}).get(method)
        fl_there = floor_seed.get(s, {}).get(ref, {}).get(method)
        if fl_here is not None and fl_there is not None:
            prep[s, res, "shift"] = _prep(fl_here, method, grid, top_k)
            prep[s, ref, "shift"] = _prep(fl_there, method, grid, top_k)
            shift_r.append(per_image(prep[s, res], prep[s, res, "shift"], METRIC)[0])
            shift_ref.append(per_image(prep[s, ref], prep[s, ref, "shift"], METRIC)[0])
            crossed.append(_mean_of(prep, (s, res), (s, ref, "shift"), (s, res, "shift"), (s, ref)))
    has_shift = len(shift_r) == len(used)
    by_seed = len(used) >= 2 and not one_fit
    if by_seed:  # two fits against two fits: the cross-seed floor, over disjoint pairs of seeds (module doc)
        pairs = list(zip(used[0::2], used[1::2]))
        a_i = _seed_mean([_mean_of(prep, (s, res), (t, ref), (t, res), (s, ref)) for s, t in pairs])
        f_i = _seed_mean([_mean_of(prep, (s, res), (t, res), (s, ref), (t, ref)) for s, t in pairs])
        row["seed_pairs"] = len(pairs)
    elif has_shift:  # one fit: its map and its shifted map play the two fits (module doc)
        a_i = _seed_mean(crossed)
        f_i = 0.5 * (_seed_mean(shift_r) + _seed_mean(shift_ref))
    else:
        a_i, f_i = _seed_mean(a), np.full(len(a), np.nan)
    c_i, s_i = _seed_mean(c), _seed_mean(same)
    has_floor = by_seed or has_shift
    usable = np.isfinite(a_i) & np.isfinite(c_i) & np.isfinite(s_i) & (np.isfinite(f_i) if has_floor else True)
    n = int(usable.sum())
    row.update(images=n, left_out=int(len(a_i) - n), agreement=_mean(a_i[usable]), chance=_mean(c_i[usable]))
    row.update(floor=_mean(f_i[usable]) if has_floor else math.nan, chance_within=_mean(s_i[usable]))
    row["floor_kind"] = "seed" if by_seed else "shift"
    row["floor_at_resolution"] = _mean(_seed_mean(shift_r)[usable]) if has_shift else math.nan
    row["floor_at_reference"] = _mean(_seed_mean(shift_ref)[usable]) if has_shift else math.nan
    row["region"] = region_kind
    for key in ("share", "share_reference", "centre_shift"):
        row[key] = _mean(_seed_mean([p[key] for p in placed])[usable])
    row["_chance_d"] = (f_i - s_i)[usable] if has_floor else None
    row["_floor_d"] = (a_i - f_i)[usable] if has_floor else None
    if not has_floor:
        row.update(verdict=NO_FLOOR, why="no shift floor saved with these maps (explainability.floor)")
    return row


def shift_floor_rows(maps: Maps, floors: Maps, cfg: Any, deterministic: Mapping | None) -> list[dict]:
    """agreement.csv's `shift_floor` rows: per model, method and resolution, the mean Spearman agreement (main grid,
    as the agreement rows) of its maps with their shifted-and-undone maps, over its seeds (a deterministic model's
    first): what MLflow's agreement chart draws beside the agreement and its chance level."""
    rows = []
    for model in sorted(maps):
        seeds = sorted(maps[model])[: 1 if (deterministic or {}).get(model) else None]
        found: dict[tuple[str, int], list[float]] = defaultdict(list)
        for s in seeds:
            for res, by_method in maps[model][s].items():
                for method, m in by_method.items():
                    fl = floors.get(model, {}).get(s, {}).get(res, {}).get(method)
                    if fl is None:
                        continue
                    prep = [_prep(x, method, cfg.common_grid, cfg.top_k_percent) for x in (m, fl)]
                    found[(method, res)].append(nanmean(per_image(*prep, SPEARMAN)[0]))
        rows += [
            {"model": model, "method": me, "grid": cfg.common_grid, "kind": "shift_floor", "metric": SPEARMAN}
            | {"a": res, "b": res, "value": nanmean(v)}
            for (me, res), v in sorted(found.items())
        ]
    return rows


def _decide(family: list[dict[str, Any]], alpha: float) -> None:
    """Holm over the family (one model's methods and steps) per test; each row gets its p values and verdict."""
    open_rows = [r for r in family if r.get("verdict") != NO_FLOOR and r.get("images", 0) >= MIN_UNITS]
    for r in family:
        if r.get("verdict") is None and r.get("images", 0) < MIN_UNITS:
            r.update(verdict=UNDECIDED, why=f"{r.get('images', 0)} usable probe images: too few to decide")
    raw_chance = [margin_test(r["_chance_d"], 0.0, alpha=alpha).p_within for r in open_rows]  # floor above it
    tests = [margin_test(r["_floor_d"], r["margin"], alpha=alpha, power=POWER) for r in open_rows]
    decided = margin_verdicts(tests, alpha)
    for r, p_ch, test, (verdict, p_within, p_beyond) in zip(open_rows, holm(raw_chance), tests, decided, strict=True):
        r.update(p_chance=float(p_ch), p_same=p_within, p_elsewhere=p_beyond, difference=test.mean, sd=test.sd)
        r.update(lower=test.lower, upper=test.upper)
        r.update(detectable=test.detectable, needed=units_needed(test.sd, r["margin"], alpha, POWER))
        r["verdict"] = CHANCE if p_ch > alpha else verdict
        if r["verdict"] == BEYOND and not r["deterministic"] and r["floor_kind"] == "shift":
            r.update(verdict=UNDECIDED, why=ONE_SEED)  # two fits may differ more than one fit under a shift
    for r in family:
        r.pop("_chance_d", None)
        r.pop("_floor_d", None)


def _mean_of(prep: Mapping, a: tuple, b: tuple, c: tuple, d: tuple) -> np.ndarray:
    """Per image, the mean of the agreement of maps a with b and of c with d."""
    return 0.5 * (per_image(prep[a], prep[b], METRIC)[0] + per_image(prep[c], prep[d], METRIC)[0])


def _prep(maps: np.ndarray, method: str, grid: int, top_k: float) -> Prepared:
    return Prepared(resample(comparable(maps, method), grid), top_k)


def _seed_mean(values: list[np.ndarray]) -> np.ndarray:
    """Per image, the mean over seeds (nan where any seed's value is nan: that image's maps are left out)."""
    return np.mean(np.stack(values), axis=0) if values else np.zeros(0)


def _mean(values: np.ndarray) -> float:
    return float(np.mean(values)) if np.size(values) else math.nan


# ---------------------------------------------------------------------------------------------------- words


def scope_words(row: Mapping[str, Any]) -> str:
    """What a verdict is about: this fit (a deterministic model) or these seeds, on these probe images (the methods'
    maps left out are said with each verdict: `left_words`)."""
    images = f"these {int(row.get('images', 0)) + int(row.get('left_out', 0) or 0)} probe images"
    if row.get("deterministic") or int(row.get("seeds", 0)) <= 1:
        return f"this fit on {images}"
    pairs = int(row.get("seed_pairs", 0) or 0)
    left = int(row["seeds"]) - 2 * pairs
    return f"{images}, {int(row['seeds'])} seeds' fits in {pairs} disjoint pair(s)" + (
        f" ({left} seed left out)" if left else ""
    )


def _p(v: Any) -> str:
    return "n.a." if v is None or not math.isfinite(float(v)) else (f"{v:.3g}" if v >= 0.001 else "<0.001")


def verdict_words(row: Mapping[str, Any], short: bool = False) -> str:
    """One step's verdict with its evidence ('elsewhere: 0.39 against its shift floor 0.86, ...')."""
    verdict = row.get("verdict")
    if verdict == NO_FLOOR:
        return f"not decided ({row.get('why', '')})"

    a, f, within = (float(row.get(k, math.nan)) for k in ("agreement", "floor", "chance_within"))
    if verdict == UNDECIDED and "p_same" not in row:
        return f"undecided ({row.get('why', '')})"
    if verdict == UNDECIDED and row.get("why") == ONE_SEED:
        return f"undecided: agreement {a:.2f} {-float(row['difference']):.2f} {ONE_SEED} (floor {f:.2f})"
    if verdict == CHANCE:
        if short:
            return f"at chance (its floor {f:.2f}, maps of different images {within:.2f})"
        return (
            f"at chance: a map agrees with its own shifted map ({f:.2f}) not shown more than with other images'"
            f" maps ({within:.2f}; Holm p {_p(row.get('p_chance'))}): its maps are not shown to follow the image, so"
            f" nothing is said of where it looks (agreement across resolutions {a:.2f})"
        )
    d, margin = float(row["difference"]), float(row["margin"])
    if verdict == WITHIN:
        words = f"the same places within {margin:g} of its floor: agreement {a:.2f}, floor {f:.2f}"
        words += "" if short else f", difference {d:+.2f}"
        return words + f" (Holm p {_p(row['p_same'])})"
    if verdict == BEYOND:
        words = f"elsewhere: agreement {a:.2f}, {-d:.2f} below its floor {f:.2f}"
        words += "" if short else f", more than the margin {margin:g}"
        return words + f" (Holm p {_p(row['p_elsewhere'])})"
    lower, upper = float(row.get("lower", math.nan)), float(row.get("upper", math.nan))
    words = f"undecided at margin {margin:g}: agreement {a:.2f}, floor {f:.2f} (difference {d:+.2f}"
    if math.isfinite(lower) and math.isfinite(upper):
        words += f", one-sided bounds [{lower:+.2f}, {upper:+.2f}]"
    words += ")"
    if math.isfinite(lower) and lower < 0:
        words += f"; the smallest margin these images show it within: {-lower:.2f}"
    det, needed = row.get("detectable"), row.get("needed")
    if not short and det is not None and math.isfinite(float(det)):
        words += f" (with no true change they would show {float(det):.2f} with power {POWER:g}"
        words += f"; the margin {margin:g} needs about {int(needed)} probe images)" if needed else ")"
    return words


def _with_placement(words: str, row: Mapping[str, Any]) -> str:
    placed = ", ".join(w for w in (placement_words(row), faithful_words(row)) if w)
    return f"{words}; {placed}" if placed else words


def left_words(row: Mapping[str, Any]) -> str:
    """' (on 10 images: 2 left out, a constant or non-finite map)' where a method's maps were left out."""
    out = int(row.get("left_out", 0) or 0)
    return f" (on {int(row.get('images', 0))} images: {out} left out, a constant or non-finite map)" if out else ""


def faithful_words(row: Mapping[str, Any]) -> str:
    """'its maps at 32 px shown more faithful than random maps (deletion)' or 'not shown ...' (Holm over the
    model's methods, resolutions and both scores)."""
    shown = row.get("faithful")
    if not isinstance(shown, str):
        return ""
    res = row["resolution"]
    if shown == "none":
        return f"at {res} px not shown more faithful than random maps (deletion, insertion)"
    return f"at {res} px shown more faithful than random maps ({shown.replace('+', ', ')})"


def method_words(rows: list[Mapping[str, Any]], model: str, method: str) -> str:
    """The decision's words for one model and method, every step (appended to the comparison's sentence)."""
    mine = [r for r in rows if r["model"] == model and r["method"] == method]
    if not mine:
        return ""
    first = mine[0]
    steps = "; ".join(
        f"{r['resolution']} px against {r['reference']} px{left_words(r)} "
        + _with_placement(verdict_words(r, short=True), r)
        for r in mine
    )
    return f"Where it looks ({_measure(first)}; {scope_words(first)}): {steps}."


def answer_sentence(rows: list[Mapping[str, Any]], model: str) -> str:
    """The Answer's sentence on where `model` looks: its smallest resolution against its reference, every method."""
    mine = [r for r in rows if r["model"] == model]
    if not mine:
        return ""
    low = min(r["resolution"] for r in mine)
    step = [r for r in mine if r["resolution"] == low]
    first = step[0]
    parts = "; ".join(
        f"{r['method']}{left_words(r)} "
        + (_with_placement(verdict_words(r, short=True), r) if r["verdict"] == BEYOND else verdict_words(r, short=True))
        for r in step
    )
    head = f"{model}, where it looks at {low} px against {first['reference']} px"
    return f"{head} ({_measure(first)}; {scope_words(first)}): {parts}."


def _measure(row: Mapping[str, Any]) -> str:
    """What the agreement and the floor are, in words."""
    g = int(row["grid"])
    return (
        f"agreement: the share of map mass in the same cells of a {g} x {g} grid, against its {_floor_name(row)},"
        f" margin {float(row['margin']):g}"
    )


def _floor_name(row: Mapping[str, Any]) -> str:
    if row.get("floor_kind") == "seed":
        return "cross-seed floor (two fits' maps of the image at one resolution)"
    return f"{int(row.get('pixels', 1))}-pixel-shift floor"


def csv_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows as map_decisions.csv holds them (the words beside the numbers)."""
    return [{**r, "words": _with_placement(verdict_words(r), r)} for r in rows]

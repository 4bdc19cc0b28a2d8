"""The three-way trade-off per model: which resolutions are on the front of score x cost x explanation quality,
a resolution dropped only on evidence: another resolution is shown better on one axis and worse on none by tests
of the differences between the two (resomap.stats.paired_front), Holm over every test of the model's front.

The axes of a model, each from what the summary already holds, and the test of each pair of resolutions on it:

- score: the headline score pooled over seeds (SummaryRow.score); the difference is the summary's paired test on
  the same test images (paired_tests: the clustered McNemar / sign-flip test of the per-image differences, seeds
  averaged within each image); higher is better;
- cost: inference latency at batch 1, each trial's own measurement; the difference is Welch's t-test over the
  seeds of the two resolutions (each trial is timed in its own process, so seed 42 at one resolution shares nothing
  with seed 42 at another: the seeds are not paired). Its interval is the summary row's (`timing_columns`: from the
  lowest to the highest of the seeds' order-statistic intervals of their median call, never below zero), not one
  over the seeds' medians. With one seed at some resolution latency cannot be tested: GMACs instead (a count:
  compared exactly), else the cost gives no evidence; lower is better;
- quality: an explanation score's excess over random maps (explanations/quality.csv) of the first method (by name)
  that has one with its interval at every resolution of the model, the first score of QUALITY_SCORES it has; the
  difference is the sign-flip test of the per-probe-image differences (the same probe images at every resolution,
  each image's seeds averaged: stats.paired_score_test); higher is better. Without an interval (fewer than 10 probe
  images) the axis is left out.

The intervals beside each coordinate are each resolution's own, for reading; two of them apart or overlapping
decides nothing (a difference measured on the same images is tested as one). An axis that a resolution of the model
lacks is left out, and the model's note says so. The result (`tradeoffs`) is plain JSON, summary.json's
``front3``; the table (`tradeoff_cells`), the words (`tradeoff_lines`) and the figure (resomap.reports.tradeoff,
figures/tradeoff_score_cost_quality) are drawn from it, never recomputed.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from resomap.results import QUALITY_SCORES
from resomap.stats import Axis, Coordinate, Difference, paired_front, paired_score_test, pareto_front, timing_interval
from resomap.summary.rows import TWOWAY_WORDS, SummaryRow

AXES = ("score", "cost", "quality")
ON_FRONT = "on the front"
QUALITY_INTERVAL = "bootstrap interval over the probe images, each image's seeds together"
LATENCY_INTERVAL = "the seeds' order-statistic intervals of their median call, lowest to highest"
RULE = (
    "A resolution is dropped from a model's front only when another resolution is shown better on at least one"
    " axis and worse on none. Shown better: a two-sided test of the difference between the two resolutions rejects"
    " at {alpha:.2g}, Holm over all of the model's tests (every pair of resolutions on every axis), in the other's"
    " favour: score paired on the same test images, explanation quality paired on the same probe images, latency"
    " by Welch's t-test over seeds; a count (GMACs) is compared exactly. A pair with no test on an axis gives no"
    " evidence, so it keeps the resolution. The intervals are each resolution's own, for reading; they decide"
    " nothing."
)


@dataclass(frozen=True)
class Measured:
    """What the front's tests read besides the summary rows: the summary's paired tests (summary.paired_tests),
    each trial's result (summary.trials: its latency), and per (model, resolution, method, score) the probe images'
    quality scores, seeds averaged (explain.evaluation.intervals.seed_means); ``level``, ``resamples`` and
    ``seed`` those of the summary's statistics."""

    paired: Sequence[Mapping[str, Any]] = ()
    trials: Sequence[Mapping[str, Any]] = ()
    quality: Mapping[tuple[str, int, str, str], np.ndarray] = field(default_factory=dict)
    resamples: int = 2000
    seed: int = 0

    def latencies(self, model: str) -> dict[int, list[float]]:
        """resolution -> each finished trial's latency at batch 1 (ms)."""
        out: dict[int, list[float]] = defaultdict(list)
        for t in self.trials:
            value = (t.get("profile") or {}).get("latency_median_ms")
            if t.get("model") == model and t.get("status", "FINISHED") == "FINISHED" and finite(value):
                out[int(t["resolution"])].append(float(value))
        return dict(out)


def timing_columns(results: Sequence[Mapping[str, Any]], level: float) -> dict[str, Any]:
    """SummaryRow's latency_ms_ci_low/high and throughput_ips_ci_low/high of one model x resolution: each an
    interval over its seeds' trials from each trial's timed calls (stats.timing_interval at ``level``: the lowest
    to the highest of the trials' intervals of their median call; throughput from the same calls as images per
    second), never below zero; ``note`` says why there is none. Nothing when no trial kept its calls (profiling
    off, results written before they were kept)."""
    profiles = [t.get("profile") or {} for t in results]
    calls = [p.get("latency_calls_ms") or [] for p in profiles]
    if not any(calls):
        return {}
    latency = timing_interval(calls, level)
    if not latency.available:
        return {"note": f"latency interval not available: {latency.reason}"}
    images = [int(p.get("batch_size") or 1) for p in profiles]
    throughput = timing_interval([[n * 1000.0 / ms for ms in c] for n, c in zip(images, calls, strict=True)], level)
    return {"latency_ms_ci_low": latency.low, "latency_ms_ci_high": latency.high,
            "throughput_ips_ci_low": throughput.low, "throughput_ips_ci_high": throughput.high}  # fmt: skip


def front_inputs(summary: Any, comparison: Any, stats: Any) -> tuple[list[dict[str, Any]], Measured]:
    """(quality.csv's rows, what the front's tests read) of a summary and the comparison of its maps (before
    its figures are drawn: they drop the comparison's data), at the statistics' settings."""
    data = getattr(comparison, "figure_data", None)
    rows, images = (data.quality_rows, data.quality_images) if data is not None else ([], {})
    measured = Measured(summary.paired_tests, summary.trials, images, stats.resamples, stats.seed)
    return list(rows), measured


def finite(value: Any) -> bool:
    """A number that is not NaN or infinite (not a bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _coordinate(estimate: Any, low: Any = None, high: Any = None) -> Coordinate:
    bounds = (float(low), float(high)) if finite(low) and finite(high) else (None, None)
    return Coordinate(float(estimate) if finite(estimate) else None, *bounds)


def _pairs(resolutions: Sequence[int]) -> list[tuple[int, int]]:
    return [(a, b) for i, a in enumerate(resolutions) for b in resolutions[i + 1 :]]


Found = tuple[dict[str, Any], dict[int, Coordinate], list[Difference]]


def _score_axis(model: str, rs: list[SummaryRow], measured: Measured) -> Found | None:
    """The headline score with the widest interval every resolution has, each pair's paired test on the same test
    images (the summary's paired test of the model's first score); None when a resolution has no score."""
    first = rs[0]
    found = {r.resolution: r.score(r.headline) for r in rs}
    if not all(finite(v[0]) for v in found.values()):
        return None
    if all(finite(r.twoway_ci_low) and finite(r.twoway_ci_high) for r in rs):
        coords = {r.resolution: _coordinate(found[r.resolution][0], r.twoway_ci_low, r.twoway_ci_high) for r in rs}
        interval = TWOWAY_WORDS
    else:
        coords = {res: _coordinate(*v) for res, v in found.items()}
        interval = "interval over test images" if any(c.has_interval for c in coords.values()) else "no interval"
    mine = [p for p in measured.paired if p.get("model") == model]
    tests = {(int(p["resolution_a"]), int(p["resolution_b"])): p for p in mine if p.get("metric") == mine[0]["metric"]}
    diffs = []
    for a, b in _pairs([r.resolution for r in rs]):
        row = tests.get((a, b))
        if row is None:
            diffs.append(Difference("score", str(a), str(b), None, reason="no paired test of the pair"))
            continue
        p = row.get("p_value") if row.get("available", True) else None
        effect = row.get("effect")
        diffs.append(Difference("score", str(a), str(b), float(effect) if finite(effect) else None,
                                float(p) if finite(p) else None, test=str(row.get("method") or "paired test"),
                                reason=str(row.get("reason") or "")))  # fmt: skip
    axis = {"name": "score", "words": first.say(first.headline), "interval": interval}
    return axis | {"test": "paired test on the same test images"}, coords, diffs


def _cost_axis(rs: list[SummaryRow], latencies: Mapping[int, list[float]]) -> Found | str:
    """Latency with Welch's t-test over seeds, each resolution with its row's interval; GMACs (a count, exact)
    where latency has one seed at some resolution or is missing; the reason when neither is everywhere."""
    res = [r.resolution for r in rs]
    has_latency = all(finite(r.latency_ms) for r in rs)
    latency = {r.resolution: _coordinate(r.latency_ms, r.latency_ms_ci_low, r.latency_ms_ci_high) for r in rs}
    if has_latency and all(len(latencies.get(x, [])) >= 2 for x in res):
        diffs = [_welch(a, b, latencies[a], latencies[b]) for a, b in _pairs(res)]
        axis = {"name": "cost", "words": "latency, batch 1 (ms)", "column": "latency_ms"}
        return axis | {"interval": _latency_words(latency), "test": "Welch's t-test over seeds"}, latency, diffs
    if all(finite(r.gmacs) for r in rs):
        coords = {r.resolution: _coordinate(r.gmacs) for r in rs}
        gmacs = {r.resolution: float(r.gmacs) for r in rs}  # type: ignore[arg-type]
        diffs = [Difference("cost", str(a), str(b), gmacs[b] - gmacs[a], exact=True, test="a count: exact")
                 for a, b in _pairs(res)]  # fmt: skip
        axis = {"name": "cost", "words": "GMACs", "column": "gmacs", "interval": "a count: no interval"}
        why = "latency of one seed at some resolution cannot be tested" if has_latency else "latency missing"
        return (
            axis | {"test": "a count: compared exactly", "why": f"{why} at some resolution: GMACs instead"},
            coords,
            diffs,
        )
    if has_latency:  # one seed, no count to fall back on: measured, but no test can tell the resolutions apart
        why = "one seed at some resolution: latency cannot be tested, so it keeps every resolution"
        diffs = [Difference("cost", str(a), str(b), None, reason=why) for a, b in _pairs(res)]
        axis = {"name": "cost", "words": "latency, batch 1 (ms)", "column": "latency_ms"}
        return axis | {"interval": _latency_words(latency), "test": "none (one seed)", "why": why}, latency, diffs
    return "no cost: latency and GMACs missing at some resolution"


def _latency_words(coords: Mapping[int, Coordinate]) -> str:
    """Which interval the latency coordinates carry: LATENCY_INTERVAL, where only some resolutions have one, or
    none (the trials kept too few timed calls, or none)."""
    have = sum(c.has_interval for c in coords.values())
    if not have:
        return "no interval (too few timed calls kept; see the rows' notes)"
    return LATENCY_INTERVAL if have == len(coords) else f"{LATENCY_INTERVAL}, where the trials kept enough calls"


def _welch(a: int, b: int, at_a: Sequence[float], at_b: Sequence[float]) -> Difference:
    """Latency at b minus at a with Welch's t-test (scipy) over the seeds of each; no test without spread."""
    effect = float(np.mean(at_b) - np.mean(at_a))
    test = f"Welch's t-test over seeds ({len(at_a)} and {len(at_b)})"
    if np.std(at_a) == 0 and np.std(at_b) == 0:
        return Difference("cost", str(a), str(b), effect, test=test, reason="no spread over seeds: no test")
    from scipy import stats as st

    p = float(st.ttest_ind(at_b, at_a, equal_var=False).pvalue)
    return Difference("cost", str(a), str(b), effect, p if math.isfinite(p) else None, test=test)


def _quality_axis(
    model: str, resolutions: list[int], quality_rows: Iterable[Mapping[str, Any]], measured: Measured
) -> Found | str:
    """The excess over random maps of the first method (by name) that has a score of QUALITY_SCORES with its
    interval at every resolution (its first such score), each pair tested on the same probe images; the reason when
    none has. A quality score without an interval (too few probe images to bootstrap) is left out rather than
    compared by its estimate: unlike a count of MACs it is a noisy measurement."""
    found: dict[tuple[str, str], dict[int, Mapping[str, Any]]] = defaultdict(dict)
    for row in quality_rows:
        if row.get("model") == model and row.get("score") in QUALITY_SCORES and finite(row.get("estimate")):
            found[(str(row["method"]), str(row["score"]))][int(row["resolution"])] = row
    no_interval = None
    for method in sorted({m for m, _ in found}):
        for score in QUALITY_SCORES:
            at = found.get((method, score), {})
            if not set(resolutions) <= set(at):
                continue
            coords = {r: _coordinate(at[r]["estimate"], at[r].get("low"), at[r].get("high")) for r in resolutions}
            if not all(c.has_interval for c in coords.values()):
                why = next((str(at[r].get("reason")) for r in resolutions if at[r].get("reason")), "")
                no_interval = no_interval or f"{QUALITY_SCORES[score]} ({method}) has no interval" + (
                    f" ({why})" if why else ""
                )
                continue
            diffs = [_quality_difference(measured, (model, method, score), a, b) for a, b in _pairs(resolutions)]
            axis = {"name": "quality", "words": f"{QUALITY_SCORES[score]} ({method})", "method": method}
            axis |= {"score": score, "interval": QUALITY_INTERVAL, "test": "sign-flip test, paired on the probe images"}
            return axis | {"why": f"quality of {method}: the first method with one at every resolution"}, coords, diffs
    if not found:
        return "no explanation quality for this model"
    if no_interval:
        return f"explanation quality not compared: {no_interval}"
    return "no explanation method has a quality score at every resolution of this model"


def _quality_difference(measured: Measured, key: tuple[str, str, str], a: int, b: int) -> Difference:
    """b - a on the probe images both have a finite score for (seeds averaged), with the sign-flip test."""
    model, method, score = key
    at_a, at_b = (measured.quality.get((model, r, method, score)) for r in (a, b))
    if at_a is None or at_b is None or len(at_a) != len(at_b):
        why = "no per-image scores" if at_a is None or at_b is None else "different probe sets"
        return Difference("quality", str(a), str(b), None, reason=f"{why}: no paired test")
    both = np.isfinite(at_a) & np.isfinite(at_b)
    t = paired_score_test(at_a[both], at_b[both], resamples=measured.resamples, seed=measured.seed)
    p = t.p_value if t.available else None
    return Difference("quality", str(a), str(b), t.effect, p, test=t.method, reason=t.reason or "")


def tradeoffs(
    rows: Iterable[SummaryRow], quality_rows: Iterable[Mapping[str, Any]] = (), measured: Measured | None = None
) -> list[dict[str, Any]]:
    """summary.json's ``front3``: per model with a headline score at every resolution, its axes (name, words,
    interval, test, why), a note naming any axis left out and why, every test of the model's front (``tests``:
    each pair on each axis with its p, Holm p and the resolution shown better), and per resolution its
    coordinates ([estimate, low, high]) and standing on the front (stats.paired_front) in words."""
    by_model: dict[str, list[SummaryRow]] = defaultdict(list)
    for row in rows:
        by_model[row.model].append(row)
    quality, measured = list(quality_rows), measured or Measured()
    return [f for f in (_model_front(m, sorted(rs, key=lambda r: r.resolution), quality, measured) for m, rs in
                        sorted(by_model.items())) if f]  # fmt: skip


def _model_front(
    model: str, rs: list[SummaryRow], quality: list[Mapping[str, Any]], measured: Measured
) -> dict[str, Any] | None:
    score = _score_axis(model, rs, measured)
    if score is None:
        return None
    level = next((float(r.ci_level) for r in rs if finite(r.ci_level)), 0.95)
    resolutions = [r.resolution for r in rs]
    axes, coords, diffs, missing = [score[0]], {"score": score[1]}, list(score[2]), []
    cost = _cost_axis(rs, measured.latencies(model))
    for name, found in (("cost", cost), ("quality", _quality_axis(model, resolutions, quality, measured))):
        if isinstance(found, str):
            missing.append(f"{found}: {name} left out")
        else:
            axes.append(found[0])
            coords[name] = found[1]
            diffs += found[2]
    names = [a["name"] for a in axes]
    spec = [Axis(n, higher_is_better=n != "cost") for n in names]
    standings, verdicts = paired_front([str(r) for r in resolutions], spec, diffs, round(1 - level, 10))
    words = {a["name"]: a["words"] for a in axes}
    out = []
    for res, standing in zip(resolutions, standings, strict=True):
        point: dict[str, Any] = {"resolution": res, "on_front": standing.on_front}
        point |= {n: list(_triple(coords[n][res])) if n in coords else None for n in AXES}
        point |= {"dropped_by": int(standing.dropped_by) if standing.dropped_by else None}
        point |= {"better_on": list(standing.better_on), "exact_on": list(standing.exact_on)}
        point["p_holm"] = list(standing.p_holm)
        point["standing"] = _standing_words(standing, words)
        out.append(point)
    notes = [a["why"] for a in axes if a.get("why")] + missing
    tests = [v.to_dict() for v in verdicts]
    counted = sum(1 for v in verdicts if v.p_holm is not None)
    alpha = round(1 - level, 10)
    family = f"Holm over {counted} test{'s' if counted != 1 else ''} at {alpha:.2g}"
    return {"model": model, "level": level, "alpha": alpha, "family": family, "axes": axes,
            "note": "; ".join(notes), "points": out, "tests": tests}  # fmt: skip


def _triple(c: Coordinate) -> tuple[float | None, float | None, float | None]:
    return c.estimate, c.low, c.high


def _standing_words(standing: Any, words: dict[str, str]) -> str:
    """'on the front', or 'dropped: 64 px is shown better on accuracy (Holm p 0.003) and GMACs (a count) and worse
    on none'."""
    if standing.dropped_by is None:
        return ON_FRONT
    p_holm = iter(standing.p_holm)
    said = [f"{words[a]} ({'a count' if a in standing.exact_on else f'Holm p {next(p_holm):.2g}'})"
            for a in standing.better_on]  # fmt: skip
    listed = said[0] if len(said) == 1 else ", ".join(said[:-1]) + " and " + said[-1]
    return f"dropped: {standing.dropped_by} px is shown better on {listed} and worse on none"


# ------------------------------------------------------------------------------------------------ table and words


def _cell(value: Any, spec: str) -> str:
    """'0.912 [0.880, 0.940]', the estimate alone without an interval, '-' when the axis is left out."""
    if not value or not finite(value[0]):
        return "-"
    estimate, low, high = value
    text = f"{estimate:{spec}}"
    return f"{text} [{low:{spec}}, {high:{spec}}]" if finite(low) and finite(high) else text


def tradeoff_cells(front3: Iterable[Mapping[str, Any]]) -> tuple[list[str], list[tuple[list[str], bool]]]:
    """The table of every model's front: (header, [(cells, on the front)]); each model's axes in words are in
    `tradeoff_lines`."""
    head = ["model", "px", "score [interval]", "cost [interval]", "quality [interval]", "standing"]
    body = []
    for entry in front3:
        for p in entry["points"]:
            cells = [str(entry["model"]), str(p["resolution"]), _cell(p.get("score"), ".3f")]
            cells += [_cell(p.get("cost"), "#.3g"), _cell(p.get("quality"), "+.3f"), str(p["standing"])]
            body.append((cells, bool(p["on_front"])))
    return head, body


def tradeoff_lines(front3: Sequence[Mapping[str, Any]]) -> list[str]:
    """The rule in words, then per model what each axis is (its interval and test), what its tests showed, and
    what was left out and why."""
    if not front3:
        return []
    lines = [RULE.format(alpha=float(front3[0].get("alpha") or 1 - float(front3[0].get("level") or 0.95)))]
    for entry in front3:
        axes = "; ".join(
            f"{a['name']} = {a['words']} ({a['interval']}; {a.get('test') or 'no test'})" for a in entry["axes"]
        )
        on = [str(p["resolution"]) for p in entry["points"] if p["on_front"]]
        note = f" ({entry['note']})" if entry.get("note") else ""
        shown = _shown_counts(entry)
        lines.append(f"{entry['model']}: on the front {', '.join(on)} px; {axes}; {shown}{note}.")
    return lines


def _shown_counts(entry: Mapping[str, Any]) -> str:
    """'Holm over 9 tests at 0.05: a difference shown for 2 of 3 pairs on score, 0 of 3 on cost, none tested on
    quality (one seed ...)'."""
    parts = []
    for axis in entry["axes"]:
        tests = [t for t in entry.get("tests") or [] if t["axis"] == axis["name"]]
        decided = [t for t in tests if t.get("p_holm") is not None or axis.get("column") == "gmacs"]
        if not decided:
            why = next((t["reason"] for t in tests if t.get("reason")), "no test")
            parts.append(f"none tested on {axis['name']} ({why})")
            continue
        shown = sum(1 for t in decided if t.get("shown_better"))
        parts.append(f"{shown} of {len(tests)} pairs on {axis['name']}")
    family = entry.get("family") or "the front's tests"
    return f"{family}: a difference shown for " + ", ".join(parts)


def estimate_front(rows: Sequence[SummaryRow]) -> list[Any]:
    """The model x resolutions (stats.ParetoPoint: name 'model@res', accuracy = the headline score pooled over seeds,
    cost = the mean latency) that no other one beats on both by their estimates: the line the score x latency figure
    draws, descriptive (the front decided on tests of the differences is `tradeoffs`)."""
    points = [r for r in rows if finite(r.latency_ms) and finite(r.score(r.headline)[0])]
    return pareto_front([(f"{r.model}@{r.resolution}", r.score(r.headline)[0], r.latency_ms) for r in points])

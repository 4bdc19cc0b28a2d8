"""Every pair of resolutions compared on the same test images (Holm-adjusted) and the recommended resolution: the
smallest one not significantly below the most accurate one."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from resomap.errors import ConfigError
from resomap.stats.checks import as_runs, as_scores, check_choice, check_level, to_dict
from resomap.stats.paired import PAIRED_METHODS, PairedTest, holm, paired_score_test, paired_test


@dataclass(frozen=True)
class PairComparison:
    """One row of :func:`compare_resolutions`: ``test`` is B = ``resolution_b`` against A = ``resolution_a``
    (``resolution_a < resolution_b``, so a positive effect is a gain from the higher resolution)."""

    resolution_a: int
    resolution_b: int
    test: PairedTest
    p_adjusted: float | None
    significant: bool
    correction: str

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)


@dataclass(frozen=True)
class Recommendation:
    """The smallest sufficient resolution (``resolution``), the most accurate one (``best_resolution``), a one-line
    ``reason`` in words, and the pairwise ``rows`` it was read from. ``resolution`` is None when unavailable."""

    resolution: int | None
    best_resolution: int | None
    reason: str
    rows: list[PairComparison]
    accuracies: dict[int, float]
    level: float
    margin: float
    available: bool = True

    def to_dict(self) -> dict[str, Any]:
        out = to_dict(self)
        out["accuracies"] = {str(k): v for k, v in self.accuracies.items()}  # JSON keys are strings
        return out


def fmt_p(p: float | None) -> str:
    if p is None:
        return "p unavailable"
    return "p < 0.001" if p < 0.001 else f"p = {p:.2g}"


def _by_resolution(correct_by_res: Mapping[int, Any], method: str = "mcnemar") -> dict[int, np.ndarray]:
    """{resolution: [seeds, images]}: bool for 0/1 outcomes; float per-image scores (IoU, Dice, ...) are taken by
    the paired bootstrap only (McNemar's test needs 0/1 outcomes)."""
    if not isinstance(correct_by_res, Mapping) or not correct_by_res:
        raise ConfigError("correct_by_res must be a non-empty mapping {resolution: bool [seeds, images]}")
    binary = method == "mcnemar" or all(np.asarray(v).dtype == bool for v in correct_by_res.values())
    read = as_runs if binary else as_scores
    runs = {int(r): read(v, f"results at {r} px") for r, v in sorted(correct_by_res.items())}
    shapes = {r: v.shape for r, v in runs.items()}
    if len(set(shapes.values())) > 1:
        listed = ", ".join(f"{r} px: {s}" for r, s in shapes.items())
        raise ConfigError(f"every resolution needs the same [seeds, images] shape (same test images): {listed}")
    return runs


def compare_resolutions(
    correct_by_res: Mapping[int, Any],
    *,
    level: float = 0.95,
    method: str = "mcnemar",
    correction: str = "holm",
    resamples: int = 2000,
    seed: int = 0,
) -> list[PairComparison]:
    """:func:`paired_test` for every pair of resolutions r1 < r2 (B = r2, A = r1), C(k, 2) rows ordered by (r1, r2);
    float per-image scores (method="bootstrap" only) get :func:`paired_score_test`.

    ``p_adjusted``: Holm over the available rows (``correction="holm"``) or the raw p (``"none"``);
    ``significant``: ``p_adjusted < 1 - level`` (two-sided). A row whose test is unavailable is never significant.

    The sign-flip p (method="bootstrap", and method="mcnemar" with several seeds: its clustered form) is exact on
    0/1 outcomes (seeds averaged per image lie on a 1/S lattice), with no floor but 2^(1-K) over the K images that
    differ, as McNemar's exact p of one seed. On a continuous score it is drawn from at least ``resamples`` flips,
    so its smallest value is 1 / (flips + 1), and with Holm over m = C(k, 2) pairs a row can only be significant
    when flips > m / (1 - level) - 1: the default 2000 covers up to 14 resolutions (91 pairs) at level 0.95.
    """
    level = check_level(level)
    correction = check_choice(correction, ("holm", "none"), "correction")
    method = check_choice(method, PAIRED_METHODS, "paired test method")
    runs = _by_resolution(correct_by_res, method)
    res = list(runs)
    kw = {"level": level, "resamples": resamples, "seed": seed}

    def test(a: np.ndarray, b: np.ndarray) -> PairedTest:
        if a.dtype == bool:
            return paired_test(a, b, method=method, **kw)
        return paired_score_test(a, b, **kw)

    tests = [(r1, r2, test(runs[r1], runs[r2])) for i, r1 in enumerate(res) for r2 in res[i + 1 :]]
    idx = [i for i, (_, _, t) in enumerate(tests) if t.available and t.p_value is not None]
    raw = np.array([tests[i][2].p_value for i in idx], dtype=float)
    adjusted = dict(zip(idx, (holm(raw) if correction == "holm" else raw).tolist()))
    rows = []
    for i, (r1, r2, t) in enumerate(tests):
        p_adj = adjusted.get(i)
        rows.append(PairComparison(r1, r2, t, p_adj, p_adj is not None and p_adj < 1 - level, correction))
    return rows


def _check_margin(margin: Any) -> float:
    if isinstance(margin, bool) or not isinstance(margin, (int, float, np.number)) or not (0 <= margin < 1):
        raise ConfigError(f"margin must be an accuracy difference in [0, 1), got {margin!r}")
    return float(margin)


def smallest_sufficient_resolution(
    correct_by_res: Mapping[int, Any],
    *,
    level: float = 0.95,
    margin: float = 0.0,
    method: str = "mcnemar",
    correction: str = "holm",
    resamples: int = 2000,
    seed: int = 0,
) -> Recommendation:
    """The smallest resolution whose accuracy is not significantly below the best one.

    best = the highest accuracy pooled over seeds and images (ties: the smaller resolution). A resolution r is
    *significantly below* the best when, in :func:`compare_resolutions` (all C(k, 2) pairs, ``correction``-adjusted,
    so the recommendation reads the same table a report shows), the (r, best) test has adjusted p < 1 - level and
    accuracy(r) < accuracy(best) - ``margin`` (a one-sided reading of the two-sided test; ``margin`` is a practical
    tolerance: a significant drop no larger than it is accepted). "Not significantly below" is not proof of
    equality: the row's interval shows how large a drop the data cannot rule out.
    """
    level, margin = check_level(level), _check_margin(margin)
    runs = _by_resolution(correct_by_res, check_choice(method, PAIRED_METHODS, "paired test method"))
    if next(iter(runs.values())).shape[1] == 0:
        return Recommendation(None, None, "no test images", [], {}, level, margin, available=False)
    acc = {r: float(v.mean()) for r, v in runs.items()}
    rows = compare_resolutions(runs, level=level, method=method, correction=correction, resamples=resamples, seed=seed)
    return _Reading(acc, rows, level, margin, method, correction).recommend()


@dataclass
class _Reading:
    """The pairwise table read from the smallest resolution up, with the words of the reason."""

    acc: dict[int, float]
    rows: list[PairComparison]
    level: float
    margin: float
    method: str
    correction: str

    def recommend(self) -> Recommendation:
        acc, level = self.acc, self.level
        best = max(acc, key=lambda r: (acc[r], -r))
        pair = {(row.resolution_a, row.resolution_b): row for row in self.rows}
        below: list[str] = []
        for r in sorted(acc):
            if r == best:
                reason = f"{r} px is the most accurate ({acc[r]:.3f})"
                if below:
                    reason += f"; significantly below it ({self.test_words}, at level {level:g}): " + ", ".join(below)
                else:
                    reason += " and the smallest resolution"
                return self.result(r, best, reason)
            row = pair[(min(r, best), max(r, best))]
            if not row.test.available:
                why = f"cannot compare {r} px with the best ({best} px): {row.test.reason}"
                return self.result(None, best, why, available=False)
            p_words = fmt_p(row.p_adjusted).replace("p ", f"{self.adj_words}p ", 1)
            if row.significant and acc[r] < acc[best] - self.margin:
                below.append(f"{r} px ({acc[r]:.3f}, {p_words})")
                continue
            return self.result(r, best, self.sufficient(r, best, row, p_words, below))
        raise AssertionError("unreachable: the best resolution is among the resolutions")

    @property
    def test_words(self) -> str:
        if self.method.lower() != "mcnemar":
            return "paired image bootstrap, sign-flip test"
        return "McNemar exact" if self.rows and self.rows[0].test.n_seeds == 1 else "clustered McNemar"

    @property
    def adj_words(self) -> str:
        return "Holm-adjusted " if self.correction.lower() == "holm" else ""

    def result(self, r: int | None, best: int, reason: str, available: bool = True) -> Recommendation:
        return Recommendation(r, best, reason, self.rows, self.acc, self.level, self.margin, available=available)

    def sufficient(self, r: int, best: int, row: PairComparison, p_words: str, below: list[str]) -> str:
        """Why r, below the best resolution, is recommended: not significantly below it, or within the margin."""
        acc, level = self.acc, self.level
        lead = f"best ({best} px: {acc[best]:.3f} vs {acc[r]:.3f}, {self.test_words}, {p_words} at level {level:g})"
        if row.significant:  # a significant drop, but no larger than the margin
            reason = f"{r} px: below the {lead}, but by no more than the margin {self.margin:g}"
        else:
            reason = f"{r} px: not significantly below the {lead}"
        if row.test.low is not None and row.test.high is not None:
            sign = 1 if r > best else -1  # the row's effect is (larger res) - (smaller res); report r - best
            lo, hi = sorted((sign * row.test.low, sign * row.test.high))
            reason += f"; difference {acc[r] - acc[best]:+.3f}, {level:.0%} CI [{lo:+.3f}, {hi:+.3f}]"
        if below:
            reason += "; significantly below the best: " + ", ".join(below)  # the test and level are named above
        return reason

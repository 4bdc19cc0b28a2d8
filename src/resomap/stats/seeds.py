"""Training seeds as evidence beside a model-scope decision: each seed's own mean difference at a step (a
resolution minus the reference, over the test images), a flag for a seed far from the others, and the decision
taken again without each seed in turn.

The flag is the studentized deleted residual of each seed's difference: t = (x_s - mean of the others) / (sd of the
others x sqrt(1 + 1 / (S - 1))), which for normal seed differences follows Student's t with S - 2 degrees of
freedom; a seed is flagged when its two-sided p, Bonferroni-adjusted over the S seeds, is below OUTLIER_ALPHA (3 or
more seeds). So a healthy seed is flagged in about OUTLIER_ALPHA of the sweeps whatever the seed count; the median
/ MAD rule (modified z > 3.5) was tried first and flagged a healthy seed in 20% of 5-seed sweeps here, the MAD of
5 values being too often small. Its power is what 3-5 seeds allow: on 400 images with 5 seeds, a seed whose
accuracy fell by 0.2 at one resolution is flagged in about half of the sweeps, by 0.4 in nearly all
(tests/test_seed_evidence.py). The model-scope test assumes symmetric seed effects; a seed that failed at one
resolution breaks that, and a decision that changes when one seed is left out rests on that seed. Measured (300
images, margin 0.05, alpha 0.05, 3,000 simulated sweeps per cell, seeds that fail at the smaller resolution with
probability q and lose d there, the mean difference held at -margin: `python scripts/simulate_seed_failures.py`, a
2-core AMD EPYC, 2026-11-29), the step test's error at 2 / 3 / 5 seeds is 0.014 / 0.017 / 0.028 with no failures,
0.033 / 0.078 / 0.139 at q 0.1, d 0.2, 0.075 / 0.171 / 0.203 at q 0.2, d 0.2 and 0.089 / 0.228 / 0.386 at q 0.1,
d 0.4: read an outlying seed, and a decision that changes without one seed, as a decision not to trust.

Written here: scipy has Student's t but no outlier rule over a handful of replicates, and no library re-decides a
fixed sequence without each replicate."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

OUTLIER_ALPHA = 0.05  # the Bonferroni-adjusted two-sided p below which a seed is flagged
MIN_SEEDS = 3  # fewer: no seed can be told apart from "the others"


def seed_differences(scores: Mapping[int, Any], resolution: int, reference: int) -> np.ndarray:
    """float [S]: each seed's mean score at ``resolution`` minus its mean at ``reference`` (``scores``
    {resolution: [S, N]}, the same seeds in the same order at every resolution)."""
    at = np.asarray(scores[resolution], dtype=float).mean(axis=1)
    ref = np.asarray(scores[reference], dtype=float).mean(axis=1)
    return at - ref


def deleted_t(values: Any) -> np.ndarray:
    """Each value's studentized deleted residual (module doc); 0 where it equals the others' mean, +-inf where the
    others agree exactly and it does not; zeros with fewer than MIN_SEEDS values."""
    x = np.asarray(values, dtype=float)
    if x.size < MIN_SEEDS:
        return np.zeros_like(x)
    out = np.zeros_like(x)
    for s in range(x.size):
        others = np.delete(x, s)
        gap, sd = x[s] - others.mean(), others.std(ddof=1)
        scale = sd * np.sqrt(1 + 1 / others.size)
        out[s] = gap / scale if scale > 0 else (np.sign(gap) * np.inf if abs(gap) > 1e-12 else 0.0)
    return out


def outlying_p(values: Any) -> np.ndarray:
    """Each value's Bonferroni-adjusted two-sided p of its deleted residual (1 with fewer than MIN_SEEDS)."""
    from scipy import stats

    x = np.asarray(values, dtype=float)
    if x.size < MIN_SEEDS:
        return np.ones_like(x)
    return np.minimum(1.0, x.size * 2 * stats.t.sf(np.abs(deleted_t(x)), x.size - 2))


def outlying(values: Any) -> list[int]:
    """The indices of the values flagged: adjusted p below OUTLIER_ALPHA."""
    return [int(i) for i in np.flatnonzero(outlying_p(values) < OUTLIER_ALPHA)]


def without_each_seed(
    scores: Mapping[int, Any], decide: Callable[[dict[int, np.ndarray]], Any]
) -> list[tuple[int, Any]]:
    """[(seed index, the decision without that seed)] for each seed, by ``decide`` (the decision's own call on
    {resolution: [S - 1, N]}); empty with fewer than MIN_SEEDS seeds (one seed left decides nothing about the
    model)."""
    seeds = int(np.asarray(next(iter(scores.values()))).shape[0])
    if seeds < MIN_SEEDS:
        return []
    out = []
    for s in range(seeds):
        kept = {r: np.delete(np.asarray(v), s, axis=0) for r, v in scores.items()}
        out.append((s, decide(kept)))
    return out

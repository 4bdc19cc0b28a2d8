"""Training seeds as evidence beside a model-scope decision: each seed's own mean difference at a step (a
resolution minus the reference, over the test images), a flag for a seed far from the others, and the decision
taken again without each seed in turn.

The flag is the studentized deleted residual of each seed's difference: t = (x_s - mean of the others) / (sd of the
others x sqrt(1 + 1 / (S - 1))), which for normal seed differences follows Student's t with S - 2 degrees of
freedom; a seed is flagged when its two-sided p, Bonferroni-adjusted over the S seeds x the steps checked (every
resolution the decision tested), is below OUTLIER_ALPHA (3 or more seeds). The others' variance is taken as at
least the images' own sampling variance of a seed's mean difference (:func:`sampling_floor`: the image x seed
residual mean square / N): seeds that agree more closely than their test images allow are a tie of the 0/1
outcomes, not evidence; without the floor two equal differences gave an infinite statistic and flagged the third
seed with p 0 (-0.089, -0.022, -0.022 on 180 images). Measured in tests/test_seed_evidence.py (180 images, 3 steps,
no outlying seed, 2,000 sweeps a cell), a healthy seed is flagged per model in 0-0.051 of the sweeps at 3 and 5
seeds, where Bonferroni over the seeds alone without the floor flagged 0.13-0.14 at 5 seeds and 0.15-0.66 at 3
(ties). The floor makes the rule conservative where the seeds spread little (0.000 at seed sd 0-0.02), near its
alpha where they spread widely (0.038-0.051 at seed sd 0.2, 5 seeds). The median / MAD rule (modified z > 3.5)
was tried first and flagged a healthy seed in 20% of 5-seed sweeps here, the MAD of 5 values being too often
small. Its power is what 3-5 seeds allow: on 400 images with 5 seeds, a seed whose accuracy fell by 0.2 / 0.3 /
0.4 at one resolution is flagged in 0.36 / 0.86 / 0.97 of the sweeps when one step is checked, 0.01 / 0.39 / 0.79
when three are (2,000 sweeps a cell, the generator of tests/test_seed_evidence.py). With 3 seeds, t with 1 degree
of freedom at alpha / (3 x steps) asks a gap of 47 (one step) to 140 (three) times the others' sd, which the floor
does not leave: the flag did not fire in those sweeps even for a seed 0.4 down, and the decision taken without
each seed is the evidence there. The model-scope test assumes symmetric seed effects; a seed that failed at one
resolution breaks that, and a decision that changes when one seed is left out rests on that seed. Measured (300
images, margin 0.05, alpha 0.05, 3,000 simulated sweeps per cell, seeds that fail at the smaller resolution with
probability q and lose d there, the mean difference held at -margin: `python scripts/simulate_seed_failures.py`, a
2-core AMD EPYC, 2026-11-29), the step test's error at 2 / 3 / 5 seeds is 0.014 / 0.017 / 0.028 with no failures,
0.033 / 0.078 / 0.139 at q 0.1, d 0.2, 0.075 / 0.171 / 0.203 at q 0.2, d 0.2 and 0.089 / 0.228 / 0.386 at q 0.1,
d 0.4: read an outlying seed, and a decision that changes without one seed, as a decision not to trust.

Written here: scipy has Student's t but no outlier rule over a handful of replicates, and no library re-decides a
fixed sequence without each replicate."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from resomap.stats.scope import two_way

OUTLIER_ALPHA = 0.05  # the Bonferroni-adjusted two-sided p below which a seed is flagged
MIN_SEEDS = 3  # fewer: no seed can be told apart from "the others"


def seed_differences(scores: Mapping[int, Any], resolution: int, reference: int) -> np.ndarray:
    """float [S]: each seed's mean score at ``resolution`` minus its mean at ``reference`` (``scores``
    {resolution: [S, N]}, the same seeds in the same order at every resolution)."""
    at = np.asarray(scores[resolution], dtype=float).mean(axis=1)
    ref = np.asarray(scores[reference], dtype=float).mean(axis=1)
    return at - ref


def sampling_floor(d: Any) -> np.ndarray:
    """The variance [...] of a seed's mean difference over the N images that the images alone give it, for the
    per-image differences d [..., S, N] of one step: the image x seed residual mean square / N (scope.two_way). An
    image's part shared by the seeds cancels between seeds and is not in it; 0 when every seed's differences are
    the others' shifted (one fit S times)."""
    d = np.asarray(d, dtype=float)
    lead, (seeds, n) = d.shape[:-2], d.shape[-2:]
    if seeds < 2:
        return np.zeros(lead)
    _, _, ms_resid = two_way(d.reshape(-1, seeds, n))
    return (ms_resid / n).reshape(lead)


def deleted_t(values: Any, floor: Any = 0.0) -> np.ndarray:
    """Each value's studentized deleted residual (module doc) over the last axis of ``values`` [..., S], the
    others' variance taken as at least ``floor`` [...] (:func:`sampling_floor`); 0 where a value equals the
    others' mean, +-inf only where the others agree exactly, the floor is 0 and it does not; zeros with fewer than
    MIN_SEEDS values."""
    x = np.asarray(values, dtype=float)
    seeds = x.shape[-1]
    if seeds < MIN_SEEDS:
        return np.zeros_like(x)
    rest = np.array([[j for j in range(seeds) if j != s] for s in range(seeds)])  # [S, S - 1]
    others = x[..., rest]  # [..., S, S - 1]
    gap = x - others.mean(-1)
    variance = np.maximum(others.var(-1, ddof=1), np.asarray(floor, dtype=float)[..., None])
    scale = np.sqrt(variance * (1 + 1 / (seeds - 1)))
    exact = np.where(np.abs(gap) > 1e-12, np.copysign(np.inf, gap), 0.0)
    return np.divide(gap, scale, out=exact, where=scale > 0)


def outlying_p(values: Any, floor: Any = 0.0, steps: int = 1) -> np.ndarray:
    """Each value's two-sided p of its deleted residual, Bonferroni-adjusted over the S values x ``steps`` (the
    steps checked with it); 1 with fewer than MIN_SEEDS values."""
    from scipy import stats

    x = np.asarray(values, dtype=float)
    seeds = x.shape[-1]
    if seeds < MIN_SEEDS:
        return np.ones_like(x)
    return np.minimum(1.0, seeds * steps * 2 * stats.t.sf(np.abs(deleted_t(x, floor)), seeds - 2))


def outlying(values: Any, floor: Any = 0.0, steps: int = 1) -> list[int]:
    """The indices of the values [S] flagged: adjusted p below OUTLIER_ALPHA."""
    return [int(i) for i in np.flatnonzero(outlying_p(values, floor, steps) < OUTLIER_ALPHA)]


def outlying_seeds(
    scores: Mapping[int, Any], steps: Sequence[int], reference: int
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """The flag of the summary: {step: (each seed's mean difference to ``reference`` [..., S], its p
    (:func:`outlying_p`) with the floor of that step's differences, Bonferroni over the S seeds x the len(steps)
    steps)} for ``scores`` {resolution: [..., S, N]} (a leading batch axis for the simulation test)."""
    out = {}
    for res in steps:
        d = np.asarray(scores[res], dtype=float) - np.asarray(scores[reference], dtype=float)
        diffs = d.mean(axis=-1)
        out[res] = (diffs, outlying_p(diffs, sampling_floor(d), len(steps)))
    return out


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

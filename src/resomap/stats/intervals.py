"""The interval result and the intervals across seeds: Student t across seeds (`seed_interval`, `t_interval`), the
grand mean of a [seeds, images] table where both are random draws (`crossed_interval`) and a timing over the seeds'
trials from each trial's timed calls (`timing_interval`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from resomap.errors import ConfigError
from resomap.stats.checks import check_level, to_dict
from resomap.stats.median import median_interval


@dataclass(frozen=True)
class Interval:
    """An estimate with a two-sided interval at ``level``; ``n`` is the sample size (images, or seeds).

    ``available=False`` means no interval could be computed (``low``/``high`` are None) and ``reason`` says why;
    ``reason`` may also carry a caveat for an available interval (for example a zero-width bootstrap interval).
    """

    estimate: float | None
    low: float | None
    high: float | None
    level: float
    method: str
    n: int
    available: bool = True
    reason: str | None = None
    std: float | None = None  # the spread across seeds (seed_interval only)

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)


def unavailable_interval(estimate: float | None, level: float, method: str, n: int, reason: str) -> Interval:
    return Interval(estimate, None, None, level, method, n, available=False, reason=reason)


def _t_half_width(std: float, n: int, level: float, df: float) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.5 + level / 2, df=df)) * std / math.sqrt(n)


def seed_interval(values: Any, level: float = 0.95) -> Interval:
    """Mean over seeds, their std (ddof=1) and a Student-t interval for the mean: mean ± t_{S-1} · std / √S.

    One seed: ``available=False`` (no spread across seeds); a NaN/inf value: ``available=False``.
    """
    level = check_level(level)
    arr = np.asarray(values, dtype=float) if np.size(values) else np.zeros(0)
    if arr.ndim != 1:
        raise ConfigError(f"seed values must be 1-D (one number per seed), got shape {arr.shape}")
    s = arr.size
    method = "Student t across seeds"
    if s == 0:
        return unavailable_interval(None, level, method, 0, "no seeds")
    if not np.isfinite(arr).all():
        return unavailable_interval(None, level, method, s, "a seed's value is NaN or infinite")
    mean = float(arr.mean())
    if s == 1:
        return unavailable_interval(mean, level, method, 1, "one seed: no spread across seeds")
    std = float(arr.std(ddof=1))
    half = _t_half_width(std, s, level, s - 1)
    return Interval(mean, mean - half, mean + half, level, method, s, std=std)


def t_interval(values: np.ndarray, level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): Student-t interval of the mean; (mean, nan, nan) for fewer than 2 values (a plain tuple
    for the explanation sanity check, which compares it with thresholds; NaN here means "no interval")."""
    values = np.asarray(values, dtype=np.float64)
    mean = float(values.mean()) if values.size else float("nan")
    if values.size < 2:
        return mean, float("nan"), float("nan")
    half = _t_half_width(float(values.std(ddof=1)), values.size, level, values.size - 1)
    return mean, mean - half, mean + half


def crossed_interval(values: np.ndarray, level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high) of the grand mean of a [seeds, images] table where both are random draws.

    Var = (MS_seeds + MS_images) / (S N) (two-way random effects, conservative: the residual is not
    subtracted), Satterthwaite degrees of freedom; one seed or one image: `t_interval` of the values. A seed
    effect shared by all images widens the interval, so a verdict that flips with the seed is inconclusive.
    """
    y = np.asarray(values, dtype=np.float64)
    if y.ndim != 2 or min(y.shape) < 2:
        return t_interval(y.reshape(-1), level)
    s, n = y.shape
    ms_s, ms_i = n * y.mean(axis=1).var(ddof=1), s * y.mean(axis=0).var(ddof=1)
    mean, var = float(y.mean()), (ms_s + ms_i) / (s * n)
    if var <= 0:
        return mean, mean, mean
    from scipy import stats

    df = (ms_s + ms_i) ** 2 / (ms_s**2 / (s - 1) + ms_i**2 / (n - 1))
    half = float(stats.t.ppf(0.5 + level / 2, df=df)) * math.sqrt(var)
    return mean, mean - half, mean + half


def wilson_interval(count: int, n: int, level: float = 0.95) -> Interval:
    """The share ``count / n`` with its Wilson score interval at ``level`` (statsmodels' proportion_confint,
    method "wilson": right at 0 and n, where the normal interval collapses); no images: unavailable."""
    check_level(level)
    if n <= 0:
        return unavailable_interval(None, level, "wilson", 0, "no images")
    from statsmodels.stats.proportion import proportion_confint

    low, high = proportion_confint(int(count), int(n), alpha=1 - level, method="wilson")
    return Interval(count / n, float(low), float(high), level, "wilson", int(n))


TIMING_METHOD = "order-statistic interval of each trial's median call, from the lowest to the highest of the seeds'"


def calls_needed(level: float) -> int:
    """The fewest timed calls whose order-statistic interval of the median reaches ``level``: [min, max] of n calls
    holds the median with probability 1 - 2^(1 - n), the most any n calls give."""
    return max(1, math.ceil(1 + math.log2(1 / (1 - check_level(level))) - 1e-9))


def timing_interval(calls: Any, level: float = 0.95) -> Interval:
    """A timing of one model x resolution over its seeds' trials, each timed by repeated calls (``calls``: one
    sequence of positive times per trial): the estimate is the mean of the trials' median calls; the interval runs
    from the lowest to the highest of the trials' distribution-free intervals of their median (median_interval:
    order statistics of the trial's calls, at ``level``). Never below zero: its bounds are among the calls given.
    Written here: neither scipy nor statsmodels combines per-trial intervals of a median.

    What it holds: let each trial's calls be independent draws from its own continuous distribution with median
    m_i (a trial runs in its own process, so the m_i differ by more than the calls' noise). For any value t between
    the smallest and the largest m_i, the mean of the m_i (what the estimate estimates) among them, the interval
    misses t above only if every trial's upper bound lies below t, so the trial with the largest m_i has its upper
    bound below its own median, which happens with probability at most (1 - level) / 2 (the order statistic is
    chosen so); likewise below. So it holds t with probability at least ``level``, however far apart the trials
    are, with one trial as with many (one trial: its own interval). It speaks of these trials: it is not a
    prediction of another run's timing. It replaces a Student-t interval over the seeds' medians, which over 2 seeds
    (quantile 12.7 at 1 degree of freedom) ran below zero; tests/test_latency_interval.py simulates its coverage.
    Unavailable when a trial has no calls, a call is not a positive number, or a trial has fewer calls than an
    interval of its median at ``level`` needs (`calls_needed`)."""
    level = check_level(level)
    trials = [np.asarray(c, dtype=float).reshape(-1) for c in calls]
    n = len(trials)
    if n == 0 or any(t.size == 0 for t in trials):
        return unavailable_interval(None, level, TIMING_METHOD, n, "no timed calls kept")
    if not all(np.isfinite(t).all() and (t > 0).all() for t in trials):
        return unavailable_interval(None, level, TIMING_METHOD, n, "a timed call is not a positive number")
    estimate = float(np.mean([np.median(t) for t in trials]))
    fewest, needed = min(t.size for t in trials), calls_needed(level)
    if fewest < needed:
        why = f"{fewest} timed calls: an interval of the median at {level:.0%} needs at least {needed}"
        return unavailable_interval(estimate, level, TIMING_METHOD, n, why)
    bounds = np.array([median_interval(t, level)[1:] for t in trials])
    return Interval(estimate, float(bounds[:, 0].min()), float(bounds[:, 1].max()), level, TIMING_METHOD, n)

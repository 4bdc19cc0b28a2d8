"""The interval result and the intervals across seeds: Student t across seeds (`seed_interval`, `t_interval`) and
the grand mean of a [seeds, images] table where both are random draws (`crossed_interval`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from resomap.errors import ConfigError
from resomap.stats.checks import check_level, to_dict


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


def spread_interval(
    mean: float | None, std: float | None, n: int | None, level: float = 0.95
) -> tuple[float | None, float | None]:
    """(low, high) of the Student-t interval of a mean kept as its mean, std (ddof=1) and count (a summary row's
    column and its `_std`), as `seed_interval` gives it from the values; (None, None) without a finite mean and
    std or with fewer than 2 values."""
    values = (mean, std)
    if n is None or n < 2 or not all(isinstance(v, int | float) and math.isfinite(v) for v in values):
        return None, None
    half = _t_half_width(float(std), int(n), check_level(level), int(n) - 1)
    return float(mean) - half, float(mean) + half


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

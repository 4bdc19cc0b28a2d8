"""Distribution-free intervals of a median (timings): `median_interval` from order statistics, `MedianInterval`
and `ratio_interval`, the median of per-round ratios between two timed variants with the same interval (the ratio
of two identical variants then has an interval that contains 1.0)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

LEVEL = 0.95  # confidence level of the intervals printed by the benchmarks


def median_interval(values: Sequence[float], level: float = LEVEL) -> tuple[float, float, float]:
    """(median, low, high): the distribution-free confidence interval of a median from order statistics.

    The interval [x_(k), x_(n-k+1)] holds the true median with probability 1 - 2 P(Binom(n, 1/2) < k), whatever
    the distribution (no resampling, exact for i.i.d. samples). scipy has no function returning it, hence these
    lines; with fewer than 6 values no k reaches 95%, and the interval is [min, max].
    """
    from scipy.stats import binom

    x = np.sort(np.asarray(values, dtype=np.float64))
    n = x.size
    if n == 0:
        return math.nan, math.nan, math.nan
    med = float(np.median(x))
    # the largest k with P(Binom(n, .5) <= k - 1) <= (1 - level) / 2
    k = int(binom.ppf((1 - level) / 2, n, 0.5))
    if k >= 1 and binom.cdf(k - 1, n, 0.5) > (1 - level) / 2:
        k -= 1
    k = max(k, 1)
    return med, float(x[k - 1]), float(x[n - k])


@dataclass(frozen=True)
class MedianInterval:
    """A median with its confidence interval (`n`: how many values it came from)."""

    value: float
    low: float
    high: float
    n: int
    level: float = LEVEL

    @classmethod
    def of(cls, values: Sequence[float], level: float = LEVEL) -> MedianInterval:
        med, lo, hi = median_interval(values, level)
        return cls(med, lo, hi, len(values), level)

    def contains(self, x: float) -> bool:
        return self.low <= x <= self.high

    def text(self, fmt: str = ".2f") -> str:
        return f"{self.value:{fmt}} [{self.low:{fmt}}, {self.high:{fmt}}]"

    def as_list(self) -> list[float]:
        return [self.value, self.low, self.high]


def ratio_interval(numerator: Sequence[float], denominator: Sequence[float], level: float = LEVEL) -> MedianInterval:
    """The median of the per-round ratios numerator[r] / denominator[r] with its interval (median_interval)."""
    ratios = [a / b for a, b in zip(numerator, denominator) if b > 0 and math.isfinite(a / b)]
    return MedianInterval.of(ratios, level) if ratios else MedianInterval(math.nan, math.nan, math.nan, 0, level)

"""A three-way decision of paired differences against a margin: "within" (the mean difference shown above
-margin), "beyond" (shown below -margin) or undecided, each one-sided at alpha by the sign-flip test of the
differences shifted by the margin, Holm over a family per direction (`margin_verdicts`).

The map decision uses it with probe images as the unit: per image, the agreement of its maps across two
resolutions minus the agreement of each map with its own map under a content-keeping nuisance (the floor). The two
nulls (mean <= -margin, mean >= -margin) exclude each other's alternatives, so one family never says both.

Both tests and the bounds come from one set of sign patterns: all 2^n where n <= MAX_ENUMERATED, else MC_FLIPS
seeded random ones (the observed pattern counted once more, (hits + 1) / (flips + 1)). A pattern f flips a subset
of the differences; the shifted test at margin m counts it as a hit exactly when m is on one side of minus the
mean of the flipped subset, so the margins each test decides are read off those subset means: the one-sided bounds
of the mean difference the sign-flip test gives at alpha (Hartigan's subset-mean interval). scipy's
permutation_test gives a p for one margin, not this inversion, hence the few lines here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from resomap.stats.checks import check_alpha, check_power
from resomap.stats.paired import holm

WITHIN, BEYOND, UNDECIDED = "within", "beyond", "undecided"
MIN_UNITS = 3  # fewer paired units than this decide nothing (the smallest sign-flip p with 3 is 0.125)
MAX_ENUMERATED = 16  # up to this many differences every sign pattern is counted (exact)
MC_FLIPS = 20000  # random sign patterns beyond it (Monte-Carlo standard error of p at most 0.0036)


@dataclass(frozen=True)
class MarginTest:
    """The two one-sided tests of one set of paired differences against -margin, before any multiplicity step,
    and the one-sided bounds of the mean difference at the same alpha (the margins each test decides)."""

    n: int
    mean: float
    sd: float
    margin: float
    p_within: float  # H0: mean <= -margin (the differences shown above it: within the margin)
    p_beyond: float  # H0: mean >= -margin (shown below it: beyond the margin)
    lower: float  # the mean is shown above every value below this (within any margin > -lower)
    upper: float  # and below every value above this (beyond any margin < -upper)
    detectable: float  # the smallest margin shown "within" with the stated power when the true difference is 0
    exact: bool


def detectable_margin(sd: float, n: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """(z_(1-alpha) + z_power) * sd / sqrt(n): the margin a one-sided test at alpha shows with `power` over n units
    whose differences have standard deviation sd and mean 0 (normal approximation; nan below MIN_UNITS)."""
    from scipy.stats import norm

    if n < MIN_UNITS or not math.isfinite(sd):
        return math.nan
    return float((norm.ppf(1 - check_alpha(alpha)) + norm.ppf(check_power(power))) * sd / math.sqrt(n))


def units_needed(sd: float, margin: float, alpha: float = 0.05, power: float = 0.8) -> int | None:
    """The units (probe images) `detectable_margin` needs to reach `margin` (None: no spread known or margin 0)."""
    from scipy.stats import norm

    if not (math.isfinite(sd) and margin > 0):
        return None
    z = norm.ppf(1 - check_alpha(alpha)) + norm.ppf(check_power(power))
    return max(MIN_UNITS, math.ceil((z * sd / margin) ** 2))


def _patterns(n: int, seed: int) -> tuple[np.ndarray, bool]:
    """(sign patterns [F, n] of +1/-1, exact): all of them up to MAX_ENUMERATED, else MC_FLIPS seeded draws."""
    if n <= MAX_ENUMERATED:
        bits = (np.arange(2**n)[:, None] >> np.arange(n)[None, :]) & 1
        return 1.0 - 2.0 * bits, True
    rng = np.random.default_rng([seed, 7741])
    return rng.choice(np.array([-1.0, 1.0]), size=(MC_FLIPS, n)), False


def margin_test(
    differences: Any, margin: float, *, alpha: float = 0.05, power: float = 0.8, seed: int = 0
) -> MarginTest:
    """Both one-sided sign-flip tests of the differences (finite values; nan ones must be left out by the caller)
    against -margin, with the bounds at `alpha`; fewer than MIN_UNITS differences give p = 1 and no bounds."""
    alpha = check_alpha(alpha)
    d = np.asarray(differences, dtype=np.float64).reshape(-1)
    n = int(d.size)
    mean = float(d.mean()) if n else math.nan
    sd = float(d.std(ddof=1)) if n > 1 else math.nan
    if n < MIN_UNITS:
        return MarginTest(n, mean, sd, float(margin), 1.0, 1.0, math.nan, math.nan, math.nan, True)
    flips, exact = _patterns(n, seed)
    flipped = (flips < 0).sum(axis=1)
    moved = flipped > 0  # the identity pattern (nothing flipped) is a hit of both tests at every margin
    # minus the mean of each pattern's flipped subset: the pattern is a hit of the "within" test at margin m exactly
    # when m <= t, of the "beyond" test exactly when m >= t (module doc)
    t = -((flips[moved] < 0) @ d) / flipped[moved]
    extra = 0 if exact else 1  # the observed pattern counted once more in a Monte-Carlo p
    total = len(flips) + extra
    always = int((~moved).sum()) + extra
    m = float(margin)
    p_within = (always + int((t >= m - 1e-12).sum())) / total
    p_beyond = (always + int((t <= m + 1e-12).sum())) / total
    allowed = math.floor(alpha * total + 1e-9) - always  # hits beyond `always` a p <= alpha leaves room for
    ordered = np.sort(t)
    if 0 <= allowed < len(ordered):
        lower, upper = -float(ordered[::-1][allowed]), -float(ordered[allowed])
    else:
        lower, upper = -math.inf, math.inf
    det = detectable_margin(sd, n, alpha, power)
    return MarginTest(n, mean, sd, m, p_within, p_beyond, lower, upper, det, exact)


def margin_verdicts(tests: Sequence[MarginTest], alpha: float = 0.05) -> list[tuple[str, float, float]]:
    """(verdict, Holm-adjusted p_within, Holm-adjusted p_beyond) per test, Holm over the family in each direction."""
    alpha = check_alpha(alpha)
    if not tests:
        return []
    within = holm([t.p_within for t in tests])
    beyond = holm([t.p_beyond for t in tests])
    out = []
    for w, b in zip(within, beyond, strict=True):
        verdict = WITHIN if w <= alpha else BEYOND if b <= alpha else UNDECIDED
        out.append((verdict, float(w), float(b)))
    return out

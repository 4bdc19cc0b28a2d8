"""Permutation tests: the sign-flip test of paired per-image differences (exact where the differences lie on a 1/k
lattice, as seed-averaged differences of 0/1 outcomes do; otherwise all sign patterns of few differences, or enough
random flips for a Monte-Carlo standard error at most 0.002) and the relabelling test of resolution labels within
each seed (explanation agreement against its cross-seed floor)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from resomap.errors import ConfigError
from resomap.stats.bootstrap import BATCH_ELEMENTS
from resomap.stats.checks import check_choice, check_resamples, check_seed, to_dict

MAX_EXACT = 20000  # relabellings enumerated exactly up to this count, else sampled (seeded)
RELABEL_SEED = 12345  # the sampled relabellings' random seed (repeatable p-values)

ALTERNATIVES = ("two-sided", "greater", "less")
MAX_LATTICE = 64  # the finest lattice 1/k searched for (k seeds averaged: up to 64 seeds, or k given)
LATTICE_TOLERANCE = 1e-9  # d * k counts as an integer within this (relative above 1)
MAX_LATTICE_SUM = 1 << 22  # the largest sum of |d| * k (over their gcd) convolved exactly
MAX_LATTICE_WORK = 10**9  # multiply-adds the convolution may take (5,000 values up to 64: 4e8, about 0.15 s)
MAX_ENUMERATED = 16  # off a lattice, up to this many nonzero differences have all 2**K sign patterns counted
MC_ERROR = 0.002  # random flips are drawn until the Monte-Carlo standard error of p is at most this
MC_MAX_FLIPS = math.ceil(0.25 / MC_ERROR**2)  # 62,500: enough for that error at any p (p (1 - p) <= 1/4)
MC_BATCH = 16384  # flips drawn per round (fewer when the differences are many: BATCH_ELEMENTS bounds the memory)
_BITS = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1).astype(np.float64)  # [256, 8], MSB first


@dataclass(frozen=True)
class SignFlip:
    """A sign-flip test's p and how it was computed.

    ``method``: "exact (lattice 1/k)" (the null distribution convolved over the integer sums), "exact (all 2^K sign
    patterns)" (enumerated), "Monte Carlo" (random flips, seeded), "no nonzero difference" (p = 1).
    ``flips``: the sign patterns counted (2^K; the number drawn); 0 for the convolution, which covers all 2^K.
    ``standard_error``: the Monte-Carlo standard error of ``p_value`` (sqrt(p (1 - p) / flips)); 0 where exact.
    """

    p_value: float
    alternative: str
    method: str
    exact: bool
    n_nonzero: int
    lattice: int | None = None  # k of the 1/k lattice the differences lie on (None: off any lattice up to 64)
    flips: int = 0
    standard_error: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)

    def describe(self) -> str:
        """How the p was computed, in words: 'exact', or 'Monte Carlo: 62,500 flips, se 0.0020'."""
        if self.exact:
            return "exact"
        return f"Monte Carlo: {self.flips:,} flips, se {self.standard_error:.4f}"


def sign_flip(
    differences: Any,
    *,
    alternative: str = "two-sided",
    lattice: int | None = None,
    resamples: int = 2000,
    seed: int = 0,
) -> SignFlip:
    """The sign-flip (paired permutation) test of sum(differences) = 0 under "each difference is as likely with
    either sign"; with 0/1 outcomes of one seed it is McNemar's exact test, with several seeds averaged per image
    the exact permutation form of the clustered McNemar test (Durkalski et al. 2003).

    ``alternative``: "two-sided" (p = P(|sum of the randomly signed differences| >= |observed sum|)), "greater"
    (P(sum >= observed): the differences tend to be positive) or "less". Flipping a zero changes nothing, so only
    the nonzero differences count (K of them). All zero: p = 1.

    How p is computed, the first that applies:

    - the differences lie on a lattice 1/k (every d * k an integer within 1e-9, with k = ``lattice`` when given,
      else the smallest k <= 64; seed-averaged differences of 0/1 outcomes over S seeds lie on 1/S): exact. The sum
      of randomly signed integers d_i * k is convolved (the values grouped, each group's count binomial), so the
      p is the exact share of the 2^K sign patterns up to float64 rounding (about 1e-15), fast for thousands of
      differences (under 0.2 s for 5,000 values up to 64), deterministic (``seed`` is not used);
    - at most 16 nonzero differences: all 2^K sign patterns enumerated (exact, deterministic);
    - otherwise (continuous scores such as IoU): Monte Carlo with random flips from ``seed``, at least
      ``resamples`` and then more, in rounds, until the standard error sqrt(p (1 - p) / flips) of the reported p is
      at most 0.002 (at most about 62,500 flips); the observed pattern counts as one flip ((hits + 1) / (flips +
      1), a valid p). ``standard_error`` and ``flips`` say how far to trust it.
    """
    alternative = check_choice(alternative, ALTERNATIVES, "alternative")
    resamples, seed = check_resamples(resamples), check_seed(seed)
    d = np.asarray(differences, dtype=np.float64).reshape(-1)
    if not np.isfinite(d).all():
        raise ConfigError("sign-flip test: the differences must be finite numbers")
    d = d[d != 0]
    if d.size == 0:
        return SignFlip(1.0, alternative, "no nonzero difference", True, 0)
    found = _on_lattice(d, lattice)
    if found is not None:
        k, m = found
        p = _lattice_p(m, alternative)
        if p is not None:
            return SignFlip(p, alternative, f"exact (lattice 1/{k})", True, d.size, lattice=k)
    if d.size <= MAX_ENUMERATED:
        flips = np.array(list(itertools.product((1.0, -1.0), repeat=d.size)))
        p = _hits(flips @ d, d, alternative) / len(flips)
        return SignFlip(p, alternative, "exact (all 2^K sign patterns)", True, d.size, flips=len(flips))
    return _monte_carlo(d, alternative, resamples, seed)


def sign_flip_test(
    differences: Any,
    *,
    resamples: int = 2000,
    seed: int = 0,
    alternative: str = "two-sided",
    lattice: int | None = None,
) -> float | None:
    """The p of :func:`sign_flip` (two-sided unless told): exact where the differences lie on a 1/k lattice
    (seed-averaged 0/1 outcomes) or are at most 16 nonzero values, else Monte Carlo with a standard error of at most
    0.002 (``resamples`` is the least number of flips, ``seed`` their random seed). All zero: p = 1."""
    return sign_flip(differences, alternative=alternative, lattice=lattice, resamples=resamples, seed=seed).p_value


def _on_lattice(d: np.ndarray, lattice: int | None) -> tuple[int, np.ndarray] | None:
    """(k, the integers d * k) for the given k when d lies on 1/k, else the smallest k <= 64 that fits; None."""
    given = [int(lattice)] if lattice is not None and int(lattice) >= 1 else []
    for k in [*given, *range(1, MAX_LATTICE + 1)]:
        scaled = d * k
        whole = np.rint(scaled)
        if not whole.all():  # a nonzero difference rounded to 0 (e.g. 1e-17 of float noise) lies on no lattice
            continue
        if np.all(np.abs(scaled - whole) <= LATTICE_TOLERANCE * np.maximum(1.0, np.abs(scaled))):
            return (k, whole.astype(np.int64)) if np.abs(whole).max() <= MAX_LATTICE_SUM else None
    return None


def _lattice_p(m: np.ndarray, alternative: str) -> float | None:
    """The exact p of the sign-flip test of the nonzero integers ``m``; None when they are too large or too many to
    convolve in about a second (MAX_LATTICE_SUM, MAX_LATTICE_WORK: the caller goes on to enumeration or flips)."""
    a = np.abs(m)
    g = int(np.gcd.reduce(a))
    a //= g
    observed = int(m.sum()) // g  # a multiple of g: exact
    total = int(a.sum())
    if total > MAX_LATTICE_SUM or _convolution_work(a) > MAX_LATTICE_WORK:
        return None
    pmf = _positive_sum_pmf(a)  # P(sum of the values that keep their sign = s), s = 0..total
    # a pattern's signed sum is 2 s - total: the tails are sums over s
    if alternative == "two-sided":
        if observed == 0:
            return 1.0
        high, low = (total + abs(observed)) // 2, (total - abs(observed)) // 2
        return min(1.0, float(pmf[high:].sum() + pmf[: low + 1].sum()))
    at = (total + observed) // 2
    return min(1.0, float(pmf[at:].sum() if alternative == "greater" else pmf[: at + 1].sum()))


def _convolution_work(a: np.ndarray) -> int:
    """The multiply-adds of :func:`_positive_sum_pmf` on ``a``."""
    values, counts = np.unique(a, return_counts=True)
    work, size = 0, 1
    for v, c in zip(values.tolist(), counts.tolist(), strict=True):
        work += size * (c + 1)
        size += v * c
    return work


def _positive_sum_pmf(a: np.ndarray) -> np.ndarray:
    """The distribution of sum(a_i * b_i) with b_i independent fair 0/1 (a_i positive integers), entries 0 to
    sum(a): the values grouped, v * Binomial(count, 1/2) per distinct value v (scipy's binomial pmf), convolved into
    the distribution one group at a time: a dense convolution of every v-th entry (the binomial's taps are v
    apart), or, for a group of few, a shifted copy per tap. Probabilities, not counts: 2^K overflows float64."""
    from scipy import stats

    values, counts = np.unique(a, return_counts=True)
    dist = np.ones(1)
    for v, c in zip(values.tolist(), counts.tolist(), strict=True):
        group = stats.binom.pmf(np.arange(c + 1), c, 0.5)
        out = np.zeros(dist.size + v * c)
        if c + 1 < min(v, dist.size):
            for j, weight in enumerate(group.tolist()):
                out[j * v : j * v + dist.size] += weight * dist
        else:
            for r in range(min(v, dist.size)):
                conv = np.convolve(dist[r::v], group)
                out[r : r + v * conv.size : v] = conv
        dist = out
    return dist


def _hits(sums: np.ndarray, d: np.ndarray, alternative: str) -> int:
    """How many signed sums are as extreme as the observed sum(d) (a relative tolerance for float ties)."""
    observed = float(d.sum())
    tolerance = 1e-9 * float(np.abs(d).sum())
    if alternative == "two-sided":
        return int(np.count_nonzero(np.abs(sums) >= abs(observed) - tolerance))
    if alternative == "greater":
        return int(np.count_nonzero(sums >= observed - tolerance))
    return int(np.count_nonzero(sums <= observed + tolerance))


def _monte_carlo(d: np.ndarray, alternative: str, resamples: int, seed: int) -> SignFlip:
    """Random flips (seeded), in rounds, until at least ``resamples`` are drawn and the standard error of p is at
    most MC_ERROR. A flip is one random byte per 8 differences; a table of each byte's signed sum per group of 8
    makes a pattern's sum n/8 look-ups."""
    rng = np.random.default_rng(seed)
    n = d.size
    groups = (n + 7) // 8
    padded = np.zeros(groups * 8)
    padded[:n] = d
    eights = padded.reshape(groups, 8)
    table = (2.0 * (eights @ _BITS.T) - eights.sum(axis=1, keepdims=True)).ravel()  # bit 1 keeps the sign
    offsets = np.arange(groups, dtype=np.intp) * 256
    batch = max(1, min(MC_BATCH, BATCH_ELEMENTS // groups))
    hits = drawn = 0
    while True:
        draws = rng.integers(0, 256, size=(batch, groups), dtype=np.uint8)
        hits += _hits(table[draws + offsets].sum(axis=1), d, alternative)
        drawn += batch
        p = (hits + 1) / (drawn + 1)
        error = math.sqrt(p * (1 - p) / drawn)
        if drawn >= resamples and (error <= MC_ERROR or drawn >= MC_MAX_FLIPS):
            return SignFlip(min(1.0, p), alternative, "Monte Carlo", False, n, flips=drawn, standard_error=error)


@dataclass(frozen=True)
class RelabelTest:
    """Is cross-resolution agreement lower than same-resolution cross-seed agreement beyond seed noise?"""

    statistic: float  # mean same-resolution cross-seed agreement - mean cross-resolution cross-seed agreement
    p_value: float  # one-sided: share of relabellings with a statistic >= the observed one (identity included)
    relabellings: int  # distinct relabellings (enumerated, or the number sampled)
    min_p: float  # the smallest p value the seeds and resolutions can give
    exact: bool
    # the smallest statistic that reaches p <= alpha on these maps (NaN when min_p > alpha: no statistic can)
    critical: float = float("nan")
    # the agreement drop shown with probability `power` if it shifted the statistic: critical minus the
    # (1 - power) quantile of the relabelling distribution (NaN when no decision is attainable)
    detectable: float = float("nan")
    alpha: float = 0.05
    power: float = 0.8


def _agreement_array(values: Mapping, seeds: list, res: list) -> np.ndarray:
    """A[s, t, i, j]: seed s at resolution i vs seed t at resolution j (s < t filled, NaN where missing)."""
    S, R = len(seeds), len(res)
    A = np.full((S, S, R, R), np.nan)
    for s, t in itertools.combinations(range(S), 2):
        for i in range(R):
            for j in range(R):
                key = ((seeds[s], res[i]), (seeds[t], res[j]))
                v = values.get(key)
                if v is None:
                    v = values.get((key[1], key[0]), float("nan"))
                A[s, t, i, j] = float(v)
    return A


def relabel_test(
    values: Mapping[tuple[tuple[Hashable, int], tuple[Hashable, int]], float],
    seeds: Sequence[Hashable],
    resolutions: Sequence[int],
    *,
    draws: int = 9999,
    alpha: float = 0.05,
    power: float = 0.8,
) -> RelabelTest:
    """Exact (or sampled) permutation test of the resolution labels within each seed.

    `values[((s, r), (t, r'))]` is the agreement of seed s at r with seed t at r' (s != t, both orders or one).
    Under H0 (no resolution effect beyond seed noise) the trials of one seed at the different resolutions are
    exchangeable, so every relabelling of resolutions within each seed is as likely as the observed one; the
    statistic is mean(same-resolution cross-seed) - mean(cross-resolution cross-seed). Same-seed pairs are not
    used (they do not change under relabelling). The unit is the trained model (seed), not the probe image, so the
    test is valid but needs seeds: with S seeds and R resolutions there are (R!)^(S-1) distinct relabellings and
    p >= 1/(R!)^(S-1) (2 seeds and 2 resolutions: p >= 0.5).

    Where p <= ``alpha`` is attainable, ``critical`` is the smallest statistic that reaches it on these maps and
    ``detectable`` the agreement drop shown with probability ``power`` if a resolution effect shifted the statistic
    by that much (a shift alternative on the relabelling distribution: critical - its (1 - power) quantile), so a
    "not shown" is read beside the size it could have shown.
    """
    seeds, res = list(seeds), list(resolutions)
    R, S = len(res), len(seeds)
    A = _agreement_array(values, seeds, res)
    pairs = list(itertools.combinations(range(S), 2))
    if S < 2 or R < 2 or not np.isfinite(A[tuple(zip(*pairs))]).all():
        return RelabelTest(float("nan"), float("nan"), 0, float("nan"), True, alpha=alpha, power=power)
    totals = sum(A[s, t].sum() for s, t in pairs)
    n_same, n_cross = len(pairs) * R, len(pairs) * R * (R - 1)

    def stat(perm: Sequence[Sequence[int]]) -> float:
        same = sum(A[s, t, perm[s], perm[t]].sum() for s, t in pairs)
        return same / n_same - (totals - same) / n_cross

    identity = [list(range(R))] * S
    observed = stat(identity)
    perms = [list(p) for p in itertools.permutations(range(R))]
    count = len(perms) ** (S - 1)
    min_p = 1.0 / count
    if count <= MAX_EXACT:
        stats = [stat([identity[0], *rest]) for rest in itertools.product(perms, repeat=S - 1)]
        exact = True
    else:
        rng = np.random.default_rng(RELABEL_SEED)
        draw = [[identity[0], *(perms[k] for k in rng.integers(len(perms), size=S - 1))] for _ in range(draws)]
        stats = [observed] + [stat(p) for p in draw]
        exact, count = False, draws + 1
    null = np.sort(np.asarray(stats, dtype=float))
    p = float(np.mean(null >= observed - 1e-12))
    critical, detectable = _critical(null, alpha, power) if min_p <= alpha else (float("nan"), float("nan"))
    return RelabelTest(float(observed), p, count, min_p, exact, critical, detectable, alpha, power)


def _critical(null: np.ndarray, alpha: float, power: float) -> tuple[float, float]:
    """(the smallest statistic that reaches p <= alpha, the shift shown with probability `power`) from the sorted
    relabelling distribution `null`; NaN where ties fill its top (constant agreements)."""
    # p(x) = share of relabellings >= x; the smallest null value v with p(v) <= alpha is the critical value
    share_at_or_above = 1.0 - np.searchsorted(null, null - 1e-12, side="left") / null.size
    reaching = null[share_at_or_above <= alpha + 1e-12]
    if not reaching.size:
        return float("nan"), float("nan")
    critical = float(reaching.min())
    return critical, max(0.0, critical - float(np.quantile(null, 1 - power)))

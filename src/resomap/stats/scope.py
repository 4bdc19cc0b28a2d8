"""The one-sided test behind each non-inferiority step (stats.decide), at one of two scopes, for the paired
per-image differences ``d`` [S, N] (seed s, image i; the same N test images and S seeds at both resolutions).

- ``checkpoint`` scope, "for these trained checkpoints": the test images are the only random thing. For 0/1
  outcomes a score test of the mean of the seed-averaged differences, whose values lie on the lattice k/S
  (k = -S..S): its variance is the one of the multinomial on that lattice fitted with its mean held at the null
  value (maximum likelihood under H0; for S = 1 this is Tango's (1998) restricted estimate for paired proportions),
  and z is compared with the normal. The paired t-test it replaces over-rejects on 0/1 outcomes with few discordant
  images (size 0.083 at discordance 0.03, n = 180, in tests/test_scope.py's simulation; this test 0.042-0.053). For
  other scores (IoU, Dice) the one-sided t-test over images.
- ``model`` scope, "about the model at that resolution": the training seed is a replicate. The mean difference D
  has variance sigma_seed^2 / S + Var(image mean) / N (seeds and images crossed); the two parts are estimated from
  the two-way layout (ANOVA moments): the image part ``a`` as at checkpoint scope (restricted for 0/1 outcomes),
  the seed part ``b = max(0, var(per-seed means) - MS_residual / N) / S`` (for scores other than 0/1, which have
  no restricted image part, ``v = var(per-seed means) / S``: conservative). T = (D - delta0) / sqrt(a + b) is
  compared with c = sqrt((1 - w) z^2 + w t_{S-1}^2), w = v / (a + v), v = var(per-seed means) / S: the normal
  quantile when the images dominate, Student's t with S - 1 degrees of freedom when the seeds do. The weight v keeps
  the image x seed part (it is not subtracted as in b), so a seed part estimated small by chance from 2-4 degrees of
  freedom does not swing c to the normal quantile: with b in its place the size reached 0.058 at 3 seeds and seed
  sd 0.04, with Satterthwaite's degrees of freedom 0.062-0.071; with v it is 0.016-0.045 over seed sd 0-0.04,
  discordance 0.03-0.2, 3 and 5 seeds (tests/test_scope.py), at some power with no seed spread (0.69 against 0.79
  at 3 seeds in the sweep simulated there). One seed says nothing of the seed-to-seed variation: no test.
  The seeds are paired across resolutions (row s of ``d`` is seed s at both): a trial's seed sets its initial
  weights, the order of its training batches and its augmentation draws, the same at every resolution
  (tests/test_seed_pairing.py), so seed s at two resolutions shares that randomness and differs in the resolution.

Written by hand: neither scipy nor statsmodels has a score test for paired proportions (Tango's) or its
seed-averaged form, nor a test over crossed seeds x images. Everything is vectorised over a leading batch axis so
the simulation test runs the same code as the summary.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

SCOPES = ("model", "checkpoint")
SCOPE_WORDS = {
    "model": "at model scope (training seeds as replicates)",
    "checkpoint": "for these trained checkpoints (checkpoint scope)",
}
_BISECT = 40


def lattice_counts(dbar: np.ndarray, seeds: int) -> tuple[np.ndarray, np.ndarray]:
    """(counts [B, 2S+1] of the seed-averaged differences on the lattice k/S, the lattice values)."""
    values = np.arange(-seeds, seeds + 1) / seeds
    k = np.rint(dbar * seeds).astype(np.int64) + seeds
    counts = np.zeros((dbar.shape[0], 2 * seeds + 1))
    np.add.at(counts, (np.arange(dbar.shape[0])[:, None], k), 1.0)
    return counts, values


def restricted_variance(counts: np.ndarray, values: np.ndarray, delta0: float | np.ndarray) -> np.ndarray:
    """The variance [B] of one image's difference under H0 "mean = delta0": the multinomial on ``values`` of
    largest likelihood for ``counts`` [B, K] among those with mean delta0. Its cells are counts / (n (1 + lam a_k))
    with a_k = values_k - delta0 and lam the root of sum counts a / (1 + lam a) = 0; where the observed values
    cannot reach the mean delta0, the root sits at the end of its range and the leftover mass goes to the lattice
    end whose 1 + lam a_k is 0 (as Tango's estimate gives an unobserved discordant cell mass)."""
    counts = np.asarray(counts, dtype=float)
    delta0 = np.broadcast_to(np.asarray(delta0, dtype=float), counts.shape[:1])
    a = values[None, :] - delta0[:, None]  # [B, K]
    n = counts.sum(1)
    lo, hi = -1.0 / a.max(1), -1.0 / a.min(1)  # 1 + lam a_k >= 0 on the whole lattice
    span = hi - lo
    lo, hi = lo + 1e-12 * span, hi - 1e-12 * span

    def g(lam: np.ndarray) -> np.ndarray:  # decreasing in lam
        return (counts * a / (1 + lam[:, None] * a)).sum(1)

    g_lo, g_hi = g(lo), g(hi)
    lam = np.where(g_lo <= 0, lo, np.where(g_hi >= 0, hi, _root_in(counts, a, lo, hi)))
    cells = np.where(counts > 0, counts / (n[:, None] * (1 + lam[:, None] * a)), 0.0)
    variance = (cells * a**2).sum(1)
    leftover = np.clip(1 - cells.sum(1), 0.0, None)
    end = np.where(g_hi >= 0, a.min(1), np.where(g_lo <= 0, a.max(1), 0.0))  # the lattice end taking the rest
    return variance + leftover * end**2


_NARROW, _POLISH = 16, 4  # bisections, then Newton steps (each kept in the bracket) of _root_in


def _root_in(counts: np.ndarray, a: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The root [B] of the decreasing g(lam) = sum counts a / (1 + lam a) inside (lo, hi), where it changes sign
    (rows where it does not: any value in the bracket; the caller takes an end there): _NARROW bisections bring the
    bracket to 2^-16 of its span, where Newton's steps (kept inside it) converge quadratically; _POLISH of them
    reach the root to the last digits, where _BISECT bisections stopped at 2^-40 of the span. 20 evaluations of g
    instead of 40: the root finding of the bounds and p values calls this hundreds of times per decision."""
    left, right = lo.copy(), hi.copy()
    for _ in range(_NARROW):
        mid = 0.5 * (left + right)
        up = (counts * a / (1 + mid[:, None] * a)).sum(1) > 0
        left, right = np.where(up, mid, left), np.where(up, right, mid)
    lam = 0.5 * (left + right)
    for _ in range(_POLISH):
        x = 1 + lam[:, None] * a
        value = (counts * a / x).sum(1)
        slope = -(counts * a**2 / x**2).sum(1)  # < 0 wherever some image's difference is not delta0
        with np.errstate(divide="ignore", invalid="ignore"):
            step = lam - value / slope
        lam = np.where(np.isfinite(step), np.clip(step, left, right), lam)
    return lam


@dataclass(frozen=True)
class Parts:
    """The variance parts of the mean difference [B each]: ``image`` (Var(image mean) / N, restricted at delta0
    for 0/1 outcomes), ``seed`` (sigma_seed^2 / S, model scope; 0 at checkpoint scope)."""

    mean: np.ndarray
    image: np.ndarray
    seed: np.ndarray
    seeds: int
    images: int
    seed_weight: np.ndarray  # var(per-seed means) / S, image x seed part included: the t weight (0 off model scope)


def two_way(d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The seeds x images layout of d [B, S, N] (S >= 2): (image means over seeds [B, N], seed means over images
    [B, S], the residual mean square [B], the image x seed interaction; 0 with one image)."""
    _, seeds, n = d.shape
    dbar, per_seed = d.mean(1), d.mean(2)
    resid = d - dbar[:, None, :] - per_seed[:, :, None] + dbar.mean(1)[:, None, None]
    ms_resid = (resid**2).sum((1, 2)) / ((n - 1) * (seeds - 1)) if n > 1 else np.zeros(d.shape[0])
    return dbar, per_seed, ms_resid


def parts(d: np.ndarray, delta0: float | np.ndarray, *, binary: bool, scope: str) -> Parts:
    """The mean difference and its variance parts for d [B, S, N] under H0 "mean = delta0"."""
    return prepared(d, binary=binary, scope=scope)(delta0)


def prepared(d: np.ndarray, *, binary: bool, scope: str) -> Callable[[float | np.ndarray], Parts]:
    """`parts` of d [B, S, N] as a function of delta0: what does not depend on it (the lattice, the two-way layout)
    computed once, for the bounds' and the p value's root finding, which ask for many delta0 or alpha."""
    d = np.asarray(d, dtype=float)
    _, seeds, n = d.shape
    dbar = d.mean(1)  # [B, N] the image's difference, seeds averaged
    mean = dbar.mean(1)
    if binary:
        counts, values = lattice_counts(dbar, seeds)
    else:
        image = dbar.var(1, ddof=1) / n if n > 1 else np.zeros_like(mean)
    seed = weight = np.zeros_like(mean)
    if scope == "model" and seeds > 1:
        _, per_seed, ms_resid = two_way(d)
        weight = per_seed.var(1, ddof=1) / seeds
        # 0/1 outcomes: the image x seed part subtracted (the restricted image part keeps the size). Other scores
        # have no restricted variance, and with the part subtracted the size reached 0.056-0.063 (AUROC, 5 seeds,
        # tests/test_per_image.py); kept in (counted twice: conservative) it is at most 0.046 there
        seed = np.clip(weight - ms_resid / (n * seeds), 0.0, None) if binary else weight

    def at(delta0: float | np.ndarray) -> Parts:
        found = restricted_variance(counts, values, delta0) / n if binary else image
        return Parts(mean, found, seed, seeds, n, weight)

    return at


@functools.lru_cache(maxsize=4096)
def _isf(alpha: float, df: int) -> float:
    """The one-sided quantile at ``alpha`` of the normal (df 0) or Student's t with df degrees of freedom."""
    return float(_upper_quantile(alpha, df))


def _upper_quantile(alpha: float | np.ndarray, df: int) -> np.ndarray:
    """scipy.stats' norm.isf / t.isf, through the special functions they call (-ndtri, -stdtrit), without the
    distribution objects' argument handling (75 us a call against 1 us: the p values' and bounds' root finding asks
    for tens of thousands of quantiles in a simulation); their values bit for bit, 0 at alpha 1/2 and inf at 0 as
    scipy.stats gives them (tests/test_scope.py)."""
    from scipy import special

    q = np.asarray(alpha, dtype=float)
    found = -special.ndtri(q) if df == 0 else -special.stdtrit(df, q)
    return np.where(q == 0, np.inf, found) + 0.0  # + 0.0: -0.0 (at 1/2) is 0.0


def _quantile(alpha: float | np.ndarray, df: int) -> np.float64 | np.ndarray:
    """`_isf` (cached: the root finding asks the same alpha many times), element-wise for an array of alphas."""
    if np.ndim(alpha) == 0:
        return np.float64(_isf(float(alpha), df))  # numpy's float: a quantile squared far in the tail is inf
    return _upper_quantile(alpha, df)


def critical(p: Parts, alpha: float | np.ndarray, *, binary: bool) -> np.ndarray:
    """The critical value of T at one-sided alpha: the normal (t for scores other than 0/1) and the t_{S-1}
    quantiles mixed by variance share (module doc); negative for alpha > 1/2, as the quantiles are."""
    total = p.image + p.seed
    image_q = _quantile(alpha, 0 if binary else max(p.images - 1, 1))
    if p.seeds < 2:
        return np.broadcast_to(np.asarray(image_q, dtype=float), total.shape).copy()
    seed_q = _quantile(alpha, p.seeds - 1)
    weight = p.seed_weight
    share = np.divide(weight, p.image + weight, out=np.zeros_like(total), where=p.image + weight > 0)
    with np.errstate(over="ignore"):  # t with 1-2 degrees of freedom far in the tail: inf, a valid critical value
        return np.sign(image_q) * np.sqrt((1 - share) * image_q**2 + share * seed_q**2)


def statistic(p: Parts, delta0: float | np.ndarray) -> np.ndarray:
    """T = (mean - delta0) / sqrt(total variance); where the variance is 0, +-inf by the sign of the difference, and
    0 where the difference is 0 too (0/0: the limit of T at delta0 = mean, where no test rejects). Read as -inf,
    0/0 showed "mean < delta0" at delta0 = mean, and the upper bound of a table where no image changes outcome was
    its estimate: [-0.094, +0.000] on 26 images at alpha 0.05, where the test gives +0.094 (tests/test_scope.py)."""
    total = p.image + p.seed
    diff = np.broadcast_to(p.mean - delta0, np.shape(total))
    tied = np.where(diff > 0, np.inf, np.where(diff < 0, -np.inf, 0.0))
    return np.divide(diff, np.sqrt(total), out=tied, where=total > 0)


def rejects(d: np.ndarray, delta0: float, alpha: float, *, binary: bool, scope: str) -> np.ndarray:
    """[B] bool: H0 "mean difference <= delta0" rejected at one-sided alpha (shown above delta0)."""
    p = parts(d, delta0, binary=binary, scope=scope)
    return statistic(p, delta0) > critical(p, alpha, binary=binary)


def _root(f: Callable[[float], float], lo: float, hi: float) -> float:
    """The root of the continuous ``f`` on [lo, hi], whose ends it takes with opposite signs, by Brent's method
    (scipy's brentq, to the last few bits): infinite values (a t quantile far in its tail) are read as 1e300."""
    from scipy.optimize import brentq

    def finite(x: float) -> float:
        return float(np.clip(f(x), -1e300, 1e300))

    return float(brentq(finite, lo, hi, xtol=1e-15, rtol=4 * np.finfo(float).eps))


def _crossing(f: Callable[[float], float], lo: float, hi: float) -> float:
    """Where the continuous, increasing ``f`` crosses 0 on [lo, hi]: ``lo`` when f(lo) >= 0, ``hi`` when
    f(hi) <= 0, else the root."""
    if f(lo) >= 0:
        return lo
    if f(hi) <= 0:
        return hi
    return _root(f, lo, hi)


def p_value(d: np.ndarray, delta0: float, *, binary: bool, scope: str) -> float:
    """The one-sided p of H0 "mean difference <= delta0" for one table d [S, N]: the alpha at which T meets the
    critical value (the normal's or t's tail when the seed weight is 0; else the root of c(alpha) = T, on log
    alpha where T > 0: c falls as alpha grows)."""
    from scipy import stats

    p = parts(d[None], delta0, binary=binary, scope=scope)
    t = float(statistic(p, delta0)[0])
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    if p.seeds < 2 or float(p.seed_weight[0]) == 0.0:
        return float(stats.norm.sf(t) if binary else stats.t.sf(t, max(p.images - 1, 1)))

    def below(alpha: float) -> float:  # increasing in alpha: >= 0 where H0 is rejected at alpha
        return t - float(critical(p, alpha, binary=binary)[0])

    if t > 0:  # alpha in (0, 1/2): on log alpha, from 1e-300 up: scipy's t quantile at the smallest doubles
        # (5e-324) comes back -inf, which would read as "rejected at every alpha" and give p = 5e-324 for any T > 0
        return math.exp(_crossing(lambda la: below(math.exp(la)), math.log(1e-300), math.log(0.5)))
    return _crossing(below, 0.5, 1.0 - 1e-12)


def bounds(d: np.ndarray, alpha: float, *, binary: bool, scope: str) -> tuple[float, float]:
    """The one-sided (1 - alpha) bounds of the mean difference by inverting the test: ``low`` the boundary of the
    null values delta0 below which "mean > delta0" is shown, ``high`` that above which "mean < delta0" is."""
    mean = float(d.mean())
    edge = 1 - 1e-9
    if not binary:  # neither the variance nor the critical value depends on delta0: the bounds in closed form
        p = parts(d[None], mean, binary=binary, scope=scope)
        half = float(critical(p, alpha, binary=binary)[0] * math.sqrt(p.image[0] + p.seed[0]))
        return max(-edge, mean - half), min(edge, mean + half)

    at = prepared(d[None], binary=binary, scope=scope)

    def shown(delta: float, sign: int) -> float:  # > 0 where "mean > delta0" (sign 1) or "< delta0" (-1) is shown
        p = at(delta)
        return float(sign * statistic(p, delta)[0] - critical(p, alpha, binary=binary)[0])

    middle = min(max(mean, -edge), edge)
    low = _crossing(lambda delta: -shown(delta, 1), -edge, middle)  # "above" holds below low
    high = _crossing(lambda delta: shown(delta, -1), middle, edge)  # "below" holds above high
    return low, high


def plan_se(n_images: int, seeds: int, image_var: float, resid_var: float, seed_var: float) -> float:
    """The standard error of the mean difference for a design of N images x S seeds from variance components of
    one image's difference: ``image_var`` (shared by the seeds), ``resid_var`` (image x seed), ``seed_var`` (of a
    seed's mean difference)."""
    return math.sqrt((image_var + resid_var / seeds) / n_images + seed_var / seeds)


NODES = 400  # equal-probability nodes of the seed mean square's distribution in step_power's integral


@functools.lru_cache(maxsize=256)
def _mean_square_nodes(seeds: int) -> np.ndarray:
    """chi2_{S-1} / (S-1) at the midpoints of NODES equal-probability bins: var(per-seed means) over its
    expectation, for normal per-seed means."""
    from scipy import stats

    return stats.chi2.ppf((np.arange(NODES) + 0.5) / NODES, seeds - 1) / (seeds - 1)


def _quantiles(alpha: float, seeds: int, images: int, binary: bool) -> tuple[float, float]:
    """(the image part's one-sided quantile, the seed part's t_{S-1} quantile) of the test's critical value."""
    image_q = _isf(alpha, 0 if binary else max(images - 1, 1))
    return image_q, _isf(alpha, seeds - 1) if seeds > 1 else image_q


def step_power(
    n_images: int,
    seeds: int,
    margin: float,
    alpha: float,
    image_var: float,
    resid_var: float,
    seed_var: float,
    scope: str,
    *,
    tested_var: float | None = None,
    binary: bool = True,
) -> float:
    """The probability that one step's test, as :func:`rejects` runs it, shows "mean difference > -margin" when the
    true difference is 0, for N images x S seeds whose per-image differences have the variance components
    ``image_var`` (shared by an image's seeds), ``resid_var`` (image x seed) and ``seed_var`` (of a seed's mean
    difference, model scope). ``tested_var``: the variance of an image's seed-averaged difference that the test
    divides by (0/1 outcomes: the restricted one at -margin, which is not the true one); default the true one,
    image_var + resid_var / S.

    Model scope: the test's seed part b and its critical value c are random through V = var(per-seed means), which
    for normal per-seed means is (seed_var + resid_var / N) chi2_{S-1} / (S-1), independent of the mean difference
    D ~ N(0, image_var / N + seed_var / S + resid_var / (N S)); the power E_V[P(D > -margin + c(V) sqrt(a + b(V)))]
    is integrated over NODES quantiles of V (the image part a = tested_var / N and the residual mean square, whose
    degrees of freedom grow with N, taken as known). Plugging the expected seed share into c instead (the plan
    before this) missed by up to 0.4: 0.00 planned where the test has 0.09 at 656 images x 2 seeds. Checkpoint
    scope: the seeds are fixed, D ~ N(0, (image_var + resid_var / S) / N), c the image quantile. Model scope with
    one seed: 0 (no test). The seeded simulation in tests/test_power_plan.py runs the test itself against it."""
    from scipy.special import ndtr

    n, s = int(n_images), int(seeds)
    if scope == "model" and s < 2:
        return 0.0
    true = image_var + resid_var / s  # an image's seed-averaged difference
    tested = true if tested_var is None else float(tested_var)
    a = tested / n
    image_q, seed_q = _quantiles(float(alpha), s, n, bool(binary))
    if scope != "model":
        spread = math.sqrt(true / n)
        if spread == 0:
            return float(margin > image_q * math.sqrt(a))
        return float(ndtr((margin - image_q * math.sqrt(a)) / spread))
    per_seed = seed_var + resid_var / n  # the variance of a seed's mean difference over images
    weight = per_seed * _mean_square_nodes(s) / s  # the test's var(per-seed means) / S at each node
    b = np.clip(weight - resid_var / (n * s), 0.0, None) if binary else weight
    share = np.divide(weight, a + weight, out=np.zeros_like(weight), where=a + weight > 0)
    c = np.sqrt((1 - share) * image_q**2 + share * seed_q**2)
    spread = math.sqrt(image_var / n + seed_var / s + resid_var / (n * s))
    edge = -margin + c * np.sqrt(a + b)  # D above it: shown
    if spread == 0:
        return float(np.mean(edge < 0))
    return float(np.mean(ndtr(-edge / spread)))


def smallest_margin(power_at: Callable[[float], float], power: float, binary: bool) -> float:
    """The smallest margin m at which ``power_at(m)`` (increasing in m) reaches ``power`` (:func:`_crossing`); inf
    when none up to 1 (0/1 outcomes, whose differences lie in [-1, 1]) or up to 1e6 (other scores)
    does."""
    top = 1.0 - 1e-6 if binary else 1.0  # a margin of 1 leaves the restricted fit no room
    while power_at(top) < power:
        if binary or top >= 1e6:
            return math.inf
        top *= 10.0
    return _crossing(lambda m: power_at(m) - power, 0.0, top)

"""Does a resolution effect differ between groups of test images? The group x resolution interaction on per-image
differences d [S, N] (seed s, image i: its score at one resolution minus its score at the reference, the same seed
at both), and the question whether their mean is the same for every value of the group (ELPV: mono and poly cells).

Two separate verdicts (one value shown non-inferior, the other not) are no evidence of a difference: a value with
fewer images or more discordant images simply has less power. This test asks the difference itself, two-sided, for
each pair of values (g, h), Bonferroni over the pairs (p = the smallest pair's p x the number of pairs). The
difference of the two values' mean differences D_g - D_h has two variance parts, as the model-scope step test
(stats.scope) has:

- the images' part, each value's own: var(its seed-averaged differences) / n_g (sizes and spreads may differ
  between values), less what its seeds do not share (the image x seed residual mean square / (n_g S), counted in
  the seed part). A value whose differences do not vary at all (for 0/1 outcomes: no image changes outcome, 59% of
  the time for 26 images at discordance 0.02) takes the variance its images would have under equal means:
  stats.scope.restricted_variance at the two values' pooled mean (a score test's variance). Treated as exact, as
  the Wald F with HC3 standard errors did, its mean made the test reject 0.11-0.51 of the time under an equal
  effect in every value at discordance 0.02 (tests/test_stats_interaction.py);
- the seeds' part, for seeds that differ: var over seeds of the pair's per-seed differences (m_sg - m_sh) / S, with
  S - 1 degrees of freedom. It holds the seed x value variation (a training seed that moves one value's images and
  not the other's), which a test over images alone does not see: that one (Alexander-Govern on the seed-averaged
  differences) rejected 0.10 of the time at seed sd 0.02 of a seed's value effect, 0.26 at 0.04 (issue 58), and a
  Welch test on the seed-averaged differences 0.50-0.53 at 0.04 in the simulation below. It is 0 for a
  deterministic fit (every seed the same predictions): the images are then the only random thing.

T = (D_g - D_h)^2 / (images' part + seeds' part) is compared with (1 - w) q_image + w q_seed, w the seeds' share of
the variance, q_image the squared normal quantile at alpha / 2 (Student's t with Welch's degrees of freedom for
scores other than 0/1), q_seed the squared t quantile with S - 1 degrees of freedom: the normal's when the images
dominate, t's when the seeds do (stats.scope's mix). With 2 seeds that differ, t with 1 degree of freedom makes the
test very conservative: the seeds cannot tell a value x resolution effect from seed x value variation.

Measured in tests/test_stats_interaction.py (seeded simulations of 0/1 outcomes): under an equal effect in every
value, 0.041-0.057 with 2 seeds and values of unequal size and spread; 0.011-0.018 for a deterministic fit with
values of 26, 300 and 330 images at discordance 0.02-0.05, effect -0.01 to -0.02 (Bonferroni over 3 pairs);
0.039-0.051 with 2, 3 and 5 seeds at seed sd 0.02 and 0.04 of a seed's value effect. Its power where one value of
400 images (120 and 280) loses 0.1 and the other nothing: 0.96 with 5 seeds, 0.50 with 3, 0.19 with 2, 0.58 for a
deterministic fit (the Alexander-Govern test on the seed-averaged differences had 0.89 with 2 seeds, at the price
of ignoring the seed x value variation); at ELPV's 26, 300 and 330 images, where the 300 lose 0.06 and the 330
nothing (discordance 0.1), 0.86 with 5 seeds and no seed x value variation, 0.52 at seed sd 0.02, 0.28 / 0.16
with 3 seeds, 0.12 / 0.07 with 2, 0.54 for a deterministic fit.

Written by hand: scipy's tests of equal means (Alexander-Govern, Welch's ANOVA) and statsmodels' Wald test see one
replicate per image, none the seeds x images layout or a variance under equal means for a value without spread.
Vectorised over a leading batch axis so the simulation test runs this code."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from resomap.errors import ConfigError
from resomap.stats.checks import to_dict
from resomap.stats.scope import lattice_counts, restricted_variance, two_way


@dataclass(frozen=True)
class Interaction:
    """``p``: two-sided, any difference between the values' mean differences (Bonferroni over the pairs);
    ``values``: the codes compared (those with at least 2 images), ascending; ``means`` / ``sizes``: each one's mean
    difference and image count; ``method``: the test that gave p, in words."""

    p: float
    values: list[int]
    means: list[float]
    sizes: list[int]
    method: str

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)


@dataclass(frozen=True)
class PairParts:
    """One pair's statistic [B] and what its critical value needs: the seeds' share of the variance and the
    images' degrees of freedom (inf for 0/1 outcomes: the normal)."""

    statistic: np.ndarray
    seed_share: np.ndarray
    image_df: np.ndarray
    seeds: int


def interaction_test(differences: Any, codes: Any, *, binary: bool | None = None) -> Interaction:
    """The interaction test (module doc) of per-image ``differences`` [S, N] (or [N]: one replicate) between the
    values of ``codes`` [N] (an integer per image; the values with at least 2 images whose differences are finite
    are compared; two such values are needed). ``binary``: 0/1 outcomes (None: every difference in {-1, 0, 1})."""
    d = np.asarray(differences, dtype=np.float64)
    d = d[None] if d.ndim == 1 else d
    c = np.asarray(codes).ravel()
    if d.ndim != 2 or d.shape[1] != c.size:
        raise ConfigError(f"interaction test: {d.shape[-1]} differences for {c.size} group codes")
    keep = np.isfinite(d).all(0)
    values = [v for v in np.unique(c[keep]) if np.count_nonzero(keep & (c == v)) >= 2]
    if len(values) < 2:
        raise ConfigError("interaction test: needs two group values with at least 2 images each")
    chosen = keep & np.isin(c, values)
    d, c = d[:, chosen], c[chosen]
    if binary is None:
        binary = bool(np.isin(d, (-1.0, 0.0, 1.0)).all())
    pairs = [(g, h) for k, g in enumerate(values) for h in values[k + 1 :]]
    smallest = min(pair_p(pair_parts(d[None], c, g, h, binary=binary)) for g, h in pairs)
    means = [float(d[:, c == v].mean()) for v in values]
    sizes = [int(np.count_nonzero(c == v)) for v in values]
    p, method = min(1.0, smallest * len(pairs)), _method(d, c, values, binary)
    return Interaction(p=p, values=[int(v) for v in values], means=means, sizes=sizes, method=method)


def _method(d: np.ndarray, codes: np.ndarray, values: list, binary: bool) -> str:
    """The test in words: which parts its variance has, what a value without spread took, how many pairs."""
    seeds, pairs = d.shape[0], len(values) * (len(values) - 1) // 2
    differ = seeds > 1 and bool(np.ptp(d, axis=0).any())
    parts = (
        f"test images and {seeds} training seeds as replicates (critical value between the normal's and t with "
        f"{seeds - 1} degree{'' if seeds == 2 else 's'} of freedom by the seeds' share)"
        if differ
        else "the test images as replicates"
    )
    flat = [v for v in values if np.ptp(d[:, codes == v].mean(0)) == 0]
    if flat:
        one = len(flat) == 1
        took = ("its variance" if one else "their variances") + " under equal means"
        if not binary:
            took = ("its mean" if one else "their means") + " taken as exact"
        parts += f"; {len(flat)} value{'' if one else 's'} without spread: {took}"
    over = f", Bonferroni over {pairs} pairs" if pairs > 1 else ""
    return f"test of equal mean differences for each pair of values, {parts}{over}"


def pair_parts(d: np.ndarray, codes: np.ndarray, first: Any, second: Any, *, binary: bool) -> PairParts:
    """The statistic of the pair of values (first, second) for d [B, S, N] (module doc)."""
    d = np.asarray(d, dtype=float)
    batch, seeds, _ = d.shape
    pooled = d.mean(1)[:, (codes == first) | (codes == second)].mean(1)  # the two values' mean under H0
    means, images, dfs, per_seed = [], [], [], []
    for value in (first, second):
        x = d[:, :, codes == value]
        n = x.shape[2]
        dbar = x.mean(1)
        image = dbar.var(1, ddof=1) / n
        if binary:  # a value without spread: its variance with the pooled mean (stats.scope's restricted variance)
            counts, lattice = lattice_counts(dbar, seeds)
            flat = np.ptp(dbar, axis=1) == 0
            image = np.where(flat, restricted_variance(counts, lattice, pooled) / n, image)
        if seeds > 1:  # what the seeds do not share is in the seeds' part
            image = np.clip(image - two_way(x)[2] / (n * seeds), 0.0, None)
        means.append(dbar.mean(1))
        images.append(image)
        dfs.append(n - 1)
        per_seed.append(x.mean(2))
    diff = means[0] - means[1]
    image = images[0] + images[1]
    seed = (per_seed[0] - per_seed[1]).var(1, ddof=1) / seeds if seeds > 1 else np.zeros(batch)
    total = image + seed
    exact = np.where(diff != 0, np.inf, 0.0)  # no variance: the means compared as they are
    statistic = np.divide(diff**2, total, out=exact, where=total > 0)
    share = np.divide(seed, total, out=np.zeros(batch), where=total > 0)
    if binary:
        image_df = np.full(batch, np.inf)
    else:  # Welch-Satterthwaite over the two values' image parts
        spread = images[0] ** 2 / dfs[0] + images[1] ** 2 / dfs[1]
        image_df = np.divide(image**2, spread, out=np.full(batch, float(min(dfs))), where=spread > 0)
    return PairParts(statistic, share, image_df, seeds)


def critical(parts: PairParts, alpha: float) -> np.ndarray:
    """The critical value [B] of the pair's statistic at two-sided ``alpha``: the images' and the seeds' squared
    quantiles mixed by the seeds' share (module doc)."""
    from scipy import stats

    image = np.where(np.isinf(parts.image_df), stats.chi2.isf(alpha, 1), stats.f.isf(alpha, 1, parts.image_df))
    if parts.seeds < 2:
        return image
    with np.errstate(over="ignore"):
        return (1 - parts.seed_share) * image + parts.seed_share * stats.f.isf(alpha, 1, parts.seeds - 1)


def rejects(d: Any, codes: Any, alpha: float, *, binary: bool) -> np.ndarray:
    """[B] bool: equal mean differences rejected at two-sided ``alpha`` for d [B, S, N] between the values of
    ``codes`` [N] (each with at least 2 images): any pair at alpha / the number of pairs."""
    codes = np.asarray(codes)
    values = list(np.unique(codes))
    pairs = [(g, h) for k, g in enumerate(values) for h in values[k + 1 :]]
    out = np.zeros(np.shape(d)[0], dtype=bool)
    for g, h in pairs:
        parts = pair_parts(d, codes, g, h, binary=binary)
        out |= parts.statistic > critical(parts, alpha / len(pairs))
    return out


def pair_p(parts: PairParts) -> float:
    """The two-sided p of one pair (batch of one): the alpha at which the statistic meets the critical value (the
    critical value falls as alpha grows; scipy's brentq on log alpha)."""
    from scipy import stats
    from scipy.optimize import brentq

    t, share, df = float(parts.statistic[0]), float(parts.seed_share[0]), float(parts.image_df[0])
    if math.isinf(t) or t <= 0:
        return 0.0 if t > 0 else 1.0
    if parts.seeds < 2 or share == 0.0:
        return float(stats.chi2.sf(t, 1) if math.isinf(df) else stats.f.sf(t, 1, df))

    def above(log_alpha: float) -> float:  # increasing in alpha: >= 0 where rejected
        return float(np.clip(t - critical(parts, math.exp(log_alpha))[0], -1e300, 1e300))

    low, high = math.log(1e-300), math.log(1.0 - 1e-12)
    if above(low) >= 0:
        return 0.0
    if above(high) <= 0:
        return 1.0
    return math.exp(brentq(above, low, high, xtol=1e-12))

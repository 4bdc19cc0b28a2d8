"""Permutation tests: the sign-flip test of paired per-image differences (``scipy.stats.permutation_test``) and
the relabelling test of resolution labels within each seed (explanation agreement against its cross-seed floor)."""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from resomap.stats.bootstrap import BATCH_ELEMENTS
from resomap.stats.checks import finite

MAX_EXACT = 20000  # relabellings enumerated exactly up to this count, else sampled (seeded)
RELABEL_SEED = 12345  # the sampled relabellings' random seed (repeatable p-values)


def sign_flip_test(differences: np.ndarray, *, resamples: int = 2000, seed: int = 0) -> float | None:
    """Two-sided p-value of mean(differences) = 0 under "each difference is as likely with either sign" (a paired
    permutation test, ``permutation_type="samples"``; with 0/1 outcomes of one seed a randomized McNemar test).

    Flipping the sign of a zero changes nothing, so the test runs on the nonzero differences only (same p-value
    distribution, often 10x less work; exact enumeration by scipy when 2**K <= resamples). All zero: p = 1.
    """
    from scipy import stats

    d = np.asarray(differences, dtype=np.float64).reshape(-1)
    nonzero = d[d != 0]
    if nonzero.size == 0:
        return 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        perm = stats.permutation_test(
            (nonzero,),
            np.mean,
            permutation_type="samples",
            vectorized=True,
            n_resamples=resamples,
            batch=max(1, BATCH_ELEMENTS // nonzero.size),
            alternative="two-sided",
            axis=-1,
            rng=np.random.default_rng(seed),
        )
    return finite(min(1.0, perm.pvalue))


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
    critical = detectable = float("nan")
    if min_p <= alpha:
        # p(x) = share of relabellings >= x; the smallest null value v with p(v) <= alpha is the critical value
        share_at_or_above = 1.0 - np.searchsorted(null, null - 1e-12, side="left") / null.size
        reaching = null[share_at_or_above <= alpha + 1e-12]
        if reaching.size:  # none when ties fill the top of the distribution (constant agreements): left NaN
            critical = float(reaching.min())
            detectable = max(0.0, critical - float(np.quantile(null, 1 - power)))
    return RelabelTest(float(observed), p, count, min_p, exact, critical, detectable, alpha, power)

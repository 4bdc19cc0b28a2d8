"""Alpha spending over the planned looks of an adaptive sweep (group-sequential error control).

An adaptive sweep looks at its decisions after every round and stops adding seeds to what is decided; testing every
look at the full alpha would call "non-inferior" more often than alpha under the null (every look is another
chance). A spending function ``a(t)`` (``a(0) = 0``, ``a(1) = alpha``) says how much of the one-sided alpha is spent
by information fraction ``t``; the sweep plans ``K`` looks at ``t_k = k / K`` and tests look ``k`` at the increment
``a(t_k) - a(t_{k-1})``. The increments sum to alpha, so by the union bound the chance of any false
"non-inferior" over all looks is at most alpha whatever the correlation between looks (conservative: the exact
group-sequential boundaries of Lan & DeMets 1983 would spend the same alpha with slightly more power). Rules:

- ``obrien_fleming``: ``a(t) = 2 - 2 Phi(z_{1 - alpha/2} / sqrt(t))`` (Lan-DeMets O'Brien-Fleming type): almost
  nothing early, most of alpha at the last look;
- ``pocock``: ``a(t) = alpha * ln(1 + (e - 1) t)`` (Lan-DeMets Pocock type): about even, a little more early;
- ``bonferroni``: ``a(t) = alpha * t``: alpha / K at every look.
"""

from __future__ import annotations

import math

from resomap.errors import ConfigError

RULES = ("obrien_fleming", "pocock", "bonferroni")


def spent(rule: str, alpha: float, t: float) -> float:
    """The one-sided alpha spent by information fraction ``t`` in [0, 1] under ``rule``."""
    from scipy import stats

    if not 0 < alpha < 1:
        raise ConfigError(f"alpha must be in (0, 1), got {alpha!r}")
    t = min(max(float(t), 0.0), 1.0)
    if t == 0.0:
        return 0.0
    if rule == "obrien_fleming":
        return float(2 - 2 * stats.norm.cdf(stats.norm.ppf(1 - alpha / 2) / math.sqrt(t)))
    if rule == "pocock":
        return float(alpha * math.log(1 + (math.e - 1) * t))
    if rule == "bonferroni":
        return float(alpha * t)
    raise ConfigError(f"unknown alpha-spending rule {rule!r}; known: {', '.join(RULES)}")


def look_alphas(rule: str, alpha: float, looks: int) -> list[float]:
    """The nominal one-sided alpha of each of ``looks`` equally spaced looks: the increments of the spending
    function, summing to ``alpha``."""
    if looks < 1:
        raise ConfigError(f"an adaptive sweep plans at least 1 look, got {looks!r}")
    cumulative = [spent(rule, alpha, k / looks) for k in range(looks + 1)]
    return [cumulative[k] - cumulative[k - 1] for k in range(1, looks + 1)]

"""What a design of paired per-image differences can show at a stated margin (the plans of stats.decide): the
variance parts of the differences [seeds, images] (image, image x seed, seed), the smallest margin the design shows
with the planned power when the true difference is 0 (``detectable_margin``), the seeds and test images it would
need to show a margin (``needs``, ``design_needs``), the same before training from assumptions (``plan_power``),
and what the explanation relabelling test can reach with a number of seeds (``relabel_min_p``,
``relabel_seeds_needed``)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from resomap.errors import ConfigError
from resomap.stats import scope as scopes
from resomap.stats.checks import check_alpha, check_level, check_margin, check_power, check_scope, check_seed_sd

MAX_SEEDS = 64


def _components(d: np.ndarray) -> tuple[float, float, float]:
    """Variance components of one image's difference from d [S, N] (two-way ANOVA moments, each at least 0):
    (shared by the seeds of an image, image x seed residual, of a seed's mean difference)."""
    seeds, n = d.shape
    if seeds < 2:
        return float(d[0].var(ddof=1)) if n > 1 else 0.0, 0.0, 0.0
    dbar, per_seed, ms_resid = (x[0] for x in scopes.two_way(d[None]))
    ms = float(ms_resid)
    image = max(0.0, float(dbar.var(ddof=1)) - ms / seeds) if n > 1 else 0.0
    seed = max(0.0, float(per_seed.var(ddof=1)) - ms / n)
    return image, ms, seed


def needs(
    n: int, seeds: int, margin: float, alpha: float, power: float, parts: tuple[float, float, float], scope: str
) -> dict[str, Any]:
    """What shows ``margin`` with ``power`` when the true difference is 0: ``seeds_needed`` (the fewest seeds at
    these images; None: none up to 64), ``images_needed`` (the fewest images at these seeds; None: no number) and,
    where neither alone does, ``joint_needed``: (seeds, images), of the designs at these seeds or 3, 5, 10, 20,
    32, 64 seeds that do, the one with the fewest test predictions (seeds x images); None when none does."""
    from scipy import stats

    image, resid, seed = parts
    at = functools.partial(
        scopes.plan_power_at,
        margin=margin,
        alpha=alpha,
        power_q=float(stats.norm.ppf(power)),
        image_var=image,
        resid_var=resid,
        seed_var=seed,
        scope=scope,
    )
    out: dict[str, Any] = {
        "seeds_needed": next((k for k in range(1, MAX_SEEDS + 1) if at(n, k)[0] >= power), None),
        "images_needed": _images_needed(at, seeds, power),
        "joint_needed": None,
    }
    if out["seeds_needed"] is None and out["images_needed"] is None:
        designs = []
        for k in sorted({max(seeds, 2 if scope == "model" else 1), 3, 5, 10, 20, 32, MAX_SEEDS}):
            found = _images_needed(at, k, power) if k >= seeds else None
            if found is not None:
                designs.append((k * found, k, found))
        out["joint_needed"] = min(designs)[1:] if designs else None
    return out


def _images_needed(at: Callable[[int, int], tuple[float, float]], seeds: int, power: float) -> int | None:
    """The fewest test images with which ``at(images, seeds)`` reaches ``power``; None when no number does."""
    if at(10**9, seeds)[0] < power:
        return None
    lo, hi = 2, 2
    while at(hi, seeds)[0] < power:
        hi *= 2
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if at(mid, seeds)[0] < power else (lo, mid)
    return lo


def plan_parts(
    d: np.ndarray, scope: str, seed_sd: float, margin: float | None = None, binary: bool = False
) -> tuple[float, float, float]:
    """The variance parts the plan of a step uses: observed (:func:`_components`); at model scope with one seed
    the seed part is planned from the assumed seed sd (no seed variance to see). For 0/1 outcomes with a
    ``margin`` and no image that differs (an observed variance of 0, which would plan every margin as detectable
    while the test itself cannot show it), an image's part is the score test's restricted variance at -margin (the
    variance its statistic is divided by)."""
    parts = _components(d)
    if scope == "model" and d.shape[0] < 2:
        parts = (parts[0], 0.0, 2 * seed_sd**2)
    if not binary or margin is None:
        return parts
    seeds = d.shape[0]
    image, resid, seed = parts
    # only where the observed variance says nothing (no image differs): a floor everywhere made the plan
    # conservative on real data (it asked 8 seeds where 6 decide; the score test's power has the restricted
    # variance in its critical value only, the observed one in its spread). Computed only then: the restricted
    # fit is most of a decision's time (detectable_margin asks for it at each of its 40 bisection steps)
    if image + resid / seeds > 0:
        return image, resid, seed
    counts, values = scopes.lattice_counts(d.mean(0)[None], seeds)
    floor = float(scopes.restricted_variance(counts, values, -margin)[0])
    return floor - resid / seeds, resid, seed


def detectable_margin(d: np.ndarray, alpha: float, power_q: float, scope: str, seed_sd: float, binary: bool) -> float:
    """The smallest margin the design of ``d`` shows with the power whose normal quantile is ``power_q`` when the
    true difference is 0 (inf when none up to 1 does). For 0/1 outcomes the plan's variance depends on the margin
    (:func:`plan_parts`), so the margin m with m = (c + q) se(m) is found by bisection."""
    seeds, n = d.shape

    def needed(m: float | None) -> float:
        parts = plan_parts(d, scope, seed_sd, m, binary)
        return scopes.plan_power_at(n, seeds, m or 0.0, alpha, power_q, *parts, scope=scope)[1]

    if not binary:
        return needed(None)
    top = 1.0 - 1e-6  # a margin of 1 leaves the restricted fit no room (every image at the lattice end)
    if needed(top) > top:
        return math.inf
    lo, hi = 0.0, top  # needed(hi) <= hi; the variance floor grows with m, so the crossing is unique in practice
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if needed(mid) <= mid else (mid, hi)
    return hi


def design_needs(
    d: Any, *, margin: float, alpha: float, power: float = 0.8, scope: str = "model", seed_sd: float = 0.02
) -> dict[str, Any]:
    """What the design of the differences ``d`` [seeds, images] (a resolution minus the reference) would need to
    show ``margin`` with ``power`` at one-sided ``alpha``: ``seeds_needed``, ``images_needed`` and
    ``joint_needed``, as a verdict tested at that alpha states them (the same variance parts). An adaptive sweep
    asks it at the alpha of the look where new seeds would be tested."""
    d = np.asarray(d, dtype=float)
    if d.ndim != 2 or d.shape[1] < 1:
        raise ConfigError(f"d must be [seeds, images] differences, got shape {d.shape}")
    margin, power, scope = check_margin(margin), check_power(power), check_scope(scope)
    alpha = check_alpha(alpha)
    seeds, n = d.shape
    binary = bool(np.isin(d, (-1.0, 0.0, 1.0)).all())  # differences of 0/1 outcomes, as the summary's tests read them
    parts = plan_parts(d, scope, check_seed_sd(seed_sd), margin, binary)
    return needs(n, seeds, margin, alpha, power, parts, scope)


def plan_power(
    n_images: int,
    n_seeds: int,
    *,
    margin: float = 0.02,
    level: float = 0.95,
    power: float = 0.8,
    discordance: float = 0.2,
    seed_correlation: float = 0.5,
    seed_sd: float = 0.02,
    scope: str = "model",
) -> dict[str, Any]:
    """Before training: the detectable margin and the power at ``margin`` of one step (a resolution against the
    reference, no true difference) for a 0/1 score, assuming a fraction ``discordance`` of images change outcome
    between the two resolutions (per-image difference variance ``discordance`` for one seed), a correlation
    ``seed_correlation`` between the seeds' differences on one image (so ``discordance * seed_correlation`` of it
    is shared by the seeds and the rest is seed x image), and at model scope a standard deviation ``seed_sd`` of a
    model's accuracy across training seeds at each resolution (a seed's mean difference: 2 seed_sd^2). Also the
    seeds and test images the design would need for the margin (``seeds_needed``, ``images_needed``; None: none
    up to 64 seeds / no number of images) and ``steps``: the chance to pass each step of a fixed sequence when no
    resolution truly differs (power^k: the steps share the reference, so this is a lower bound)."""
    from scipy import stats

    if n_images < 2:
        raise ConfigError(f"a power plan needs at least 2 test images, got {n_images}")
    margin, level, power = check_margin(margin), check_level(level), check_power(power)
    scope, seed_sd = check_scope(scope), check_seed_sd(seed_sd)
    if not 0 < discordance <= 1 or not 0 <= seed_correlation <= 1:
        raise ConfigError(
            f"a power plan needs a discordance in (0, 1] and a seed correlation in [0, 1], got {discordance!r} "
            f"and {seed_correlation!r}"
        )
    alpha = 1 - level
    parts = (discordance * seed_correlation, discordance * (1 - seed_correlation), 2 * seed_sd**2)
    seed_var = parts[2] if scope == "model" else 0.0
    q = float(stats.norm.ppf(power))
    reached, detectable = scopes.plan_power_at(n_images, n_seeds, margin, alpha, q, *parts, scope=scope)
    se = scopes.plan_se(n_images, n_seeds, parts[0], parts[1], seed_var)
    return {
        "detectable": detectable,
        "power_at_margin": reached,
        "se": se,
        **needs(n_images, n_seeds, margin, alpha, power, parts, scope),
        "steps": [reached**k for k in range(1, 9)],
    }


def relabel_min_p(n_seeds: int, n_resolutions: int) -> float:
    """The smallest p the explanation relabelling test can give: 1 / (R!)^(S-1) (stats.permutation.relabel_test)."""
    if n_seeds < 2 or n_resolutions < 2:
        return 1.0
    return 1.0 / math.factorial(n_resolutions) ** (n_seeds - 1)


def relabel_seeds_needed(n_resolutions: int, alpha: float = 0.05, most: int = 64) -> int | None:
    """The fewest seeds with which the relabelling test can reach p <= alpha at ``n_resolutions`` resolutions (the
    test is exact, so below that count no map, however different, is a decision); None under 2 resolutions."""
    if n_resolutions < 2:
        return None
    return next((s for s in range(2, most + 1) if relabel_min_p(s, n_resolutions) <= alpha), None)

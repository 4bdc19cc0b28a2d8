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
# margins at which detectable_margin evaluates the test's restricted variance (smooth in the margin; read
# linearly between the points: 0.001 apart up to 0.3, where detectable margins lie, coarser to 1)
MARGIN_GRID = np.concatenate([np.linspace(0.0, 0.3, 301), np.linspace(0.3, 1 - 1e-6, 71)[1:]])


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
    n: int,
    seeds: int,
    margin: float,
    alpha: float,
    power: float,
    parts: tuple[float, float, float],
    scope: str,
    tested: Callable[[int], float] | None = None,
    binary: bool = True,
) -> dict[str, Any]:
    """What shows ``margin`` with ``power`` when the true difference is 0, by the power of the test that runs
    (:func:`resomap.stats.scope.step_power`; ``tested(k)``: the per-image variance it divides by at k seeds):
    ``seeds_needed`` (the fewest seeds at these images; None: none up to 64), ``images_needed`` (the fewest images
    at these seeds; None: no number) and, where neither alone does, ``joint_needed``: (seeds, images), of the
    designs at these seeds or 3, 5, 10, 20, 32, 64 seeds that do, the one with the fewest test predictions
    (seeds x images); None when none does."""
    image, resid, seed = parts

    @functools.cache
    def at(images: int, k: int) -> float:
        return scopes.step_power(
            images, k, margin, alpha, image, resid, seed, scope,
            tested_var=tested(k) if tested is not None else None, binary=binary,
        )  # fmt: skip

    out: dict[str, Any] = {
        "seeds_needed": next((k for k in range(1, MAX_SEEDS + 1) if at(n, k) >= power), None),
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


def _images_needed(at: Callable[[int, int], float], seeds: int, power: float) -> int | None:
    """The fewest test images with which the power ``at(images, seeds)`` reaches ``power``; None when no number
    does."""
    if at(10**9, seeds) < power:
        return None
    lo, hi = 2, 2
    while at(hi, seeds) < power:
        hi *= 2
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if at(mid, seeds) < power else (lo, mid)
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
    # only where the observed variance says nothing (no image differs): the test's spread is the observed variance,
    # its critical value the restricted one (observed_tested)
    if image + resid / seeds > 0:
        return image, resid, seed
    return _restricted(d, margin) - resid / seeds, resid, seed


def _restricted(d: np.ndarray, margin: float) -> float:
    """The score test's restricted variance at -margin of an image's seed-averaged difference, from d's lattice."""
    counts, values = scopes.lattice_counts(d.mean(0)[None], d.shape[0])
    return float(scopes.restricted_variance(counts, values, -margin)[0])


def observed_tested(d: np.ndarray, margin: float, parts: tuple[float, float, float]) -> Callable[[int], float]:
    """For 0/1 outcomes: the per-image variance the test divides by at ``margin`` (the restricted one of d's
    lattice) at k seeds: at d's own seed count the test's, at another count scaled as the observed shared and
    image x seed parts scale (image + resid / k)."""
    seeds = d.shape[0]
    found = _restricted(d, margin)
    image, resid, _ = parts
    own = image + resid / seeds
    return lambda k: found if own <= 0 or k == seeds else found * (image + resid / k) / own


def detectable_margin(d: np.ndarray, alpha: float, power: float, scope: str, seed_sd: float, binary: bool) -> float:
    """The smallest margin the design of ``d`` shows with ``power`` when the true difference is 0, by the power of
    the test that runs (inf when none up to 1 does, for 0/1 outcomes). For 0/1 outcomes the variance the test
    divides by depends on the margin (the restricted one at -margin), so it is found again at each margin tried."""
    seeds, n = d.shape
    parts = plan_parts(d, scope, seed_sd, None, binary)
    floored = binary and parts[0] + parts[1] / seeds <= 0  # plan_parts' floor depends on the margin
    if binary and not floored:  # the restricted variance on a grid of margins in one call, read between its points
        counts, values = scopes.lattice_counts(d.mean(0)[None], seeds)
        on_grid = scopes.restricted_variance(np.repeat(counts, MARGIN_GRID.size, 0), values, -MARGIN_GRID)

    def power_at(m: float) -> float:
        if floored:
            found = plan_parts(d, scope, seed_sd, m, binary)
            tested = observed_tested(d, m, found)(seeds)
        else:
            found, tested = parts, float(np.interp(m, MARGIN_GRID, on_grid)) if binary else None
        return scopes.step_power(n, seeds, m, alpha, *found, scope, tested_var=tested, binary=binary)

    return scopes.smallest_margin(power_at, power, binary)


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
    tested = observed_tested(d, margin, parts) if binary else None
    return needs(n, seeds, margin, alpha, power, parts, scope, tested, binary)


def lattice_probs(discordance: float, seed_correlation: float, seeds: int) -> np.ndarray:
    """The planned distribution of an image's seed-averaged difference on the lattice k/S (k = -S..S): with
    probability ``seed_correlation`` the image's outcome changes (or not) alike for every seed, else independently
    for each; a change either way with probability ``discordance`` / 2 (no true difference). Its variance parts are
    the plan's: discordance x seed_correlation shared, the rest image x seed."""
    one = np.array([discordance / 2, 1 - discordance, discordance / 2])
    summed = np.array([1.0])
    for _ in range(seeds):
        summed = np.convolve(summed, one)
    probs = (1 - seed_correlation) * summed
    probs[[0, seeds, 2 * seeds]] += seed_correlation * one
    return probs


@functools.lru_cache(maxsize=4096)
def assumed_tested(discordance: float, seed_correlation: float, seeds: int, margin: float) -> float:
    """The variance the test divides by (the restricted one at -margin) on the planned lattice (lattice_probs)."""
    values = np.arange(-seeds, seeds + 1) / seeds
    probs = lattice_probs(discordance, seed_correlation, seeds)
    return float(scopes.restricted_variance(probs[None], values, -margin)[0])


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
    """Before training: the power at ``margin`` of one step (a resolution against the reference, no true
    difference) for a 0/1 score, as the test that runs has it (stats.scope.step_power), and the detectable margin,
    assuming a fraction ``discordance`` of images change outcome between the two resolutions (per-image difference
    variance ``discordance`` for one seed), a correlation ``seed_correlation`` between the seeds' differences on one
    image (so ``discordance * seed_correlation`` of it is shared by the seeds and the rest is seed x image: the
    lattice of :func:`lattice_probs`), and at model scope a standard deviation ``seed_sd`` of a model's accuracy
    across training seeds at each resolution (a seed's mean difference: 2 seed_sd^2). Also the seeds and test
    images the design would need for the margin (``seeds_needed``, ``images_needed``; None: none up to 64 seeds /
    no number of images) and ``steps``: the chance to pass each step of a fixed sequence when no resolution truly
    differs (power^k: the steps share the reference, so this is a lower bound)."""
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

    def power_at(m: float) -> float:
        tested = assumed_tested(discordance, seed_correlation, n_seeds, m)
        return scopes.step_power(n_images, n_seeds, m, alpha, *parts, scope, tested_var=tested)

    def tested(k: int) -> float:  # at k seeds, for `needs`
        return assumed_tested(discordance, seed_correlation, k, margin)

    reached = power_at(margin)
    return {
        "detectable": scopes.smallest_margin(power_at, power, True),
        "power_at_margin": reached,
        "se": scopes.plan_se(n_images, n_seeds, parts[0], parts[1], seed_var),
        **needs(n_images, n_seeds, margin, alpha, power, parts, scope, tested),
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

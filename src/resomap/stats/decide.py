"""Decisions at a stated margin: is a smaller resolution non-inferior to a reference resolution, and how small a
difference could the design have shown?

Non-inferiority of resolution r to the reference (fixed before testing: the largest resolution by default, never the
best on the test set): H0: mean(r) - mean(ref) <= -margin against H1: > -margin, on the same test images, at one of
two scopes (stats.scope, which holds the tests):

- ``model`` (the default): about the model at that resolution, whatever the training seed: the seed is the unit of
  replication beside the test image, and the test counts both sources of variation. One seed cannot say how much
  another seed would differ: with one seed (of a model whose seeds are not known to agree) the step is undecided
  and says how many seeds the power plan needs.
- ``checkpoint``: "for these trained checkpoints": the test images are the only random thing (each image's
  difference averaged over the seeds first; a score test for 0/1 outcomes, the t-test for other scores).

Resolutions are tested in a fixed sequence from the reference down, each at the full alpha, stopping at the first
that is not shown non-inferior: the fixed-sequence procedure keeps the family-wise error at alpha without Holm
(Maurer, Hothorn & Lehmacher 1995). Each resolution ends as one of

- ``non-inferior``: shown no more than ``margin`` below the reference (one-sided p < alpha);
- ``inferior``: shown more than ``margin`` below it (the one-sided upper bound is below -margin);
- ``undecided``: neither; or not tested because the sequence stopped above it;
- ``reference`` (the reference itself), ``above reference`` (not tested).

``detectable`` is the smallest margin the design shows with probability ``power`` when the true difference is 0,
from the variance parts observed; ``seeds_needed`` / ``images_needed`` what the design would need to show the
configured margin with that power; ``plan_power`` gives the same numbers before training, from assumptions.
Written by hand because neither scipy nor statsmodels has a fixed-sequence non-inferiority procedure over paired
per-image scores, nor the tests of stats.scope.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from resomap.errors import ConfigError
from resomap.stats import scope as scopes
from resomap.stats.checks import as_scores, check_level, to_dict
from resomap.stats.scope import SCOPE_WORDS, SCOPES

VERDICTS = ("reference", "non-inferior", "inferior", "undecided", "above reference")


@dataclass(frozen=True)
class Verdict:
    """Resolution ``resolution`` against ``reference`` at ``margin``: ``difference`` = mean(r) - mean(ref) with
    the one-sided bounds at the level (``low``: r is at least this much better; ``high``: at most), the one-sided
    p of H0 "more than margin below", the ``detectable`` margin, and the ``reason`` in words."""

    resolution: int
    reference: int
    verdict: str
    margin: float
    level: float
    difference: float | None = None
    low: float | None = None
    high: float | None = None
    p_value: float | None = None
    detectable: float | None = None
    n_images: int = 0
    n_seeds: int = 0
    reason: str = ""
    scope: str = "model"
    seeds_needed: int | None = None  # the fewest seeds showing the margin with the power (None: none up to 64)
    images_needed: int | None = None  # the fewest test images at these seeds (None: no number suffices)
    joint_needed: tuple[int, int] | None = None  # (seeds, test images) where neither alone suffices

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)


@dataclass(frozen=True)
class Decision:
    """Every resolution's verdict (largest first) and the recommendation: the smallest resolution shown
    non-inferior (the reference when none is), ``decided`` False when no resolution below the reference was shown
    non-inferior or inferior."""

    reference: int
    resolution: int
    verdicts: list[Verdict] = field(default_factory=list)
    decided: bool = False
    reason: str = ""
    scope: str = "model"

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)


def check_margin(margin: Any) -> float:
    if isinstance(margin, bool) or not isinstance(margin, (int, float, np.number)) or not (0 < margin < 1):
        raise ConfigError(f"margin must be a difference in (0, 1) on the score's scale (e.g. 0.02), got {margin!r}")
    return float(margin)


def check_power(power: Any) -> float:
    if isinstance(power, bool) or not isinstance(power, (int, float, np.number)) or not (0 < power < 1):
        raise ConfigError(f"power must be a probability in (0, 1) (e.g. 0.8), got {power!r}")
    return float(power)


def check_scope(scope: Any) -> str:
    if scope not in SCOPES:
        raise ConfigError(f"stats.scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    return str(scope)


def check_seed_sd(seed_sd: Any) -> float:
    if isinstance(seed_sd, bool) or not isinstance(seed_sd, (int, float, np.number)) or not 0 <= seed_sd < 1:
        raise ConfigError(
            f"stats.seed_sd must be a standard deviation of accuracy across training seeds in [0, 1) "
            f"(e.g. 0.02), got {seed_sd!r}"
        )
    return float(seed_sd)


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


def _needs(
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


def _plan_parts(
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
    counts, values = scopes.lattice_counts(d.mean(0)[None], seeds)
    floor = float(scopes.restricted_variance(counts, values, -margin)[0])
    image, resid, seed = parts
    # only where the observed variance says nothing (no image differs): a floor everywhere made the plan
    # conservative on real data (it asked 8 seeds where 6 decide; the score test's power has the restricted
    # variance in its critical value only, the observed one in its spread)
    return (floor - resid / seeds if image + resid / seeds <= 0 else image), resid, seed


def _detectable(d: np.ndarray, alpha: float, power_q: float, scope: str, seed_sd: float, binary: bool) -> float:
    """The smallest margin the design of ``d`` shows with the power whose normal quantile is ``power_q`` when the
    true difference is 0 (inf when none up to 1 does). For 0/1 outcomes the plan's variance depends on the margin
    (:func:`_plan_parts`), so the margin m with m = (c + q) se(m) is found by bisection."""
    seeds, n = d.shape

    def needed(m: float | None) -> float:
        parts = _plan_parts(d, scope, seed_sd, m, binary)
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
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.floating)) or not 0 < alpha < 1:
        raise ConfigError(f"alpha must be a one-sided alpha in (0, 1), got {alpha!r}")
    seeds, n = d.shape
    binary = bool(np.isin(d, (-1.0, 0.0, 1.0)).all())  # differences of 0/1 outcomes, as the summary's tests read them
    parts = _plan_parts(d, scope, check_seed_sd(seed_sd), margin, binary)
    return _needs(n, seeds, margin, float(alpha), power, parts, scope)


def _step(
    d: np.ndarray, margin: float, alpha: float, power: float, binary: bool, scope: str, seed_sd: float
) -> dict[str, Any]:
    """One step's test (stats.scope) of mean(d) > -margin, its one-sided bounds, the detectable margin and what the
    design would need."""
    from scipy import stats

    seeds, n = d.shape
    out: dict[str, Any] = {"difference": float(d.mean()), "n_images": int(n), "untestable": None}
    parts = _plan_parts(d, scope, seed_sd, margin, binary)
    if scope == "model" and seeds < 2:
        out["untestable"] = "one seed says nothing of how much another training seed would differ"
    elif not binary and not any(parts) and float(np.ptp(d.mean(0))) == 0.0:
        out["untestable"] = (
            f"not testable: the per-image differences do not vary ({n} image(s), each {float(d.mean()):+.3f})"
        )
    if out["untestable"]:
        out.update(low=None, high=None, p_value=None, detectable=None)
        if not binary and not any(parts):
            out.update(seeds_needed=None, images_needed=None, joint_needed=None)
        else:
            out.update(_needs(n, seeds, margin, alpha, power, parts, scope))
        return out
    low, high = scopes.bounds(d, alpha, binary=binary, scope=scope)
    edge = 1 - 1e-6
    out["cut"] = bool(low <= -edge or high >= edge)
    out["low"], out["high"] = max(-1.0, low if low > -edge else -1.0), min(1.0, high if high < edge else 1.0)
    out["p_value"] = scopes.p_value(d, -margin, binary=binary, scope=scope)
    q = float(stats.norm.ppf(power))
    detectable = _detectable(d, alpha, q, scope, seed_sd, binary)
    out["detectable"] = None if math.isinf(detectable) else detectable  # None: no margin up to 1 (JSON-safe)
    out.update(_needs(n, seeds, margin, alpha, power, parts, scope))
    return out


def noninferiority(
    scores_by_res: Mapping[int, Any],
    *,
    margin: float = 0.02,
    reference: int | None = None,
    level: float = 0.95,
    power: float = 0.8,
    metric: str = "accuracy",
    alpha: float | None = None,
    scope: str = "model",
    binary: bool | None = None,
    seed_sd: float = 0.02,
    images: str = "test images",
) -> Decision:
    """The fixed-sequence non-inferiority decision of every resolution against the reference (module doc).

    ``scores_by_res``: {resolution: [seeds, images]} per-image scores (0/1 or in [0, 1]) on the same images and
    seeds at every resolution; ``reference`` None: the largest resolution. ``alpha``: the one-sided alpha of the
    tests and bounds in place of ``1 - level`` (an adaptive sweep's alpha for this look, stats.spending); the
    verdicts then carry ``level = 1 - alpha``. ``scope``: model or checkpoint (module doc); ``binary``: 0/1
    outcomes (None: read from the values); ``seed_sd``: the assumed sd of a model's score across training seeds,
    for the plan of a one-seed design at model scope; ``images``: what the images counted are, in words (a class's
    recall counts that class's test images)."""
    margin, level, power = check_margin(margin), check_level(level), check_power(power)
    scope, seed_sd = check_scope(scope), check_seed_sd(seed_sd)
    if alpha is not None:
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float, np.floating)) or not 0 < alpha < 1:
            raise ConfigError(f"alpha must be a one-sided alpha in (0, 1), got {alpha!r}")
        level = 1 - float(alpha)
    if not isinstance(scores_by_res, Mapping) or len(scores_by_res) < 1:
        raise ConfigError("scores_by_res must be a non-empty mapping {resolution: [seeds, images]}")
    runs = {int(r): as_scores(v, f"scores at {r} px") for r, v in sorted(scores_by_res.items())}
    if len({v.shape for v in runs.values()}) > 1:
        raise ConfigError("every resolution needs the same [seeds, images] shape (same test images and seeds)")
    ref = max(runs) if reference is None else int(reference)
    if ref not in runs:
        raise ConfigError(f"stats.reference {ref} px is not a resolution of the sweep ({sorted(runs)})")
    if binary is None:
        binary = all(bool(np.isin(v, (0.0, 1.0)).all()) for v in runs.values())
    alpha = 1 - level
    seeds, n = runs[ref].shape
    base = {"reference": ref, "margin": margin, "level": level, "n_seeds": seeds, "scope": scope}
    verdicts = [Verdict(ref, verdict="reference", n_images=n, reason=f"{ref} px is the reference", **base)]
    verdicts += [
        Verdict(r, verdict="above reference", reason="above the reference: not tested", **base)
        for r in sorted((r for r in runs if r > ref), reverse=True)
    ]
    stopped: int | None = None
    chosen = ref
    for r in sorted((r for r in runs if r < ref), reverse=True):
        if stopped is not None:
            why = f"not tested: the fixed sequence stopped at {stopped} px"
            verdicts.append(Verdict(r, verdict="undecided", n_images=n, reason=why, **base))
            continue
        d = runs[r].astype(float) - runs[ref]  # [S, N]: seed s at r against seed s at the reference
        found = _step(d, margin, alpha, power, binary, scope, seed_sd)
        if found["p_value"] is None:
            verdict = "undecided"
        else:
            verdict = (
                "non-inferior" if found["p_value"] < alpha else "inferior" if found["high"] < -margin else "undecided"
            )
        reason = _words(r, ref, verdict, found, margin, level, metric, scope, seeds, images)
        found.pop("cut", None)  # said in the reason
        found.pop("untestable")
        verdicts.append(Verdict(r, verdict=verdict, reason=reason, **base, **found))
        if verdict == "non-inferior":
            chosen = r
        else:
            stopped = r
    decided = any(v.verdict in ("non-inferior", "inferior") for v in verdicts)
    return Decision(
        ref, chosen, verdicts, decided, _summary(chosen, ref, verdicts, margin, metric, scope, images), scope
    )


def _words(
    r: int,
    ref: int,
    verdict: str,
    found: dict[str, Any],
    margin: float,
    level: float,
    metric: str,
    scope: str,
    seeds: int,
    images: str = "test images",
) -> str:
    where = SCOPE_WORDS[scope]
    if found["p_value"] is None:
        constant = found["untestable"].startswith("not testable")  # no variance to plan with
        needs = "" if constant else _need_words(found, margin, seeds, images)
        return f"{r} px undecided {where}: {found['untestable']}" + needs
    diff, low, high = found["difference"], found["low"], found["high"]
    text = (
        f"{r} px {verdict} to {ref} px {where} at margin {margin:g} ({metric} difference {diff:+.3f}, "
        f"{_percent(level)} one-sided bounds [{low:+.3f}, {high:+.3f}]"
        + (" cut to the range [-1, 1]" if found.get("cut") else "")
        + f", p = {found['p_value']:.3g})"
    )
    if verdict == "undecided":
        text += "; " + _detectable_words(found["detectable"]) + _need_words(found, margin, seeds, images)
    return text


def _detectable_words(detectable: float | None) -> str:
    if detectable is None or math.isinf(detectable):
        return "this design shows no margin up to 1 with the planned power"
    return f"this design detects margins of {detectable:.3f} and larger"


def _need_words(found: dict[str, Any], margin: float, have: int | None = None, unit: str = "test images") -> str:
    seeds, images, joint = found.get("seeds_needed"), found.get("images_needed"), found.get("joint_needed")
    if seeds is not None and have is not None and seeds <= have:  # the plan assumes no true difference
        return (
            f"; with no true difference these {have} seed(s) would show the margin {margin:g} with the planned "
            "power: the difference observed keeps it undecided"
        )
    if seeds is not None:
        text = f"; needs {seeds} seeds to show the margin {margin:g}"
        return text + (f" (or about {images} {unit} at these seeds)" if images is not None else "")
    if images is not None:
        return (
            f"; needs about {images} {unit} to show the margin {margin:g} (no number of seeds up to "
            f"{MAX_SEEDS} does on these images)"
        )
    if joint is not None:
        return (
            f"; neither more seeds nor more test images alone show the margin {margin:g}: "
            f"about {joint[1]} {unit} x {joint[0]} seeds would"
        )
    return f"; no design up to {MAX_SEEDS} seeds shows the margin {margin:g}"


def _percent(level: float) -> str:
    """95% for a round level; 99.931% for a look's level of an adaptive sweep."""
    text = f"{level:.0%}"
    return text if abs(float(text[:-1]) / 100 - level) < 1e-12 else f"{level:.3%}"


def _summary(
    chosen: int, ref: int, verdicts: list[Verdict], margin: float, metric: str, scope: str, images: str
) -> str:
    where = SCOPE_WORDS[scope]
    if chosen != ref:
        return (
            f"{chosen} px is the smallest resolution shown non-inferior to {ref} px {where} "
            f"(margin {margin:g} in {metric})"
        )
    tested = next((v for v in verdicts if v.verdict not in ("reference", "above reference")), None)
    if tested is None:
        return f"{ref} px: no smaller resolution to test"
    if tested.verdict == "inferior":
        return f"{ref} px: {tested.resolution} px is shown inferior {where} (more than {margin:g} below in {metric})"
    needs = _need_words(tested.to_dict(), margin, tested.n_seeds, images).lstrip("; ")
    if tested.p_value is None:
        if scope == "model" and tested.n_seeds < 2:
            return f"undecided {where}: one seed says nothing of seed-to-seed variation; {needs}"
        return f"undecided {where}: {tested.resolution} px is not testable: its per-image differences do not vary"
    detectable = _detectable_words(tested.detectable).replace("this design", "the design")
    return (
        f"undecided {where}: no smaller resolution shown non-inferior to {ref} px at margin {margin:g}; "
        f"{detectable}; {needs}"
    )


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
        **_needs(n_images, n_seeds, margin, alpha, power, parts, scope),
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

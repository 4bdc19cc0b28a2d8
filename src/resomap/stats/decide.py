"""Decisions at a stated margin: is a smaller resolution non-inferior to a reference resolution, and how small a
difference could the design have shown?

Non-inferiority of resolution r to the reference (fixed before testing: the largest resolution by default, never the
best on the test set): H0: mean(r) - mean(ref) <= -margin against H1: > -margin, on the same test images. The unit
is the test image: each image's difference is averaged over the seeds first (the seeds of one image are correlated,
so image x seed pairs are not independent), and the one-sided paired t-test runs over images (``scipy.stats``;
the per-image differences of a 0/1 score or an IoU are bounded, so the t-test holds for the test-set sizes here).
Resolutions are tested in a fixed sequence from the reference down, each at the full alpha, stopping at the first
that is not shown non-inferior: the fixed-sequence procedure keeps the family-wise error at alpha without Holm
(Maurer, Hothorn & Lehmacher 1995). Each resolution ends as one of

- ``non-inferior``: shown no more than ``margin`` below the reference (one-sided p < alpha);
- ``inferior``: shown more than ``margin`` below it (the one-sided upper bound is below -margin);
- ``undecided``: neither; or not tested because the sequence stopped above it;
- ``reference`` (the reference itself), ``above reference`` (not tested).

``detectable`` is the smallest margin the design shows with probability ``power`` when the true difference is 0:
(t_{1-alpha} + z_{power}) * sd / sqrt(n), from the per-image differences observed; ``plan_power`` gives the same
number before training, from an assumed discordance. Written by hand because neither scipy nor statsmodels has a
fixed-sequence non-inferiority procedure over paired per-image scores; the tests themselves are scipy's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from resomap.errors import ConfigError
from resomap.stats.checks import as_scores, check_level, to_dict

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


def _bounds(d: np.ndarray, margin: float, alpha: float, power: float) -> dict[str, Any]:
    """The one-sided paired t-test of mean(d) > -margin over images, its bounds and the detectable margin."""
    from scipy import stats

    n = d.size
    mean = float(d.mean())
    sd = float(d.std(ddof=1)) if n > 1 else 0.0
    out: dict[str, Any] = {"difference": mean, "n_images": int(n)}
    if sd == 0.0:  # every image moved by the same amount: the difference is known exactly
        out.update(low=mean, high=mean, p_value=0.0 if mean > -margin else 1.0, detectable=0.0)
        return out
    se = sd / math.sqrt(n)
    t_crit = float(stats.t.ppf(1 - alpha, n - 1))
    low, high = mean - t_crit * se, mean + t_crit * se
    # a difference of per-image scores in [0, 1] lies in [-1, 1]: a t bound beyond it (few, spread images) is cut
    # there and said so (the verdicts do not change: they compare the bounds with -margin)
    out["low"], out["high"], out["cut"] = max(-1.0, low), min(1.0, high), bool(low < -1.0 or high > 1.0)
    out["p_value"] = float(stats.t.sf((mean + margin) / se, n - 1))
    out["detectable"] = (t_crit + float(stats.norm.ppf(power))) * se
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
) -> Decision:
    """The fixed-sequence non-inferiority decision of every resolution against the reference (module doc).

    ``scores_by_res``: {resolution: [seeds, images]} per-image scores (0/1 or in [0, 1]) on the same images and
    seeds at every resolution; ``reference`` None: the largest resolution. ``alpha``: the one-sided alpha of the
    tests and bounds in place of ``1 - level`` (an adaptive sweep's alpha for this look, stats.spending); the
    verdicts then carry ``level = 1 - alpha``."""
    margin, level, power = check_margin(margin), check_level(level), check_power(power)
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
    alpha = 1 - level
    seeds, n = runs[ref].shape
    base = {"reference": ref, "margin": margin, "level": level, "n_seeds": seeds}
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
        d = runs[r].mean(axis=0) - runs[ref].mean(axis=0)  # per image, seeds averaged: the image is the unit
        found = _bounds(d, margin, alpha, power)
        verdict = "non-inferior" if found["p_value"] < alpha else "inferior" if found["high"] < -margin else "undecided"
        reason = _words(r, ref, verdict, found, margin, level, metric)
        found.pop("cut", None)  # said in the reason
        verdicts.append(Verdict(r, verdict=verdict, reason=reason, **base, **found))
        if verdict == "non-inferior":
            chosen = r
        else:
            stopped = r
    decided = any(v.verdict in ("non-inferior", "inferior") for v in verdicts)
    return Decision(ref, chosen, verdicts, decided, _summary(chosen, ref, verdicts, margin, metric))


def _words(r: int, ref: int, verdict: str, found: dict[str, Any], margin: float, level: float, metric: str) -> str:
    diff, low, high = found["difference"], found["low"], found["high"]
    text = (
        f"{r} px {verdict} to {ref} px at margin {margin:g} ({metric} difference {diff:+.3f}, "
        f"{_percent(level)} one-sided bounds [{low:+.3f}, {high:+.3f}]"
        + (" cut to the range [-1, 1]" if found.get("cut") else "")
        + f", p = {found['p_value']:.3g})"
    )
    if verdict == "undecided":
        text += f"; this design detects margins of {found['detectable']:.3f} and larger"
    return text


def _percent(level: float) -> str:
    """95% for a round level; 99.931% for a look's level of an adaptive sweep."""
    text = f"{level:.0%}"
    return text if abs(float(text[:-1]) / 100 - level) < 1e-12 else f"{level:.3%}"


def _summary(chosen: int, ref: int, verdicts: list[Verdict], margin: float, metric: str) -> str:
    if chosen != ref:
        return f"{chosen} px is the smallest resolution shown non-inferior to {ref} px (margin {margin:g} in {metric})"
    tested = next((v for v in verdicts if v.p_value is not None), None)
    if tested is None:
        return f"{ref} px: no smaller resolution to test"
    if tested.verdict == "inferior":
        return f"{ref} px: {tested.resolution} px is shown inferior (more than {margin:g} below in {metric})"
    return (
        f"undecided: no smaller resolution shown non-inferior to {ref} px at margin {margin:g}; "
        f"the design detects margins of {tested.detectable:.3f} and larger (more test images or seeds lower it)"
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
) -> dict[str, float]:
    """Before training: the detectable margin and the power at ``margin`` of the one-sided test of one resolution
    against the reference, for a 0/1 score, assuming a fraction ``discordance`` of images change outcome between
    the two resolutions (per-image difference variance ``discordance`` for one seed) and a correlation
    ``seed_correlation`` between the seeds' differences on one image (variance of the seeds' mean: discordance *
    (1 + (S - 1) rho) / S). A pilot-free default; the summary restates it from the differences observed."""
    from scipy import stats

    if n_images < 2:
        raise ConfigError(f"a power plan needs at least 2 test images, got {n_images}")
    margin, level, power = check_margin(margin), check_level(level), check_power(power)
    if not 0 < discordance <= 1 or not 0 <= seed_correlation <= 1:
        raise ConfigError(
            f"a power plan needs a discordance in (0, 1] and a seed correlation in [0, 1], got {discordance!r} "
            f"and {seed_correlation!r}"
        )
    var = discordance * (1 + (n_seeds - 1) * seed_correlation) / max(n_seeds, 1)
    se = math.sqrt(var / n_images)
    t_crit = float(stats.t.ppf(level, n_images - 1))
    detectable = (t_crit + float(stats.norm.ppf(power))) * se
    reached = float(stats.norm.cdf(margin / se - t_crit))
    return {"detectable": detectable, "power_at_margin": reached, "se": se}


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

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
- ``undecided``: tested, neither;
- ``not reached``: not tested, because the sequence stopped above it;
- ``reference`` (the reference itself), ``above reference`` (not tested).

``detectable`` is the smallest margin the design shows with probability ``power`` when the true difference is 0,
from the variance parts observed; ``seeds_needed`` / ``images_needed`` what the design would need to show the
configured margin with that power (the plans: stats.design; ``plan_power`` gives the same numbers before
training, from assumptions).
Written by hand because neither scipy nor statsmodels has a fixed-sequence non-inferiority procedure over paired
per-image scores, nor the tests of stats.scope.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from resomap.errors import ConfigError
from resomap.stats import scope as scopes
from resomap.stats.checks import (
    as_scores,
    check_alpha,
    check_level,
    check_margin,
    check_power,
    check_scope,
    check_seed_sd,
    to_dict,
)
from resomap.stats.design import MAX_SEEDS, detectable_margin, needs, observed_tested, plan_parts
from resomap.stats.scope import SCOPE_WORDS

VERDICTS = ("reference", "non-inferior", "inferior", "undecided", "not reached", "above reference")


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


def _step(
    d: np.ndarray, margin: float, alpha: float, power: float, binary: bool, scope: str, seed_sd: float
) -> dict[str, Any]:
    """One step's test (stats.scope) of mean(d) > -margin, its one-sided bounds, the detectable margin and what the
    design would need."""

    seeds, n = d.shape
    out: dict[str, Any] = {"difference": float(d.mean()), "n_images": int(n), "untestable": None}
    parts = plan_parts(d, scope, seed_sd, margin, binary)
    tested = observed_tested(d, margin, parts) if binary else None
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
            out.update(needs(n, seeds, margin, alpha, power, parts, scope, tested, binary))
        return out
    low, high = scopes.bounds(d, alpha, binary=binary, scope=scope)
    edge = 1 - 1e-6
    out["cut"] = bool(low <= -edge or high >= edge)
    out["low"], out["high"] = max(-1.0, low if low > -edge else -1.0), min(1.0, high if high < edge else 1.0)
    out["p_value"] = scopes.p_value(d, -margin, binary=binary, scope=scope)
    detectable = detectable_margin(d, alpha, power, scope, seed_sd, binary)
    out["detectable"] = None if math.isinf(detectable) else detectable  # None: no margin up to 1 (JSON-safe)
    out.update(needs(n, seeds, margin, alpha, power, parts, scope, tested, binary))
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
    deterministic: bool = False,
) -> Decision:
    """The fixed-sequence non-inferiority decision of every resolution against the reference (module doc).

    ``scores_by_res``: {resolution: [seeds, images]} per-image scores (0/1 or in [0, 1]) on the same images and
    seeds at every resolution; ``reference`` None: the largest resolution. ``alpha``: the one-sided alpha of the
    tests and bounds in place of ``1 - level`` (an adaptive sweep's alpha for this look, stats.spending); the
    verdicts then carry ``level = 1 - alpha``. ``scope``: model or checkpoint (module doc); ``binary``: 0/1
    outcomes (None: read from the values); ``seed_sd``: the assumed sd of a model's score across training seeds,
    for the plan of a one-seed design at model scope; ``images``: what the images counted are, in words (a class's
    recall counts that class's test images); ``deterministic``: the model's fit does not depend on the training
    seed (its spec says so, or its seeds gave one fit), so its seeds are one replicate whose seed part is known to
    be 0: one seed decides as several do, at model scope."""
    margin, level, power = check_margin(margin), check_level(level), check_power(power)
    scope, seed_sd = check_scope(scope), check_seed_sd(seed_sd)
    if alpha is not None:
        level = 1 - check_alpha(alpha)
    runs, ref = _runs(scores_by_res, reference)
    if binary is None:
        binary = all(bool(np.isin(v, (0.0, 1.0)).all()) for v in runs.values())
    seeds, n = runs[ref].shape
    base = {"reference": ref, "margin": margin, "level": level, "n_seeds": seeds, "scope": scope}
    head = [Verdict(ref, verdict="reference", n_images=n, reason=f"{ref} px is the reference", **base)]
    head += [
        Verdict(r, verdict="above reference", reason="above the reference: not tested", **base)
        for r in sorted((r for r in runs if r > ref), reverse=True)
    ]
    steps = [
        Step(r, runs[r].astype(float) - runs[ref], deterministic)  # [S, N]: seed s at r against seed s at ref
        for r in sorted((r for r in runs if r < ref), reverse=True)
    ]
    settings = Settings(margin, level, power, metric, scope, binary, seed_sd, images)
    verdicts = head + fixed_sequence(steps, ref, settings)
    passed = [v.resolution for v in verdicts if v.verdict == "non-inferior"]
    chosen = passed[-1] if passed else ref
    decided = any(v.verdict in ("non-inferior", "inferior") for v in verdicts)
    shown = DETERMINISTIC_SCOPE if deterministic and scope == "model" else scope
    return Decision(
        ref, chosen, verdicts, decided, _summary(chosen, ref, verdicts, margin, metric, shown, images), scope
    )


@dataclass(frozen=True)
class Step:
    """One hypothesis of a fixed sequence: ``key`` (a resolution, or any label of a configuration), the per-image
    differences ``d`` [S, N] against the reference (row s: replicate s of both; the same N images) and whether
    both sides are deterministic fits (seed part known to be 0: the rows are one replicate)."""

    key: Any
    d: np.ndarray
    deterministic: bool = False


@dataclass(frozen=True)
class Settings:
    """What every step of a fixed sequence is tested with (noninferiority's arguments, checked)."""

    margin: float
    level: float
    power: float
    metric: str
    scope: str
    binary: bool
    seed_sd: float
    images: str = "test images"


def replicate_differences(
    a: np.ndarray, b: np.ndarray, *, paired: bool, a_fixed: bool, b_fixed: bool
) -> tuple[np.ndarray, bool]:
    """(d = a - b [S, N], whether d is one replicate) for two configurations' per-image scores a [Sa, N] and
    b [Sb, N] on the same N images: a deterministic fit (``*_fixed``: its seeds one fit) counts as one replicate,
    broadcast against the other's seeds; two configurations whose seeds are paired (the same model at two
    resolutions: ``paired``, rows by seed) keep their pairs; otherwise the seeds are independent replicates, and
    pairing row i with row i (the first min(Sa, Sb)) gives min(Sa, Sb) independent replicates of the difference, as
    any pairing of independent replicates would."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a_fixed and b_fixed:
        return a[:1] - b[:1], True
    if a_fixed or b_fixed:
        return (a[:1] if a_fixed else a) - (b[:1] if b_fixed else b), False
    if paired and a.shape[0] != b.shape[0]:
        raise ConfigError(f"paired configurations need the same seeds: {a.shape[0]} and {b.shape[0]}")
    k = min(a.shape[0], b.shape[0])
    return a[:k] - b[:k], False


def _px(key: Any) -> str:
    return f"{key} px"


def fixed_sequence(steps: list[Step], reference: Any, settings: Settings, label: Any = _px) -> list[Verdict]:
    """Each step's verdict, tested in the order given at the full one-sided alpha (1 - level), stopping at the first
    that is not shown non-inferior: the later ones are "not reached" (Maurer, Hothorn & Lehmacher 1995: the
    family-wise error stays at alpha for any order fixed before the test images are seen). ``label(key)`` names a
    step in the reasons (a resolution: "96 px"; a configuration across models: "pixel_logreg@64"). A deterministic
    step is tested with its seed part known to be 0 (its rows one replicate), at the scope asked for."""
    s = settings
    alpha = 1 - s.level
    out: list[Verdict] = []
    stopped: Any = None
    for step in steps:
        seeds, n = step.d.shape
        base = {"reference": reference, "margin": s.margin, "level": s.level, "n_seeds": seeds, "scope": s.scope}
        if stopped is not None:
            why = f"not tested: the fixed sequence stopped at {label(stopped)}"
            out.append(Verdict(step.key, verdict="not reached", n_images=n, reason=why, **base))
            continue
        d, scope = (step.d[:1], "checkpoint") if step.deterministic else (step.d, s.scope)
        found = _step(d, s.margin, alpha, s.power, s.binary, scope, s.seed_sd)
        verdict = _verdict(found, alpha, s.margin)
        shown = DETERMINISTIC_SCOPE if step.deterministic and s.scope == "model" else s.scope
        reason = _words(step.key, reference, verdict, found, s, shown, seeds, label)
        found.pop("cut", None)  # said in the reason
        found.pop("untestable")
        out.append(Verdict(step.key, verdict=verdict, reason=reason, **base, **found))
        if verdict != "non-inferior":
            stopped = step.key
    return out


def _runs(scores_by_res: Mapping[int, Any], reference: int | None) -> tuple[dict[int, np.ndarray], int]:
    """The scores {resolution: [seeds, images]} checked (one shape at every resolution) and the reference (None:
    the largest resolution)."""
    if not isinstance(scores_by_res, Mapping) or len(scores_by_res) < 1:
        raise ConfigError("scores_by_res must be a non-empty mapping {resolution: [seeds, images]}")
    runs = {int(r): as_scores(v, f"scores at {r} px") for r, v in sorted(scores_by_res.items())}
    if len({v.shape for v in runs.values()}) > 1:
        raise ConfigError("every resolution needs the same [seeds, images] shape (same test images and seeds)")
    ref = max(runs) if reference is None else int(reference)
    if ref not in runs:
        raise ConfigError(f"stats.reference {ref} px is not a resolution of the sweep ({sorted(runs)})")
    return runs, ref


def _verdict(found: dict[str, Any], alpha: float, margin: float) -> str:
    """One tested step's verdict: non-inferior (p < alpha), inferior (the upper bound below -margin) or undecided."""
    if found["p_value"] is None:
        return "undecided"
    if found["p_value"] < alpha:
        return "non-inferior"
    return "inferior" if found["high"] < -margin else "undecided"


def _words(
    key: Any, reference: Any, verdict: str, found: dict[str, Any], s: Settings, scope: str, seeds: int, label: Any = _px
) -> str:
    where = _scope_words(scope)
    if found["p_value"] is None:
        constant = found["untestable"].startswith("not testable")  # no variance to plan with
        needs = "" if constant else _need_words(found, s.margin, seeds, s.images)
        return f"{label(key)} undecided {where}: {found['untestable']}" + needs
    diff, low, high = found["difference"], found["low"], found["high"]
    text = (
        f"{label(key)} {verdict} to {label(reference)} {where} at margin {s.margin:g} ({s.metric} difference "
        f"{diff:+.3f}, {_percent(s.level)} one-sided bounds [{low:+.3f}, {high:+.3f}]"
        + (" cut to the range [-1, 1]" if found.get("cut") else "")
        + f", p = {found['p_value']:.3g})"
    )
    if verdict == "undecided":
        text += "; " + _detectable_words(found["detectable"]) + _need_words(found, s.margin, seeds, s.images)
    return text


# a deterministic fit at model scope: the seed changes nothing, so these checkpoints are the model
DETERMINISTIC_SCOPE = "deterministic"
DETERMINISTIC_WORDS = "at model scope (one fit: the training seed changes nothing)"


def _scope_words(scope: str) -> str:
    return DETERMINISTIC_WORDS if scope == DETERMINISTIC_SCOPE else SCOPE_WORDS[scope]


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
    where = _scope_words(scope)
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


ABOVE_VERDICTS = ("better", "non-inferior", "worse", "undecided")


def better_or_noninferior(
    d: Any,
    *,
    margin: float,
    alpha: float,
    binary: bool,
    power: float = 0.8,
    scope: str = "model",
    seed_sd: float = 0.02,
    deterministic: bool = False,
) -> dict[str, Any]:
    """Whether configuration B is shown better than A or no worse than A by more than ``margin``, from the per-image
    differences ``d`` = B - A [S, N] (row s: replicate s of both, the same N images), by the tests and scopes of
    :func:`noninferiority`'s steps: H0 "mean <= -margin" (p_noninferior) and H0 "mean <= 0" (p_better), each at
    the one-sided ``alpha``. The second null lies inside the first, so the two claims together keep the error at
    alpha (a test that shows "better" shows "non-inferior" too). Verdicts (ABOVE_VERDICTS): ``better`` (p_better <
    alpha), ``non-inferior``, ``worse`` (the one-sided upper bound below -margin) or ``undecided``; with the
    difference, its one-sided bounds at alpha and the margin the design detects. ``deterministic``: both sides are
    one fit (their seeds one replicate: the first row is tested, its seed part known to be 0)."""
    margin, power = check_margin(margin), check_power(power)
    alpha, scope, seed_sd = check_alpha(alpha), check_scope(scope), check_seed_sd(seed_sd)
    d = np.asarray(d, dtype=float)
    if d.ndim != 2 or d.size == 0:
        raise ConfigError(f"d must be [seeds, images] per-image differences, got shape {d.shape}")
    d, scope = (d[:1], "checkpoint") if deterministic else (d, scope)
    found = _step(d, margin, alpha, power, binary, scope, seed_sd)
    p_noninferior = found["p_value"]
    p_better = None if p_noninferior is None else scopes.p_value(d, 0.0, binary=binary, scope=scope)
    if p_better is not None and p_better < alpha:
        verdict = "better"
    elif p_noninferior is not None and p_noninferior < alpha:
        verdict = "non-inferior"
    elif found["high"] is not None and found["high"] < -margin:
        verdict = "worse"
    else:
        verdict = "undecided"
    return {
        "verdict": verdict,
        "difference": found["difference"],
        "low": found["low"],
        "high": found["high"],
        "p_noninferior": p_noninferior,
        "p_better": p_better,
        "detectable": found["detectable"],
        "n_images": found["n_images"],
        "n_seeds": int(d.shape[0]),
        "untestable": found["untestable"],
    }

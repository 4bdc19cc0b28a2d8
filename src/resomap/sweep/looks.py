"""One look of an adaptive sweep (sweep.adaptive) for one model, as a pure function: from the model's per-image
scores on its open resolutions, whether it is decided, which resolutions to drop and how many seeds the next round
adds. run_adaptive calls :func:`look_step` after every round; tests/test_adaptive_model.py simulates sweeps with it.
No training, no files.

- The decision: stats.decide.noninferiority at the look's one-sided alpha (the fixed sequence from the reference
  down at stats.margin, at stats.scope), as the round's summary makes it.
- Decided (the sequence ends at a resolution shown inferior, or every resolution is shown non-inferior): no more
  seeds.
- Undecided at resolution s: the resolutions below s are tested alone against the reference at the look's alpha,
  and from the first shown inferior down they are dropped. The seeds to add come from the power plan of step s
  (its observed variance parts; at model scope with one seed, the seed part from stats.seed_sd), asked at the alpha
  of each later look, where the new seeds will be tested: the first later look whose plan the remaining rounds
  (``seeds_per_round`` at most per round; ``"plan"``: no cap) and the trials left can reach is aimed at, and the
  next round adds what that plan is missing (at least one seed), at most ``seeds_per_round`` and what the trials
  left pay for.
- When no later look's plan can be reached (or none is left), the model stops: "cannot decide within the budget:
  would need k seeds" (k: the fewest any later look's plan asks), or, where no number of seeds up to 64 shows the
  margin on these test images, the test images (or seeds x images) that would.

Stopping a model early never adds a chance of a false "non-inferior"; the seeds added depend on the variance parts,
not on the observed difference. The simulation in tests/test_adaptive_model.py measures the familywise error of
the whole procedure at a known seed variance.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from resomap.config.schema import StatsConfig
from resomap.stats import Decision, design_needs
from resomap.stats.design import MAX_SEEDS

PLAN = "plan"  # sweep.adaptive.seeds_per_round: add what the power plan asks, with no cap per round
CANNOT = "cannot decide within the budget"


@dataclasses.dataclass(frozen=True)
class Step:
    """What one look says of one model: ``decided``; ``drop`` ({resolution: why}, run no further); ``add``: the
    seeds of the next round; ``seeds_needed``: the plan aimed at (None when decided or out of reach); ``stopped``:
    the sentence of a model out of reach ("" otherwise); ``decision``: the look's decision."""

    decided: bool
    decision: Decision
    drop: dict[int, str] = dataclasses.field(default_factory=dict)
    add: int = 0
    seeds_needed: int | None = None
    stopped: str = ""


def stopped_at(reference: int, verdicts: Sequence[Mapping[str, Any]]) -> tuple[bool, int | None]:
    """(decided, the resolution the fixed sequence stopped at undecided) from a decision's verdicts: decided when
    the sequence ends at a resolution shown inferior or shows every resolution below the reference non-inferior."""
    below = [v for v in verdicts if v["resolution"] < reference]
    for v in sorted(below, key=lambda v: v["resolution"], reverse=True):
        if v["verdict"] == "non-inferior":
            continue
        return v["verdict"] == "inferior", (None if v["verdict"] == "inferior" else v["resolution"])
    return True, None


def look_step(
    scores: Mapping[int, Any],
    stats: StatsConfig,
    alphas: Sequence[float],
    look: int,
    *,
    seeds_per_round: int | str = 1,
    trials_left: int | None = None,
    binary: bool | None = None,
    words: str = "accuracy",
    images: str = "test images",
) -> Step:
    """Look ``look`` (1-based; ``alphas``: every planned look's one-sided alpha) of one model whose open
    resolutions have the per-image scores ``scores`` {resolution: [seeds, images]} (module doc).
    ``trials_left``: the trials this model may still add (None: no limit); each new seed costs one trial per
    resolution not dropped. ``binary``: 0/1 scores (None: read from the values); ``words`` / ``images``: the
    decision metric and its images in words (the reasons of dropped resolutions quote the decision)."""
    from resomap.summary.decision import decide

    runs = {int(r): np.asarray(v) for r, v in scores.items()}
    alpha = alphas[look - 1]
    said = {"alpha": alpha, "binary": binary, "words": words, "images": images}
    decision = decide(runs, stats, **said)
    ref = decision.reference
    decided, stop = stopped_at(ref, [v.to_dict() for v in decision.verdicts])
    if decided or stop is None:
        return Step(True, decision)
    drop = _drops(runs, ref, stop, stats, look, said)
    per_seed = sum(r not in drop for r in runs)  # trials one more seed costs
    seeds = runs[ref].shape[0]
    cap = math.inf if seeds_per_round == PLAN else int(seeds_per_round)
    affordable = math.inf if trials_left is None else max(trials_left, 0) // per_seed
    d = runs[stop].astype(float) - runs[ref]
    later = {
        j: design_needs(
            d, margin=stats.margin, alpha=alphas[j - 1], power=stats.power, scope=stats.scope, seed_sd=stats.seed_sd
        )
        for j in range(look + 1, len(alphas) + 1)
    }
    for j, plan in later.items():
        k = plan["seeds_needed"]
        # at least one more seed: a plan the seeds so far already meet was not enough on these data
        wanted = None if k is None else max(k, seeds + 1)
        if wanted is not None and wanted - seeds <= min((j - look) * cap, affordable):
            add = int(min(wanted - seeds, cap, affordable))
            return Step(False, decision, drop, add=add, seeds_needed=k)
    verdict = next(v for v in decision.verdicts if v.resolution == stop)
    plans = [later[j] for j in sorted(later, key=lambda j: alphas[j - 1])] or [verdict.to_dict()]
    return Step(False, decision, drop, stopped=out_of_reach(plans, seeds, stats.margin, verdict.n_images))


def out_of_reach(plans: Sequence[Mapping[str, Any]], seeds: int, margin: float, images: int) -> str:
    """The sentence of a model the budget cannot decide, from the plans of the looks left (or of this look), the
    most lenient (largest alpha) last: the fewest seeds any of them asks, else the test images or seeds x images
    the most lenient would need (as the decision's words say them)."""
    asked = [p["seeds_needed"] for p in plans if p["seeds_needed"] is not None]
    if asked:
        k = min(asked)
        if k > seeds:
            return f"{CANNOT}: would need {k} seeds"
        return f"{CANNOT}: undecided with {seeds} seeds, no fewer than the power plan asks ({k}), and no seed to add"
    plan = plans[-1]
    text = f"{CANNOT}: no number of seeds up to {MAX_SEEDS} shows the margin {margin:g} on these {images} test images"
    if plan.get("images_needed") is not None:
        return text + f"; about {plan['images_needed']} test images at {seeds} seeds would"
    if plan.get("joint_needed") is not None:
        more_seeds, more_images = plan["joint_needed"]
        return text + f"; about {more_images} test images x {more_seeds} seeds would"
    return text + f"; no design up to {MAX_SEEDS} seeds does"


def _drops(
    runs: dict[int, np.ndarray], ref: int, stop: int, stats: StatsConfig, look: int, said: dict[str, Any]
) -> dict[int, str]:
    """The resolutions below ``stop`` from the first shown inferior (alone against the reference ``ref``, the
    larger of each pair, so stats.reference picks it too) down; ``said``: the look's decide() settings."""
    from resomap.summary.decision import decide

    for r in sorted((r for r in runs if r < stop), reverse=True):
        decision = decide({ref: runs[ref], r: runs[r]}, stats, **said)
        verdict = next(v for v in decision.verdicts if v.resolution == r)
        if verdict.verdict == "inferior":
            drop = {r: f"shown inferior at look {look} (alone against {ref} px): {verdict.reason}"}
            for lower in (x for x in runs if x < r):
                drop[lower] = f"below {r} px, shown inferior at look {look}: not run further"
            return drop
    return {}

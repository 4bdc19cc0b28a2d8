"""Adaptive sweeps at model scope (issue 31 item 7): seeded simulations of whole adaptive sweeps, statistics only (no
training), through the product's per-look rule (resomap.sweep.looks.look_step, what run_adaptive calls after every
round): the familywise error of "non-inferior" at a known seed variance, the seeds added from the power plan, and
the stop of a model the rounds and budget cannot decide."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from resomap.config.schema import StatsConfig
from resomap.stats import design_needs
from resomap.stats.spending import look_alphas
from resomap.sweep.looks import CANNOT, look_step
from test_scope import _latent_scale

N, ACC, MARGIN, DISCORDANCE = 180, 0.8, 0.1, 0.15
ALPHAS = look_alphas("obrien_fleming", 0.05, 3)
STATS = StatsConfig(margin=MARGIN)  # model scope, level 0.95, power 0.8, planning seed sd 0.02: the defaults
REF, AT_MARGIN, FAR = 64, 32, 16
LIMIT = 0.055
# 800 simulated sweeps per setting. The expected familywise error, measured beforehand with other seeds: 0.022 and
# 0.031 at seed sd 0.04 (3,000 and 6,000 sweeps; standard errors 0.0027 and 0.0022), 0.022 and 0.028 at seed sd 0
# (3,000 and 4,000; 0.0027 and 0.0026). At 800 sweeps and a rate of 0.031 one standard error is 0.0061: LIMIT is
# 3.9 of them above the higher estimate
REPS = 800


class _Model:
    """A model's 0/1 outcomes on N fixed test images, with known truth: image i is right for (resolution r, seed s)
    when z_i + w_ri + e_rsi passes the cut giving accuracy ACC - drop_r + u_rs, u_rs ~ N(0, seed_sd^2) (each
    resolution's seeds trained independently); w and e share the spread that makes DISCORDANCE of the images
    change outcome between two resolutions of equal accuracy (tests/test_scope.py's model). Seeds are drawn as
    the sweep asks for them."""

    def __init__(self, rng: np.random.Generator, drops: dict[int, float], seed_sd: float) -> None:
        from scipy import stats

        self.rng, self.drops, self.seed_sd = rng, drops, seed_sd
        self.spread = _latent_scale(DISCORDANCE)
        self.cut_scale = math.sqrt(1 + 2 * self.spread**2)
        self.ppf = stats.norm.ppf
        self.z = rng.standard_normal(N)
        self.w = {r: self.spread * rng.standard_normal(N) for r in drops}

    def seeds(self, r: int, count: int) -> np.ndarray:
        e = self.spread * self.rng.standard_normal((count, N))
        acc = np.clip(ACC - self.drops[r] + self.seed_sd * self.rng.standard_normal((count, 1)), 0.01, 0.99)
        return self.z + self.w[r] + e > self.ppf(1 - acc) * self.cut_scale


def _adaptive_sweep(rng, seed_sd: float, stats: StatsConfig, drop: float = MARGIN) -> tuple[bool, str, int]:
    """One adaptive sweep of one model (reference 64 px; 32 px ``drop`` below it, by default exactly the margin,
    the null's boundary; 16 px far below), one seed in the first round, then the seeds each look asks for (no cap:
    seeds_per_round "plan", no trial budget) drawn from the same model. (32 px called non-inferior at some look,
    how it ended, the seeds reached)."""
    model = _Model(rng, {REF: 0.0, AT_MARGIN: drop, FAR: 0.3}, seed_sd)
    scores = {r: model.seeds(r, 1) for r in model.drops}
    for look in range(1, len(ALPHAS) + 1):
        step = look_step(scores, stats, ALPHAS, look, seeds_per_round="plan")
        called = any(v.verdict == "non-inferior" and v.resolution == AT_MARGIN for v in step.decision.verdicts)
        seeds = scores[REF].shape[0]
        if called or step.decided or step.stopped:  # a call at any look counts, even one a later look would revise
            return called, "decided" if step.decided else "stopped" if step.stopped else "open", seeds
        assert step.add >= 1, step
        for r in step.drop:
            del scores[r]
        scores = {r: np.concatenate([s, model.seeds(r, step.add)]) for r, s in scores.items()}
    raise AssertionError("the last look always decides or stops")


# with a seed spread in the default suite; without one (~25 s) with the slow suite
@pytest.mark.parametrize(("seed_sd", "rng_seed"), [pytest.param(0.0, 1, marks=pytest.mark.slow), (0.04, 2)])
def test_adaptive_sweeps_hold_the_familywise_error_at_model_scope(seed_sd: float, rng_seed: int):
    rng = np.random.default_rng(rng_seed)
    runs = [_adaptive_sweep(rng, seed_sd, STATS) for _ in range(REPS)]
    errors = sum(called for called, _, _ in runs) / REPS
    se = math.sqrt(max(errors, 1e-3) * (1 - errors) / REPS)
    assert errors <= LIMIT, (seed_sd, errors, se)
    assert errors > 0.005, errors  # not a procedure that never decides
    assert max(seeds for _, _, seeds in runs) > 5  # the plan added more than one seed a round somewhere


def test_the_checkpoint_scope_would_exceed_the_level_with_a_seed_spread():
    """The same sweeps decided about the trained checkpoints (the seeds' spread unseen): with seed sd 0.04 the
    model exactly at the margin is called non-inferior far more often than 0.05 (0.196 over 1,000 sweeps, standard
    error 0.013): the simulation above can fail."""
    rng = np.random.default_rng(3)
    runs = [_adaptive_sweep(rng, 0.04, replace(STATS, scope="checkpoint")) for _ in range(200)]
    assert sum(called for called, _, _ in runs) / 200 > 0.1


def test_adaptive_sweeps_at_model_scope_decide_an_equal_resolution():
    """32 px truly equal to 64 px, seed sd 0.04: the adaptive sweep calls it non-inferior in 0.91 of 100 sweeps
    (other seeds): the seeds the plan adds reach a decision."""
    rng = np.random.default_rng(4)
    runs = [_adaptive_sweep(rng, 0.04, STATS, drop=0.0) for _ in range(100)]
    assert sum(called for called, _, _ in runs) / 100 > 0.7


# ---------------------------------------------------------------- the seeds a look adds, and out of reach


def _scores(seeds: int, seed_sd: float = 0.0, drop: float = 0.0, rng_seed: int = 0) -> dict[int, np.ndarray]:
    model = _Model(np.random.default_rng(rng_seed), {REF: 0.0, AT_MARGIN: drop}, seed_sd)
    return {r: model.seeds(r, seeds) for r in model.drops}


def _two_seeds() -> tuple[dict[int, np.ndarray], list[int]]:
    """Two seeds of a model whose seeds differ widely (seed sd 0.06), 32 px 0.05 below 64 px; and the seeds the
    plan of 32 px asks at the alphas of looks 2 and 3 (where new seeds would be tested)."""
    scores = _scores(2, seed_sd=0.06, drop=0.05, rng_seed=4)
    d = scores[AT_MARGIN].astype(float) - scores[REF]
    return scores, [design_needs(d, margin=MARGIN, alpha=a, seed_sd=0.02)["seeds_needed"] for a in ALPHAS[1:]]


def test_a_look_adds_what_the_plan_is_missing_within_the_cap_and_the_trials_left():
    scores, asks = _two_seeds()
    assert asks == [8, 6]  # look 2's alpha is the smaller (O'Brien-Fleming), so its plan asks more
    step = look_step(scores, STATS, ALPHAS, 1, seeds_per_round="plan")
    assert (step.decided, step.stopped, step.seeds_needed, step.add) == (False, "", 8, 6)
    assert step.decision.verdicts[1].verdict == "undecided"
    # at most 3 a round: 8 seeds by look 2 out of reach, 6 by look 3 within it: 3 now
    capped = look_step(scores, STATS, ALPHAS, 1, seeds_per_round=3)
    assert (capped.seeds_needed, capped.add, capped.stopped) == (6, 3, "")
    # each seed costs one trial per resolution: 11 trials pay for 5 seeds, enough for look 3's plan only
    afforded = look_step(scores, STATS, ALPHAS, 1, seeds_per_round="plan", trials_left=11)
    assert (afforded.seeds_needed, afforded.add) == (6, 4)


def test_a_model_the_rounds_cannot_decide_stops_with_the_seeds_it_would_need():
    scores, _ = _two_seeds()
    one = look_step(scores, STATS, ALPHAS, 1, seeds_per_round=1)  # 4 seeds at most by look 3
    assert (one.stopped, one.add, one.seeds_needed) == (f"{CANNOT}: would need 6 seeds", 0, None)
    assert not one.decided and one.decision.verdicts[1].verdict == "undecided"
    broke = look_step(scores, STATS, ALPHAS, 1, seeds_per_round="plan", trials_left=5)  # 2 seeds' trials
    assert broke.stopped == f"{CANNOT}: would need 6 seeds"
    last = look_step(scores, STATS, ALPHAS, 3, seeds_per_round="plan")  # no round left: this look's own plan
    k = last.decision.verdicts[1].seeds_needed
    assert last.stopped == f"{CANNOT}: would need {k} seeds" and last.add == 0 and k > 2


def test_where_no_number_of_seeds_shows_the_margin_the_stop_names_the_test_images():
    scores = {r: s[:, :40] for r, s in _scores(2).items()}  # 40 test images: the image part alone is too wide
    step = look_step(scores, replace(STATS, margin=0.05), ALPHAS, 1, seeds_per_round="plan")
    assert step.stopped.startswith(f"{CANNOT}: no number of seeds up to 64 shows the margin 0.05 on these 40 test")
    assert "test images" in step.stopped.split(";")[1] and step.stopped.endswith("would"), step.stopped

"""The power plan is the power of the test that runs (issue 47, item 1): for 0/1 outcomes of N test images x S
training seeds with no true difference, the rate at which the model-scope step test (stats.scope, as
stats.decide runs it) shows "not worse than the margin" over seeded simulated sweeps is what stats.plan_power
states for the same assumptions, within 0.03, at 2, 3 and 5 seeds, two discordances and two or three seed sds.
The simulated tables are drawn here, not by the plan's code: a share `seed_correlation` of images change outcome
alike for every seed, the rest independently per seed, and each seed shifts its mean difference by a normal seed
effect (sd sqrt(2) x seed_sd: two resolutions' seed-to-seed spreads)."""

from __future__ import annotations

import numpy as np
import pytest

from resomap.stats import noninferiority, plan_power
from resomap.stats import scope as scopes

N, MARGIN, ALPHA, CORRELATION = 656, 0.02, 0.05, 0.5
DRAWS = 4000

# (discordance, seed sd): the issue's assumed (0.2, 0.02) and its observed (0.07, ~0) designs, each beside a
# middle seed sd. At discordance 0.07 a seed sd of 0.02 shifts a seed's differences by more than its discordant
# images allow (the generator would clip the seed effect), so 0.01 is the largest used there.
DESIGNS = [(0.2, 0.0), (0.2, 0.01), (0.2, 0.02), (0.07, 0.0), (0.07, 0.01)]


def _tables(rng: np.random.Generator, draws: int, seeds: int, p: float, r: float, sd: float) -> np.ndarray:
    """float [draws, seeds, N] differences in {-1, 0, 1} (a resolution's outcome minus the reference's)."""
    shared = rng.random((draws, 1, N)) < r
    u = rng.random((draws, 1, N))
    alike = np.where(u < p / 2, 1, np.where(u < p, -1, 0))
    effect = rng.normal(0.0, np.sqrt(2) * sd, (draws, seeds, 1)) / (1 - r)  # on the per-seed images only
    up = np.clip(p / 2 + effect / 2, 0.0, p)  # P(+1); P(-1) = p - up: the seed's mean moved by `effect`
    w = rng.random((draws, seeds, N))
    own = np.where(w < up, 1, np.where(w < p, -1, 0))
    return np.where(shared, alike, own).astype(float)


def _simulated_power(seeds: int, p: float, sd: float, seed: int) -> float:
    rng = np.random.default_rng([seed, seeds, int(p * 1000), int(sd * 1000)])
    shown = [
        scopes.rejects(_tables(rng, 1000, seeds, p, CORRELATION, sd), -MARGIN, ALPHA, binary=True, scope="model")
        for _ in range(DRAWS // 1000)
    ]
    return float(np.concatenate(shown).mean())


@pytest.mark.parametrize("seeds", [2, 3, 5])
@pytest.mark.parametrize(("discordance", "seed_sd"), DESIGNS)
def test_the_planned_power_is_the_simulated_power_of_the_test_that_runs(seeds, discordance, seed_sd):
    planned = plan_power(
        N, seeds, margin=MARGIN, level=1 - ALPHA, discordance=discordance, seed_correlation=CORRELATION, seed_sd=seed_sd
    )["power_at_margin"]
    simulated = _simulated_power(seeds, discordance, seed_sd, 47)
    assert abs(planned - simulated) <= 0.03, (planned, simulated)


def test_the_issue_cases_no_longer_plan_zero_where_the_test_has_power():
    """The issue's table: 656 images x 2 seeds planned 0.00 (seed sd 0.02) and 0.374 (seed sd 0) where the test
    has 0.090 and 0.131."""
    two = [plan_power(N, 2, margin=MARGIN, seed_sd=sd)["power_at_margin"] for sd in (0.02, 0.0)]
    assert two == [pytest.approx(0.090, abs=0.01), pytest.approx(0.131, abs=0.01)]


def test_the_simulated_step_is_the_decision_the_summary_takes():
    """The simulation runs scopes.rejects; stats.noninferiority (what the summary calls) decides the same step the
    same way on outcome tables with those differences."""
    rng = np.random.default_rng(5)
    d = _tables(rng, 60, 3, 0.2, CORRELATION, 0.01)
    shown = scopes.rejects(d, -MARGIN, ALPHA, binary=True, scope="model")
    base = rng.random(d.shape) < 0.8  # the outcome where nothing changes
    for table, expected in zip(d, shown, strict=True):
        other = np.where(table == 0, base[0], table == 1)
        ref = np.where(table == 0, base[0], table == -1)
        verdict = noninferiority({64: other, 128: ref}, margin=MARGIN, level=1 - ALPHA).verdicts[1].verdict
        assert (verdict == "non-inferior") == bool(expected), verdict
    assert 0 < shown.sum() < len(shown)  # both outcomes occur: the comparison can fail

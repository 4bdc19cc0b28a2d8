"""The group x resolution interaction test (resomap.stats.interaction_test): a seeded simulation of per-image
differences of 0/1 outcomes averaged over 2 seeds, as the summary gives it, shows it holds its level when the
values differ in size and spread but not in mean effect, and finds a real difference; a value without spread, values
that never vary, and bad input."""

from __future__ import annotations

import numpy as np
import pytest

from resomap import stats
from resomap.errors import ConfigError

REPS, ALPHA = 1000, 0.05
SE = (ALPHA * (1 - ALPHA) / REPS) ** 0.5  # the Monte-Carlo standard error of a rejection rate at ALPHA


def _differences(rng: np.random.Generator, n: int, discordance: float, effect: float, seeds: int = 2) -> np.ndarray:
    """Per image, the seeds' mean of (outcome at a resolution - outcome at the reference): a `discordance` share of
    images changes outcome under a seed, more of them for the worse by `effect` (the mean difference)."""
    flips = rng.random((seeds, n)) < discordance
    worse = rng.random((seeds, n)) < 0.5 - effect / (2 * discordance)
    return np.where(flips, np.where(worse, -1.0, 1.0), 0.0).mean(axis=0)


def _rejections(sizes, discordances, effects, seed: int) -> float:
    rng = np.random.default_rng(seed)
    codes = np.concatenate([np.full(n, k) for k, n in enumerate(sizes)])
    hits = 0
    for _ in range(REPS):
        d = np.concatenate([_differences(rng, n, q, e) for n, q, e in zip(sizes, discordances, effects, strict=True)])
        hits += stats.interaction_test(d, codes).p <= ALPHA
    return hits / REPS


NULLS = [  # the same mean effect in every value; sizes and spreads differ (the smaller value the noisier, or not)
    ((120, 280), (0.1, 0.35), (0.0, 0.0)),
    ((60, 400), (0.35, 0.1), (0.0, 0.0)),
    ((30, 400), (0.3, 0.05), (-0.03, -0.03)),
    ((40, 150, 300), (0.3, 0.1, 0.2), (0.0, 0.0, 0.0)),
]


@pytest.mark.parametrize(("sizes", "discordances", "effects"), NULLS)
def test_the_interaction_test_holds_its_level_with_unequal_sizes_and_spreads(sizes, discordances, effects):
    rate = _rejections(sizes, discordances, effects, seed=len(sizes) * 100 + sizes[0])
    assert ALPHA - 3 * SE <= rate <= ALPHA + 3 * SE, rate  # at its level: neither liberal nor far too conservative


def test_the_interaction_test_finds_a_real_difference():
    # one value loses 10 points at the smaller resolution, the other nothing: 400 images (ELPV's mono/poly split)
    assert _rejections((120, 280), (0.1, 0.35), (-0.1, 0.0), seed=7) >= 0.8


def test_a_value_without_spread_and_values_that_never_vary():
    rng = np.random.default_rng(0)
    d = np.r_[np.zeros(50), _differences(rng, 200, 0.3, -0.15)]
    codes = np.r_[np.zeros(50, int), np.ones(200, int)]
    found = stats.interaction_test(d, codes)  # the first value never changes: the HC3 Wald test
    assert found.method.startswith("Wald F of equal means, HC3") and found.p < 0.01
    assert found.values == [0, 1] and found.sizes == [50, 200] and found.means == [0.0, pytest.approx(d[50:].mean())]
    constant = stats.interaction_test(np.r_[np.zeros(5), -np.ones(5)], np.r_[np.zeros(5), np.ones(5)])
    assert constant.p == 0.0 and constant.method.startswith("no spread within any value")
    assert stats.interaction_test(np.zeros(10), np.r_[np.zeros(5), np.ones(5)]).p == 1.0


def test_bad_input_is_one_line():
    with pytest.raises(ConfigError, match="needs two group values with at least 2 images each"):
        stats.interaction_test(np.ones(5), np.zeros(5))
    with pytest.raises(ConfigError, match="needs two group values"):
        stats.interaction_test([0.0, 1.0, 0.5], [0, 0, 1])  # the second value has one image
    with pytest.raises(ConfigError, match="3 differences for 2 group codes"):
        stats.interaction_test([0.0, 1.0, 0.5], [0, 1])

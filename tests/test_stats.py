"""resomap.stats against known answers: bootstrap coverage, McNemar vs statsmodels/scipy, seed t-intervals, Holm,
the resolution recommendation, Pareto front, and bad inputs."""

from __future__ import annotations

import gc
import itertools
import json
import math

import numpy as np
import pytest
from scipy import stats as sps
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests

from resomap import stats
from resomap.errors import ConfigError


def _pair_from_table(n00: int, n01: int, n10: int, n11: int) -> tuple[np.ndarray, np.ndarray]:
    """Correctness arrays of models A and B whose 2x2 table (rows A wrong/right, columns B wrong/right) is given."""
    a = np.array([False] * n00 + [False] * n01 + [True] * n10 + [True] * n11)
    b = np.array([False] * n00 + [True] * n01 + [False] * n10 + [True] * n11)
    return a, b


def _resolution_data(accuracy: dict[int, float], *, seeds: int = 2, images: int = 300, noise: float = 0.05, seed=0):
    """Same images for every resolution: a shared difficulty u per (seed, image); an image is right at a resolution
    when u < accuracy, except a fraction `noise` of entries redrawn per resolution (equal accuracies differ a bit)."""
    rng = np.random.default_rng(seed)
    u = rng.random((seeds, images))
    out = {}
    for res, acc in accuracy.items():
        redraw = rng.random((seeds, images)) < noise
        out[res] = np.where(redraw, rng.random((seeds, images)) < acc, u < acc)
    return out


# ------------------------------------------------------------------------------------------------ bootstrap


def test_bootstrap_interval_covers_true_accuracy_at_nominal_rate():
    # 400 simulated test sets of 199 Bernoulli(0.8) images, 90% BCa intervals with 500 resamples each.
    # 199 images, not 200: 0.8 is then not a possible accuracy, so it never sits exactly on an interval end (with
    # 200 images it does ~2.5% of the time and the inclusive coverage reads ~0.92). Measured over 3000 sets, this
    # procedure covers 0.903. The observed coverage is a Binomial(400, c) proportion, sd sqrt(0.9 * 0.1 / 400) = 0.015:
    # [0.85, 0.95] is more than 3 sd from 0.90 on both sides (a false failure for ~1 seed in 1000), and still
    # rejects a miscalibrated interval (an 80% or a 99% one).
    rng = np.random.default_rng(2024)
    p, level, sets = 0.8, 0.9, 400
    covered = 0
    for i in range(sets):
        iv = stats.bootstrap_accuracy(rng.random(199) < p, level=level, resamples=500, seed=i)
        assert iv.available and iv.low <= iv.estimate <= iv.high
        covered += iv.low <= p <= iv.high
    assert 0.85 <= covered / sets <= 0.95


def test_bootstrap_accuracy_pools_seeds_and_resamples_images():
    rng = np.random.default_rng(0)
    correct = rng.random((3, 100)) < 0.7
    iv = stats.bootstrap_accuracy(correct, resamples=300)
    assert iv.n == 100 and iv.estimate == pytest.approx(correct.mean())
    assert iv.low < iv.estimate < iv.high
    again = stats.bootstrap_accuracy(correct, resamples=300)
    assert (again.low, again.high) == (iv.low, iv.high)  # seeded: reproducible
    json.dumps(iv.to_dict())


def test_bootstrap_all_correct_is_zero_width_with_a_reason_not_nan():
    iv = stats.bootstrap_accuracy(np.ones(50, bool), resamples=200)
    assert iv.available and iv.estimate == iv.low == iv.high == 1.0
    assert "zero-width" in iv.reason


def test_macro_f1_matches_sklearn_including_absent_classes():
    f1_score = pytest.importorskip("sklearn.metrics").f1_score
    rng = np.random.default_rng(1)
    for _ in range(30):  # 6 classes, 8 images: resamples routinely miss classes in y_true, y_pred or both
        yt, yp = rng.integers(0, 6, 8), rng.integers(0, 6, 8)
        want = f1_score(yt, yp, average="macro", zero_division=0)
        assert stats.macro_f1(yt, yp, 6) == pytest.approx(want)
    batch_t, batch_p = rng.integers(0, 4, (5, 12)), rng.integers(0, 4, (5, 12))  # vectorized over rows
    want = [f1_score(t, p, average="macro", zero_division=0) for t, p in zip(batch_t, batch_p)]
    np.testing.assert_allclose(stats.macro_f1(batch_t, batch_p, 4), want)


def test_bootstrap_metric_macro_f1_and_accuracy():
    rng = np.random.default_rng(3)
    y_true = np.array(["cat", "dog", "owl"])[rng.integers(0, 3, 150)]
    y_pred = np.where(rng.random(150) < 0.75, y_true, "dog")
    f1 = stats.bootstrap_metric(y_true, y_pred, metric="macro_f1", resamples=300)
    acc = stats.bootstrap_metric(y_true, y_pred, metric="accuracy", resamples=300)
    assert acc.estimate == pytest.approx(np.mean(y_true == y_pred))
    assert f1.available and f1.low < f1.estimate < f1.high
    assert acc.available and acc.low < acc.estimate < acc.high


# ------------------------------------------------------------------------------------------------ seeds


def test_seed_interval_is_the_student_t_interval():
    values = [0.81, 0.79, 0.84, 0.80]
    iv = stats.seed_interval(values, level=0.9)
    sem = np.std(values, ddof=1) / math.sqrt(4)
    low, high = sps.t.interval(0.9, df=3, loc=np.mean(values), scale=sem)
    assert iv.estimate == pytest.approx(0.81) and iv.std == pytest.approx(np.std(values, ddof=1))
    assert (iv.low, iv.high) == (pytest.approx(low), pytest.approx(high))
    assert iv.n == 4 and iv.available


def test_seed_interval_one_seed_is_unavailable():
    iv = stats.seed_interval([0.8])
    assert not iv.available and iv.reason == "one seed: no spread across seeds"
    assert iv.estimate == 0.8 and iv.low is None and iv.high is None
    assert json.dumps(iv.to_dict())  # no NaN in the JSON
    assert not stats.seed_interval([]).available
    assert not stats.seed_interval([0.8, float("nan")]).available


# ------------------------------------------------------------------------------------------------ paired tests


def test_mcnemar_matches_statsmodels_and_exact_binomial():
    n00, n01, n10, n11 = 40, 17, 6, 137
    a, b = _pair_from_table(n00, n01, n10, n11)
    t = stats.paired_test(a, b)
    assert (t.b01, t.b10) == (17, 6)
    assert t.p_value == pytest.approx(mcnemar([[n00, n01], [n10, n11]], exact=True).pvalue)
    assert t.p_value == pytest.approx(sps.binomtest(17, 23, 0.5).pvalue)
    assert t.effect == pytest.approx(b.mean() - a.mean()) and t.low < t.effect < t.high


@pytest.mark.parametrize("b01,b10", [(17, 6), (15, 6), (14, 6), (10, 10), (0, 7), (30, 2)])
def test_mcnemar_interval_excludes_zero_exactly_when_p_below_alpha(b01, b10):
    a, b = _pair_from_table(50, b01, b10, 100)
    for level in (0.9, 0.95, 0.99):
        t = stats.paired_test(a, b, level=level)
        assert (t.low > 0 or t.high < 0) == (t.p_value <= 1 - level)


@pytest.mark.parametrize("method", ["mcnemar", "bootstrap"])
@pytest.mark.parametrize("shape", [(120,), (3, 120)])
def test_identical_models_are_never_different(method, shape):
    correct = np.random.default_rng(5).random(shape) < 0.7
    t = stats.paired_test(correct, correct.copy(), method=method, resamples=200)
    assert t.available and t.p_value == 1.0 and t.effect == 0.0 and t.low == t.high == 0.0
    rows = stats.compare_resolutions({32: correct, 64: correct.copy()}, method=method, resamples=200)
    assert not rows[0].significant and rows[0].p_adjusted == 1.0


@pytest.mark.parametrize("method", ["mcnemar", "bootstrap"])
@pytest.mark.parametrize("seeds", [1, 3])
def test_clearly_better_model_is_significant_with_the_right_sign(method, seeds):
    rng = np.random.default_rng(7)
    weak, strong = rng.random((seeds, 300)) < 0.60, rng.random((seeds, 300)) < 0.95
    t = stats.paired_test(weak, strong, method=method, resamples=500)
    assert t.effect == pytest.approx(strong.mean() - weak.mean()) and t.effect > 0.25
    assert t.p_value < 0.01 and 0 < t.low < t.effect < t.high
    t_rev = stats.paired_test(strong, weak, method=method, resamples=500)
    assert t_rev.effect == pytest.approx(-t.effect) and t_rev.high < 0 and t_rev.p_value < 0.01
    assert (t.n_images, t.n_seeds) == (300, seeds)


def test_bootstrap_paired_test_with_one_seed_agrees_with_mcnemar():
    a, b = _pair_from_table(60, 20, 8, 112)  # the sign-flip test on one seed is McNemar's test
    exact = stats.paired_test(a, b).p_value
    boot = stats.paired_test(a, b, method="bootstrap", resamples=2000).p_value
    # was abs=0.015 (2,000 random flips); the sign-flip p on 0/1 outcomes is now exact: McNemar's exact p itself
    assert boot == pytest.approx(exact, rel=1e-9)


def _two_seed_table() -> tuple[np.ndarray, np.ndarray]:
    """2 seeds x 40 images where discordance is concentrated in images: 8 images B right / A wrong under both seeds,
    2 images A right / B wrong under both, 2 images discordant under one seed only (B better), the rest the same."""
    a = np.zeros((2, 40), dtype=bool)
    b = np.zeros((2, 40), dtype=bool)
    b[:, :8] = True  # B better under both seeds
    a[:, 8:10] = True  # A better under both seeds
    b[0, 10:12] = True  # B better under seed 0 only
    a[:, 12:30] = b[:, 12:30] = True  # both right
    return a, b


def test_clustered_mcnemar_with_two_seeds_equals_the_exact_sign_flip_and_durkalski():
    """With several seeds the default test treats each image as one unit: its p equals the exact sign-flip test of
    the per-image differences enumerated here by hand, and is close to Durkalski et al.'s (2003) clustered McNemar
    chi-square; the McNemar test on the table summed over seeds (pseudo-replication) gives a smaller p."""
    a, b = _two_seed_table()
    t = stats.paired_test(a, b, resamples=5000)  # 2 ** 12 sign patterns <= 5000: scipy enumerates them exactly
    assert t.method.startswith("clustered McNemar (2 seeds") and (t.b01, t.b10) == (18, 4)
    d = (b.astype(float) - a.astype(float)).mean(axis=0)
    nonzero = d[d != 0]
    flips = np.array(list(itertools.product((1.0, -1.0), repeat=nonzero.size)))
    exact = float(np.mean(np.abs(flips @ nonzero) >= abs(nonzero.sum()) - 1e-12))
    assert t.p_value == pytest.approx(exact, rel=1e-9)
    diff = b.sum(axis=0).astype(float) - a.sum(axis=0)  # b_k - c_k per image (cluster)
    durkalski = sps.chi2.sf(diff.sum() ** 2 / (diff**2).sum(), df=1)
    assert t.p_value == pytest.approx(durkalski, abs=0.02)
    summed = [[int((~a & ~b).sum()), 18], [4, int((a & b).sum())]]
    assert mcnemar(summed, exact=True).pvalue < t.p_value / 2  # summing over seeds overstates the evidence
    assert t.effect == pytest.approx(b.mean() - a.mean()) and t.low < t.effect < t.high
    one = stats.paired_test(a[:1], b[:1])  # one seed: the exact McNemar test stays
    assert one.method == "McNemar exact" and one.p_value == pytest.approx(
        mcnemar([[int((~a[0] & ~b[0]).sum()), 10], [2, int((a[0] & b[0]).sum())]], exact=True).pvalue
    )


# ------------------------------------------------------------------------------------------------ two-way interval


def test_twoway_bootstrap_covers_the_mean_over_images_and_seeds_where_the_image_bootstrap_does_not():
    """y = mu + seed effect + image effect + noise (5 seeds x 60 images): the two-way interval covers mu at about
    the nominal rate (the pigeonhole bootstrap runs a little under with few seeds: 0.93 measured); the image-only
    bootstrap, blind to the seed effect, covers it far less often."""
    rng = np.random.default_rng(3)
    runs, twoway_hits, image_hits = 300, 0, 0
    for r in range(runs):
        y = 0.5 + 0.06 * rng.standard_normal((5, 1)) + 0.1 * rng.standard_normal((1, 60))
        y = y + 0.1 * rng.standard_normal((5, 60))
        iv = stats.twoway_bootstrap(y, level=0.95, resamples=500, seed=r)
        twoway_hits += iv.low <= 0.5 <= iv.high
        img = stats.bootstrap_scores(y, level=0.95, resamples=500, seed=r, method="percentile")
        image_hits += img.low <= 0.5 <= img.high
    assert twoway_hits / runs >= 0.89  # nominal 0.95, binomial sd 0.013 over 300 runs
    assert image_hits / runs < 0.75


def test_twoway_bootstrap_stays_in_the_range_and_needs_three_seeds():
    rng = np.random.default_rng(0)
    correct = rng.random((3, 50)) < 0.97  # near the top of [0, 1]
    iv = stats.twoway_bootstrap(correct, resamples=400)
    assert iv.available and 0.0 <= iv.low <= iv.estimate <= iv.high <= 1.0
    assert "over test images and training seeds" in iv.method
    for few in (correct[:1], correct[:2]):  # one or two seeds: no interval, the reason in words
        found = stats.twoway_bootstrap(few, resamples=400)
        assert not found.available and found.reason == "not available: needs >= 3 seeds"
        assert found.low is None and found.high is None and found.estimate == pytest.approx(few.mean())
    assert stats.TWOWAY_MIN_SEEDS == 3
    same = stats.twoway_bootstrap(np.stack([correct[0]] * 3), resamples=2000, seed=1)
    image = stats.bootstrap_scores(correct[0], resamples=2000, seed=1, method="percentile")
    assert (same.low, same.high) == pytest.approx((image.low, image.high), abs=0.02)  # no seed variation to add


def _correct_with_seed_effect(rng: np.random.Generator, seeds: int, seed_sd: float, n: int = 180) -> np.ndarray:
    """0/1 outcomes [seeds, n]: image i right with probability p_i = clip(0.75 + 0.2 z_i) moved by each seed's
    effect (sd `seed_sd`), clipped to [0, 1]."""
    image = np.clip(0.75 + 0.2 * rng.standard_normal(n), 0.0, 1.0)
    p = np.clip(image[None, :] + seed_sd * rng.standard_normal((seeds, 1)), 0.0, 1.0)
    return rng.random((seeds, n)) < p


def test_twoway_interval_with_three_seeds_covers_the_grand_mean_under_a_real_seed_effect():
    """The setting of the quickstart before 2026-11-25: 180 test images, 0/1 outcomes, the seed-to-seed sd of
    accuracy its CNNs showed (0.044). With 3 seeds the interval over test images and training seeds covers the grand
    mean (over the image and the seed populations) at about the nominal rate (0.95 measured over 300 runs); with 2
    seeds none is given. Measured beside it, not asserted: a seed sd of 0.09 is covered 0.84 with 3 seeds (0.83 with
    2, 0.93 with 5): the seed part is estimated from the few seeds there are (stats.twoway_bootstrap)."""
    truth = _correct_with_seed_effect(np.random.default_rng(99), 4000, 0.044, 4000).mean()  # sd ~0.001
    rng = np.random.default_rng(1)
    runs, hits = 300, 0
    for r in range(runs):
        correct = _correct_with_seed_effect(rng, 3, 0.044)
        iv = stats.twoway_bootstrap(correct, level=0.95, resamples=400, seed=r)
        hits += iv.low <= truth <= iv.high
        if r < 5:  # the same draws with 2 seeds: nothing produced
            assert not stats.twoway_bootstrap(correct[:2], resamples=400, seed=r).available
    assert hits / runs >= 0.9  # nominal 0.95, binomial sd 0.013 over 300 runs


# ------------------------------------------------------------------------------------------------ Holm, resolutions


def test_holm_matches_statsmodels_and_known_answer():
    p = [0.01, 0.04, 0.03, 0.2, 0.001]
    np.testing.assert_allclose(stats.holm(p), multipletests(p, method="holm")[1])
    np.testing.assert_allclose(stats.holm([0.01, 0.04, 0.03]), [0.03, 0.06, 0.06])
    assert stats.holm([]).size == 0
    with pytest.raises(ConfigError):
        stats.holm([0.5, 1.2])
    rng = np.random.default_rng(7)  # random lengths, ties, zeros, ones and values whose products pass 1
    # multipletests calls gc.collect() each time; with the suite's heap frozen each collection scans only what is new
    # (without it the 300 references took 264 s late in the suite)
    gc.freeze()
    try:
        for _ in range(300):
            m = int(rng.integers(1, 12))
            q = rng.choice([0.0, 0.001, 0.02, 0.05, 0.3, 1.0], size=m) if rng.random() < 0.3 else rng.random(m) ** 3
            np.testing.assert_allclose(stats.holm(q), multipletests(q, method="holm")[1], rtol=0, atol=1e-15)
    finally:
        gc.unfreeze()


def test_compare_resolutions_gives_every_pair_holm_adjusted():
    data = _resolution_data({16: 0.55, 32: 0.9, 64: 0.9, 128: 0.9})
    rows = stats.compare_resolutions(data)
    pairs = [(16, 32), (16, 64), (16, 128), (32, 64), (32, 128), (64, 128)]
    assert [(r.resolution_a, r.resolution_b) for r in rows] == pairs
    raw = [r.test.p_value for r in rows]
    np.testing.assert_allclose([r.p_adjusted for r in rows], multipletests(raw, method="holm")[1])
    assert all(r.significant == (r.p_adjusted < 0.05) for r in rows)
    assert all(r.test.effect > 0.25 for r in rows[:3])  # 16 px clearly worse
    assert json.dumps([r.to_dict() for r in rows])
    assert len(stats.compare_resolutions({r: data[r] for r in (16, 32, 64)})) == 3
    assert stats.compare_resolutions({32: data[32]}) == []


def test_smallest_sufficient_resolution_skips_the_significantly_worse_one():
    data = _resolution_data({16: 0.55, 32: 0.9, 64: 0.9, 128: 0.9})
    rec = stats.smallest_sufficient_resolution(data)
    assert rec.available and rec.resolution == 32 and rec.best_resolution in (32, 64, 128)
    row16 = next(r for r in rec.rows if r.resolution_a == 16 and r.resolution_b == rec.best_resolution)
    assert row16.significant and row16.test.effect > 0
    assert "clustered McNemar" in rec.reason and "level 0.95" in rec.reason and "16 px (0.5" in rec.reason
    assert json.dumps(rec.to_dict())
    assert stats.smallest_sufficient_resolution(data, method="bootstrap", resamples=500).resolution == 32


def test_recommendation_reason_states_the_test_and_level_in_words():
    a, b = _pair_from_table(30, 12, 8, 350)  # 128 px better by 4 / 400 = 0.01; McNemar p = binomtest(12, 20) = 0.50
    rec = stats.smallest_sufficient_resolution({32: a, 128: b})
    assert (rec.resolution, rec.best_resolution) == (32, 128)
    prefix = "32 px: not significantly below the best (128 px: 0.905 vs 0.895, McNemar exact, Holm-adjusted p = 0.5 "
    assert rec.reason.startswith(prefix + "at level 0.95); difference -0.010, 95% CI [")


def test_smallest_sufficient_resolution_when_all_equal_is_the_smallest():
    rng = np.random.default_rng(11)
    same = rng.random((2, 200)) < 0.8
    rec = stats.smallest_sufficient_resolution({64: same, 16: same.copy(), 32: same.copy()})
    assert rec.resolution == 16 and rec.best_resolution == 16
    noisy = _resolution_data({16: 0.8, 32: 0.8, 64: 0.8}, seed=3)
    assert stats.smallest_sufficient_resolution(noisy).resolution == 16


def test_margin_accepts_a_small_significant_drop():
    a, b = _pair_from_table(20, 40, 10, 330)  # 128 px is significantly better by 30 / 400 = 0.075
    assert stats.smallest_sufficient_resolution({32: a, 128: b}).resolution == 128
    rec = stats.smallest_sufficient_resolution({32: a, 128: b}, margin=0.1)
    assert rec.resolution == 32 and "margin" in rec.reason


# ------------------------------------------------------------------------------------------------ Pareto


def test_pareto_front_keeps_ties_and_drops_dominated():
    points = [("a", 0.9, 10), ("b", 0.9, 10), ("c", 0.8, 5), ("d", 0.85, 12), ("e", 0.7, 5), ("f", 0.95, 40)]
    front = stats.pareto_front(points)
    assert [p.name for p in front] == ["c", "a", "b", "f"]
    assert stats.pareto_front([]) == []


def test_pareto_indices_is_the_same_front_over_cost_score_pairs_and_skips_non_finite():
    points = [("a", 0.9, 10), ("b", 0.9, 10), ("c", 0.8, 5), ("d", 0.85, 12), ("e", 0.7, 5), ("f", 0.95, 40)]
    pairs = [(cost, acc) for _, acc, cost in points] + [(float("nan"), 1.0), (1.0, float("inf"))]
    front = stats.pareto_indices(pairs)
    assert front == [2, 0, 1, 5]  # by cost, ties in input order; the non-finite points are left out
    assert [points[i][0] for i in front] == [p.name for p in stats.pareto_front(points)]


THREE = (stats.Axis("score"), stats.Axis("cost", higher_is_better=False), stats.Axis("quality"))


def _standing(names, shown, exact=(), untested=()):
    """paired_front over every pair of `names` on THREE: `shown` {(axis, a, b): effect b - a} tested at p 1e-6, every
    other pair at p 0.9 (effect 0.01 in b's favour); `exact` {(axis, a, b): effect} compared exactly; `untested`
    [(axis, a, b)] with no test."""
    diffs = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            for axis in THREE:
                key = (axis.name, a, b)
                if key in exact:
                    diffs.append(stats.Difference(axis.name, a, b, exact[key], exact=True))
                elif key in untested:
                    diffs.append(stats.Difference(axis.name, a, b, None, reason="no test"))
                else:
                    sign = 1 if axis.higher_is_better else -1
                    effect, p = (shown[key], 1e-6) if key in shown else (0.01 * sign, 0.9)
                    diffs.append(stats.Difference(axis.name, a, b, effect, p))
    standings, _ = stats.paired_front(names, THREE, diffs, 0.05)
    return {s.name: s for s in standings}


def test_paired_front_drops_a_point_shown_worse_on_score_and_better_on_nothing():
    # 64 px shown above 32 px on score by its test; cost and quality differences not shown
    found = _standing(["32", "64"], {("score", "32", "64"): 0.18})
    assert found["64"].on_front and found["64"].dropped_by is None
    assert not found["32"].on_front
    assert (found["32"].dropped_by, found["32"].better_on, found["32"].exact_on) == ("64", ("score",), ())
    assert found["32"].p_holm == pytest.approx((3e-6,))  # Holm over the 3 tests: the smallest p times 3


def test_paired_front_keeps_a_point_worse_on_score_but_shown_cheaper():
    # 32 px is shown worse on score but shown cheaper (64 px's latency higher): neither is dropped
    found = _standing(["32", "64"], {("score", "32", "64"): 0.18, ("cost", "32", "64"): 4.0})
    assert found["32"].on_front and found["64"].on_front


def test_paired_front_keeps_both_when_no_difference_is_shown():
    # 64 px is ahead on every estimate, but no test rejects: no evidence, both stay
    found = _standing(["32", "64"], {})
    assert found["32"].on_front and found["64"].on_front
    # the same direction as counts (exact on every axis): the comparison decides, and the drop says so
    exact = {("score", "32", "64"): 0.04, ("cost", "32", "64"): -0.5, ("quality", "32", "64"): 0.02}
    bare = _standing(["32", "64"], {}, exact)
    assert not bare["32"].on_front and bare["32"].better_on == ("score", "cost", "quality")
    assert bare["32"].exact_on == ("score", "cost", "quality") and bare["32"].p_holm == ()


def test_paired_front_an_untested_axis_blocks_the_drop():
    # 64 px is shown better on score, but the quality of the pair has no test: 32 px might be better there
    found = _standing(["32", "64"], {("score", "32", "64"): 0.18}, untested=[("quality", "32", "64")])
    assert found["32"].on_front and found["64"].on_front


def test_paired_front_is_never_empty_when_the_drops_run_in_a_circle():
    # a drops b (score), b drops c (cost), c drops a (quality), nothing else shown: none is dropped by a point it
    # reaches itself
    circle = {("score", "a", "b"): -2.0, ("cost", "b", "c"): 2.0, ("quality", "a", "c"): 2.0}
    assert all(s.on_front for s in _standing(["a", "b", "c"], circle).values())
    # a fourth point shown worse than a on score (and better on nothing) is still dropped
    found = _standing(["a", "b", "c", "d"], {**circle, ("score", "a", "d"): -3.0})
    assert [n for n, s in found.items() if not s.on_front] == ["d"] and found["d"].dropped_by == "a"


# ------------------------------------------------------------------------------------------------ per-image scores


def test_score_functions_equal_the_correctness_ones_on_0_1_scores():
    rng = np.random.default_rng(3)
    a, b = rng.random((2, 80)) < 0.7, rng.random((2, 80)) < 0.8
    assert stats.bootstrap_scores(a.astype(float), resamples=300, seed=4) == stats.bootstrap_accuracy(
        a, resamples=300, seed=4
    )
    by_score = stats.paired_score_test(a.astype(float), b.astype(float), resamples=300, seed=2)
    by_correct = stats.paired_test(a, b, method="bootstrap", resamples=300, seed=2)
    assert (by_score.low, by_score.high, by_score.p_value) == (by_correct.low, by_correct.high, by_correct.p_value)
    assert (by_score.b01, by_score.b10, by_score.method) == (by_correct.b01, by_correct.b10, by_correct.method)
    assert by_score.effect == pytest.approx(by_correct.effect, abs=1e-12)


def test_paired_score_test_on_float_scores_finds_a_shifted_iou():
    rng = np.random.default_rng(5)
    iou_a = rng.uniform(0.3, 0.7, 60)
    iou_b = np.clip(iou_a + 0.05 + rng.normal(0, 0.02, 60), 0, 1)
    test = stats.paired_score_test(iou_a, iou_b, resamples=500)
    assert test.effect == pytest.approx(float((iou_b - iou_a).mean()))
    assert 0 < test.low < test.effect < test.high and test.p_value < 0.01
    same = stats.paired_score_test(iou_a, iou_a)
    assert (same.effect, same.low, same.high, same.p_value) == (0.0, 0.0, 0.0, 1.0)
    iv = stats.bootstrap_scores(iou_a, resamples=500)
    assert iv.available and iv.low < float(iou_a.mean()) < iv.high


def test_sign_flip_test_is_exact_on_few_differences():
    # 4 nonzero differences of one sign: 2 of the 16 sign patterns are as extreme, p = 2 / 16
    assert stats.sign_flip_test(np.array([0.0, 1.0, 2.0, 0.5, 1.5])) == pytest.approx(2 / 16)
    assert stats.sign_flip_test(np.zeros(7)) == 1.0


def _enumerated(d: np.ndarray, alternative: str) -> float:
    """The share of all 2^n sign patterns of d whose signed sum is as extreme as the observed one."""
    sums = np.array(list(itertools.product((1.0, -1.0), repeat=d.size))) @ d
    observed, tol = d.sum(), 1e-9
    if alternative == "two-sided":
        return float(np.mean(np.abs(sums) >= abs(observed) - tol))
    if alternative == "greater":
        return float(np.mean(sums >= observed - tol))
    return float(np.mean(sums <= observed + tol))


# 14 differences on the 1/2 lattice (two seeds averaged per image) and one on 1/3: the lattice found is 1/6
LATTICE_TABLE = np.array([0.5, 1.0, 0.5, -0.5, 1.0, 0.5, 0.5, -1.0, 1.0, 0.5, 0.0, 0.5, -0.5, 1.0, 1 / 3])


@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_exact_sign_flip_p_equals_full_enumeration_of_the_sign_patterns(alternative):
    found = stats.sign_flip(LATTICE_TABLE, alternative=alternative)
    assert found.exact and found.lattice == 6 and found.method == "exact (lattice 1/6)"
    assert found.n_nonzero == 14 and found.standard_error == 0.0
    assert found.p_value == pytest.approx(_enumerated(LATTICE_TABLE, alternative), abs=1e-12)
    # the same table given its seed count 2: 1/2 does not fit the 1/3 entry, the search still finds 1/6
    assert stats.sign_flip(LATTICE_TABLE, alternative=alternative, lattice=2).p_value == found.p_value


def test_exact_sign_flip_p_equals_an_integer_count_on_many_differences():
    """60 differences on 1/7 (values grouped and convolved, both ways the code convolves a group) against exact
    integer counts of the signed sums (a plain dictionary of counts, Python integers)."""
    rng = np.random.default_rng(11)
    m = rng.integers(1, 4, 60) * rng.choice([-1, 1], 60)  # many 1, 2, 3 (convolved every v-th entry) ...
    m[:3] = (6, -6, 7)  # ... and few 6 and 7 (a shifted copy per tap)
    m[3:40] = np.abs(m[3:40])  # lean positive: a small p
    counts = {0: 1}
    for v in np.abs(m).tolist():
        nxt: dict[int, int] = {}
        for total, c in counts.items():
            nxt[total + v] = nxt.get(total + v, 0) + c
            nxt[total - v] = nxt.get(total - v, 0) + c
        counts = nxt
    observed = int(m.sum())
    two_sided = sum(c for t, c in counts.items() if abs(t) >= abs(observed)) / 2**60
    greater = sum(c for t, c in counts.items() if t >= observed) / 2**60
    assert stats.sign_flip_test(m / 7) == pytest.approx(two_sided, abs=1e-12) and two_sided < 0.01
    assert stats.sign_flip_test(m / 7, alternative="greater", lattice=7) == pytest.approx(greater, abs=1e-12)


def test_exact_sign_flip_p_does_not_depend_on_the_seed_or_the_resamples():
    """The issue's case in spirit: with 2,000 random flips the p of two models' seed-averaged outcomes moved with
    the flips' seed (0.018 reported where the exact p was 0.0121); on the 1/S lattice it is exact, one value."""
    rng = np.random.default_rng(3)
    a, b = rng.random((2, 180)) < 0.80, rng.random((2, 180)) < 0.86
    found = {stats.paired_test(a, b, resamples=r, seed=s).p_value for s in range(5) for r in (200, 2000)}
    assert len(found) == 1
    d = (b.astype(float) - a.astype(float)).mean(axis=0)
    assert found == {stats.sign_flip(d).p_value} and stats.sign_flip(d).method == "exact (lattice 1/2)"
    t = stats.paired_test(a, b)
    assert "exact sign-flip test" in t.method
    sampled = {
        float(sps.permutation_test((d[d != 0],), np.mean, permutation_type="samples", n_resamples=2000, rng=s).pvalue)
        for s in range(5)
    }
    assert len(sampled) > 1  # what 2,000 random flips gave: a p that moves with the seed


def test_sign_flip_off_a_lattice_states_its_monte_carlo_error():
    """Continuous differences (IoU-like) of many images: random flips, enough for a standard error <= 0.002 at the
    reported p, repeatable with the seed; close to the normal approximation."""
    d = np.random.default_rng(5).normal(0.012, 0.2, 600)
    found = stats.sign_flip(d, seed=1)
    assert not found.exact and found.method == "Monte Carlo" and found.lattice is None
    assert found.standard_error <= 0.002 and found.flips >= 2000
    assert found.standard_error == pytest.approx(math.sqrt(found.p_value * (1 - found.p_value) / found.flips))
    assert stats.sign_flip(d, seed=1) == found  # seeded: the same p every time
    normal = 2 * sps.norm.sf(abs(d.sum()) / math.sqrt((d**2).sum()))
    assert found.p_value == pytest.approx(normal, abs=4 * 0.002 + 0.005)
    assert "Monte Carlo" in stats.paired_score_test(d[None, :] + 0.5, np.full((1, 600), 0.5)).method
    few = stats.sign_flip(d[:12])  # 12 differences: all 4,096 sign patterns counted
    assert few.exact and few.flips == 4096 and few.p_value == pytest.approx(_enumerated(d[:12], "two-sided"))


def test_exact_sign_flip_is_fast_on_thousands_of_images():
    import time

    rng = np.random.default_rng(2)
    d = rng.integers(1, 65, 5000) * rng.choice([-1, 1], 5000) / 64  # 64 seeds averaged, 5,000 images
    start = time.perf_counter()
    found = stats.sign_flip(d)
    assert time.perf_counter() - start < 2.0  # about 0.15 s on 2 cores
    assert found.method == "exact (lattice 1/64)"
    normal = 2 * sps.norm.sf(abs(d.sum()) / math.sqrt((d**2).sum()))
    assert found.p_value == pytest.approx(normal, abs=0.005)


# ------------------------------------------------------------------------------------------------ bad inputs

GOOD = np.random.default_rng(0).random(50) < 0.7


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda: stats.bootstrap_accuracy(GOOD, level=0), id="level-0"),
        pytest.param(lambda: stats.bootstrap_accuracy(GOOD, level=1.5), id="level-1.5"),
        pytest.param(lambda: stats.seed_interval([0.8, 0.9], level=1.0), id="seed-level-1"),
        pytest.param(lambda: stats.paired_test(GOOD, GOOD, level=-0.1), id="paired-level"),
        pytest.param(lambda: stats.bootstrap_accuracy(GOOD, resamples=0), id="resamples-0"),
        pytest.param(lambda: stats.bootstrap_metric(GOOD, GOOD, resamples=-5), id="resamples-neg"),
        pytest.param(lambda: stats.paired_test(GOOD, GOOD[:40]), id="mismatched-pair"),
        pytest.param(lambda: stats.compare_resolutions({32: GOOD, 64: GOOD[:40]}), id="mismatched-res"),
        pytest.param(lambda: stats.bootstrap_metric([0, 1, 2], [0, 1]), id="mismatched-labels"),
        pytest.param(lambda: stats.bootstrap_accuracy([0, 1, 2]), id="not-binary"),
        pytest.param(lambda: stats.paired_test(GOOD, GOOD, method="ttest"), id="unknown-method"),
        pytest.param(lambda: stats.smallest_sufficient_resolution({}), id="no-resolutions"),
        pytest.param(lambda: stats.smallest_sufficient_resolution({32: GOOD}, margin=-0.1), id="bad-margin"),
        pytest.param(lambda: stats.pareto_front([("a", float("nan"), 1)]), id="pareto-nan"),
        pytest.param(lambda: stats.bootstrap_scores([0.5, float("nan")]), id="scores-nan"),
        pytest.param(lambda: stats.paired_score_test([0.1, 0.2], [0.3]), id="mismatched-scores"),
    ],
)
def test_bad_settings_raise_config_error_with_one_line_message(call):
    with pytest.raises(ConfigError) as err:
        call()
    assert str(err.value) and "\n" not in str(err.value)


def test_too_small_samples_are_unavailable_with_a_reason():
    small = np.array([True, False, True, True, False])
    for result in (
        stats.bootstrap_accuracy(small),
        stats.bootstrap_metric(small.astype(int), np.ones(5, int)),
        stats.bootstrap_accuracy(np.zeros(0, bool)),
        stats.paired_test(small, ~small, method="bootstrap"),
    ):
        assert not result.available and result.reason and "\n" not in result.reason
        assert result.low is None and result.high is None
    assert stats.paired_test(small, ~small).available  # McNemar's exact test is fine on few images
    rec = stats.smallest_sufficient_resolution({16: ~small, 32: small}, method="bootstrap")  # 32 px best: test 16
    assert not rec.available and rec.resolution is None and "at least" in rec.reason


def test_stats_is_the_bottom_layer_it_imports_nothing_of_resomap_but_errors():
    # imports inside functions count too (scipy/statsmodels are imported there): the whole AST is read
    import ast
    from pathlib import Path

    package = Path(stats.__file__).parent
    found = set()
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
    inside = {name for name in found if name == "resomap" or name.startswith("resomap.")}
    assert inside and {name for name in inside if not name.startswith("resomap.stats")} == {"resomap.errors"}

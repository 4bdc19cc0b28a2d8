"""Decisions at a stated margin (resomap.stats.decide) against known answers: the error rate of "non-inferior" when
the truth is exactly the margin below the reference, the power the planner predicts, identical models, and the
per-image test over seeds against an independent implementation (statsmodels)."""

from __future__ import annotations

import numpy as np
import pytest

from resomap.errors import ConfigError
from resomap.stats import noninferiority, plan_power, relabel_min_p, relabel_seeds_needed

SIMS = 1000
ALPHA = 0.05


def _sim_error(p: float) -> float:
    return 3 * np.sqrt(p * (1 - p) / SIMS)  # three binomial standard errors of a rate estimated from SIMS sweeps


def _outcomes(rng, n: int, seeds: int, p: np.ndarray) -> np.ndarray:
    """0/1 outcomes [seeds, n]: image i correct with probability p[i] under every seed, independently."""
    return rng.random((seeds, n)) < p[None, :]


def test_non_inferior_is_called_at_most_alpha_when_the_truth_is_the_margin_below():
    """1,000 simulated sweeps (3 resolutions, 2 seeds, 300 images) where the middle resolution is exactly `margin`
    below the reference on every image's probability and the smallest further below: the fixed sequence calls any
    resolution non-inferior at most alpha (+ simulation error) of the time (the family-wise error)."""
    rng = np.random.default_rng(1)
    n, margin = 300, 0.05
    called = 0
    for _ in range(SIMS):
        ease = rng.uniform(0.55, 0.95, n)  # images differ in difficulty; the seeds of one image are correlated
        scores = {
            128: _outcomes(rng, n, 2, ease),
            64: _outcomes(rng, n, 2, ease - margin),
            32: _outcomes(rng, n, 2, ease - 2 * margin),
        }
        decision = noninferiority(scores, margin=margin, level=1 - ALPHA)
        called += any(v.verdict == "non-inferior" for v in decision.verdicts)
    assert called / SIMS <= ALPHA + _sim_error(ALPHA), called


def test_power_with_no_true_difference_is_what_the_planner_predicts():
    """One seed, no true difference, a fraction q of images discordant (half each way): the rate of "non-inferior"
    over 1,000 sweeps matches plan_power's prediction for that discordance within simulation error."""
    rng = np.random.default_rng(2)
    n, margin, q = 400, 0.05, 0.2
    predicted = plan_power(n, 1, margin=margin, level=1 - ALPHA, discordance=q, scope="checkpoint")["power_at_margin"]
    shown = 0
    for _ in range(SIMS):
        ref = rng.random(n) < 0.8
        flip = rng.random(n) < q
        other = ref.copy()
        # a discordant image goes right->wrong or wrong->right with probability 1/2 each: no true difference
        up = flip & (rng.random(n) < 0.5)
        other[flip] = up[flip]
        ref = np.where(flip, ~up, ref)
        found = noninferiority({64: other[None], 128: ref[None]}, margin=margin, scope="checkpoint")
        shown += found.verdicts[1].verdict == "non-inferior"
    assert 0.3 < predicted < 0.95  # a design in the range where the check means something
    assert abs(shown / SIMS - predicted) <= _sim_error(predicted) + 0.02, (shown / SIMS, predicted)


def test_identical_models_are_never_called_inferior():
    """Identical predictions at every resolution and seed: non-inferior at both scopes once the images can rule
    out the margin. With no image changing outcome the score test still counts the discordance it has not seen
    (Tango's restricted estimate): 120 images cannot rule out a 2-point drop (z = 1.57), 400 can (z = 2.86)."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        same = rng.random((2, 400)) < rng.uniform(0.3, 0.9)
        for scope in ("model", "checkpoint"):
            decision = noninferiority({32: same, 64: same.copy(), 128: same.copy()}, margin=0.02, scope=scope)
            assert [v.verdict for v in decision.verdicts] == ["reference", "non-inferior", "non-inferior"]
            assert decision.resolution == 32 and decision.decided
    few = rng.random((2, 120)) < 0.8
    found = noninferiority({64: few, 128: few.copy()}, margin=0.02).verdicts[1]
    assert found.verdict == "undecided" and 0.05 < found.p_value < 0.07


def test_the_per_image_test_over_seeds_matches_statsmodels():
    """Scores other than 0/1 (an IoU), two seeds, checkpoint scope: the image is the unit (its seeds averaged), and
    the one-sided p, bounds and difference equal statsmodels' one-sample t-test of the per-image differences
    against -margin. (0/1 outcomes take the score test: tests/test_scope.py checks it against Tango's form.)"""
    from statsmodels.stats.weightstats import DescrStatsW

    rng = np.random.default_rng(4)
    ref = np.clip(rng.normal(0.7, 0.15, (2, 150)), 0, 1)
    low = np.clip(ref + rng.normal(-0.01, 0.08, (2, 150)), 0, 1)
    margin = 0.03
    v = noninferiority({64: low, 128: ref}, margin=margin, scope="checkpoint").verdicts[1]
    d = low.mean(axis=0) - ref.mean(axis=0)
    described = DescrStatsW(d)
    _, p, _ = described.ttest_mean(-margin, alternative="larger")
    low_bound, high_bound = described.tconfint_mean(alpha=2 * ALPHA)  # the two one-sided 95% bounds
    assert v.p_value == pytest.approx(p, rel=1e-6) and v.low == pytest.approx(low_bound, abs=1e-6)
    assert v.high == pytest.approx(high_bound, abs=1e-6)
    assert v.difference == pytest.approx(d.mean()) and v.n_images == 150 and v.n_seeds == 2
    # pooling the 300 image x seed pairs as independent would give a smaller p: the seeds are not independent
    pooled = DescrStatsW((low - ref).ravel()).ttest_mean(-margin, alternative="larger")[1]
    assert pooled != pytest.approx(p)


def test_fixed_sequence_stops_at_the_first_failure_and_says_what_it_would_take():
    rng = np.random.default_rng(5)
    ref = rng.random((1, 200)) < 0.85
    worse = ref & (rng.random((1, 200)) < 0.6)  # 40% of the right answers lost: clearly inferior
    decision = noninferiority({32: ref.copy(), 64: worse, 128: ref}, margin=0.02, scope="checkpoint")
    verdicts = {v.resolution: v for v in decision.verdicts}
    assert verdicts[64].verdict == "inferior" and verdicts[64].high < -0.02
    assert verdicts[32].verdict == "not reached" and "stopped at 64 px" in verdicts[32].reason  # never tested
    assert decision.resolution == 128 and "shown inferior" in decision.reason
    noisy = {64: rng.random((1, 40)) < 0.8, 128: rng.random((1, 40)) < 0.8}
    found = noninferiority(noisy, margin=0.02, scope="checkpoint")
    assert found.verdicts[1].verdict == "undecided" and "detects margins of" in found.reason
    assert found.verdicts[1].detectable > 0.1  # 40 images cannot show a 2-point margin


def test_planner_numbers_and_the_relabelling_floor():
    plan = plan_power(180, 2, margin=0.02, scope="checkpoint")
    se = np.sqrt(0.2 * 1.5 / 2 / 180)
    assert plan["se"] == pytest.approx(se) and 0.06 < plan["detectable"] < 0.08 and plan["power_at_margin"] < 0.3
    more = plan_power(3000, 2, margin=0.02, scope="checkpoint")["detectable"]
    assert more < plan["detectable"] / 3  # more images, smaller margins
    # at model scope the seeds' spread adds 2 seed_sd^2 / S to the variance of the mean difference
    model = plan_power(180, 2, margin=0.02, seed_sd=0.02)
    assert model["se"] == pytest.approx(np.sqrt(se**2 + 2 * 0.02**2 / 2))
    assert model["detectable"] > plan["detectable"] and plan_power(180, 1, margin=0.02)["power_at_margin"] == 0.0
    assert relabel_min_p(2, 3) == pytest.approx(1 / 6) and relabel_min_p(3, 3) == pytest.approx(1 / 36)
    assert relabel_min_p(1, 3) == 1.0
    # the fewest seeds with which the exact relabelling test can decide at all (p <= 0.05 attainable)
    assert [relabel_seeds_needed(r) for r in (1, 2, 3, 4)] == [None, 6, 3, 2]  # 1/32, 1/36, 1/24


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [({"margin": 0}, "margin"), ({"margin": 1.0}, "margin"), ({"power": 1.0}, "power"), ({"reference": 48}, "48")],
)
def test_bad_settings_are_one_line_errors(kwargs, words):
    scores = {32: np.ones((1, 20), bool), 64: np.ones((1, 20), bool)}
    with pytest.raises(ConfigError) as err:
        noninferiority(scores, **kwargs)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_dry_run_of_the_quickstart_states_the_detectable_margin_and_what_the_explanation_test_can_decide(
    capsys, tmp_path
):
    from resomap.cli import main

    out = tmp_path / "out"
    assert main(["sweep", "--dry-run", "--preset", "quickstart", f"experiment.output_dir={out}"]) == 0
    text = capsys.readouterr().out
    power = next(ln for ln in text.splitlines() if ln.startswith("power:"))
    plan = plan_power(656, 2, margin=0.02)  # the default scope: the model, training seeds as replicates
    assert "656 test images x 2 seed(s), decided at model scope" in power
    assert f"margins of {plan['detectable']:.3f} and larger" in power
    assert f"the power is {plan['power_at_margin']:.2f}" in power and "seed sd 0.02" in power
    steps = next(ln for ln in text.splitlines() if ln.startswith("power per step"))
    assert f"96 px {plan['steps'][0]:.2f}, 64 px {plan['steps'][1]:.2f}" in steps  # the quickstart's 64 / 96 / 128 px
    needs = next(ln for ln in text.splitlines() if ln.startswith("to show the margin 0.02 with power 0.8:"))
    seeds, images = plan["joint_needed"]
    assert f"about {images} test images x {seeds} seeds" in needs
    assert "smallest p is 0.167: it cannot reach p <= 0.05, so no decision against the cross-seed floor" in text
    # the map decision against the shift floor decides without seeds: its power for the preset's 12 probe images,
    # at the assumed spread before any run (stats.margin's normal approximation, checked against plan numbers)
    from resomap.stats.margin import detectable_margin, units_needed

    maps = next(ln for ln in text.splitlines() if ln.startswith("maps: "))
    assert "over 12 probe images" in maps and "of 0.15 (assumed 0.15: no earlier run of this sweep)" in maps
    assert f"shows margins of {detectable_margin(0.15, 12):.3g} and larger with power 0.8" in maps
    assert f"the margin 0.1 (explainability.map_margin) needs about {units_needed(0.15, 0.1)} probe images" in maps
    assert "seeds: with 2 the model-scope test is very conservative wherever the seeds differ" in text  # issue 47
    assert (
        main(["sweep", "--dry-run", "--preset", "quickstart", f"experiment.output_dir={out}", "sweep.seeds=[1,2,3]"])
        == 0
    )
    three = capsys.readouterr().out
    assert "smallest p is 0.0278: it can decide at alpha 0.05" in three and "seeds: with 2" not in three
    assert not out.exists()  # a dry run writes nothing


def test_the_dry_run_plans_again_from_the_discordance_a_finished_summary_observed(tmp_path):
    """Once this sweep has a summary, the plan also uses the discordance its paired tests against the reference
    observed (b01 + b10 over the image-seed pairs) in place of the pilot-free assumption."""
    import json

    from resomap.config import load
    from resomap.sweep.power import observed_discordance, power_lines
    from resomap.sweep.sweep import summary_folder

    cfg = load("configs", "quickstart", [f"experiment.output_dir={tmp_path}"])
    assert observed_discordance(cfg) is None
    folder = summary_folder(cfg)
    folder.mkdir(parents=True)
    paired = [
        {"model": "m", "metric": "accuracy", "resolution_a": 32, "resolution_b": 128, "n_images": 180, "n_seeds": 2}
        | {"b01": 10, "b10": 8},
        {"model": "m", "metric": "accuracy", "resolution_a": 64, "resolution_b": 128, "n_images": 180, "n_seeds": 2}
        | {"b01": 4, "b10": 6},
        {"model": "m", "metric": "accuracy", "resolution_a": 32, "resolution_b": 64, "n_images": 180, "n_seeds": 2}
        | {"b01": 90, "b10": 90},  # not against the reference: not counted
    ]
    summary = {"paired_tests": paired, "recommendations": [{"model": "m", "reference": 128}]}
    (folder / "summary.json").write_text(json.dumps(summary))
    found, where = observed_discordance(cfg)
    assert found == pytest.approx(28 / 720) and "720 image-seed pairs" in where
    plan = plan_power(656, 2, margin=0.02, discordance=28 / 720)  # the planned test set of the quickstart
    line = next(ln for ln in power_lines(cfg) if ln.startswith("power from this sweep's finished trials"))
    assert f"discordance {28 / 720:.3f} observed, so margins of {plan['detectable']:.3f} and larger" in line
    assert "(assumed above: discordance 0.2, seed sd 0.02; the seed sd still assumed: no model x resolution" in line
    # (issue 47, item 1) the seed sd observed beside it: pooled over the rows with 2 or more seeds, planned with
    rows = [
        {"model": "m", "resolution": 64, "n_seeds": 2, "test_accuracy_std": 0.006},
        {"model": "m", "resolution": 128, "n_seeds": 2, "test_accuracy_std": 0.008},
        {"model": "m", "resolution": 32, "n_seeds": 1, "test_accuracy_std": 0.5},  # one seed: no spread to see
    ]
    (folder / "summary.json").write_text(json.dumps(summary | {"rows": rows}))
    plan = plan_power(656, 2, margin=0.02, discordance=28 / 720, seed_sd=np.sqrt((0.006**2 + 0.008**2) / 2))
    line = next(ln for ln in power_lines(cfg) if ln.startswith("power from this sweep's finished trials"))
    assert f"discordance {28 / 720:.3f} and seed sd 0.007 observed, so margins of {plan['detectable']:.3f}" in line
    assert f"the power is {plan['power_at_margin']:.2f} (assumed above: discordance 0.2, seed sd 0.02; seed sd " in line
    assert "pooled over 2 model x resolution rows)" in line
    for row in paired:  # no image changed outcome: no estimate, the assumption stands (not a division by zero)
        row["b01"] = row["b10"] = 0
    (folder / "summary.json").write_text(json.dumps(summary))
    line = next(ln for ln in power_lines(cfg) if ln.startswith("power from this sweep's finished trials"))
    assert "no image changed outcome against the reference" in line and "the assumption above stands" in line


def test_a_design_that_detects_no_margin_says_so_in_words_not_inf(tmp_path):
    """(issue 49, item 6) One seed at model scope plans an infinite detectable margin: the power lines, from the
    assumed and from an observed discordance, say that no margin is detectable, never "margins of inf"."""
    import json

    from resomap.config import load
    from resomap.sweep.power import power_lines
    from resomap.sweep.sweep import summary_folder

    cfg = load("configs", "quickstart", [f"experiment.output_dir={tmp_path}", "sweep.seeds=[42]"])
    folder = summary_folder(cfg)
    folder.mkdir(parents=True)
    row = {"model": "m", "metric": "accuracy", "resolution_a": 64, "resolution_b": 128, "n_images": 180, "b01": 4}
    summary = {"paired_tests": [row], "recommendations": [{"model": "m", "reference": 128}]}
    (folder / "summary.json").write_text(json.dumps(summary))  # a discordance observed: the plan made again
    lines = power_lines(cfg)
    assert not any("inf" in line.split() for line in lines), lines
    why = "one seed says nothing of seed-to-seed variation"
    power = next(ln for ln in lines if ln.startswith("power:"))
    assert (
        "decided at model scope (training seeds as replicates): no margin is detectable with this design at " in power
    )
    assert f"power 0.8 (one-sided, alpha 0.05): {why}; at the configured margin 0.02 the power is" in power
    observed = next(ln for ln in lines if ln.startswith("power from this sweep's finished trials"))
    assert f"observed, so no margin is detectable with this design at power 0.8: {why}; at the margin" in observed


def test_a_one_sided_bound_beyond_the_score_range_is_cut_there_and_said():
    """Few images that move far apart give a t bound beyond [-1, 1] (a difference of [0, 1] scores cannot): it is
    cut to the range and the reason says so; the verdict is the same as uncut."""
    ref = np.array([[0.9, 0.1, 0.9]])
    low = np.array([[0.1, 0.9, 0.1]])  # per-image differences -0.8, +0.8, -0.8: mean -0.27, sd 0.92, t(0.95, 2) = 2.92
    found = noninferiority({64: ref, 32: low}, margin=0.02, scope="checkpoint")
    v = found.verdicts[1]
    assert v.low == -1.0 and -1.0 <= v.high <= 1.0 and v.verdict == "undecided"
    assert "cut to the range [-1, 1]" in v.reason
    ok = noninferiority({64: ref, 32: ref.copy()}, margin=0.02, scope="checkpoint").verdicts[1]
    assert "cut" not in ok.reason


def test_the_recommendation_carries_the_decided_steps_detectable_margin():
    """(issue 46, item 4) 64 px and 32 px both shown non-inferior to 128 px on 600 images: the recommendation is
    32 px, and its detectable margin is 32 px's step (more discordant images: a wider margin), not 64 px's; with
    no smaller resolution decided it is the first step's, where the sequence stopped."""
    from resomap.summary.decision import _detectable

    rng = np.random.default_rng(5)
    ref = rng.random(600) < 0.85
    near, far = ref.copy(), ref.copy()
    near[:6] = ~near[:6]  # 6 images change at 64 px, 60 at 32 px
    far[:60] = ~far[:60]
    far[:60] = np.where(np.arange(60) % 2 == 0, True, far[:60])  # the same accuracy on average
    scores = {128: ref[None], 64: near[None], 32: far[None]}
    found = noninferiority(scores, margin=0.08, scope="checkpoint")
    steps = {v.resolution: v.detectable for v in found.verdicts if v.detectable is not None}
    assert found.resolution == 32 and steps[32] > steps[64]
    assert _detectable(found) == steps[32]
    stopped = noninferiority(scores, margin=0.001, scope="checkpoint")
    assert stopped.resolution == 128 and _detectable(stopped) == steps[64] == stopped.verdicts[1].detectable

"""Adaptive sweeps (issue 18 item 4): the error rate of "non-inferior" under repeated looks with the alpha-spending
rules, against 1,000 simulated adaptive null sweeps (numpy, no training), and sweep.adaptive's bad input."""

from __future__ import annotations

import numpy as np
import pytest

from resomap.cli import main
from resomap.stats import noninferiority
from resomap.stats.spending import RULES, look_alphas, spent
from resomap.sweep.adaptive import settled_at

SIMS, ALPHA, LOOKS = 1000, 0.05, 3
N, MARGIN = 200, 0.05


def _sim_error(p: float) -> float:
    return 3 * np.sqrt(p * (1 - p) / SIMS)  # three binomial standard errors of a rate from SIMS sweeps


def _adaptive_null_sweep(rng, alphas: list[float]) -> bool:
    """One adaptive sweep of one model at 64, 32 and 16 px over N images: 32 px is exactly MARGIN below 64 px on
    every image's probability (the null), 16 px far below. Round k has k seeds; after each look the model stops
    when decided (settled_at, as the driver reads the summary), else a seed is added. True when any look calls 32 px
    non-inferior (the error)."""
    ease = rng.uniform(0.55, 0.95, N)
    probs = {64: ease, 32: ease - MARGIN, 16: ease - 0.4}
    outcomes = {r: rng.random((LOOKS, N)) < p[None, :] for r, p in probs.items()}  # seed x image, all looks
    for look, alpha in enumerate(alphas, 1):
        scores = {r: o[:look] for r, o in outcomes.items()}
        decision = noninferiority(scores, margin=MARGIN, level=1 - ALPHA, alpha=alpha)
        if any(v.verdict == "non-inferior" for v in decision.verdicts):
            return True
        rec = {"available": True, "reference": 64, "verdicts": [v.to_dict() for v in decision.verdicts]}
        if settled_at(rec)[0]:
            return False
    return False


@pytest.mark.parametrize("rule", RULES)
def test_adaptive_looks_keep_the_error_at_alpha_with_spending(rule: str):
    rng = np.random.default_rng(18)
    alphas = look_alphas(rule, ALPHA, LOOKS)
    assert sum(alphas) == pytest.approx(ALPHA)
    errors = sum(_adaptive_null_sweep(rng, alphas) for _ in range(SIMS))
    assert errors / SIMS <= ALPHA + _sim_error(ALPHA), (rule, errors)


def test_without_spending_the_repeated_looks_exceed_alpha():
    """Evidence the test above can fail: every look at the full alpha calls the null non-inferior too often."""
    rng = np.random.default_rng(18)
    errors = sum(_adaptive_null_sweep(rng, [ALPHA] * LOOKS) for _ in range(SIMS))
    assert errors / SIMS > ALPHA + _sim_error(ALPHA), errors


def test_spending_functions_known_values():
    assert spent("obrien_fleming", 0.05, 1.0) == pytest.approx(0.05)
    assert spent("pocock", 0.05, 1.0) == pytest.approx(0.05)
    assert look_alphas("bonferroni", 0.05, 4) == pytest.approx([0.0125] * 4)
    # O'Brien-Fleming spends almost nothing at the first of 3 looks: 2 - 2 Phi(1.95996 * sqrt(3))
    assert look_alphas("obrien_fleming", 0.05, 3)[0] == pytest.approx(6.869e-4, rel=1e-3)


def test_alpha_override_changes_only_the_threshold():
    rng = np.random.default_rng(3)
    scores = {64: rng.random((2, 100)) < 0.9, 32: rng.random((2, 100)) < 0.9}
    default = noninferiority(scores, margin=0.05)
    same = noninferiority(scores, margin=0.05, alpha=0.05)
    assert default.to_dict() == same.to_dict()
    strict = noninferiority(scores, margin=0.05, alpha=1e-6)
    assert strict.verdicts[1].p_value == default.verdicts[1].p_value
    assert strict.verdicts[1].level == pytest.approx(1 - 1e-6)


@pytest.mark.parametrize(
    ("setting", "words"),
    [
        ("sweep.adaptive.budget=0", "sweep.adaptive.budget: expected null or a positive number of trials, got 0"),
        ("sweep.adaptive.budget=-3", "sweep.adaptive.budget"),
        ("sweep.adaptive.max_rounds=0", "sweep.adaptive.max_rounds: expected an integer >= 1"),
        ("sweep.adaptive.seeds_per_round=0", "sweep.adaptive.seeds_per_round"),
        ("sweep.adaptive.spending=pocok", "did you mean 'pocock'?"),
        ("sweep.adaptive.spending=bogus", "one of obrien_fleming, pocock, bonferroni"),
        ("stats.look_alpha={tiny_cnn: 1.5}", "stats.look_alpha.tiny_cnn"),
    ],
)
def test_bad_adaptive_settings_fail_at_load_in_one_line(setting: str, words: str, capsys, tmp_path):
    code = main(["sweep", "--dry-run", f"experiment.output_dir={tmp_path}", setting])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert words in err and "\n" not in err and "Traceback" not in err, err

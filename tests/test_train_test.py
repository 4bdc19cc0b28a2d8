"""Each model tested above its training resolution (resomap.summary.train_test, stats.better_or_noninferior): on
constructed per-image records whose truth is known, a test resolution that wins images is "better", one that keeps
them "non-inferior", one that loses many "worse", each pair at the Bonferroni alpha over the model's pairs; the
p values against McNemar's score test written out here; and seeded simulations showing that the claims hold their
error rate where the tool runs (one fit at checkpoint scope, three seeds at model scope)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from resomap.config.schema import StatsConfig
from resomap.records import Predictions
from resomap.stats import better_or_noninferior
from resomap.stats import scope as scopes
from resomap.summary.aligned import TrialRecord
from resomap.summary.train_test import train_test_decisions
from resomap.tasks import get_task

N = 400
TRAINED, TESTED = (16, 32), (16, 32, 64)


def _records(predict, seeds=(0, 1, 2), model: str = "m") -> list[TrialRecord]:
    """TrialRecords of `model` trained at 16 and 32 px, each tested at 16, 32 and 64 px; ``predict(trained, tested,
    seed)`` gives the predictions of the N test images (labels: the first 200 of class 0)."""
    task = get_task("classification")
    labels = (np.arange(N) >= N // 2).astype(np.int64)
    index = np.arange(N, dtype=np.int64)
    out = []
    for trained in TRAINED:
        for seed in seeds:
            tables = {t: Predictions(t, index, labels, predict(labels, trained, t, seed)).table() for t in TESTED}
            result = {"model": model, "resolution": trained, "seed": seed, "status": "FINISHED",
                      "data": {"classes": ["a", "b"]}}  # fmt: skip
            out.append(TrialRecord(result, None, tables, task))
    return out


def _known(labels, trained, tested, seed):
    """Right on all but the first 80 + seed images at each own resolution; trained at 16: tested at 32 the first 60
    of those put right (better), at 64 as at 16 (the same images); trained at 32, tested at 64: 120 more wrong."""
    p = labels.copy()
    wrong = 80 + seed
    if trained == 16 and tested == 32:
        wrong -= 60
    p[:wrong] = 1 - p[:wrong]
    if trained == 32 and tested == 64:
        p[200:320] = 1 - p[200:320]
    return p


def test_a_test_resolution_that_wins_keeps_or_loses_images_is_better_non_inferior_or_worse():
    cfg = StatsConfig(margin=0.05, level=0.95, scope="checkpoint")
    (row,) = train_test_decisions(_records(_known), cfg)
    assert row["model"] == "m" and row["n_pairs"] == 3 and row["correction"] == "Bonferroni over 3 pairs"
    assert row["alpha"] == pytest.approx(0.05 / 3) and not row["deterministic"] and row["notes"] == []
    pairs = {(p["trained"], p["tested"]): p for p in row["pairs"]}
    assert set(pairs) == {(16, 32), (16, 64), (32, 64)}  # only test resolutions above the trained one
    assert pairs[16, 32]["verdict"] == "better" and pairs[16, 32]["difference"] == pytest.approx(60 / N)
    assert pairs[16, 64]["verdict"] == "non-inferior" and pairs[16, 64]["difference"] == 0.0
    assert pairs[32, 64]["verdict"] == "worse" and pairs[32, 64]["difference"] == pytest.approx(-120 / N)
    assert pairs[32, 64]["high"] < -cfg.margin < pairs[16, 64]["low"]
    for p in pairs.values():
        assert p["n_images"] == N and p["n_seeds"] == 3 and p["images"] == "test images"
    said = row["sentence"]
    assert said.startswith("m, tested above its training resolution (accuracy on the same 400 test images, 3 seed(s)")
    assert "better 1, non-inferior 1, worse 1 of 3 pair(s)" in said
    assert "trained at 16 px, tested at 32 px better (+0.150" in said and "at 64 px worse by more than" in said


def test_the_p_values_are_mcnemars_score_test_for_one_fit():
    """A deterministic model (its seeds give the same predictions): one replicate at checkpoint scope, whose test of
    a 0/1 score is the score test on the discordant pairs; at delta0 = 0 that is McNemar's z = (b - c) / sqrt(b + c)
    (b images gained, c lost), one-sided; the model's one pair at the model's alpha."""
    from scipy import stats

    rng = np.random.default_rng(7)
    gained, lost = rng.choice(50, 30, replace=False), 50 + rng.choice(N - 50, 14, replace=False)  # b 30, c 14

    def predict(labels, trained, tested, seed):
        p = labels.copy()
        p[:50] = 1 - p[:50]  # wrong at the own resolution
        if tested > trained:
            at = np.r_[gained, lost]
            right = np.isin(np.arange(N), gained) | (~np.isin(np.arange(N), lost) & (np.arange(N) >= 50))
            p[at] = np.where(right[at], labels[at], 1 - labels[at])
        return p

    records = [r for r in _records(predict, seeds=(0, 1)) if r.id[1] == 16]  # one trained resolution
    for r in records:
        r.tables.pop(64)
    (row,) = train_test_decisions(records, StatsConfig(margin=0.02))
    (pair,) = row["pairs"]
    assert row["deterministic"] and row["alpha"] == pytest.approx(0.05) and pair["n_seeds"] == 1
    own = np.arange(N) >= 50
    above = own.copy()
    above[gained], above[lost] = True, False
    b, c = int((above & ~own).sum()), int((own & ~above).sum())
    assert pair["difference"] == pytest.approx((b - c) / N)
    assert pair["p_better"] == pytest.approx(stats.norm.sf((b - c) / math.sqrt(b + c)), rel=1e-9)
    assert (b, c) == (30, 14) and pair["p_better"] < 0.05 and pair["verdict"] == "better"


def test_a_model_tested_only_at_and_below_its_training_resolutions_gets_no_row():
    records = [r for r in _records(_known) if r.id[1] == 32]
    for r in records:
        r.tables.pop(64)
    assert train_test_decisions(records, StatsConfig()) == []


# ------------------------------------------------------------------------------------------------ error rates

ALPHA = 0.05 / 3  # a model's pair among 3 (the quickstart's three resolutions)
REPS, IMAGES, ACC, LATENT = 8000, 300, 0.8, 0.3


def _differences(rng, seeds: int, delta: float, seed_sd: float) -> np.ndarray:
    """d [REPS, seeds, IMAGES] of 0/1 outcomes: image i right for checkpoint s tested at a resolution when z_i +
    0.3 e (e fresh per test resolution and seed) exceeds the cut of that accuracy; tested at its own resolution the
    accuracy is ACC, above it ACC + delta + u_s, u_s ~ N(0, seed_sd^2) (the seed's own change). The true mean
    difference is delta: the truth at model scope, and for one fit (seed_sd 0) at checkpoint scope too."""
    from scipy import stats

    total = math.sqrt(1 + LATENT**2)
    z = rng.standard_normal((REPS, 1, IMAGES), dtype=np.float32)
    own = z + LATENT * rng.standard_normal((REPS, seeds, IMAGES), dtype=np.float32)
    above = z + LATENT * rng.standard_normal((REPS, seeds, IMAGES), dtype=np.float32)
    acc = np.clip(ACC + delta + seed_sd * rng.standard_normal((REPS, seeds, 1)), 0.01, 0.99)
    right_own = own > stats.norm.ppf(1 - ACC) * total
    right_above = above > stats.norm.ppf(1 - acc) * total
    return right_above.astype(float) - right_own.astype(float)


@pytest.mark.parametrize("seeds, scope, seed_sd", [(1, "checkpoint", 0.0), (3, "model", 0.02)])
def test_better_and_non_inferior_claims_hold_their_error_rate(seeds, scope, seed_sd):
    """At a true difference of 0, "better" is claimed at most alpha + 2 SE of the time; at -margin, "non-inferior"
    (or better) likewise, and at -margin "worse" likewise; with a true gain of 0.1 "better" is claimed in most
    sweeps (the tests decide). The verdicts are the rejections of scope.rejects at delta0 0 and -margin and of the
    mirrored test (checked draw by draw on 40 draws), so the rates are those of better_or_noninferior. 8000 draws:
    one SE of a rate of 0.0167 is 0.0014."""
    rng = np.random.default_rng(11 + seeds)
    margin = 0.02
    limit = ALPHA + 2 * math.sqrt(ALPHA * (1 - ALPHA) / REPS)
    at_zero = _differences(rng, seeds, 0.0, seed_sd)
    at_margin = _differences(rng, seeds, -margin, seed_sd)
    gain = _differences(rng, seeds, 0.1, seed_sd)
    discordant = float(np.abs(at_zero[:200]).mean())
    assert 0.05 < discordant < 0.25, discordant  # images that change outcome: as the quickstart sees (0.05-0.2)

    def claims(d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        kw = {"binary": True, "scope": scope}
        better = scopes.rejects(d, 0.0, ALPHA, **kw)
        return better, better | scopes.rejects(d, -margin, ALPHA, **kw), scopes.rejects(-d, margin, ALPHA, **kw)

    fixed = seeds == 1
    for d in (at_zero[:20], at_margin[:20]):  # the verdicts are these rejections
        better, noninferior, worse = claims(d)
        for k in range(len(d)):
            found = better_or_noninferior(d[k], margin=margin, alpha=ALPHA, binary=True, scope=scope,
                                          deterministic=fixed)  # fmt: skip
            expect = "better" if better[k] else "non-inferior" if noninferior[k] else "undecided"
            expect = "worse" if worse[k] else expect  # never beside a claim above -margin
            assert found["verdict"] == expect, (k, found)
    false_better = claims(at_zero)[0].mean()
    _, false_noninferior, false_worse = (c.mean() for c in claims(at_margin))
    assert max(false_better, false_noninferior, false_worse) <= limit, (false_better, false_noninferior, false_worse)
    assert claims(gain)[0].mean() > 0.5  # a test that decides

"""The score x cost x explanation-quality front decides on tests of the differences between resolutions (issue 47,
item 3): paired on the same test images (score) and probe images (quality), Welch over seeds (latency), Holm over
the model's tests. Constructed per-image data with a known answer, through the summary's own code (build_summary
reads the trials' predictions.csv; quality through explanations' quality_table and seed_means)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from resomap.config.schema import StatsConfig
from resomap.explain.evaluation.intervals import quality_table, seed_means
from resomap.records import Predictions, write_predictions
from resomap.stats import Axis, Difference, paired_front
from resomap.summary import build_summary
from resomap.summary.front import Measured, tradeoff_lines, tradeoffs

FAST = StatsConfig(resamples=400)
SEEDS = (42, 43)


def _summary(root: Path, correct: dict[int, np.ndarray], latency: dict[int, tuple[float, ...]]):
    """A sweep of model m: at each resolution, each seed's predictions (`correct[res]`: 0/1 per image, the same
    for every seed) and that seed's latency at batch 1."""
    results, folders = [], {}
    for res, right in correct.items():
        n = len(right)
        for seed, ms in zip(SEEDS, latency[res], strict=True):
            folder = root / str(res) / str(seed)
            folder.mkdir(parents=True)
            label = np.arange(n) % 2
            prediction = np.where(right, label, 1 - label)
            write_predictions(folder, {res: Predictions(res, np.arange(n, dtype=np.int64), label, prediction)})
            results.append(
                {"model": "m", "family": "cnn", "resolution": res, "seed": seed, "status": "FINISHED",
                 "test": {"test/accuracy": float(right.mean())}, "profile": {"latency_median_ms": ms, "gmacs": res},
                 "predictions": "predictions.csv", "task": "classification"}
            )  # fmt: skip
            folders[("m", res, seed)] = folder
    return build_summary(results, folders, FAST)


def _front(summary, quality_rows=(), images=None) -> dict:
    measured = Measured(summary.paired_tests, summary.trials, images or {}, FAST.resamples, FAST.seed)
    (entry,) = tradeoffs(summary.rows, quality_rows, measured)
    return entry


def _apart(q: list, p: list) -> bool:
    """q's interval entirely above p's."""
    return q[1] > p[2]


def test_a_paired_score_difference_drops_a_resolution_whose_interval_overlaps_the_others(tmp_path):
    """600 images, 64 px right on 20 images more than 32 px and wrong on none of 32 px's: the two accuracy intervals
    (0.80 and 0.833) overlap, but on the same images the difference is certain (sign-flip p 2^-19); latency the
    same within its seed spread. 32 px is dropped by 64 px on accuracy."""
    right = np.zeros(600, dtype=bool)
    right[:480] = True
    better = right.copy()
    better[480:500] = True
    summary = _summary(tmp_path, {32: right, 64: better}, {32: (1.00, 1.10), 64: (1.02, 1.08)})
    entry = _front(summary)
    low, high = entry["points"]
    assert not _apart(high["score"], low["score"]) and high["score"][1] < low["score"][2]  # the intervals overlap
    assert (low["on_front"], low["dropped_by"], low["better_on"]) == (False, 64, ["score"])
    assert high["on_front"] and high["standing"] == "on the front"
    (score,) = [t for t in entry["tests"] if t["axis"] == "score"]
    assert score["p_value"] == pytest.approx(2.0**-19) and score["shown_better"] == "64"
    (cost,) = [t for t in entry["tests"] if t["axis"] == "cost"]
    assert cost["p_value"] > 0.5 and cost["shown_better"] is None and cost["test"].startswith("Welch")
    assert (
        low["standing"]
        == f"dropped: 64 px is shown better on accuracy (Holm p {score['p_holm']:.2g}) and worse on none"
    )
    assert entry["family"] == "Holm over 2 tests at 0.05"
    # the words: the rule, then what each axis is and what its tests showed
    rule, line = tradeoff_lines([entry])
    assert "Holm over all of the model's tests" in rule and "they decide nothing" in rule
    assert line.startswith("m: on the front 64 px; score = accuracy")
    assert "Holm over 2 tests at 0.05: a difference shown for 1 of 1 pairs on score, 0 of 1 pairs on cost" in line


def test_intervals_apart_without_a_difference_shown_by_the_paired_test_keep_both(tmp_path):
    """2000 images, 32 px right on exactly the images 64 px gets wrong but 88: accuracy 0.500 and 0.544, the two
    intervals apart, but the per-image differences nearly cancel (1000 images for 64 px, 912 for 32 px): the paired
    test gives p 0.046, above Holm's first threshold (0.05 / 2 tests). Neither resolution is dropped."""
    n = 2000
    right = np.zeros(n, dtype=bool)
    right[:1000] = True
    other = ~right  # right on the 1000 images 32 px gets wrong
    other[:88] = True  # and on 88 of its right ones: 1088 right, 1000 + 912 discordant
    summary = _summary(tmp_path, {32: right, 64: other}, {32: (1.00, 1.10), 64: (1.02, 1.08)})
    entry = _front(summary)
    low, high = entry["points"]
    assert _apart(high["score"], low["score"])  # the separate intervals do not overlap
    (score,) = [t for t in entry["tests"] if t["axis"] == "score"]
    assert 0.025 < score["p_value"] < 0.05 and score["shown_better"] is None
    assert low["on_front"] and high["on_front"]


def test_a_paired_quality_difference_drops_a_resolution_and_an_untestable_axis_keeps_it(tmp_path):
    """The same accuracy and latency at both resolutions; 32 probe images whose quality at 64 px is 32 px's + 0.05
    (+-0.01 noise), a per-image spread of 0.2: the bootstrap intervals overlap, the paired sign-flip test shows the
    difference. 32 px is dropped on quality. With one seed of latency and no count, the cost cannot be tested and
    keeps it."""
    right = np.zeros(300, dtype=bool)
    right[:240] = True
    summary = _summary(tmp_path, {32: right, 64: right.copy()}, {32: (1.00, 1.10), 64: (1.02, 1.08)})
    rng = np.random.default_rng(3)
    base = rng.normal(0.1, 0.2, 32)
    per_trial = []
    for seed in SEEDS:
        low_q = base + rng.normal(0, 0.01, 32)
        per_trial.append(("m", 32, seed, {"saliency": {"deletion_auc_vs_random": low_q.tolist()}}))
        per_trial.append(("m", 64, seed, {"saliency": {"deletion_auc_vs_random": (low_q + 0.05).tolist()}}))
    rows = quality_table(per_trial, resamples=FAST.resamples, seed=FAST.seed)
    entry = _front(summary, rows, seed_means(per_trial))
    low, high = entry["points"]
    assert [a["name"] for a in entry["axes"]] == ["score", "cost", "quality"]
    assert not _apart(high["quality"], low["quality"])
    assert (low["on_front"], low["dropped_by"], low["better_on"]) == (False, 64, ["quality"])
    (score,) = [t for t in entry["tests"] if t["axis"] == "score"]
    assert score["p_value"] == 1.0 and score["shown_better"] is None  # the same predictions
    axes = {a["name"]: a for a in entry["axes"]}
    assert axes["quality"]["interval"] == "bootstrap interval over the probe images, each image's seeds together"

    # one seed of latency at 64 px and no GMACs: the cost has no test, so nothing can be dropped
    for trial in summary.trials:
        trial["profile"].pop("gmacs")
    summary.trials[:] = [t for t in summary.trials if not (t["resolution"] == 64 and t["seed"] == 43)]
    for row in summary.rows:
        row.gmacs = None
    entry = _front(summary, rows, seed_means(per_trial))
    assert all(p["on_front"] for p in entry["points"])
    (cost,) = [t for t in entry["tests"] if t["axis"] == "cost"]
    assert cost["p_value"] is None and "latency cannot be tested" in cost["reason"]
    assert "none tested on cost (one seed at some resolution" in tradeoff_lines([entry])[1]


def test_holm_runs_over_every_pair_and_axis_of_the_front():
    """Three points, two axes: six tests in one family. p 0.02 alone would reject; as the smallest of six (Holm's
    first threshold 0.05 / 6) it does not, and nothing is dropped; 0.001 rejects."""
    axes = [Axis("score"), Axis("cost", higher_is_better=False)]
    pairs = [("32", "64"), ("32", "128"), ("64", "128")]

    def front(p_score_32_64: float):
        diffs = [Difference("score", a, b, 0.01, p_score_32_64 if (a, b) == ("32", "64") else 0.9) for a, b in pairs]
        diffs += [Difference("cost", a, b, 0.0, 0.9) for a, b in pairs]
        return paired_front(["32", "64", "128"], axes, diffs, 0.05)

    standings, verdicts = front(0.02)
    assert all(s.on_front for s in standings) and verdicts[0].p_holm == pytest.approx(0.12)
    standings, verdicts = front(0.001)
    assert [s.on_front for s in standings] == [False, True, True] and standings[0].dropped_by == "64"
    assert verdicts[0].p_holm == pytest.approx(0.006) and verdicts[0].better == "64"
    # an exact axis (a count) decides by its sign, outside the family: 32 px cheaper keeps it
    diffs = [Difference("score", "32", "64", 0.05, 1e-6), Difference("cost", "32", "64", 0.3, exact=True)]
    standings, _ = paired_front(["32", "64"], axes, diffs, 0.05)
    assert all(s.on_front for s in standings)
    # a pair with no test on an axis keeps the point
    diffs = [Difference("score", "32", "64", 0.05, 1e-6), Difference("cost", "32", "64", 0.0, None, reason="none")]
    standings, _ = paired_front(["32", "64"], axes, diffs, 0.05)
    assert all(s.on_front for s in standings)

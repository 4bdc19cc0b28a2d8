"""Resolution-sensitive test images (resomap.summary.sensitivity) on constructed records whose answer is known: the
images lost, gained and seed-dependent between the reference and each smaller resolution, their Wilson intervals
(against statsmodels), the one-seed caveat, the order of the most sensitive images and a task without 0/1 scores."""

from __future__ import annotations

import numpy as np
import pytest

from resomap.config.schema import StatsConfig
from resomap.records import Predictions, ScoreTable
from resomap.summary.aligned import TrialRecord
from resomap.summary.sensitivity import ONE_SEED, most_sensitive, sensitivity, sensitivity_line
from resomap.tasks import get_task

N, CLASSES, MODEL = 40, ("cat", "dog", "owl"), "tiny_cnn"
INDEX = np.arange(100, 100 + 2 * N, 2)  # dataset indices, not positions
LABELS = np.arange(N) % len(CLASSES)


def _right(res: int, seed: int) -> np.ndarray:
    """Which of the 40 images seed `seed` gets right at `res` px: at 32 px (the reference) all but image 10 and
    35-39; at 16 px images 0-5 wrong in every seed (lost), 6-9 right in some seeds only (seed-dependent), 10 right
    (gained); at 8 px images 3, 4, 5, 11 and 12 wrong in every seed (lost), the rest as at 32 px."""
    right = np.ones(N, dtype=bool)
    right[[10, 35, 36, 37, 38, 39]] = False
    if res == 16:
        right[:6] = False
        right[6:10] = [seed % 2 == 0, seed % 2 == 1, seed == 0, seed != 0]
        right[10] = True
    elif res == 8:
        right[[3, 4, 5, 11, 12]] = False
    return right


def _records(seeds: tuple[int, ...], resolutions=(8, 16, 32)) -> list[TrialRecord]:
    task = get_task("classification")
    out = []
    for res in resolutions:
        for seed in seeds:
            preds = np.where(_right(res, seed), LABELS, (LABELS + 1) % len(CLASSES))
            table = Predictions(res, INDEX, LABELS, preds).table(task.scores[0].name)
            result = {"model": MODEL, "resolution": res, "seed": seed, "status": "FINISHED"}
            result["data"] = {"classes": list(CLASSES)}
            out.append(TrialRecord(result, None, {res: table}, task))
    return out


def _wilson(count: int, n: int, level: float = 0.95) -> tuple[float, float]:
    from statsmodels.stats.proportion import proportion_confint

    return proportion_confint(count, n, alpha=1 - level, method="wilson")


def test_lost_gained_and_seed_dependent_images_with_their_wilson_intervals():
    found = sensitivity(_records((0, 1, 2)), [{"model": MODEL, "reference": 32}], StatsConfig())
    rows = {r["resolution"]: r for r in found.rows}
    assert sorted(rows) == [8, 16]  # every resolution below the reference, the reference itself not
    at16, at8 = rows[16], rows[8]
    assert (at16["lost"], at16["gained"], at16["seed_dependent"]) == (6, 1, 4)
    assert (at8["lost"], at8["gained"], at8["seed_dependent"]) == (5, 0, 0)
    assert at16["n_images"] == N and at16["n_seeds"] == 3 and at16["available"] and at16["reason"] == ""
    for row in (at16, at8):
        for name in ("lost", "gained", "seed_dependent"):
            assert row[f"{name}_share"] == pytest.approx(row[name] / N)
            assert (row[f"{name}_low"], row[f"{name}_high"]) == pytest.approx(_wilson(row[name], N))
    lost16 = [im for im in found.images if im["resolution"] == 16 and im["status"] == "lost"]
    assert [im["index"] for im in lost16] == INDEX[:6].tolist()
    assert all(im["seeds_right_reference"] == 3 and im["seeds_right"] == 0 for im in lost16)
    assert [im["class_name"] for im in lost16] == [CLASSES[i % 3] for i in range(6)]
    (gained,) = [im for im in found.images if im["status"] == "gained"]
    assert (gained["index"], gained["label"], gained["seeds_right_reference"], gained["seeds_right"]) == (
        INDEX[10],
        LABELS[10],
        0,
        3,
    )
    line = sensitivity_line(at16)
    assert "lost 6 (0.150 [" in line and "seed-dependent (the noise to compare with) 4" in line
    # lost at two resolutions first (3, 4, 5), then lost at the higher one (0 at 16 px before 11 at 8 px)
    ranked = most_sensitive(found.images)[MODEL]
    assert [im["index"] for im in ranked] == INDEX[[3, 4, 5, 0]].tolist()
    assert ranked[0]["lost_at"] == [16, 8] and ranked[3]["lost_at"] == [16]


def test_one_seed_is_counted_and_says_it_cannot_tell_seed_noise_apart():
    found = sensitivity(_records((0,)), [], StatsConfig(level=0.9))  # no decision: the largest resolution
    row = next(r for r in found.rows if r["resolution"] == 16)
    assert row["reference"] == 32 and row["n_seeds"] == 1
    assert (row["lost"], row["gained"]) == (8, 1)  # 0-5, and 7 and 9, wrong at 16 px in the one seed
    assert (row["lost_low"], row["lost_high"]) == pytest.approx(_wilson(8, N, 0.9))
    assert row["seed_dependent"] is None and row["seed_dependent_low"] is None  # one seed cannot show it: not 0
    assert row["reason"] == ONE_SEED and ONE_SEED in sensitivity_line(row)


def test_a_task_without_right_or_wrong_scores_is_skipped_with_its_reason():
    task = get_task("segmentation")
    records = []
    for res in (16, 32):
        for seed in (0, 1):
            scores = {sc.name: np.linspace(0.2, 0.8, N) for sc in task.scores}
            result = {"model": "tiny_segnet", "resolution": res, "seed": seed, "status": "FINISHED"}
            records.append(TrialRecord(result, None, {res: ScoreTable(res, INDEX, scores)}, task))
    (row,) = sensitivity(records, [], StatsConfig()).rows
    assert not row["available"] and row["lost"] is None
    assert "mIoU per image is not right-or-wrong per image" in row["reason"]
    assert "not counted" in sensitivity_line(row)

"""Per-class decisions (resomap.summary.per_class) on constructed per-image records whose truth is known: a class
equally right at every resolution is non-inferior, a class that loses its images at the small resolution is not,
each decided by the summary's own decision at the Bonferroni alpha over the model's classes, the minority class
first; a class with one test image is "not decided"; records without labels give no rows."""

from __future__ import annotations

import numpy as np
import pytest

from resomap import stats
from resomap.config.schema import StatsConfig
from resomap.records import Predictions, ScoreTable
from resomap.summary.aligned import TrialRecord
from resomap.summary.per_class import class_cells, class_decisions
from resomap.tasks import get_task

SEEDS, SMALL, REF = (0, 1, 2), 16, 32
N_A, N_B = 120, 60  # class a: the majority; class b: the minority


def _trials(labels: np.ndarray, predict, classes: list[str]) -> list[TrialRecord]:
    """TrialRecords of model m at 16 and 32 px, three seeds; ``predict(resolution, seed)`` gives the predictions."""
    task = get_task("classification")
    index = np.arange(len(labels), dtype=np.int64)
    out = []
    for res in (SMALL, REF):
        for seed in SEEDS:
            table = Predictions(res, index, labels, predict(res, seed)).table()
            result = {"model": "m", "resolution": res, "seed": seed, "status": "FINISHED", "data": {"classes": classes}}
            out.append(TrialRecord(result, None, {res: table}, task))
    return out


def _case(with_c: bool = False) -> tuple[np.ndarray, dict]:
    """Labels (a: 120 images, b: 60, optionally c: 1) and predictions: a right on the same 108 images under every
    seed at both resolutions; b right on all its images at 32 px (but 2 to 4 by seed), wrong on all at 16 px."""
    labels = np.r_[np.zeros(N_A, np.int64), np.ones(N_B, np.int64), np.full(int(with_c), 2, np.int64)]
    rng = np.random.default_rng(3)
    a_wrong = rng.choice(N_A, 12, replace=False)
    preds = {}
    for seed in SEEDS:
        for res in (SMALL, REF):
            p = labels.copy()
            p[a_wrong] = 1
            b = np.flatnonzero(labels == 1)
            p[b[: 2 + seed] if res == REF else b] = 0
            preds[res, seed] = p
    return labels, preds


def test_a_class_equally_right_is_non_inferior_and_a_class_that_loses_its_images_is_not():
    labels, preds = _case()
    cfg = StatsConfig(margin=0.1, level=0.95)
    rows = class_decisions(_trials(labels, lambda r, s: preds[r, s], ["a", "b"]), cfg)
    assert [(r["class"], r["rank"], r["n_images"]) for r in rows] == [("b", 1, N_B), ("a", 2, N_A)]  # minority first
    b, a = rows
    for row in rows:  # Bonferroni over the model's two classes: one-sided alpha 0.05 / 2
        assert row["alpha"] == pytest.approx(0.025) and row["correction"] == "Bonferroni over 2 classes"
        assert row["available"] and row["decided"] and row["reference"] == REF and row["n_seeds"] == 3
        assert row["metric"] == f"recall:{row['class']}" and "Bonferroni over 2 classes" in row["sentence"]
    assert a["resolution"] == SMALL and a["recall"] == a["reference_recall"] == pytest.approx(108 / 120)
    assert b["resolution"] == REF and b["recall"] == pytest.approx(1 - 3 / 60) and b["reference_recall"] == b["recall"]
    verdicts = {row["class"]: {v["resolution"]: v for v in row["verdicts"]} for row in rows}
    assert verdicts["a"][SMALL]["verdict"] == "non-inferior" and verdicts["b"][SMALL]["verdict"] == "inferior"
    assert verdicts["b"][SMALL]["difference"] == pytest.approx(-(60 - 3) / 60)
    # the same decision as the statistics give on the class's own 0/1 recalls at alpha / 2, and not at alpha
    for cls, k in (("a", 0), ("b", 1)):
        mine = {r: np.stack([preds[r, s][labels == k] == k for s in SEEDS]) for r in (SMALL, REF)}
        at = stats.noninferiority(mine, margin=0.1, alpha=0.025, metric=f"recall of {cls}")
        step, plain = at.verdicts[1], stats.noninferiority(mine, margin=0.1, metric=f"recall of {cls}").verdicts[1]
        assert verdicts[cls][SMALL]["level"] == pytest.approx(0.975)
        assert (verdicts[cls][SMALL]["low"], verdicts[cls][SMALL]["p_value"]) == (step.low, step.p_value)
        assert step.low < plain.low  # the wider bound of the corrected alpha
    head, body = class_cells(rows)
    assert head[-2:] == ["32 px", "16 px"] and body[0][1:4] == ["b (60)", "0.025", "32 px"]
    assert body[1][3] == "16 px" and body[1][-1].startswith("non-inferior ") and body[0][-1].startswith("inferior ")


def test_a_class_with_one_test_image_is_not_decided_and_counts_in_the_family():
    labels, preds = _case(with_c=True)
    rows = class_decisions(_trials(labels, lambda r, s: preds[r, s], ["a", "b", "c"]), StatsConfig(margin=0.1))
    assert [(r["class"], r["n_images"]) for r in rows] == [("c", 1), ("b", N_B), ("a", N_A)]
    c = rows[0]
    assert not c["available"] and not c["decided"] and c["resolution"] is None and c["verdicts"] == []
    assert c["reason"] == "not decided: recall of c: 1 test image(s) of that class; needs >= 2"
    assert c["sentence"] == f"m, recall of c (1 test image): {c['reason']}"
    assert [r["alpha"] for r in rows] == pytest.approx([0.05 / 3] * 3)  # three classes, three shares of alpha
    assert rows[2]["decided"] and rows[2]["resolution"] == SMALL  # a still shown non-inferior at 0.05 / 3
    assert class_cells(rows)[1][0][3] == c["reason"]


def test_one_resolution_or_no_labels_give_not_decided_rows_or_none():
    labels, preds = _case()
    only_ref = [t for t in _trials(labels, lambda r, s: preds[r, s], ["a", "b"]) if t.result["resolution"] == REF]
    rows = class_decisions(only_ref, StatsConfig())
    assert [r["class"] for r in rows] == ["b", "a"]
    assert all(r["reason"].startswith("not decided: only 32 px has per-image predictions") for r in rows)
    unnamed = _trials(labels, lambda r, s: preds[r, s], [])  # no class names recorded
    assert class_decisions(unnamed, StatsConfig()) == []
    task = get_task("segmentation")
    index = np.arange(4, dtype=np.int64)
    seg = [
        TrialRecord(
            {"model": "s", "resolution": res, "seed": 0, "status": "FINISHED", "data": {"classes": ["bg", "fg"]}},
            None,
            {res: ScoreTable(res, index, {"miou": np.full(4, 0.5), "boundary_f1": np.full(4, 0.5)})},
            task,
        )
        for res in (SMALL, REF)
    ]
    assert class_decisions(seg, StatsConfig()) == []

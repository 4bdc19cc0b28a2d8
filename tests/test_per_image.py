"""The decision metrics (stats.metric, resomap.stats.per_image): per-image values whose mean is the metric as
scikit-learn computes it, AUROC's paired test against DeLong's variance computed independently (every pair of
images), the decisions' error rate at the margin in seeded simulations (statistics only), and the bad inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from conftest import run_cli
from resomap.errors import ConfigError
from resomap.stats import scope as scopes
from resomap.stats.per_image import parse_metric, values

N0, N1 = 130, 50  # an ELPV test split of 180 cells (the quickstart before 2026-11-25): functional and defective
N = N0 + N1
LABEL = np.r_[np.zeros(N0, np.int64), np.ones(N1, np.int64)]
MARGIN, ALPHA = 0.02, 0.05


def _random(rng, seeds: int, classes: int, n: int = 150):
    label = rng.integers(0, classes, n)
    prediction = np.where(rng.random((seeds, n)) < 0.7, label, rng.integers(0, classes, (seeds, n)))
    score = np.round(rng.random((seeds, n)) * 0.6 + 0.4 * (label == 1), 2)  # rounded: ties between images
    return label, prediction, score


@pytest.mark.parametrize("classes", [2, 3])
def test_each_seeds_mean_is_the_metric_as_scikit_learn_computes_it(classes):
    from sklearn.metrics import balanced_accuracy_score, f1_score, recall_score, roc_auc_score

    rng = np.random.default_rng(classes)
    label, prediction, score = _random(rng, 3, classes)
    names = [f"c{k}" for k in range(classes)]
    expected = {
        "accuracy": lambda p, s: float((p == label).mean()),
        "balanced_accuracy": lambda p, s: balanced_accuracy_score(label, p),
        "macro_f1": lambda p, s: f1_score(label, p, average="macro", labels=list(range(classes)), zero_division=0),
        "recall:c1": lambda p, s: recall_score(label, p, labels=[1], average="macro", zero_division=0),
    }
    if classes == 2:
        expected["auroc"] = lambda p, s: roc_auc_score(label, s)
    for metric, ref in expected.items():
        found = values(parse_metric(metric), label, prediction, score, names)
        want = [ref(prediction[s], score[s]) for s in range(3)]
        assert found.mean(1) == pytest.approx(want, abs=1e-12), metric
    recall = values(parse_metric("recall:c1"), label, prediction, score, names)
    assert recall.shape == (3, int((label == 1).sum())) and recall.dtype == bool  # 0/1 on that class's images


def _delong(label: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(AUROC(b) - AUROC(a), DeLong's variance of that paired difference) over every positive x negative pair."""

    def components(s):
        pos, neg = s[label == 1], s[label == 0]
        psi = (pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])
        return psi.mean(), psi.mean(1), psi.mean(0)

    auc_a, v10_a, v01_a = components(a)
    auc_b, v10_b, v01_b = components(b)
    m, n = int((label == 1).sum()), int((label == 0).sum())
    variance = np.var(v10_b - v10_a, ddof=1) / m + np.var(v01_b - v01_a, ddof=1) / n
    return auc_b - auc_a, variance


def test_auroc_decision_is_delongs_paired_test():
    """One seed, checkpoint scope: the mean of the paired values is the AUROC difference, the variance of that
    mean DeLong's (1988) for the paired design, and the decision's p the t tail of DeLong's statistic."""
    from scipy import stats

    rng = np.random.default_rng(3)
    z = rng.standard_normal(N)
    a = np.round(1.4 * LABEL + z + 0.6 * rng.standard_normal(N), 1)[None]  # rounded: ties
    b = np.round(1.2 * LABEL + z + 0.6 * rng.standard_normal(N), 1)[None]
    metric, none = parse_metric("auroc"), np.zeros((1, N), np.int64)
    d = values(metric, LABEL, none, b) - values(metric, LABEL, none, a)
    diff, variance = _delong(LABEL, a[0], b[0])
    assert d.mean() == pytest.approx(diff, abs=1e-12)
    assert d.var(ddof=1) / N == pytest.approx(variance, rel=1e-9)
    p = scopes.p_value(d, -0.05, binary=False, scope="checkpoint")
    assert p == pytest.approx(stats.t.sf((diff + 0.05) / math.sqrt(variance), N - 1), rel=1e-9)


def test_balanced_accuracy_values_carry_the_stratified_variance():
    rng = np.random.default_rng(4)
    correct = rng.random(N) < np.where(LABEL == 1, 0.6, 0.85)
    prediction = np.where(correct, LABEL, 1 - LABEL)[None]
    v = values(parse_metric("balanced_accuracy"), LABEL, prediction)[0]
    recall = [correct[k == LABEL].mean() for k in (0, 1)]
    stratified = sum(r * (1 - r) / (4 * (n - 1)) for r, n in zip(recall, (N0, N1)))
    assert v.var(ddof=1) / N == pytest.approx(stratified, rel=1e-12)


# ------------------------------------------------------------------------------------------------ error rates

REPS = 3000  # per setting; one standard error about 0.004 at 0.05


def _classified(rng, z: np.ndarray, seeds: int, spread: float, seed_sd: float, recalls: np.ndarray) -> np.ndarray:
    """Correct or not [REPS, seeds, N]: image i of class k is right for a seed when z_i + w_i + e_si exceeds the
    cut giving recall recalls[k] + u_s (u_s ~ N(0, seed_sd^2)); ``z`` [REPS, 1, N] is the image's part shared by
    the resolutions, ``spread`` sets the resolution- and seed-specific parts (and so the share of images that
    change outcome)."""
    from scipy import stats

    total = math.sqrt(1 + 2 * spread * spread)
    w = spread * rng.standard_normal((REPS, 1, N))
    e = spread * rng.standard_normal((REPS, seeds, N))
    rate = np.clip(recalls[LABEL][None, None, :] + seed_sd * rng.standard_normal((REPS, seeds, 1)), 0.01, 0.99)
    return z + w + e > stats.norm.ppf(1 - rate) * total


def _per_rep(metric, prediction: np.ndarray, score: np.ndarray | None = None) -> np.ndarray:
    """values() of every simulated sweep at once: [REPS, seeds, N] predictions (and scores) stacked into REPS x
    seeds rows of one call, split back into [REPS, seeds, N]. values() computes each row from that row and the
    labels alone (a seed's recalls, F1s, AUROC), so this equals a call per sweep; macro-F1's class count is the
    largest label or prediction, 2 either way here (LABEL holds both classes)."""
    reps, seeds, n = prediction.shape
    flat = None if score is None else score.reshape(reps * seeds, n)
    return values(metric, LABEL, prediction.reshape(reps * seeds, n), flat).reshape(reps, seeds, n)


def _macro_f1(recalls: np.ndarray) -> float:
    """The population macro-F1 of two classes with these recalls at the test split's class shares."""
    pi = N1 / N
    tp1, fp1, fn1 = pi * recalls[1], (1 - pi) * (1 - recalls[0]), pi * (1 - recalls[1])
    tp0, fp0, fn0 = (1 - pi) * recalls[0], fn1, fp1
    return 0.5 * (2 * tp1 / (2 * tp1 + fp1 + fn1) + 2 * tp0 / (2 * tp0 + fp0 + fn0))


def _at_margin(metric: str, recalls: np.ndarray) -> np.ndarray:
    """Recalls exactly MARGIN below ``recalls`` in the metric (both classes lowered alike; macro-F1 by bisection)."""
    if metric == "balanced_accuracy":
        return recalls - MARGIN
    lo, hi = 0.0, 0.2
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _macro_f1(recalls) - _macro_f1(recalls - mid) < MARGIN else (lo, mid)
    return recalls - 0.5 * (lo + hi)


@pytest.mark.parametrize("metric", ["balanced_accuracy", "macro_f1"])
def test_label_metrics_hold_their_error_at_the_margin_at_model_scope(metric):
    """3 and 5 seeds, seed sd 0 and 0.04, a small and a large share of images changing outcome: a resolution
    exactly at the margin is called non-inferior at most 0.055 of the time (nominal 0.05)."""
    rng = np.random.default_rng(5)
    recalls = np.array([0.85, 0.65])
    m, rates = parse_metric(metric), {}
    for seeds in (3, 5):
        for seed_sd in (0.0, 0.04):
            for spread in (0.1, 0.6):  # about 0.05 and 0.2 of the images change outcome
                z = rng.standard_normal((REPS, 1, N))
                ref = _classified(rng, z, seeds, spread, seed_sd, recalls)
                low = _classified(rng, z, seeds, spread, seed_sd, _at_margin(metric, recalls))
                pred_ref, pred_low = np.where(ref, LABEL, 1 - LABEL), np.where(low, LABEL, 1 - LABEL)
                d = _per_rep(m, pred_low) - _per_rep(m, pred_ref)
                rates[seeds, seed_sd, spread] = scopes.rejects(d, -MARGIN, ALPHA, binary=False, scope="model").mean()
    assert max(rates.values()) <= 0.055, rates
    assert min(rates.values()) > 0.005, rates  # it does decide


def test_auroc_holds_its_error_at_the_margin_at_model_scope():
    """Scores N(mu y, 1) with a share rho of the noise common to the image; the seeds move mu (sd 0.1-0.15: an
    AUROC sd of about 0.02); AUROC 0.85 at the reference and exactly 0.83 at the other resolution."""
    from scipy import stats

    rng = np.random.default_rng(6)
    metric = parse_metric("auroc")
    rates = {}
    for seeds in (3, 5):
        for rho, seed_sd in ((0.5, 0.0), (0.8, 0.15), (0.95, 0.1), (0.95, 0.15)):
            z = rng.standard_normal((REPS, 1, N))
            a, b = (
                (math.sqrt(2) * stats.norm.ppf(auc) + seed_sd * rng.standard_normal((REPS, seeds, 1))) * LABEL
                + math.sqrt(rho) * z
                + math.sqrt(1 - rho) * rng.standard_normal((REPS, seeds, N))
                for auc in (0.85, 0.85 - MARGIN)
            )
            none = np.zeros((REPS, seeds, N), np.int64)  # AUROC reads the scores only
            d = _per_rep(metric, none, b) - _per_rep(metric, none, a)
            rates[seeds, rho, seed_sd] = scopes.rejects(d, -MARGIN, ALPHA, binary=False, scope="model").mean()
    assert max(rates.values()) <= 0.055, rates
    assert min(rates.values()) > 0.003, rates


# ------------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("overrides", "needles"),
    [
        (["stats.metric=auroc", "data.elpv.task=defect4"], ["stats.metric", "AUROC needs two classes", "'auroc'"]),
        (["stats.metric=recall:cracked"], ["stats.metric", "recall:functional or recall:defective", "cracked"]),
        (["stats.metric=f1"], ["stats.metric", "balanced_accuracy, macro_f1", "'f1'"]),
        (
            [
                "experiment.task=segmentation",
                "data.dataset=synthetic_seg",
                "sweep.models=[tiny_segnet]",
                "stats.metric=auroc",
            ],
            ["stats.metric", "segmentation task's per-image scores (miou, boundary_f1)", "'auroc'"],
        ),
    ],
)
def test_a_metric_the_task_or_data_does_not_define_is_a_one_line_error(overrides, needles, capsys):
    code, out, err = run_cli(["sweep", "--preset", "quickstart", "--dry-run", *overrides], capsys)
    assert code == 2, (out, err)
    line = err.strip()
    assert "\n" not in line and "Traceback" not in err
    for needle in needles:
        assert needle in line, line


@pytest.mark.parametrize("text", ["recall", "accuracy:functional", "roc"])
def test_parse_metric_refuses_what_it_cannot_read(text):
    with pytest.raises(ConfigError):
        parse_metric(text)


def test_a_recall_decision_counts_the_images_of_its_class():
    """What a recall decision would need is said in that class's test images (the decision's images)."""
    from resomap.stats import noninferiority

    ref = np.arange(N1)[None] < 35  # 35 of the 50 defective cells found at the reference
    other = ref.copy()
    other[0, :4], other[0, 35:39] = False, True  # 4 lost, 4 gained: no difference, too few images to show 0.02
    metric = parse_metric("recall:defective")
    found = noninferiority(
        {64: other, 128: ref}, margin=0.02, scope="checkpoint", metric=metric.words, images=metric.images
    )
    step = found.verdicts[1]
    assert step.verdict == "undecided", step.reason
    assert "test images of defective" in step.reason and "recall of defective difference" in step.reason
    assert "test images of defective" in found.reason

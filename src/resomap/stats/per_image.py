"""The decision metric (stats.metric) as one value per test image, whose mean over the images is the metric, so the
one paired test of stats.scope decides on any of them (the seeds x images layout, the critical value, the plan).

- ``accuracy``: 0/1, correct or not (the score test for 0/1 outcomes applies).
- ``recall:<class>``: 0/1 on the images of that class only (the same score test, on those images).
- ``balanced_accuracy``: the mean of the classes' recalls (scikit-learn's balanced_accuracy_score). Per image
  ``BA + w_k (x_i - R_k)``, x_i correct or not, R_k the recall of its class k, ``w_k = sqrt(N (N-1) / (K^2 n_k
  (n_k - 1)))``: the mean is BA exactly and the one-sample variance of the mean is the stratified one,
  sum_k R_k (1 - R_k) / (K^2 (n_k - 1)) (the test set's class counts are fixed by its stratified split).
- ``macro_f1``: the unweighted mean of the classes' F1 (scikit-learn's f1_score(average="macro")). Per image
  ``F + IF_i``, IF the influence of image i on F (the delta method: F1_k = 2 TP_k / (P_k + T_k) over predicted and
  true counts, IF_k,i = (2 [y_i = k = p_i] - F1_k ([p_i = k] + [y_i = k])) / ((P_k + T_k) / N)): the mean is F
  exactly and the variance of the mean the delta method's.
- ``auroc`` (two classes; the score is the probability of class 1): DeLong's placement values V10 (a positive's share
  of negatives scored below it, ties one half) and V01 (a negative's share of positives above it) as ``A + c_1 (V10_i
  - A)`` and ``A + c_0 (V01_j - A)`` with ``c = sqrt(N (N - 1) / (m (m - 1)))`` for a class of m images: the mean is
  the AUROC and the one-sample variance of the mean is DeLong's (1988) S10 / m + S01 / n exactly, so the paired
  difference of two resolutions' values gives DeLong's paired test (its Student t with N - 1 degrees of freedom, as
  for every score that is not 0/1, in place of the normal).

Every value is computed per seed ([S, N] in, [S, N'] out), so a seed's mean is that seed's metric and the seeds stay
replicates. tests/test_per_image.py checks each against scikit-learn (and an independent DeLong) and simulates the
error rate at model scope: at most 0.05 with 3 and 5 seeds. At checkpoint scope balanced accuracy and macro-F1
rejected 0.068-0.070 at the margin when about 5% of the images change outcome (one seed, 2,000 simulated sweeps: the
t-test's weakness on values built from 0/1 outcomes): decide on them at model scope. Written by hand: scikit-learn
gives each metric but not per-image values whose mean it is, and no library gives DeLong's placement values (its
test is not in scipy or statsmodels).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from resomap.errors import ConfigError

METRICS = ("accuracy", "balanced_accuracy", "macro_f1", "recall", "auroc")
WORDS = {
    "accuracy": "accuracy",
    "balanced_accuracy": "balanced accuracy",
    "macro_f1": "macro-F1",
    "auroc": "AUROC",
}


@dataclass(frozen=True)
class Metric:
    """A parsed stats.metric: ``name`` one of METRICS, ``cls`` the class of a recall (its name)."""

    name: str
    cls: str | None = None

    @property
    def words(self) -> str:
        return f"recall of {self.cls}" if self.name == "recall" else WORDS[self.name]

    @property
    def images(self) -> str:
        """What the decision's images are, in words: a recall counts the test images of its class."""
        return f"test images of {self.cls}" if self.name == "recall" else "test images"

    @property
    def binary(self) -> bool:
        """0/1 per image: the score test for 0/1 outcomes applies."""
        return self.name in ("accuracy", "recall")


def parse_metric(text: str) -> Metric:
    """'accuracy', 'balanced_accuracy', 'macro_f1', 'auroc' or 'recall:<class name>' -> Metric; ConfigError else."""
    name, sep, cls = str(text).partition(":")
    name, cls = name.strip(), cls.strip()
    if name not in METRICS:
        raise ConfigError(
            f"unknown decision metric {text!r}; use one of {', '.join(METRICS[:-2])}, auroc, recall:<class>"
        )
    if name == "recall":
        if not cls:
            raise ConfigError(f"recall needs a class: recall:<class name>, got {text!r}")
        return Metric(name, cls)
    if sep:
        raise ConfigError(f"only recall takes a class (recall:<class name>), got {text!r}")
    return Metric(name)


def values(
    metric: Metric,
    label: np.ndarray,
    prediction: np.ndarray,
    score: np.ndarray | None = None,
    class_names: list[str] | None = None,
) -> np.ndarray:
    """Per-image values [S, N'] of ``metric`` (module doc) from the labels [N], the predictions [S, N] and, for
    AUROC, the scores [S, N] (probability of class 1); ``class_names`` name the classes (a recall's class). N' is
    N except for a recall (the class's images). ConfigError when the metric cannot be computed on these records."""
    label = np.asarray(label, dtype=np.int64)
    prediction = np.atleast_2d(np.asarray(prediction, dtype=np.int64))
    if prediction.shape[1] != label.shape[0]:
        raise ConfigError(f"{prediction.shape[1]} predictions per seed for {label.shape[0]} labels")
    correct = prediction == label[None, :]
    if metric.name == "accuracy":
        return correct
    if metric.name == "recall":
        k = class_index(metric.cls, class_names)
        chosen = label == k
        if chosen.sum() < 2:
            raise ConfigError(f"recall of {metric.cls}: {int(chosen.sum())} test image(s) of that class; needs >= 2")
        return correct[:, chosen]
    if metric.name == "balanced_accuracy":
        return _balanced(label, correct)
    if metric.name == "macro_f1":
        n_classes = max(int(label.max(initial=0)), int(prediction.max(initial=0))) + 1
        if class_names is not None:
            n_classes = max(n_classes, len(class_names))
        return _macro_f1(label, prediction, n_classes)
    if score is None:
        raise ConfigError("AUROC needs each test image's probability of class 1 (predictions.csv column 'score')")
    return _auroc(label, np.atleast_2d(np.asarray(score, dtype=np.float64)))


def class_index(cls: str | None, class_names: list[str] | None) -> int:
    """The index of class ``cls`` among ``class_names``; ConfigError naming the classes when it is not one."""
    names = list(class_names or [])
    if cls not in names:
        shown = ", ".join(names) if names else "unknown"
        raise ConfigError(f"class {cls!r} is not a class of the data (classes: {shown})")
    return names.index(cls)


def _weights(counts: np.ndarray, total: int, share: np.ndarray) -> np.ndarray:
    """sqrt(N (N - 1) / (n (n - 1))) x share per stratum of n images (a single image: its plain weight N / n)."""
    n = counts.astype(np.float64)
    safe = np.where(n > 1, n * (n - 1), 1.0)
    return np.where(n > 1, np.sqrt(total * (total - 1) / safe), total / np.maximum(n, 1.0)) * share


def _balanced(label: np.ndarray, correct: np.ndarray) -> np.ndarray:
    classes, inverse, counts = np.unique(label, return_inverse=True, return_counts=True)
    k, total = len(classes), label.shape[0]
    x = correct.astype(np.float64)  # [S, N]
    recall = np.stack([x[:, inverse == c].mean(1) for c in range(k)], axis=1)  # [S, K]
    w = _weights(counts, total, np.full(k, 1.0 / k))  # [K]
    return recall.mean(1, keepdims=True) + w[inverse][None, :] * (x - recall[:, inverse])


def _macro_f1(label: np.ndarray, prediction: np.ndarray, n_classes: int) -> np.ndarray:
    total = label.shape[0]
    out = np.zeros(prediction.shape, dtype=np.float64)
    f_sum = np.zeros(prediction.shape[0])
    for k in range(n_classes):
        is_true = (label == k)[None, :].astype(np.float64)  # [1, N]
        is_pred = (prediction == k).astype(np.float64)  # [S, N]
        both = is_true * is_pred
        denom = (is_true.sum(1) + is_pred.sum(1)) / total  # (P_k + T_k) / N per seed
        f1 = np.divide(2 * both.mean(1), denom, out=np.zeros_like(denom), where=denom > 0)
        f_sum += f1
        influence = (2 * both - f1[:, None] * (is_pred + is_true)) / np.where(denom > 0, denom, 1.0)[:, None]
        out += np.where(denom[:, None] > 0, influence, 0.0)
    return (f_sum[:, None] + out) / n_classes


def _auroc(label: np.ndarray, score: np.ndarray) -> np.ndarray:
    if score.shape[1] != label.shape[0]:
        raise ConfigError(f"{score.shape[1]} scores per seed for {label.shape[0]} labels")
    if not np.isfinite(score).all():
        raise ConfigError("AUROC: a test image has no score (an older predictions.csv without the 'score' column?)")
    if np.unique(label).size != 2 or label.max() != 1 or label.min() != 0:
        raise ConfigError("AUROC needs test images of both classes of a two-class task")
    pos, neg = label == 1, label == 0
    m, n, total = int(pos.sum()), int(neg.sum()), label.shape[0]
    out = np.empty(score.shape, dtype=np.float64)
    c_pos, c_neg = _weights(np.array([m, n]), total, np.ones(2))
    for s, row in enumerate(score):
        negs, poss = np.sort(row[neg]), np.sort(row[pos])
        below = np.searchsorted(negs, row[pos], side="left")
        ties = np.searchsorted(negs, row[pos], side="right") - below
        v10 = (below + 0.5 * ties) / n  # a positive's share of negatives scored below it
        above = m - np.searchsorted(poss, row[neg], side="right")
        ties = np.searchsorted(poss, row[neg], side="right") - np.searchsorted(poss, row[neg], side="left")
        v01 = (above + 0.5 * ties) / m  # a negative's share of positives scored above it
        auc = v10.mean()
        out[s, pos] = auc + c_pos * (v10 - auc)
        out[s, neg] = auc + c_neg * (v01 - auc)
    return out

"""Bootstrap intervals over test images (``scipy.stats.bootstrap``, BCa by default).

Inputs are per-image outcomes: ``correct`` bool ``[N]`` (one run) or ``[S, N]`` (S seeds tested on the same N
images in the same order), any per-image score (IoU, Dice: :func:`bootstrap_scores`), or true and predicted labels
(:func:`bootstrap_metric`, :func:`pooled_macro_f1`). Every resample draws whole images: an image keeps its outcome
under every seed, so the interval reflects the test set's size, not S x N. Fewer than ``MIN_BOOTSTRAP_IMAGES``
images: ``available=False``.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from resomap.errors import ConfigError
from resomap.stats.checks import (
    as_runs,
    as_scores,
    check_choice,
    check_level,
    check_resamples,
    check_seed,
    finite,
)
from resomap.stats.intervals import Interval, unavailable_interval

MIN_BOOTSTRAP_IMAGES = 10  # fewer test images than this: no bootstrap interval (the resamples barely differ)
# fewer seeds than this: no interval over images and seeds (twoway_bootstrap). With 2 seeds a real seed effect (sd
# 0.09 of accuracy) is covered 0.77-0.83 of the time at a nominal 0.95; 3 seeds cover a seed sd of 0.044 at about
# the nominal rate (tests/test_stats.py) and a larger one still short of it
TWOWAY_MIN_SEEDS = 3
BOOTSTRAP_METHODS = ("BCa", "percentile", "basic")
METRICS = ("accuracy", "macro_f1")
BATCH_ELEMENTS = 2_000_000  # values per statistic call inside scipy's bootstrap: bounds memory for large test sets


def macro_f1(y_true: np.ndarray, y_pred: np.ndarray, n_classes: int, axis: int = -1) -> np.ndarray:
    """Macro-F1 of integer labels in [0, n_classes) along ``axis``, vectorized over the other axes.

    Written with numpy (sklearn per resample would be far too slow). Matches ``sklearn.metrics.f1_score(
    average="macro", zero_division=0)``: the average is over the classes present in y_true or y_pred of that sample;
    a class present in only one of them has F1 = 0. F1 = 2 tp / (2 tp + fp + fn) = 2 tp / (n_true + n_pred).
    """
    yt = np.moveaxis(np.asarray(y_true), axis, -1)
    yp = np.moveaxis(np.asarray(y_pred), axis, -1)
    lead, m = yt.shape[:-1], yt.shape[-1]
    rows = int(np.prod(lead, dtype=np.int64))
    codes = yt.reshape(rows, m).astype(np.int64) * n_classes + yp.reshape(rows, m)
    codes += (np.arange(rows, dtype=np.int64) * n_classes * n_classes)[:, None]
    confusion = np.bincount(codes.ravel(), minlength=rows * n_classes * n_classes).reshape(rows, n_classes, n_classes)
    tp = np.diagonal(confusion, axis1=1, axis2=2)
    denom = confusion.sum(axis=2) + confusion.sum(axis=1)  # n_true + n_pred per class
    present = denom > 0
    f1 = np.divide(2.0 * tp, denom, out=np.zeros(tp.shape), where=present)
    return (f1.sum(axis=1) / np.maximum(present.sum(axis=1), 1)).reshape(lead)


def bootstrap(
    data: tuple[np.ndarray, ...], statistic, *, level: float, resamples: int, seed: int, method: str, paired: bool
) -> tuple[float | None, float | None, str, str | None]:
    """scipy.stats.bootstrap with memory-bounded batches. Returns (low, high, method used, caveat).

    BCa is undefined when every resample gives the same value (scipy warns and returns NaN): then the percentile
    interval is used, which is the (zero-width) honest answer, and the caveat says so.
    """
    from scipy import stats

    n = data[0].shape[-1]
    batch = max(1, BATCH_ELEMENTS // max(n, 1))
    for attempt in (method, "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # DegenerateDataWarning / runtime warnings: NaN is checked below
            res = stats.bootstrap(
                data,
                statistic,
                n_resamples=resamples,
                batch=batch,
                vectorized=True,
                paired=paired,
                axis=-1,
                confidence_level=level,
                method=attempt,
                rng=np.random.default_rng(seed),
            )
        low, high = finite(res.confidence_interval.low), finite(res.confidence_interval.high)
        if low is not None and high is not None:
            if low == high:
                caveat = "zero-width interval: every resample gives the same value"
            elif attempt != method:
                caveat = f"{method} undefined for this sample: percentile interval used"
            else:
                caveat = None
            return low, high, attempt, caveat
    return None, None, method, "the bootstrap gave no finite interval"


def _interval(
    data: tuple[np.ndarray, ...],
    statistic,
    estimate: float | None,
    *,
    level: float,
    resamples: int,
    seed: int,
    method: str,
    paired: bool,
    label: str = "bootstrap {method} over images ({resamples} resamples)",
) -> Interval:
    """The bootstrap Interval of ``statistic`` over the images of ``data`` (the last axis), or why there is none."""
    n = data[0].shape[-1]
    text = label.format(method=method, resamples=resamples)
    if n < MIN_BOOTSTRAP_IMAGES:
        why = f"only {n} test images: a bootstrap interval needs at least {MIN_BOOTSTRAP_IMAGES}"
        return unavailable_interval(estimate, level, text, n, why)
    low, high, used, caveat = bootstrap(
        data, statistic, level=level, resamples=resamples, seed=seed, method=method, paired=paired
    )
    text = label.format(method=used, resamples=resamples)
    if low is None:
        return unavailable_interval(estimate, level, text, n, caveat or "no interval")
    return Interval(estimate, low, high, level, text, n, reason=caveat)


def _image_means(per_image: np.ndarray, *, level: float, resamples: int, seed: int, method: str) -> Interval:
    estimate = finite(per_image.mean()) if per_image.size else None
    kw = dict(level=level, resamples=resamples, seed=seed, method=method, paired=False)
    return _interval((per_image,), np.mean, estimate, **kw)


def bootstrap_accuracy(
    correct: Any, *, level: float = 0.95, resamples: int = 2000, seed: int = 0, method: str = "BCa"
) -> Interval:
    """Accuracy with a bootstrap interval over test images (``scipy.stats.bootstrap``, BCa by default).

    ``correct``: bool ``[N]``, or ``[S, N]`` for S seeds on the same images; then the estimate is the accuracy pooled
    over seeds and each resample draws whole images (an image keeps its outcome under every seed), so the interval
    reflects the test set's size, not S x N. Fewer than ``MIN_BOOTSTRAP_IMAGES`` images: ``available=False``.
    """
    level, resamples, seed = check_level(level), check_resamples(resamples), check_seed(seed)
    method = check_choice(method, BOOTSTRAP_METHODS, "bootstrap method")
    per_image = as_runs(correct, "correct").mean(axis=0)  # [N]: fraction of seeds that got each image right
    return _image_means(per_image, level=level, resamples=resamples, seed=seed, method=method)


def bootstrap_scores(
    scores: Any, *, level: float = 0.95, resamples: int = 2000, seed: int = 0, method: str = "BCa"
) -> Interval:
    """The mean of any per-image score (0/1 correctness, IoU or Dice per image, ...) with a bootstrap interval over
    test images: ``scores`` float ``[N]`` or ``[S, N]`` (seeds pooled as in :func:`bootstrap_accuracy`, which it
    equals on 0/1 scores)."""
    level, resamples, seed = check_level(level), check_resamples(resamples), check_seed(seed)
    method = check_choice(method, BOOTSTRAP_METHODS, "bootstrap method")
    per_image = as_scores(scores, "scores").mean(axis=0)
    return _image_means(per_image, level=level, resamples=resamples, seed=seed, method=method)


def _label_codes(y_true: np.ndarray, y_pred: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Labels of any hashable kind -> integer codes in [0, k) shared by both arrays (y_pred may be [S, N])."""
    n = y_true.size
    classes, codes = np.unique(np.concatenate([y_true, y_pred.ravel()]), return_inverse=True)
    codes = codes.reshape(-1)
    return codes[:n], codes[n:].reshape(y_pred.shape), len(classes)


def bootstrap_metric(
    y_true: Any,
    y_pred: Any,
    *,
    metric: str = "macro_f1",
    level: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
    method: str = "BCa",
) -> Interval:
    """``metric`` ("accuracy" or "macro_f1") of labels ``y_pred`` against ``y_true`` (both ``[N]``, any hashable
    labels), with a bootstrap interval that resamples images (true and predicted label of an image stay together).

    Macro-F1 averages over the classes present in y_true or y_pred of each resample, as sklearn's
    ``f1_score(average="macro", zero_division=0)`` does.
    """
    level, resamples, seed = check_level(level), check_resamples(resamples), check_seed(seed)
    method = check_choice(method, BOOTSTRAP_METHODS, "bootstrap method")
    metric = check_choice(metric, METRICS, "metric")
    yt, yp = np.asarray(y_true), np.asarray(y_pred)
    if yt.ndim != 1 or yp.ndim != 1 or yt.shape != yp.shape:
        raise ConfigError(f"y_true and y_pred must be 1-D of the same length, got shapes {yt.shape} and {yp.shape}")
    if yt.size == 0:
        label = f"bootstrap {method} over images ({resamples} resamples)"
        return unavailable_interval(None, level, label, 0, "no test images")
    t_codes, p_codes, k = _label_codes(yt, yp)

    if metric == "accuracy":

        def statistic(a, b, axis=-1):
            return np.mean(a == b, axis=axis)
    else:

        def statistic(a, b, axis=-1):
            return macro_f1(a, b, k, axis=axis)

    estimate = finite(statistic(t_codes, p_codes))
    kw = dict(level=level, resamples=resamples, seed=seed, method=method, paired=True)
    return _interval((t_codes, p_codes), statistic, estimate, **kw)


def pooled_macro_f1(
    label: np.ndarray, prediction: np.ndarray, *, level: float = 0.95, resamples: int = 2000, seed: int = 0
) -> Interval:
    """Macro-F1 of the seeds' predictions pooled ([S, N] against the N labels), with a bootstrap interval that
    resamples images (each image keeps its label and its prediction under every seed). With one seed this is
    exactly :func:`bootstrap_metric`; pooling S identical seeds gives the one-seed answer."""
    prediction = np.atleast_2d(prediction)
    if prediction.shape[0] == 1:
        return bootstrap_metric(label, prediction[0], metric="macro_f1", level=level, resamples=resamples, seed=seed)
    t_codes, p_codes, k = _label_codes(np.asarray(label), prediction)

    def statistic(t, *ps, axis=-1):
        return macro_f1(np.concatenate([t] * len(ps), axis=-1), np.concatenate(ps, axis=-1), k, axis=-1)

    estimate = finite(statistic(t_codes, *p_codes))
    label_text = "bootstrap {method} over images, seeds pooled ({resamples} resamples)"
    kw = dict(level=level, resamples=resamples, seed=seed, method="BCa", paired=True, label=label_text)
    return _interval((t_codes, *p_codes), statistic, estimate, **kw)


def twoway_bootstrap(scores: Any, *, level: float = 0.95, resamples: int = 2000, seed: int = 0) -> Interval:
    """Interval of the grand mean of a per-image score ``[S, N]`` (S seeds tested on the same N images) over both
    sources of variation: each resample draws S seeds and N images with replacement, independently, and takes the
    mean of the crossed table (the two-way "pigeonhole" bootstrap, Owen 2007; percentile interval).

    Written here because ``scipy.stats.bootstrap`` resamples one axis (images) only; the counts-times-table form
    below does a resample in one matrix product. Known behaviour: the interval is slightly conservative when both
    variance parts are estimated well, and the seed part is estimated from S seeds only, (S - 1) / S of it on
    average: with few seeds a large seed-to-seed spread is under-covered (3 seeds and a seed sd of 0.09 of accuracy:
    about 0.84 at a nominal 0.95; 5 seeds: 0.93); the seeds' own spread sits beside it in the summary. The bounds
    are means of observed scores, so they never leave the score's range.
    Fewer than ``TWOWAY_MIN_SEEDS`` (3) seeds: ``available=False`` with "not available: needs >= 3 seeds" (with 2
    seeds a real seed effect is under-covered far below the level).
    """
    level, resamples, seed = check_level(level), check_resamples(resamples), check_seed(seed)
    y = as_scores(scores, "scores").astype(np.float64)
    s, n = y.shape
    method = f"two-way bootstrap over test images and training seeds ({resamples} resamples, percentile)"
    estimate = float(y.mean()) if y.size else None
    if s < TWOWAY_MIN_SEEDS:
        return unavailable_interval(estimate, level, method, n, f"not available: needs >= {TWOWAY_MIN_SEEDS} seeds")
    if n < MIN_BOOTSTRAP_IMAGES:
        why = f"only {n} test images: a bootstrap needs at least {MIN_BOOTSTRAP_IMAGES}"
        return unavailable_interval(estimate, level, method, n, why)
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    step = max(1, BATCH_ELEMENTS // (s * n + n + s))
    for start in range(0, resamples, step):
        b = min(step, resamples - start)
        seed_counts = rng.multinomial(s, np.full(s, 1.0 / s), size=b)  # [b, S]: how often each seed is drawn
        image_counts = rng.multinomial(n, np.full(n, 1.0 / n), size=b)  # [b, N]
        means[start : start + b] = np.einsum("bs,sn,bn->b", seed_counts, y, image_counts, optimize=True) / (s * n)
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return Interval(estimate, float(low), float(high), level, method, n)

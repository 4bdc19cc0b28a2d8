"""Statistics a reviewer can trust: intervals, paired tests and the resolution recommendation (issue 13).

Inputs are plain numpy arrays of per-test-image outcomes: ``correct`` is bool ``[N]`` (one run) or ``[S, N]`` (S seeds,
each tested on the same N images, in the same order). Nothing here trains or loads a model.

- :func:`bootstrap_accuracy`, :func:`bootstrap_metric`: bootstrap interval over test images (``scipy.stats.bootstrap``).
- :func:`seed_interval`: mean, std and Student-t interval across seeds (``scipy.stats.t``).
- :func:`paired_test`: model B vs model A on the same images: McNemar's exact test (``statsmodels``) or a paired
  bootstrap over images with a sign-flip permutation p-value (``scipy.stats.bootstrap`` / ``permutation_test``).
- :func:`holm`, :func:`compare_resolutions`: every pair of resolutions, Holm-adjusted (``statsmodels``).
- :func:`smallest_sufficient_resolution`: the smallest resolution not significantly below the best one.
- :func:`pareto_front`: the accuracy/cost points no other point beats on both.

A bad setting (confidence level outside (0, 1), resamples < 1, arrays of mismatched shapes or non-0/1 values) raises
:class:`~resomap.errors.ConfigError`; a sample too small for the statistic gives a result with ``available=False`` and a
plain ``reason``. Results never hold NaN: a value that cannot be computed is ``None``.

scipy and statsmodels are imported inside the functions that use them (they take seconds to import).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from resomap.errors import ConfigError

MIN_BOOTSTRAP_IMAGES = 10  # fewer test images than this: no bootstrap interval (the resamples barely differ)
BOOTSTRAP_METHODS = ("BCa", "percentile", "basic")
PAIRED_METHODS = ("mcnemar", "bootstrap")
METRICS = ("accuracy", "macro_f1")
_BATCH_ELEMENTS = 2_000_000  # values per statistic call inside scipy's bootstrap: bounds memory for large test sets


def _to_dict(obj: Any) -> dict[str, Any]:
    return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _to_dict(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _float(value: Any) -> float | None:
    """A plain float, or None for NaN/inf (results never hold NaN)."""
    value = float(value)
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class Interval:
    """An estimate with a two-sided interval at ``level``; ``n`` is the sample size (images, or seeds).

    ``available=False`` means no interval could be computed (``low``/``high`` are None) and ``reason`` says why;
    ``reason`` may also carry a caveat for an available interval (for example a zero-width bootstrap interval).
    """

    estimate: float | None
    low: float | None
    high: float | None
    level: float
    method: str
    n: int
    available: bool = True
    reason: str | None = None
    std: float | None = None  # the spread across seeds (seed_interval only)

    def to_dict(self) -> dict[str, Any]:
        return _to_dict(self)


@dataclass(frozen=True)
class PairedTest:
    """Model B against model A on the same test images.

    ``effect`` = accuracy(B) - accuracy(A), pooled over all seeds and images; ``low``/``high`` its interval at
    ``level``. ``b01`` = image-seed pairs where A is wrong and B right, ``b10`` = A right and B wrong (the discordant
    cells of the 2x2 table, summed over seeds).
    """

    effect: float | None
    low: float | None
    high: float | None
    p_value: float | None
    level: float
    method: str
    n_images: int
    n_seeds: int
    b01: int
    b10: int
    accuracy_a: float | None
    accuracy_b: float | None
    available: bool = True
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return _to_dict(self)


@dataclass(frozen=True)
class PairComparison:
    """One row of :func:`compare_resolutions`: ``test`` is B = ``resolution_b`` against A = ``resolution_a``
    (``resolution_a < resolution_b``, so a positive effect is a gain from the higher resolution)."""

    resolution_a: int
    resolution_b: int
    test: PairedTest
    p_adjusted: float | None
    significant: bool
    correction: str

    def to_dict(self) -> dict[str, Any]:
        return _to_dict(self)


@dataclass(frozen=True)
class Recommendation:
    """The smallest sufficient resolution (``resolution``), the most accurate one (``best_resolution``), a one-line
    ``reason`` in words, and the pairwise ``rows`` it was read from. ``resolution`` is None when unavailable."""

    resolution: int | None
    best_resolution: int | None
    reason: str
    rows: list[PairComparison]
    accuracies: dict[int, float]
    level: float
    margin: float
    available: bool = True

    def to_dict(self) -> dict[str, Any]:
        out = _to_dict(self)
        out["accuracies"] = {str(k): v for k, v in self.accuracies.items()}  # JSON keys are strings
        return out


@dataclass(frozen=True)
class ParetoPoint:
    name: str
    accuracy: float
    cost: float

    def to_dict(self) -> dict[str, Any]:
        return _to_dict(self)


# ------------------------------------------------------------------------------------------------ validation


def _check_level(level: Any) -> float:
    if isinstance(level, bool) or not isinstance(level, (int, float, np.floating)):
        raise ConfigError(f"confidence level must be a number in (0, 1), got {level!r}")
    level = float(level)
    if not (0.0 < level < 1.0):
        raise ConfigError(f"confidence level must be in (0, 1) (e.g. 0.95), got {level}")
    return level


def _check_resamples(resamples: Any) -> int:
    if isinstance(resamples, bool) or not isinstance(resamples, (int, np.integer)) or resamples < 1:
        raise ConfigError(f"resamples must be a positive integer (e.g. 2000), got {resamples!r}")
    return int(resamples)


def _check_choice(value: Any, choices: Sequence[str], what: str) -> str:
    for choice in choices:
        if isinstance(value, str) and value.lower() == choice.lower():
            return choice
    raise ConfigError(f"{what} must be one of {', '.join(choices)}; got {value!r}")


def _as_binary(values: Any, name: str) -> np.ndarray:
    """bool or 0/1 array -> bool array; anything else is a ConfigError."""
    arr = np.asarray(values)
    if arr.dtype == bool:
        return arr
    if arr.size and not (np.issubdtype(arr.dtype, np.number) and np.isin(arr, (0, 1)).all()):
        raise ConfigError(f"{name} must hold only True/False (or 0/1) per test image")
    return arr.astype(bool)


def _as_runs(values: Any, name: str) -> np.ndarray:
    """bool [N] or [S, N] -> bool [S, N]."""
    arr = _as_binary(values, name)
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise ConfigError(f"{name} must be 1-D [images] or 2-D [seeds, images], got shape {arr.shape}")
    return arr


def _check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ConfigError(f"seed must be an integer, got {seed!r}")
    return int(seed)


# ------------------------------------------------------------------------------------------------ bootstrap


def _macro_f1(y_true: np.ndarray, y_pred: np.ndarray, n_classes: int, axis: int = -1) -> np.ndarray:
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


def _bootstrap(
    data: tuple[np.ndarray, ...], statistic, *, level: float, resamples: int, seed: int, method: str, paired: bool
) -> tuple[float | None, float | None, str, str | None]:
    """scipy.stats.bootstrap with memory-bounded batches. Returns (low, high, method used, caveat).

    BCa is undefined when every resample gives the same value (scipy warns and returns NaN): then the percentile
    interval is used, which is the (zero-width) honest answer, and the caveat says so.
    """
    from scipy import stats

    n = data[0].shape[-1]
    batch = max(1, _BATCH_ELEMENTS // max(n, 1))
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
        low, high = _float(res.confidence_interval.low), _float(res.confidence_interval.high)
        if low is not None and high is not None:
            if low == high:
                caveat = "zero-width interval: every resample gives the same value"
            elif attempt != method:
                caveat = f"{method} undefined for this sample: percentile interval used"
            else:
                caveat = None
            return low, high, attempt, caveat
    return None, None, method, "the bootstrap gave no finite interval"


def _unavailable_interval(estimate: float | None, level: float, method: str, n: int, reason: str) -> Interval:
    return Interval(estimate, None, None, level, method, n, available=False, reason=reason)


def bootstrap_accuracy(
    correct: Any, *, level: float = 0.95, resamples: int = 2000, seed: int = 0, method: str = "BCa"
) -> Interval:
    """Accuracy with a bootstrap interval over test images (``scipy.stats.bootstrap``, BCa by default).

    ``correct``: bool ``[N]``, or ``[S, N]`` for S seeds on the same images; then the estimate is the accuracy pooled
    over seeds and each resample draws whole images (an image keeps its outcome under every seed), so the interval
    reflects the test set's size, not S x N. Fewer than ``MIN_BOOTSTRAP_IMAGES`` images: ``available=False``.
    """
    level, resamples, seed = _check_level(level), _check_resamples(resamples), _check_seed(seed)
    method = _check_choice(method, BOOTSTRAP_METHODS, "bootstrap method")
    runs = _as_runs(correct, "correct")
    per_image = runs.mean(axis=0)  # [N]: fraction of seeds that got each image right
    n = per_image.size
    label = f"bootstrap {method} over images ({resamples} resamples)"
    estimate = _float(per_image.mean()) if n else None
    if n < MIN_BOOTSTRAP_IMAGES:
        why = f"only {n} test images: a bootstrap interval needs at least {MIN_BOOTSTRAP_IMAGES}"
        return _unavailable_interval(estimate, level, label, n, why)
    low, high, used, caveat = _bootstrap(
        (per_image,), np.mean, level=level, resamples=resamples, seed=seed, method=method, paired=False
    )
    label = f"bootstrap {used} over images ({resamples} resamples)"
    if low is None:
        return _unavailable_interval(estimate, level, label, n, caveat or "no interval")
    return Interval(estimate, low, high, level, label, n, reason=caveat)


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
    level, resamples, seed = _check_level(level), _check_resamples(resamples), _check_seed(seed)
    method = _check_choice(method, BOOTSTRAP_METHODS, "bootstrap method")
    metric = _check_choice(metric, METRICS, "metric")
    yt, yp = np.asarray(y_true), np.asarray(y_pred)
    if yt.ndim != 1 or yp.ndim != 1 or yt.shape != yp.shape:
        raise ConfigError(f"y_true and y_pred must be 1-D of the same length, got shapes {yt.shape} and {yp.shape}")
    n = yt.size
    label = f"bootstrap {method} over images ({resamples} resamples)"
    if n == 0:
        return _unavailable_interval(None, level, label, 0, "no test images")
    classes, codes = np.unique(np.concatenate([yt, yp]), return_inverse=True)
    codes = codes.reshape(-1)
    t_codes, p_codes, k = codes[:n], codes[n:], len(classes)

    if metric == "accuracy":

        def statistic(a, b, axis=-1):
            return np.mean(a == b, axis=axis)
    else:

        def statistic(a, b, axis=-1):
            return _macro_f1(a, b, k, axis=axis)

    estimate = _float(statistic(t_codes, p_codes))
    if n < MIN_BOOTSTRAP_IMAGES:
        why = f"only {n} test images: a bootstrap interval needs at least {MIN_BOOTSTRAP_IMAGES}"
        return _unavailable_interval(estimate, level, label, n, why)
    low, high, used, caveat = _bootstrap(
        (t_codes, p_codes), statistic, level=level, resamples=resamples, seed=seed, method=method, paired=True
    )
    label = f"bootstrap {used} over images ({resamples} resamples)"
    if low is None:
        return _unavailable_interval(estimate, level, label, n, caveat or "no interval")
    return Interval(estimate, low, high, level, label, n, reason=caveat)


# ------------------------------------------------------------------------------------------------ seeds


def seed_interval(values: Any, level: float = 0.95) -> Interval:
    """Mean over seeds, their std (ddof=1) and a Student-t interval for the mean: mean ± t_{S-1} · std / √S.

    One seed: ``available=False`` (no spread across seeds); a NaN/inf value: ``available=False``.
    """
    level = _check_level(level)
    arr = np.asarray(values, dtype=float) if np.size(values) else np.zeros(0)
    if arr.ndim != 1:
        raise ConfigError(f"seed values must be 1-D (one number per seed), got shape {arr.shape}")
    s = arr.size
    method = "Student t across seeds"
    if s == 0:
        return _unavailable_interval(None, level, method, 0, "no seeds")
    if not np.isfinite(arr).all():
        return _unavailable_interval(None, level, method, s, "a seed's value is NaN or infinite")
    mean = float(arr.mean())
    if s == 1:
        return _unavailable_interval(mean, level, method, 1, "one seed: no spread across seeds")
    from scipy import stats

    std = float(arr.std(ddof=1))
    half = float(stats.t.ppf(0.5 + level / 2, df=s - 1)) * std / math.sqrt(s)
    return Interval(mean, mean - half, mean + half, level, method, s, std=std)


# ------------------------------------------------------------------------------------------------ paired tests


def _fmt_p(p: float | None) -> str:
    if p is None:
        return "p unavailable"
    return "p < 0.001" if p < 0.001 else f"p = {p:.2g}"


def paired_test(
    correct_a: Any,
    correct_b: Any,
    *,
    method: str = "mcnemar",
    level: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> PairedTest:
    """Is model B more (or less) accurate than model A on the same test images?

    ``correct_a``, ``correct_b``: bool ``[N]`` or ``[S, N]`` of the same shape; row s of A and row s of B are tested
    on the same N images in the same order (seed s of each model). effect = acc(B) - acc(A), pooled over seeds.

    method="mcnemar" (default; the one compare_resolutions and the recommendation use unless told otherwise):
      McNemar's exact test (``statsmodels...mcnemar(table, exact=True)``: a two-sided binomial test of b01 against
      b01 + b10 at 1/2) on the 2x2 table **summed over seeds**. Each seed pairs the same images, so summing treats
      the S x N image-seed pairs as independent; the seeds of one image are correlated, so with several seeds this
      p-value can be somewhat too small: use method="bootstrap" where that matters. The interval is the exact
      Clopper-Pearson interval of b01 / (b01 + b10) mapped to the effect scale (conditional on the number of
      discordant pairs); it excludes 0 exactly when McNemar's p <= 1 - level.
    method="bootstrap":
      resamples images, keeping each image's outcomes under every seed and both models together: the per-image
      difference d_i = mean over seeds of (B_si - A_si) is bootstrapped (BCa) for the interval, and the p-value is
      a sign-flip permutation test of mean(d) (``scipy.stats.permutation_test``, ``permutation_type="samples"``),
      which is exact under "A and B are exchangeable on each image" and, with one seed, a randomized McNemar test.
      Fewer than ``MIN_BOOTSTRAP_IMAGES`` images: ``available=False``.

    Identical inputs give effect 0, interval [0, 0] and p = 1 with either method.
    """
    method = _check_choice(method, PAIRED_METHODS, "paired test method")
    level, resamples, seed = _check_level(level), _check_resamples(resamples), _check_seed(seed)
    a, b = _as_runs(correct_a, "correct_a"), _as_runs(correct_b, "correct_b")
    if a.shape != b.shape:
        raise ConfigError(f"the two models' results must have the same shape [seeds, images]: {a.shape} vs {b.shape}")
    s, n = a.shape
    b01, b10 = int((~a & b).sum()), int((a & ~b).sum())
    label = "McNemar exact" if method == "mcnemar" else "paired bootstrap over images"
    if n == 0:
        return PairedTest(None, None, None, None, level, label, 0, s, 0, 0, None, None, False, "no test images")
    acc_a, acc_b = float(a.mean()), float(b.mean())
    total = s * n
    effect = (b01 - b10) / total  # == acc_b - acc_a, without rounding drift
    common = {"level": level, "n_images": n, "n_seeds": s, "b01": b01, "b10": b10, "accuracy_a": acc_a}
    common["accuracy_b"] = acc_b

    if method == "mcnemar":
        discordant = b01 + b10
        if discordant == 0:  # the exact test is undefined on an empty binomial: nothing tells the models apart
            return PairedTest(effect, 0.0, 0.0, 1.0, method=label, reason="no discordant pairs", **common)
        from scipy import stats
        from statsmodels.stats.contingency_tables import mcnemar

        table = [[int((~a & ~b).sum()), b01], [b10, int((a & b).sum())]]
        p = min(1.0, float(mcnemar(table, exact=True).pvalue))
        ci = stats.binomtest(b01, discordant, 0.5).proportion_ci(confidence_level=level, method="exact")
        scale = discordant / total
        low, high = scale * (2 * ci.low - 1), scale * (2 * ci.high - 1)
        return PairedTest(effect, float(low), float(high), p, method=label, **common)

    label = f"paired bootstrap over images ({resamples} resamples) + sign-flip test"
    if n < MIN_BOOTSTRAP_IMAGES:
        why = f"only {n} test images: a bootstrap needs at least {MIN_BOOTSTRAP_IMAGES}"
        return PairedTest(effect, None, None, None, method=label, available=False, reason=why, **common)
    d = (b.astype(float) - a.astype(float)).mean(axis=0)  # [N]
    if not d.any():  # identical on every image: the null distribution is all zeros
        return PairedTest(0.0, 0.0, 0.0, 1.0, method=label, reason="no discordant pairs", **common)
    from scipy import stats

    low, high, _, caveat = _bootstrap(
        (d,), np.mean, level=level, resamples=resamples, seed=seed, method="BCa", paired=False
    )
    # Flipping the sign of a zero changes nothing, so the test runs on the discordant images only (same p-value
    # distribution, often 10x less work; exact enumeration by scipy when 2**K <= resamples).
    nonzero = d[d != 0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        perm = stats.permutation_test(
            (nonzero,),
            np.mean,
            permutation_type="samples",
            vectorized=True,
            n_resamples=resamples,
            batch=max(1, _BATCH_ELEMENTS // nonzero.size),
            alternative="two-sided",
            axis=-1,
            rng=np.random.default_rng(seed + 1),
        )
    p = _float(min(1.0, perm.pvalue))
    return PairedTest(effect, low, high, p, method=label, reason=caveat, **common)


def holm(p_values: Any) -> np.ndarray:
    """Holm-adjusted p-values (``statsmodels.stats.multitest.multipletests(method="holm")``), in the input order."""
    p = np.asarray(p_values, dtype=float).reshape(-1) if np.size(p_values) else np.zeros(0)
    if p.size == 0:
        return p
    if not np.isfinite(p).all() or (p < 0).any() or (p > 1).any():
        raise ConfigError("p-values must be numbers in [0, 1]")
    from statsmodels.stats.multitest import multipletests

    return np.asarray(multipletests(p, method="holm")[1], dtype=float)


def _by_resolution(correct_by_res: Mapping[int, Any]) -> dict[int, np.ndarray]:
    if not isinstance(correct_by_res, Mapping) or not correct_by_res:
        raise ConfigError("correct_by_res must be a non-empty mapping {resolution: bool [seeds, images]}")
    runs = {int(r): _as_runs(v, f"results at {r} px") for r, v in sorted(correct_by_res.items())}
    shapes = {r: v.shape for r, v in runs.items()}
    if len(set(shapes.values())) > 1:
        listed = ", ".join(f"{r} px: {s}" for r, s in shapes.items())
        raise ConfigError(f"every resolution needs the same [seeds, images] shape (same test images): {listed}")
    return runs


def compare_resolutions(
    correct_by_res: Mapping[int, Any],
    *,
    level: float = 0.95,
    method: str = "mcnemar",
    correction: str = "holm",
    resamples: int = 2000,
    seed: int = 0,
) -> list[PairComparison]:
    """:func:`paired_test` for every pair of resolutions r1 < r2 (B = r2, A = r1), C(k, 2) rows ordered by (r1, r2).

    ``p_adjusted``: Holm over the available rows (``correction="holm"``) or the raw p (``"none"``);
    ``significant``: ``p_adjusted < 1 - level`` (two-sided). A row whose test is unavailable is never significant.

    With method="bootstrap" the smallest p-value is about 2 / (resamples + 1), so with Holm over m = C(k, 2) pairs
    a row can only be significant when resamples > 2 m / (1 - level) - 1: the default 2000 covers up to 10
    resolutions (45 pairs) at level 0.95. McNemar's exact p has no such floor.
    """
    level = _check_level(level)
    correction = _check_choice(correction, ("holm", "none"), "correction")
    runs = _by_resolution(correct_by_res)
    res = list(runs)
    tests = [
        (r1, r2, paired_test(runs[r1], runs[r2], method=method, level=level, resamples=resamples, seed=seed))
        for i, r1 in enumerate(res)
        for r2 in res[i + 1 :]
    ]
    idx = [i for i, (_, _, t) in enumerate(tests) if t.available and t.p_value is not None]
    raw = np.array([tests[i][2].p_value for i in idx], dtype=float)
    adjusted = dict(zip(idx, (holm(raw) if correction == "holm" else raw).tolist()))
    rows = []
    for i, (r1, r2, t) in enumerate(tests):
        p_adj = adjusted.get(i)
        rows.append(PairComparison(r1, r2, t, p_adj, p_adj is not None and p_adj < 1 - level, correction))
    return rows


def smallest_sufficient_resolution(
    correct_by_res: Mapping[int, Any],
    *,
    level: float = 0.95,
    margin: float = 0.0,
    method: str = "mcnemar",
    correction: str = "holm",
    resamples: int = 2000,
    seed: int = 0,
) -> Recommendation:
    """The smallest resolution whose accuracy is not significantly below the best one.

    best = the highest accuracy pooled over seeds and images (ties: the smaller resolution). A resolution r is
    *significantly below* the best when, in :func:`compare_resolutions` (all C(k, 2) pairs, ``correction``-adjusted,
    so the recommendation reads the same table a report shows), the (r, best) test has adjusted p < 1 - level and
    accuracy(r) < accuracy(best) - ``margin`` (a one-sided reading of the two-sided test; ``margin`` is a practical
    tolerance: a significant drop no larger than it is accepted). "Not significantly below" is not proof of
    equality: the row's interval shows how large a drop the data cannot rule out.
    """
    level = _check_level(level)
    if isinstance(margin, bool) or not isinstance(margin, (int, float, np.number)) or not (0 <= margin < 1):
        raise ConfigError(f"margin must be an accuracy difference in [0, 1), got {margin!r}")
    margin = float(margin)
    runs = _by_resolution(correct_by_res)
    n_images = next(iter(runs.values())).shape[1]
    if n_images == 0:
        return Recommendation(None, None, "no test images", [], {}, level, margin, available=False)
    acc = {r: float(v.mean()) for r, v in runs.items()}
    best = max(acc, key=lambda r: (acc[r], -r))
    rows = compare_resolutions(runs, level=level, method=method, correction=correction, resamples=resamples, seed=seed)
    pair = {(row.resolution_a, row.resolution_b): row for row in rows}
    test_words = "McNemar exact" if method.lower() == "mcnemar" else "paired image bootstrap, sign-flip test"
    adj_words = "Holm-adjusted " if correction.lower() == "holm" else ""
    below: list[str] = []
    for r in sorted(acc):
        if r == best:
            reason = f"{r} px is the most accurate ({acc[r]:.3f})"
            if below:
                reason += f"; significantly below it ({test_words}, at level {level:g}): " + ", ".join(below)
            else:
                reason += " and the smallest resolution"
            return Recommendation(r, best, reason, rows, acc, level, margin)
        row = pair[(min(r, best), max(r, best))]
        if not row.test.available:
            why = f"cannot compare {r} px with the best ({best} px): {row.test.reason}"
            return Recommendation(None, best, why, rows, acc, level, margin, available=False)
        p_words = _fmt_p(row.p_adjusted).replace("p ", f"{adj_words}p ", 1)
        lead = f"best ({best} px: {acc[best]:.3f} vs {acc[r]:.3f}, {test_words}, {p_words} at level {level:g})"
        if row.significant and acc[r] < acc[best] - margin:
            below.append(f"{r} px ({acc[r]:.3f}, {p_words})")
            continue
        if row.significant:  # a significant drop, but no larger than the margin
            reason = f"{r} px: below the {lead}, but by no more than the margin {margin:g}"
        else:
            reason = f"{r} px: not significantly below the {lead}"
        if row.test.low is not None and row.test.high is not None:
            sign = 1 if r > best else -1  # the row's effect is (larger res) - (smaller res); report r - best
            lo, hi = sorted((sign * row.test.low, sign * row.test.high))
            reason += f"; difference {acc[r] - acc[best]:+.3f}, {level:.0%} CI [{lo:+.3f}, {hi:+.3f}]"
        if below:
            reason += "; significantly below the best: " + ", ".join(below)  # the test and level are named above
        return Recommendation(r, best, reason, rows, acc, level, margin)
    raise AssertionError("unreachable: the best resolution is among the resolutions")


# ------------------------------------------------------------------------------------------------ Pareto


def pareto_front(points: Sequence[tuple[str, float, float]]) -> list[ParetoPoint]:
    """The points no other point dominates (at least as accurate AND at most as costly, better on one), by cost
    then accuracy (descending) then name. Exact ties are kept (neither dominates the other)."""
    pts = []
    for item in points:
        try:
            name, accuracy, cost = item
            pt = ParetoPoint(str(name), float(accuracy), float(cost))
        except (TypeError, ValueError) as err:
            raise ConfigError(f"a Pareto point must be (name, accuracy, cost), got {item!r}") from err
        if not (math.isfinite(pt.accuracy) and math.isfinite(pt.cost)):
            raise ConfigError(f"a Pareto point needs a finite accuracy and cost, got {item!r}")
        pts.append(pt)

    def dominates(q: ParetoPoint, p: ParetoPoint) -> bool:
        return q.accuracy >= p.accuracy and q.cost <= p.cost and (q.accuracy > p.accuracy or q.cost < p.cost)

    front = [p for p in pts if not any(dominates(q, p) for q in pts)]
    return sorted(front, key=lambda p: (p.cost, -p.accuracy, p.name))

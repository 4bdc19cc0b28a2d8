"""Paired tests of model B against model A on the same test images: McNemar's exact test (``statsmodels``; with
several seeds its clustered form, images as clusters: an exact sign-flip test) or a paired bootstrap over images
with a sign-flip permutation p-value (exact on 0/1 outcomes, else Monte Carlo with a stated standard error), and the
Holm correction over several tests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from resomap.errors import ConfigError
from resomap.stats.bootstrap import MIN_BOOTSTRAP_IMAGES, bootstrap
from resomap.stats.checks import (
    as_runs,
    as_scores,
    check_choice,
    check_level,
    check_resamples,
    check_seed,
    to_dict,
)
from resomap.stats.permutation import SignFlip, sign_flip

PAIRED_METHODS = ("mcnemar", "bootstrap")
# method="mcnemar" with several seeds (see paired_test)
CLUSTERED_MCNEMAR = "clustered McNemar ({seeds} seeds within each image): {flip} + paired image bootstrap"


@dataclass(frozen=True)
class PairedTest:
    """Model B against model A on the same test images.

    ``effect`` = accuracy(B) - accuracy(A) (the mean score for :func:`paired_score_test`), pooled over all seeds and
    images; ``low``/``high`` its interval at ``level``. ``b01`` = image-seed pairs where A is wrong and B right
    (B scores higher), ``b10`` = A right and B wrong (A scores higher): the discordant cells of the 2x2 table,
    summed over seeds (descriptive counts; the tests treat each image as one unit).
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
        return to_dict(self)


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

    method="mcnemar" (default; the one compare_resolutions uses unless told otherwise):
      one seed: McNemar's exact test (``statsmodels...mcnemar(table, exact=True)``: a two-sided binomial test of
      b01 against b01 + b10 at 1/2). The interval is the exact Clopper-Pearson interval of b01 / (b01 + b10) mapped
      to the effect scale (conditional on the number of discordant pairs); it excludes 0 exactly when McNemar's
      p <= 1 - level.
      several seeds: the clustered McNemar test, each image a cluster of its S seed pairs. Summing the 2x2 tables
      over seeds would count an image that is discordant under every seed S times as if the seeds were independent
      images (pseudo-replication: the p-value comes out too small). The test is run as the sign-flip permutation
      test of the per-image differences d_i = mean over seeds of (B_si - A_si), the exact permutation form of
      Durkalski et al.'s (2003) statistic (sum d_i)^2 / sum d_i^2 (sum d_i^2 does not change under sign flips), with
      the paired-bootstrap interval over images, as method="bootstrap". The d_i lie on the lattice 1/S, so the p is
      exact (the sign-flip distribution convolved, :func:`~resomap.stats.permutation.sign_flip`), the same for every
      ``seed``.
    method="bootstrap":
      resamples images, keeping each image's outcomes under every seed and both models together: the per-image
      difference d_i = mean over seeds of (B_si - A_si) is bootstrapped (BCa) for the interval, and the p-value is
      a sign-flip permutation test of mean(d) (:func:`~resomap.stats.permutation.sign_flip`), which is valid
      under "A and B are exchangeable on each image"; its p is computed exactly (d on the lattice 1/S: with one
      seed it is McNemar's exact p), whatever ``resamples`` and ``seed``.
      Fewer than ``MIN_BOOTSTRAP_IMAGES`` images: ``available=False``.

    Identical inputs give effect 0, interval [0, 0] and p = 1 with either method.
    """
    method = check_choice(method, PAIRED_METHODS, "paired test method")
    level, resamples, seed = check_level(level), check_resamples(resamples), check_seed(seed)
    a, b = _same_shape(as_runs(correct_a, "correct_a"), as_runs(correct_b, "correct_b"))
    s, n = a.shape
    b01, b10 = int((~a & b).sum()), int((a & ~b).sum())
    if n == 0:
        label = "McNemar exact" if method == "mcnemar" else "paired bootstrap over images"
        return PairedTest(None, None, None, None, level, label, 0, s, 0, 0, None, None, False, "no test images")
    common = {"level": level, "n_images": n, "n_seeds": s, "b01": b01, "b10": b10, "accuracy_a": float(a.mean())}
    common["accuracy_b"] = float(b.mean())
    effect = (b01 - b10) / (s * n)  # == acc_b - acc_a, without rounding drift
    if method == "mcnemar" and s == 1:
        return _mcnemar(a, b, effect, common)
    d = (b.astype(float) - a.astype(float)).mean(axis=0)  # [N]
    label = CLUSTERED_MCNEMAR.format(seeds=s, flip="{flip}") if method == "mcnemar" else None
    return _paired_bootstrap(d, effect, resamples=resamples, seed=seed, common=common, label=label, lattice=s)


def paired_score_test(
    scores_a: Any, scores_b: Any, *, level: float = 0.95, resamples: int = 2000, seed: int = 0
) -> PairedTest:
    """B against A on any per-image score (IoU or Dice per image, 0/1 correctness, ...): float ``[N]`` or ``[S, N]``
    of the same shape, paired as in :func:`paired_test`. The paired bootstrap of the per-image difference (BCa
    interval) with the sign-flip p-value, as ``paired_test(method="bootstrap")`` (exact where the per-image
    differences lie on a 1/k lattice, k <= 64; on continuous scores Monte Carlo with a standard error of at most
    0.002, said in ``method``); ``b01``/``b10`` count the image-seed pairs where B / A scores higher,
    ``accuracy_a``/``accuracy_b`` are the mean scores."""
    level, resamples, seed = check_level(level), check_resamples(resamples), check_seed(seed)
    a, b = _same_shape(as_scores(scores_a, "scores_a"), as_scores(scores_b, "scores_b"))
    s, n = a.shape
    if n == 0:
        label = "paired bootstrap over images"
        return PairedTest(None, None, None, None, level, label, 0, s, 0, 0, None, None, False, "no test images")
    b01, b10 = int((b > a).sum()), int((a > b).sum())
    common = {"level": level, "n_images": n, "n_seeds": s, "b01": b01, "b10": b10, "accuracy_a": float(a.mean())}
    common["accuracy_b"] = float(b.mean())
    d = (b - a).mean(axis=0)
    return _paired_bootstrap(d, float(d.mean()), resamples=resamples, seed=seed, common=common)


def _same_shape(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if a.shape != b.shape:
        raise ConfigError(f"the two models' results must have the same shape [seeds, images]: {a.shape} vs {b.shape}")
    return a, b


def _mcnemar(a: np.ndarray, b: np.ndarray, effect: float, common: dict[str, Any]) -> PairedTest:
    """McNemar's exact test on the 2x2 table summed over seeds, with the Clopper-Pearson interval of the effect."""
    label = "McNemar exact"
    b01, b10 = common["b01"], common["b10"]
    discordant = b01 + b10
    if discordant == 0:  # the exact test is undefined on an empty binomial: nothing tells the models apart
        return PairedTest(effect, 0.0, 0.0, 1.0, method=label, reason="no discordant pairs", **common)
    from scipy import stats
    from statsmodels.stats.contingency_tables import mcnemar

    table = [[int((~a & ~b).sum()), b01], [b10, int((a & b).sum())]]
    p = min(1.0, float(mcnemar(table, exact=True).pvalue))
    ci = stats.binomtest(b01, discordant, 0.5).proportion_ci(confidence_level=common["level"], method="exact")
    scale = discordant / a.size
    low, high = scale * (2 * ci.low - 1), scale * (2 * ci.high - 1)
    return PairedTest(effect, float(low), float(high), p, method=label, **common)


def _paired_bootstrap(
    d: np.ndarray,
    effect: float,
    *,
    resamples: int,
    seed: int,
    common: dict[str, Any],
    label: str | None = None,
    lattice: int | None = None,
) -> PairedTest:
    """The BCa interval of mean(d) over images and the sign-flip p-value (exact on a 1/``lattice`` lattice or any
    1/k found; else flips drawn from seed ``seed + 1``); ``method`` says which way the p was computed."""
    label = label or f"paired bootstrap over images ({resamples} resamples) + {{flip}}"
    n = d.size
    if n < MIN_BOOTSTRAP_IMAGES:
        why = f"only {n} test images: a bootstrap needs at least {MIN_BOOTSTRAP_IMAGES}"
        label = label.format(flip="sign-flip test")
        return PairedTest(effect, None, None, None, method=label, available=False, reason=why, **common)
    if not d.any():  # identical on every image: the null distribution is all zeros
        label = label.format(flip="exact sign-flip test")
        return PairedTest(0.0, 0.0, 0.0, 1.0, method=label, reason="no discordant pairs", **common)
    low, high, _, caveat = bootstrap(
        (d,), np.mean, level=common["level"], resamples=resamples, seed=seed, method="BCa", paired=False
    )
    flip = sign_flip(d, lattice=lattice, resamples=resamples, seed=seed + 1)
    label = label.format(flip=flip_words(flip))
    return PairedTest(effect, low, high, flip.p_value, method=label, reason=caveat, **common)


def flip_words(flip: SignFlip) -> str:
    """'exact sign-flip test' or 'sign-flip test (Monte Carlo: 5,333 flips, se 0.0020)'."""
    return "exact sign-flip test" if flip.exact else f"sign-flip test ({flip.describe()})"


def holm(p_values: Any) -> np.ndarray:
    """Holm-adjusted p-values, in the input order: what ``statsmodels.stats.multitest.multipletests(method="holm")``
    returns (tests/test_stats.py checks it on random and tied p-values). Computed here because multipletests runs
    ``gc.collect()`` on every Holm call: 0.1-0.2 s each in a process holding torch, twice per model in a summary."""
    p = np.asarray(p_values, dtype=float).reshape(-1) if np.size(p_values) else np.zeros(0)
    if p.size == 0:
        return p
    if not np.isfinite(p).all() or (p < 0).any() or (p > 1).any():
        raise ConfigError("p-values must be numbers in [0, 1]")
    order = np.argsort(p, kind="mergesort")
    stepped = np.maximum.accumulate(p[order] * np.arange(p.size, 0, -1))  # p_(i) * (m - i + 1), kept monotone
    adjusted = np.empty_like(p)
    adjusted[order] = np.minimum(stepped, 1.0)
    return adjusted

"""The classical baseline: logistic regression on the raw pixels, fitted by scikit-learn.

`pixel_logreg` is a model like any other (registered, trained by the Trainer, checkpointed, tested at every
resolution, profiled and explained), so every sweep can put a deep model's accuracy beside what a linear model of
the same pixels reaches on the same split at the same resolution. The Trainer reads its spec's fit, "closed_form",
and, instead of epochs of gradient steps, calls `fit_arrays` once per value of the L2 penalty on a fixed grid (weakest
regularisation last), each "epoch" scored on the validation split like a deep model's epoch, so the best checkpoint
is the penalty chosen on validation (never on test) and the convergence record reads the same way.

The standardisation (scikit-learn's StandardScaler) is folded into the linear layer, so the module is plain
torch: pixels of the trained size -> logits. An input of another size is resized to the trained size first
(antialiased bilinear, as the data cache resizes), which is how this model is tested at the other resolutions.
`pixels` (an identity on the resized input) is its CAM layer: Grad-CAM there weighs each channel of the input by its
mean gradient, which for a linear model is its weights.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from resomap.config.schema import ModelsConfig
from resomap.models.registry import register_model

PENALTIES = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)  # scikit-learn's C (inverse L2 strength), strongest penalty first
UNFITTED_SIDE = 32  # the side of an unfitted model's layer (any works: prepare_fit resizes it)
MAX_ITER = 500  # lbfgs iterations per fit; a fit that needs more is recorded as not converged


class PixelLogistic(nn.Module):
    penalties = PENALTIES

    def __init__(self, in_channels: int, num_classes: int) -> None:
        super().__init__()
        self.in_channels, self.num_classes = in_channels, num_classes
        self.pixels = nn.Identity()
        # sized for UNFITTED_SIDE px until prepare_fit (or a loaded checkpoint) gives it the trained side
        self.linear = nn.Linear(in_channels * UNFITTED_SIDE**2, num_classes)

    @property
    def side(self) -> int:
        """The input side in pixels the linear layer takes (the trained one once fitted)."""
        return math.isqrt(self.linear.weight.shape[1] // self.in_channels)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        # a checkpoint of another side: size the layer to it first (torch loads this module before its children)
        weight = state_dict.get(f"{prefix}linear.weight")
        if weight is not None and weight.shape != self.linear.weight.shape:
            self.linear = nn.Linear(weight.shape[1], weight.shape[0])
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        side = self.side
        if x.shape[-2:] != (side, side):
            x = F.interpolate(x, size=(side, side), mode="bilinear", antialias=True, align_corners=False)
        return self.linear(torch.flatten(self.pixels(x), 1))

    def prepare_fit(self, resolution: int) -> None:
        """A concrete linear layer for `resolution` px inputs before the Trainer builds its optimizer."""
        self.linear = nn.Linear(self.in_channels * resolution * resolution, self.num_classes)

    def probe_fit_seconds(
        self, x: np.ndarray, y: np.ndarray, sample_weight: np.ndarray | None = None, fit: Callable | None = None
    ) -> float:
        """Predicted seconds of the whole penalty grid's fits on (x, y): the fits at the strongest penalty (the
        quickest) and at the weakest (the slowest: lbfgs needs more iterations) timed, the fits between priced on
        the geometric line joining them (the grid is even on a log scale). No fixed ratio of the grid to one fit
        holds: on the quickstart's ELPV cells the whole grid took 23x the strongest fit at 32 px and 15x at 128 px,
        the weakest 13x and 5.4x. For the sweep's ETA (Trainer.probe_seconds); `fit`: what fits (fit_arrays by
        default; the probe passes one that keeps the fit for the trial, training.closed_form.kept_fit)."""
        import time

        fit = fit or self.fit_arrays
        ends = []
        for penalty in (self.penalties[0], self.penalties[-1]):
            start = time.perf_counter()
            fit(x, y, penalty, sample_weight)
            ends.append(time.perf_counter() - start)
        steps = len(self.penalties) - 1
        growth = (ends[1] / ends[0]) ** (1 / steps) if ends[0] > 0 and steps else 1.0
        return sum(ends[0] * growth**i for i in range(steps + 1))

    def fit_arrays(
        self, x: np.ndarray, y: np.ndarray, penalty: float, sample_weight: np.ndarray | None = None
    ) -> dict[str, float]:
        """Fit scikit-learn's StandardScaler + LogisticRegression(C=penalty, lbfgs) on x [N, D] (normalised pixels,
        flattened), y [N], each image weighted by `sample_weight` when given (training.sample_weights); copy the fit
        into the linear layer. Returns the training loss and accuracy and whether lbfgs converged within
        MAX_ITER."""
        import warnings

        from sklearn.exceptions import ConvergenceWarning
        from sklearn.linear_model import LogisticRegression
        from sklearn.metrics import log_loss
        from sklearn.preprocessing import StandardScaler

        scaler = StandardScaler().fit(x)
        z = scaler.transform(x)
        clf = LogisticRegression(C=penalty, max_iter=MAX_ITER)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # recorded below instead
            clf.fit(z, y, sample_weight=sample_weight)
        fold_standardised(self.linear, scaler, *class_rows(clf, self.num_classes))
        proba = clf.predict_proba(z)
        return {
            "train/loss": float(log_loss(y, proba, labels=clf.classes_, sample_weight=sample_weight)),
            "train/accuracy": float((clf.classes_[proba.argmax(1)] == y).mean()),
            "train/solver_converged": float(int(np.max(clf.n_iter_)) < MAX_ITER),
        }


def fold_standardised(linear: nn.Linear, scaler, coef: np.ndarray, intercept: np.ndarray) -> None:
    """Copy a linear fit on standardised inputs (scikit-learn's StandardScaler, then rows `coef` [K, D] and
    `intercept` [K]) into `linear`, the standardisation folded in: w (x - m) / s + b = (w / s) x + (b - sum w m / s)
    (a feature of zero variance keeps s = 1)."""
    weight = coef / np.where(scaler.scale_ > 0, scaler.scale_, 1.0)
    bias = intercept - weight @ scaler.mean_
    with torch.no_grad():
        linear.weight.copy_(torch.as_tensor(weight, dtype=linear.weight.dtype))
        linear.bias.copy_(torch.as_tensor(bias, dtype=linear.bias.dtype))


def class_rows(clf, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """[K, D] weights and [K] biases over all K classes from a fitted scikit-learn linear classifier
    (LogisticRegression; LinearSVC for hog_svm). A binary fit's one row z is split as +z/2 (class 1) and -z/2 (class
    0): the same softmax and the same decision (logit 1 - logit 0 = z), and each class's logit depends on the input
    (a zero row would give every explanation of class 0 a constant map). A class absent from the training labels
    gets a very low bias."""
    classes = [int(c) for c in clf.classes_]
    d = clf.coef_.shape[1]
    coef, intercept = np.zeros((num_classes, d)), np.full(num_classes, -1e4)
    if len(classes) == 2 and clf.coef_.shape[0] == 1:
        coef[classes[1]], intercept[classes[1]] = clf.coef_[0] / 2, clf.intercept_[0] / 2
        coef[classes[0]], intercept[classes[0]] = -clf.coef_[0] / 2, -clf.intercept_[0] / 2
    else:
        for row, c in enumerate(classes):
            coef[c], intercept[c] = clf.coef_[row], clf.intercept_[row]
    return coef, intercept


@register_model("pixel_logreg", family="classical", cam_layers=("pixels",), deterministic=True, fit="closed_form")
def pixel_logreg(num_classes: int, in_channels: int, cfg: ModelsConfig) -> nn.Module:
    """Logistic regression on the standardised raw pixels (scikit-learn), the classical baseline."""
    return PixelLogistic(in_channels, num_classes)

"""A second classical baseline: HOG features and a linear SVM, fitted by scikit-learn.

`hog_svm` is fitted like `pixel_logreg` (resomap.models.classical): the Trainer reads its spec's fit, "closed_form",
and calls `fit_arrays` once per value of the SVM's C on a fixed grid (strongest penalty first), each fit scored on
validation as an "epoch". The module is plain torch, so it is checkpointed, tested at every resolution, profiled and
explained like any model: input (resized to the trained side) -> grey (the channels' mean) -> HOG features -> one
`nn.Linear` holding scikit-learn's StandardScaler + LinearSVC, whose logits are the SVM's decision function (a binary
fit's one row z split as +z/2, -z/2, as `classical.class_rows` does; one-vs-rest rows for more classes).

The HOG features are those of `skimage.feature.hog(image, orientations, pixels_per_cell=(p, p),
cells_per_block=(2, 2), block_norm='L2-Hys')` (tests/test_hog.py checks them against it): gradients by central
differences, zero on the border rows and columns; each pixel's gradient magnitude added whole to the unsigned
orientation bin (0-180 degrees) its angle falls in (hard assignment); per cell the mean over its p x p pixels (pixels
beyond the last whole cell are left out); each block of 2 x 2 cells L2-normalised, clipped at 0.2 and normalised
again. The cell side is a fixed share of the image, p = resolution // models.hog.cells_per_side (8 by default), so
a feature describes the same region of the cell image at every resolution and the feature length does not change
with it. Gradients flow to the input through the magnitudes (the binning is piecewise constant), so saliency and
Grad-CAM on `pixels` (an identity on the resized input, as for pixel_logreg) work.
"""

from __future__ import annotations

import math
import time
import weakref
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from resomap.config.schema import ModelsConfig
from resomap.models.classical import class_rows, fold_standardised
from resomap.models.registry import register_model

PENALTIES = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)  # LinearSVC's C (inverse L2 strength), strongest penalty first
CELLS_PER_BLOCK = 2  # cells per block side (skimage's cells_per_block=(2, 2), Dalal and Triggs' choice)
EPS = 1e-5  # skimage's block normalisation eps: block / sqrt(sum(block ** 2) + eps ** 2)
CLIP = 0.2  # L2-Hys: normalised values clipped here before the second normalisation
UNFITTED_SIDE = 32  # the side of an unfitted model (prepare_fit or a loaded checkpoint gives the trained one)
MAX_ITER = 1000  # liblinear iterations per fit (scikit-learn's default); a fit that needs more is not converged
FEATURE_BATCH = 256  # images per batch when the training images' features are computed for a fit
# how much longer than the strongest penalty's fit each fit of the grid takes on average (weaker penalties need more
# liblinear iterations, up to MAX_ITER): 3.7x on the ELPV cells at 75 px with 8 cells per side (1.1x with 4, 1.6x
# with 16, where every fit converged)
SOLVER_GROWTH = 3.5


def hog_features(
    grey: torch.Tensor,
    pixels_per_cell: int,
    orientations: int,
    cells: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """HOG features [B, F] of grey images [B, H, W], as skimage.feature.hog computes them (module docstring):
    F = (H // p - 1) x (W // p - 1) x 2 x 2 x orientations, ordered as skimage's feature vector. `cells` (a module)
    sees the cell histograms as a feature map [B, orientations, rows, cols]: the layer Grad-CAM weighs."""
    p = pixels_per_cell
    g_row = F.pad(grey[:, 2:, :] - grey[:, :-2, :], (0, 0, 1, 1))  # central differences, zero on the border
    g_col = F.pad(grey[:, :, 2:] - grey[:, :, :-2], (1, 1, 0, 0))
    rows, cols = grey.shape[1] // p, grey.shape[2] // p
    g_row, g_col = g_row[:, : rows * p, : cols * p], g_col[:, : rows * p, : cols * p]  # whole cells only
    square = g_row * g_row + g_col * g_col
    moving = square > 0  # sqrt's gradient is infinite at 0: a flat pixel gets magnitude 0 and no gradient
    magnitude = torch.where(moving, torch.where(moving, square, 1.0).sqrt(), 0.0)
    bins = _orientation_bins(g_row, g_col, orientations)
    cells_layer, cells = (
        cells,
        [
            (magnitude * (bins == i)).reshape(-1, rows, p, cols, p).sum(dim=(2, 4)) / (p * p)
            for i in range(orientations)
        ],
    )
    hist = torch.stack(cells, dim=1)  # [B, orientations, rows, cols]
    hist = (hist if cells_layer is None else cells_layer(hist)).permute(0, 2, 3, 1)  # [B, rows, cols, orientations]
    b = CELLS_PER_BLOCK
    blocks = torch.stack(
        [torch.stack([hist[:, i : rows - b + 1 + i, j : cols - b + 1 + j] for j in range(b)], 3) for i in range(b)], 3
    )  # [B, block rows, block cols, b, b, orientations]
    blocks = blocks / torch.sqrt(blocks.square().sum(dim=(3, 4, 5), keepdim=True) + EPS**2)
    blocks = blocks.clamp(max=CLIP)
    blocks = blocks / torch.sqrt(blocks.square().sum(dim=(3, 4, 5), keepdim=True) + EPS**2)
    return blocks.flatten(1)


def _orientation_bins(g_row: torch.Tensor, g_col: torch.Tensor, orientations: int) -> torch.Tensor:
    """Each pixel's unsigned orientation bin, computed as skimage does (float64, its bin edges and its modulo), so
    an angle on an edge lands in the same bin; `orientations` for an angle of 180 degrees after rounding (skimage
    counts it nowhere)."""
    with torch.no_grad():
        angle = torch.atan2(g_row.double(), g_col.double()) * (180.0 / math.pi)  # numpy's rad2deg
        angle = torch.fmod(angle, 180.0)
        angle = torch.where(angle < 0, angle + 180.0, angle)  # numpy's % 180
        width = 180.0 / orientations
        edges = torch.tensor([width * i for i in range(orientations + 1)], dtype=torch.float64, device=angle.device)
        return torch.bucketize(angle, edges, right=True) - 1  # i where edges[i] <= angle < edges[i + 1]


class HogSvm(nn.Module):
    penalties = PENALTIES

    def __init__(self, in_channels: int, num_classes: int, cells_per_side: int = 8, orientations: int = 9) -> None:
        super().__init__()
        self.in_channels, self.num_classes = in_channels, num_classes
        self.cells_per_side, self.orientations = cells_per_side, orientations
        self.pixels = nn.Identity()
        # the cell histograms [B, orientations, rows, cols]: Grad-CAM's layer. On `pixels` Grad-CAM's one channel
        # weight, the mean gradient over the image, is zero up to rounding (every feature is a difference of pixels,
        # unchanged when all pixels shift together), so its map was rounding noise
        self.cells = nn.Identity()
        self.register_buffer("geometry", torch.zeros(3, dtype=torch.int64))  # side, pixels per cell, orientations
        self._cached: tuple[weakref.ref, np.ndarray] | None = None  # the features of the arrays being fitted
        self.prepare_fit(max(UNFITTED_SIDE, 2 * cells_per_side))

    def _set_geometry(self, side: int, pixels_per_cell: int, orientations: int) -> None:
        self.side, self.pixels_per_cell, self.orientations = side, pixels_per_cell, orientations
        device = self.geometry.device
        self.geometry = torch.tensor([side, pixels_per_cell, orientations], dtype=torch.int64, device=device)
        blocks = side // pixels_per_cell - CELLS_PER_BLOCK + 1
        self.linear = nn.Linear(blocks * blocks * CELLS_PER_BLOCK**2 * orientations, self.num_classes, device=device)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        # a checkpoint of another side: take its geometry and size the layer to it (torch loads this module first)
        geometry = state_dict.get(f"{prefix}geometry")
        if geometry is not None and geometry.tolist() != self.geometry.tolist():
            self._set_geometry(*(int(v) for v in geometry.tolist()))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def prepare_fit(self, resolution: int) -> None:
        """The geometry for `resolution` px inputs (cells of resolution // cells_per_side px) and a linear layer
        for its features, before the Trainer builds its optimizer."""
        self._set_geometry(resolution, max(resolution // self.cells_per_side, 1), self.orientations)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """HOG features [B, F] of a normalised batch [B, C, H, W] (resized to the trained side first), in float32
        whatever the autocast around it (float64 input stays float64)."""
        side = self.side
        with torch.autocast(x.device.type, enabled=False):
            x = x if x.dtype == torch.float64 else x.float()
            if x.shape[-2:] != (side, side):
                x = F.interpolate(x, size=(side, side), mode="bilinear", antialias=True, align_corners=False)
            return hog_features(self.pixels(x).mean(dim=1), self.pixels_per_cell, self.orientations, self.cells)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.features(x))

    def _train_features(self, x: np.ndarray) -> np.ndarray:
        """Features [N, F] of the flattened training images x [N, C * r * r], computed once per array (every
        penalty of the grid fits the same images)."""
        if self._cached is not None and self._cached[0]() is x:
            return self._cached[1]
        device, side = self.linear.weight.device, self.side
        out = []
        with torch.no_grad():
            for start in range(0, len(x), FEATURE_BATCH):
                batch = torch.as_tensor(x[start : start + FEATURE_BATCH], device=device).float()
                out.append(self.features(batch.view(-1, self.in_channels, side, side)).cpu().numpy())
        found = np.concatenate(out).astype(np.float64) if out else np.zeros((0, self.linear.in_features))
        self._cached = (weakref.ref(x), found)
        return found

    def probe_fit_seconds(
        self, x: np.ndarray, y: np.ndarray, sample_weight: np.ndarray | None = None, fit: Callable | None = None
    ) -> float:
        """Predicted seconds of the whole grid's fits on (x, y): the features once, plus one timed fit at the
        strongest penalty (the quickest) x the grid's size x SOLVER_GROWTH. For the sweep's ETA; `fit`: what fits
        (fit_arrays by default, as PixelLogistic.probe_fit_seconds)."""
        start = time.perf_counter()
        self._train_features(x)
        features = time.perf_counter() - start
        start = time.perf_counter()
        (fit or self.fit_arrays)(x, y, self.penalties[0], sample_weight)
        return features + (time.perf_counter() - start) * len(self.penalties) * SOLVER_GROWTH

    def fit_arrays(
        self, x: np.ndarray, y: np.ndarray, penalty: float, sample_weight: np.ndarray | None = None
    ) -> dict[str, float]:
        """Fit scikit-learn's StandardScaler + LinearSVC(C=penalty) on the HOG features of x [N, C * r * r]
        (normalised pixels, flattened), y [N], each image weighted by `sample_weight` when given; copy the fit
        into the linear layer. Returns the training loss (cross-entropy of the logits, as val/loss), accuracy and
        whether liblinear converged within MAX_ITER."""
        import warnings

        from sklearn.exceptions import ConvergenceWarning
        from sklearn.metrics import log_loss
        from sklearn.preprocessing import StandardScaler
        from sklearn.svm import LinearSVC

        features = self._train_features(x)
        scaler = StandardScaler().fit(features)
        z = scaler.transform(features)
        clf = LinearSVC(C=penalty, max_iter=MAX_ITER, random_state=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # recorded below instead
            clf.fit(z, y, sample_weight=sample_weight)
        coef, intercept = class_rows(clf, self.num_classes)
        fold_standardised(self.linear, scaler, coef, intercept)
        logits = z @ coef.T + intercept
        proba = np.exp(logits - logits.max(axis=1, keepdims=True))
        proba /= proba.sum(axis=1, keepdims=True)
        labels = np.arange(self.num_classes)
        return {
            "train/loss": float(log_loss(y, proba, labels=labels, sample_weight=sample_weight)),
            "train/accuracy": float((logits.argmax(1) == y).mean()),
            "train/solver_converged": float(int(np.max(clf.n_iter_)) < MAX_ITER),
        }


# revision 2: Grad-CAM on cells
@register_model(
    "hog_svm", family="classical", cam_layers=("cells", "pixels"), revision=2, deterministic=True, fit="closed_form"
)
def hog_svm(num_classes: int, in_channels: int, cfg: ModelsConfig) -> nn.Module:
    """A linear SVM on standardised HOG features (scikit-image's HOG in torch, scikit-learn's LinearSVC)."""
    return HogSvm(in_channels, num_classes, cfg.hog.cells_per_side, cfg.hog.orientations)

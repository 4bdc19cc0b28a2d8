"""The torch modules of the loss terms (resomap.tasks.losses registers and builds them): sample-weighted
cross-entropy, the weighted sum of segmentation terms, Focal-Tversky, pixel class weights.

Dice, Tversky and focal come from segmentation-models-pytorch (multiclass mode, from logits, class weights);
cross-entropy is torch's. smp's TverskyLoss raises the *class-averaged* loss to gamma; the Focal-Tversky loss of
Abraham & Khan (2019) raises each class's (1 - Tversky index) before averaging, so `FocalTverskyLoss` overrides
only that aggregation (the one line smp does differently). With gamma = 1 both are the plain Tversky loss.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn


class SampleWeightedCrossEntropy(nn.Module):
    """Cross-entropy with class weights and a weight per image: sum_i w_i c_{y_i} l_i / sum_i w_i c_{y_i}, torch's
    weighted mean with each image's weight multiplied in (the per-image weights are what torch's loss lacks).
    Without `w` it is nn.CrossEntropyLoss(weight=class_weight)."""

    def __init__(self, weight: torch.Tensor | None, label_smoothing: float = 0.0):
        super().__init__()
        self.weight, self.label_smoothing = weight, label_smoothing  # `weight`: the class weights, as torch's loss

    def forward(self, logits: torch.Tensor, y: torch.Tensor, w: torch.Tensor | None = None) -> torch.Tensor:
        smooth = self.label_smoothing
        if w is None:
            return nn.functional.cross_entropy(logits, y, weight=self.weight, label_smoothing=smooth)
        per = nn.functional.cross_entropy(
            logits, y, weight=self.weight, label_smoothing=smooth, reduction="none"
        )  # torch's per-image loss, class weight included
        c = self.weight[y] if self.weight is not None else torch.ones_like(w)
        return (per * w).sum() / (w * c).sum().clamp_min(1e-12)


def focal_tversky_class() -> type:
    from segmentation_models_pytorch.losses import TverskyLoss

    class FocalTverskyLoss(TverskyLoss):
        """mean_c w_c (1 - TI_c) ** gamma: the focal exponent per class (Abraham & Khan), see the module doc."""

        def aggregate_loss(self, loss: torch.Tensor) -> torch.Tensor:
            focal = loss.clamp(min=0) ** self.gamma
            if self.class_weights is None:
                return focal.mean()
            weights = self.class_weights.to(loss.device)
            if self.classes is not None:
                weights = weights[self.classes]
            return (focal * weights).sum() / weights.sum()

    return FocalTverskyLoss


class CombinedLoss(nn.Module):
    """sum_i weight_i * term_i(logits [B, K, H, W], target int64 [B, H, W]); `parts` keeps each term's last value."""

    def __init__(self, terms: dict[str, nn.Module], weights: Sequence[float]):
        super().__init__()
        self.terms = nn.ModuleDict(terms)
        self.weights = [float(w) for w in weights]

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        total = logits.new_zeros(())
        for weight, term in zip(self.weights, self.terms.values()):
            total = total + weight * term(logits, target)
        return total


def pixel_class_weights(counts: np.ndarray) -> torch.Tensor:
    """'balanced' weights from pixel counts per class (sklearn's rule n / (K * n_k)); absent classes get 1."""
    counts = np.asarray(counts, dtype=np.float64)
    present = counts > 0
    weights = np.ones(len(counts))
    weights[present] = counts.sum() / (present.sum() * counts[present])
    return torch.tensor(weights, dtype=torch.float32)

"""Segmentation losses (segmentation.loss): summed terms of cross-entropy, Dice, Focal-Tversky and focal loss.

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

from resomap.errors import ConfigError

LOSSES = ("ce", "dice", "focal_tversky", "focal")


def check_loss_names(names: Sequence[str], weights: Sequence[float]) -> str | None:
    """None when the loss config is valid, else what is wrong (the config loader turns it into a ConfigError)."""
    if not names:
        return f"at least one loss term ({', '.join(LOSSES)})"
    unknown = [n for n in names if n not in LOSSES]
    if unknown:
        return f"loss terms from {', '.join(LOSSES)} (unknown: {', '.join(unknown)})"
    if weights and len(weights) != len(names):
        return f"one weight per loss term ({len(names)}) or none"
    return None


def _focal_tversky_class():
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


def build_term(name: str, num_classes: int, seg, weight: torch.Tensor | None = None) -> nn.Module:
    """One loss term; `seg` is the segmentation config section (Focal-Tversky's alpha, beta, gamma)."""
    from segmentation_models_pytorch import losses as smp_losses

    cw = None if weight is None else [float(w) for w in weight.detach().cpu()]
    if name == "ce":
        return nn.CrossEntropyLoss(weight=weight)
    if name == "dice":
        return smp_losses.DiceLoss("multiclass", from_logits=True, class_weights=cw)
    if name == "focal_tversky":
        cls = _focal_tversky_class()
        return cls(
            "multiclass",
            from_logits=True,
            alpha=seg.tversky_alpha,
            beta=seg.tversky_beta,
            gamma=seg.tversky_gamma,
            class_weights=cw,
        )
    if name == "focal":
        return smp_losses.FocalLoss("multiclass", class_weights=cw)
    raise ConfigError(f"segmentation.loss: unknown term '{name}'; use {', '.join(LOSSES)}")


def build_loss(seg, num_classes: int, weight: torch.Tensor | None = None) -> CombinedLoss:
    """The configured sum of terms (segmentation.loss, segmentation.loss_weights; class weights to every term)."""
    problem = check_loss_names(seg.loss, seg.loss_weights)
    if problem:
        raise ConfigError(f"segmentation.loss: expected {problem}, got {list(seg.loss)!r}")
    weights = list(seg.loss_weights) or [1.0] * len(seg.loss)
    terms = {name: build_term(name, num_classes, seg, weight) for name in seg.loss}
    return CombinedLoss(terms, weights)


def pixel_class_weights(counts: np.ndarray) -> torch.Tensor:
    """'balanced' weights from pixel counts per class (sklearn's rule n / (K * n_k)); absent classes get 1."""
    counts = np.asarray(counts, dtype=np.float64)
    present = counts > 0
    weights = np.ones(len(counts))
    weights[present] = counts.sum() / (present.sum() * counts[present])
    return torch.tensor(weights, dtype=torch.float32)

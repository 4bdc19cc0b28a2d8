"""Segmentation losses (segmentation.loss): summed terms from a registry (`register_loss`): cross-entropy, Dice,
Focal-Tversky and focal loss are built in.

Dice, Tversky and focal come from segmentation-models-pytorch (multiclass mode, from logits, class weights);
cross-entropy is torch's. smp's TverskyLoss raises the *class-averaged* loss to gamma; the Focal-Tversky loss of
Abraham & Khan (2019) raises each class's (1 - Tversky index) before averaging, so `FocalTverskyLoss` overrides
only that aggregation (the one line smp does differently). With gamma = 1 both are the plain Tversky loss.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from resomap.errors import ConfigError, UnknownNameError
from resomap.registry import Registry

LossFn = Callable[[int, Any, "torch.Tensor | None"], nn.Module]  # (classes, segmentation section, class weights)
LOSSES: Registry[LossFn] = Registry("loss term", "resomap tasks")


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


def register_loss(name: str) -> Callable[[LossFn], LossFn]:
    """Register a loss term `fn(num_classes, seg, weight) -> nn.Module` (logits [B, K, H, W], target [B, H, W]);
    `seg` is the segmentation config section (its settings), `weight` the class weights or None."""
    return LOSSES.register(name)


def check_loss_names(names: Sequence[str], weights: Sequence[float]) -> str | None:
    """None when the loss config is valid, else what is wrong (the config loader turns it into a ConfigError)."""
    known = LOSSES.names()
    if not names:
        return f"at least one loss term ({', '.join(known)})"
    for name in names:
        if name not in LOSSES:
            return f"loss terms from {', '.join(known)} (no loss term '{name}'{LOSSES.hint(name)})"
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


def _class_weights(weight: torch.Tensor | None) -> list[float] | None:
    return None if weight is None else [float(w) for w in weight.detach().cpu()]


@register_loss("ce")
def cross_entropy(num_classes: int, seg: Any, weight: torch.Tensor | None = None) -> nn.Module:
    return nn.CrossEntropyLoss(weight=weight)


@register_loss("dice")
def dice(num_classes: int, seg: Any, weight: torch.Tensor | None = None) -> nn.Module:
    from segmentation_models_pytorch import losses as smp_losses

    return smp_losses.DiceLoss("multiclass", from_logits=True, class_weights=_class_weights(weight))


@register_loss("focal_tversky")
def focal_tversky(num_classes: int, seg: Any, weight: torch.Tensor | None = None) -> nn.Module:
    cls = _focal_tversky_class()
    return cls(
        "multiclass",
        from_logits=True,
        alpha=seg.tversky_alpha,
        beta=seg.tversky_beta,
        gamma=seg.tversky_gamma,
        class_weights=_class_weights(weight),
    )


@register_loss("focal")
def focal(num_classes: int, seg: Any, weight: torch.Tensor | None = None) -> nn.Module:
    from segmentation_models_pytorch import losses as smp_losses

    return smp_losses.FocalLoss("multiclass", class_weights=_class_weights(weight))


def build_term(name: str, num_classes: int, seg: Any, weight: torch.Tensor | None = None) -> nn.Module:
    """One registered loss term; `seg` is the segmentation config section (Focal-Tversky's alpha, beta, gamma)."""
    try:
        fn = LOSSES.get(name)
    except UnknownNameError as exc:
        raise ConfigError(f"segmentation.loss: {exc}") from None
    return fn(num_classes, seg, weight)


def build_loss(seg, num_classes: int, weight: torch.Tensor | None = None) -> CombinedLoss:
    """The configured sum of terms (segmentation.loss, segmentation.loss_weights; class weights to every term)."""
    problem = check_loss_names(seg.loss, seg.loss_weights)
    if problem:
        raise ConfigError(f"segmentation.loss: expected {problem}, got {list(seg.loss)!r}")
    weights = list(seg.loss_weights) or [1.0] * len(seg.loss)
    terms = {LOSSES.resolve(name): build_term(name, num_classes, seg, weight) for name in seg.loss}
    return CombinedLoss(terms, weights)


def pixel_class_weights(counts: np.ndarray) -> torch.Tensor:
    """'balanced' weights from pixel counts per class (sklearn's rule n / (K * n_k)); absent classes get 1."""
    counts = np.asarray(counts, dtype=np.float64)
    present = counts > 0
    weights = np.ones(len(counts))
    weights[present] = counts.sum() / (present.sum() * counts[present])
    return torch.tensor(weights, dtype=torch.float32)

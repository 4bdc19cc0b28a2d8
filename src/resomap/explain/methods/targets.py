"""What an explanation explains, for every task: a class's score per image.

Targets come in two forms, both int64 tensors, and every explainer, quality metric and sanity check takes either:
- `[B]`: a class per image; the explained score is that class's logit (classifier logits [B, K]);
- `[B, r, r]`: a class over a region per image (the class inside the region, `IGNORE` outside); the explained
  score is the class's logits summed over the region (pytorch-grad-cam's `SemanticSegmentationTarget`, here for
  captum too through `RegionLogits`). Dense logits [B, K, r, r] (segmentation) are explained this way.

The task (resomap.tasks) decides which form its probe images get (the forms themselves: resomap.tasks.targets);
nothing here knows the task.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from resomap.tasks.targets import IGNORE, classes_and_regions, is_region, region_targets

__all__ = [
    "IGNORE",
    "RegionLogits",
    "cam_targets",
    "classes_and_regions",
    "is_region",
    "region_mean",
    "region_targets",
    "target_probs",
]


class RegionLogits(nn.Module):
    """model(x) [B, K, r, r] -> [B, K]: each class's logits summed over the image's region (captum's forward; the
    region comes as captum's additional_forward_args, which captum expands with the inputs for every method)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor, region: torch.Tensor) -> torch.Tensor:
        out = self.model(x)
        return (out * region[:, None].to(out.dtype)).sum(dim=(2, 3))


def region_mean(values: torch.Tensor, region: torch.Tensor) -> torch.Tensor:
    """The mean of `values` [..., r, r] over the region's pixels (the last two dims; an empty region gives 0)."""
    region = region.to(values.dtype)
    return (values * region).sum((-2, -1)) / region.sum((-2, -1)).clamp(min=1)


def num_outputs(out: torch.Tensor) -> int:
    """Classes of a model output: logits [B, K] or [B, K, r, r]."""
    return int(out.shape[1])


def target_probs(model: nn.Module, x: torch.Tensor, targets: torch.Tensor) -> np.ndarray:
    """Per image [B]: the softmax probability of the target class (class targets), or the class's mean softmax
    probability over the region (region targets)."""
    classes, region = classes_and_regions(targets.to(x.device))
    with torch.no_grad():
        prob = torch.softmax(model(x).float(), dim=1)
    picked = prob[torch.arange(len(classes), device=prob.device), classes]
    if region is None:
        return picked.cpu().numpy()
    return region_mean(picked, region).cpu().numpy()


class RegionSoftmaxTarget:
    """A pytorch-grad-cam target: the class's mean softmax probability over the region (ROAD's score)."""

    def __init__(self, category: int, mask: np.ndarray) -> None:
        self.category, self.mask = category, torch.as_tensor(mask, dtype=torch.float32)

    def __call__(self, model_output: torch.Tensor) -> torch.Tensor:
        prob = torch.softmax(model_output, dim=0)[self.category]
        return region_mean(prob, self.mask.to(model_output.device))


def cam_targets(targets: torch.Tensor, softmax: bool = False) -> list[Any]:
    """pytorch-grad-cam targets: ClassifierOutput(Softmax)Target for class targets, SemanticSegmentationTarget (or
    RegionSoftmaxTarget) for region targets."""
    from pytorch_grad_cam.utils.model_targets import (
        ClassifierOutputSoftmaxTarget,
        ClassifierOutputTarget,
        SemanticSegmentationTarget,
    )

    classes, region = classes_and_regions(targets)
    if region is None:
        cls = ClassifierOutputSoftmaxTarget if softmax else ClassifierOutputTarget
        return [cls(int(c)) for c in classes]
    masks = region.detach().cpu().numpy()
    cls = RegionSoftmaxTarget if softmax else SemanticSegmentationTarget
    return [cls(int(c), m) for c, m in zip(classes, masks)]

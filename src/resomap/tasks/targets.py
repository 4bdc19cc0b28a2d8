"""The two forms of explanation targets (int64 tensors), produced by the tasks and explained by resomap.explain:
`[B]` a class per image, `[B, r, r]` a class over a region per image (the class inside, IGNORE outside)."""

from __future__ import annotations

import torch

IGNORE = -1  # a pixel outside the explained region


def is_region(targets: torch.Tensor) -> bool:
    """True for region targets [B, r, r], False for class targets [B]."""
    return torch.as_tensor(targets).dim() == 3


def classes_and_regions(targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(class per image [B] int64, region per image [B, r, r] float or None for class targets)."""
    targets = torch.as_tensor(targets)
    if targets.dim() == 1:
        return targets.long(), None
    region = (targets != IGNORE).float()
    classes = targets.flatten(1).max(1).values.clamp(min=0).long()
    return classes, region


def region_targets(classes: torch.Tensor, regions: torch.Tensor) -> torch.Tensor:
    """int64 [B, r, r]: the class inside each bool region, IGNORE outside."""
    classes = torch.as_tensor(classes, dtype=torch.int64)
    full = classes.view(-1, 1, 1).expand(regions.shape).clone()
    return torch.where(regions.bool(), full, torch.full_like(full, IGNORE))

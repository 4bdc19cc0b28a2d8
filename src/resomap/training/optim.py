"""Optimiser and learning-rate schedule from `training` config."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable

import torch

from resomap.config.schema import OptimizerConfig, TrainingConfig

log = logging.getLogger(__name__)

# When a scheduler steps: after every optimiser step, after every epoch, or never.
STEP, EPOCH, NEVER = "step", "epoch", "never"


def build_optimizer(
    params: Iterable[torch.nn.Parameter], cfg: OptimizerConfig, device: torch.device
) -> torch.optim.Optimizer:
    """AdamW (fused: auto = CUDA only; on = try, fall back with a warning) or SGD (momentum, no Nesterov).
    `params`: parameters, or parameter groups (dicts) whose `lr_scale` multiplies cfg.lr; frozen ones are left out."""
    params = _trainable(params, cfg.lr)
    if cfg.name == "sgd":
        return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    fused = cfg.fused == "on" or (cfg.fused == "auto" and device.type == "cuda")
    if fused:
        try:
            return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, fused=True)
        except (RuntimeError, ValueError, TypeError) as exc:
            log.warning("fused AdamW is not supported here (%s); using the default kernel", exc)
    return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)


def _trainable(params: Iterable, lr: float) -> list:
    items = list(params)
    if not items or not isinstance(items[0], dict):
        return [p for p in items if p.requires_grad]
    groups = []
    for group in items:
        found = [p for p in group["params"] if p.requires_grad]
        if found:
            rest = {k: v for k, v in group.items() if k not in ("params", "lr_scale")}
            groups.append({**rest, "params": found, "lr": lr * float(group.get("lr_scale", 1.0))})
    return groups


def _cosine_lambda(warmup: int, total: int, floor: float):
    """LR factor per optimiser step: linear warm-up to 1, then cosine down to `floor` (min_lr / lr)."""

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return factor


def build_scheduler(
    optimizer: torch.optim.Optimizer, cfg: TrainingConfig, steps_per_epoch: int
) -> tuple[object | None, str]:
    """The scheduler of `cfg.scheduler` and when to step it (STEP, EPOCH or NEVER).

    `steps_per_epoch` counts optimiser steps (batches / grad_accum_steps, rounded up).
    """
    sc = cfg.scheduler
    total = max(1, cfg.epochs * steps_per_epoch)
    if sc.name == "cosine":
        warmup = min(sc.warmup_epochs * steps_per_epoch, total - 1)
        floor = min(1.0, sc.min_lr / cfg.optimizer.lr)
        return torch.optim.lr_scheduler.LambdaLR(optimizer, _cosine_lambda(warmup, total, floor)), STEP
    if sc.name == "onecycle":
        pct = sc.warmup_epochs / cfg.epochs if 0 < sc.warmup_epochs < cfg.epochs else 0.3
        sched = torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=cfg.optimizer.lr, total_steps=total, pct_start=pct, cycle_momentum=False
        )
        return sched, STEP
    if sc.name == "step":
        return torch.optim.lr_scheduler.StepLR(optimizer, step_size=max(1, sc.step_size), gamma=sc.gamma), EPOCH
    if sc.name == "plateau":
        sched = torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer, mode="min", factor=sc.factor, patience=sc.patience
        )
        return sched, EPOCH
    return None, NEVER

"""The LR range test (Smith 2017, "Cyclical learning rates for training neural networks"): a short run whose learning
rate rises exponentially from `start_lr` to `end_lr`, on a throw-away copy of the model, recording the training loss
at each step. The learning rate of the lowest smoothed loss divided by 10 becomes the peak learning rate of the
schedule (fastai's `lr_min` suggestion: at the minimum the loss is about to diverge, a tenth of it still descends
steeply). Written here rather than taken from a library: the steps must be the Trainer's own (its loss, class and
sample weights, autocast, channels_last), which torch-lr-finder or Lightning's tuner would replace with theirs.
"""

from __future__ import annotations

import copy
import logging
import math
from typing import Any

import numpy as np
import torch

from resomap.config.schema import LrFindConfig
from resomap.training.checkpoint import rng_state, set_rng_state

log = logging.getLogger(__name__)

SMOOTHING = 0.05  # weight of the newest step in the loss's moving average (bias-corrected, as fastai does)
DIVERGED = 4.0  # the test stops once the smoothed loss is this many times its lowest value
DIVIDE = 10.0  # the suggestion: the learning rate of the lowest smoothed loss / this


def _batches(loader: Any):
    """Training batches without end: the loader's epochs one after the other."""
    epoch = 0
    while True:
        loader.set_epoch(epoch)
        empty = True
        for batch in loader:
            empty = False
            yield batch
        if empty:
            return
        epoch += 1


def _smoothed(avg: float, loss: float, step: int) -> tuple[float, float]:
    """(the moving average after `loss`, its bias-corrected value) at 0-based `step`."""
    avg = (1 - SMOOTHING) * avg + SMOOTHING * loss
    return avg, avg / (1 - (1 - SMOOTHING) ** (step + 1))


def suggest(lrs: list[float], losses: list[float]) -> tuple[float, float]:
    """(suggested learning rate, learning rate of the lowest smoothed loss) from the test's record."""
    smooth, avg = [], 0.0
    for i, loss in enumerate(losses):
        avg, value = _smoothed(avg, loss, i)
        smooth.append(value)
    skip = min(len(smooth) - 1, max(1, len(smooth) // 10))  # the first steps' average is mostly noise
    best = skip + int(np.nanargmin(smooth[skip:]))
    return lrs[best] / DIVIDE, lrs[best]


def lr_range_test(trainer: Any, model: torch.nn.Module, data: Any, cfg: LrFindConfig) -> dict[str, Any]:
    """Run the range test with `trainer`'s step on a copy of `model` (the model, the RNG streams and the trainer's
    state after the test are as before it). Returns {"lr", "lr_min_loss", "lrs", "losses", "steps"}."""
    rng = rng_state()
    work = copy.deepcopy(model)
    trainer.setup(work, data)
    trainer.scheduler, trainer._sched_when = None, "never"
    trainer.ema = None
    work.train()
    gamma = (cfg.end_lr / cfg.start_lr) ** (1 / max(1, cfg.steps - 1))
    lrs: list[float] = []
    losses: list[float] = []
    lowest, avg = math.inf, 0.0
    for step, (x, y, *w) in zip(range(cfg.steps), _batches(data.train), strict=False):
        lr = cfg.start_lr * gamma**step
        for group in trainer.optimizer.param_groups:
            group["lr"] = lr
        _, loss = trainer.train_step(x, y, w, 1, update=True)
        value = float(loss.detach())
        if not math.isfinite(value):
            break
        lrs.append(lr)
        losses.append(value)
        avg, smoothed = _smoothed(avg, value, step)
        lowest = min(lowest, smoothed)
        if step > cfg.steps // 10 and smoothed > DIVERGED * lowest:
            break
    set_rng_state(rng)
    if len(losses) < 3:
        from resomap.errors import TrainingError

        raise TrainingError(
            f"the LR range test ran {len(losses)} steps before the loss diverged; lower training.lr_find.start_lr"
        )
    lr, at_min = suggest(lrs, losses)
    if at_min == lrs[-1] and len(lrs) == cfg.steps:
        log.warning("LR range test: the loss still fell at the last rate (%.3g); raise training.lr_find.end_lr", at_min)
    log.info("LR range test: lowest smoothed loss at lr=%.3g; peak learning rate %.3g", at_min, lr)
    return {"lr": lr, "lr_min_loss": at_min, "lrs": lrs, "losses": losses, "steps": len(losses)}

"""Shared pieces of benchmark_precision.py and benchmark_efficiency.py: one model's timed training step and
inference call under a precision setting, the settings compared, and the ratio lines."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from resomap.config import load
from resomap.models import build_model
from resomap.profiling.timing import inference_step, training_step
from resomap.runtime import autocast_dtype, resolve_channels_last, resolve_precision
from resomap.stats import MedianInterval, ratio_interval


@dataclass(frozen=True)
class Setting:
    """What a trial trains with: `today` (fp32, NCHW: the defaults before auto) or `auto` (the defaults now)."""

    name: str
    precision: str
    channels_last: bool | str

    def resolved(self, device: torch.device) -> tuple[str, bool]:
        precision, _ = resolve_precision(self.precision, device)
        return precision, resolve_channels_last(self.channels_last, precision)

    def describe(self, device: torch.device) -> str:
        precision, cl = self.resolved(device)
        return f"{self.name} = {precision}{', channels_last' if cl else ''}"


TODAY = Setting("today", "fp32", False)
AUTO = Setting("auto", "auto", "auto")


def steps(model_name: str, resolution: int, batch: int, channels: int, setting: Setting, device: torch.device):
    """(training step, batch-1 inference call, batch inference call) of a fresh `model_name` under `setting`."""
    torch.manual_seed(0)
    model, _ = build_model(model_name, 2, channels, load(None).models)
    precision, cl = setting.resolved(device)
    fmt = torch.channels_last if cl else torch.contiguous_format
    model = model.to(device).to(memory_format=fmt)
    amp = autocast_dtype(precision)
    x = torch.randn(batch, channels, resolution, resolution, device=device).contiguous(memory_format=fmt)
    y = torch.randint(0, 2, (batch,), device=device)
    train = training_step(copy.deepcopy(model).train(), x, y, amp_dtype=amp)
    net = model.eval()
    return train, inference_step(net, x[:1].clone(), amp), inference_step(net, x, amp)


def speedup(slow: list[float], fast: list[float]) -> MedianInterval:
    """slow / fast time per round (median of the per-round ratios with its 95% interval): > 1 = `fast` is faster."""
    return ratio_interval(slow, fast)


def verdict(ok: bool, reaches: bool = False) -> str:
    return "PASS" if ok else ("MISS (interval reaches it)" if reaches else "MISS")

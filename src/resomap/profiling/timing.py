"""Timed calls: per-call CUDA events on GPU, time.perf_counter on CPU; inference and training step callables."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class LatencyStats:
    """Latency of one call (a whole batch), in milliseconds, over `iters` timed calls."""

    median_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    std_ms: float
    min_ms: float
    max_ms: float
    iters: int

    @classmethod
    def from_seconds(cls, samples: list[float]) -> LatencyStats:
        ms = np.asarray(samples, dtype=np.float64) * 1000.0
        p50, p90, p99 = np.percentile(ms, [50, 90, 99])
        std = float(ms.std(ddof=1)) if ms.size > 1 else 0.0
        return cls(float(p50), float(p90), float(p99), float(ms.mean()), std, float(ms.min()), float(ms.max()), ms.size)


def time_calls(fn: Callable[[], object], device: torch.device, *, warmup: int, iters: int) -> list[float]:
    """Seconds per call of `fn` for `iters` calls after `warmup` untimed ones.

    On CUDA each call gets its own pair of events (the GPU time of that call, without a host sync per call);
    on CPU each call is wrapped in time.perf_counter.
    """
    for _ in range(warmup):
        fn()
    if device.type == "cuda":
        with torch.cuda.device(device):
            torch.cuda.synchronize()
            starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
            ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
            for start, end in zip(starts, ends):
                start.record()
                fn()
                end.record()
            torch.cuda.synchronize()
            return [s.elapsed_time(e) / 1000.0 for s, e in zip(starts, ends)]
    out = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def autocast(device: torch.device, dtype: torch.dtype | None) -> contextlib.AbstractContextManager:
    """torch.autocast for `dtype` on the device type, or a no-op for fp32."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def inference_step(model: nn.Module, x: torch.Tensor, amp_dtype: torch.dtype | None) -> Callable[[], torch.Tensor]:
    """A call running one forward under inference_mode (the caller puts the model in eval mode)."""
    device = x.device

    def step() -> torch.Tensor:
        with torch.inference_mode(), autocast(device, amp_dtype):
            return model(x)

    return step


def training_step(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    amp_dtype: torch.dtype | None,
    fused: bool = False,
) -> Callable[[], None]:
    """A call running forward + cross-entropy + backward + AdamW step (GradScaler under fp16)."""
    device = x.device
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, fused=True if fused else None)
    scaler = torch.amp.GradScaler(device.type) if amp_dtype == torch.float16 else None

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with autocast(device, amp_dtype):
            out = model(x)
        loss = F.cross_entropy(out.float(), y)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()

    return step


def images_per_s(batch_size: int, seconds: list[float]) -> float:
    total = sum(seconds)
    return batch_size * len(seconds) / total if total > 0 else float("inf")

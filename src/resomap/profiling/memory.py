"""Memory measurements: the CUDA caching allocator's counters on GPU, a sampled resident-set size on CPU.

CPU method: a background thread samples psutil's RSS of this process every ~1 ms while the measured code
runs; the reported figure is the peak RSS minus the RSS at the start. Torch ops release the GIL, so the
sampler runs during long kernels. Before sampling, glibc's malloc_trim(0) hands freed heap pages back to the
OS, else memory kept from earlier runs is reused without raising RSS and the figure reads ~0. It stays
approximate (page granularity, other threads of the process count too).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass

import psutil
import torch
from torch import nn

MB = 2**20


@dataclass(frozen=True)
class MemoryStats:
    """Memory of one forward. method: 'cuda_allocator' or 'cpu_rss_sampler' (see the module docstring)."""

    method: str
    weights_mb: float  # parameters + buffers
    peak_mb: float  # CUDA: max_memory_allocated during the forward; CPU: peak RSS increase during it
    activation_mb: float  # CUDA: that peak minus what was allocated before (weights, input); CPU: = peak_mb
    allocated_mb: float | None = None  # CUDA: torch.cuda.memory_allocated after the forward
    reserved_mb: float | None = None  # CUDA: torch.cuda.memory_reserved after the forward


def weights_bytes(model: nn.Module) -> int:
    tensors = [*model.parameters(), *model.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors)


def _malloc_trim() -> None:
    """Return freed heap memory to the OS (glibc only; a no-op elsewhere)."""
    with suppress(OSError, AttributeError):
        ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)


class RssPeakSampler:
    """Context manager: `increase_bytes` is the peak RSS during the block minus the RSS at its start."""

    def __init__(self, interval_s: float = 0.001):
        self.interval_s = interval_s
        self._proc = psutil.Process()
        self._stop = threading.Event()
        self.start_bytes = 0
        self.peak_bytes = 0

    def _sample(self) -> None:
        self.peak_bytes = max(self.peak_bytes, self._proc.memory_info().rss)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def __enter__(self) -> RssPeakSampler:
        gc.collect()
        _malloc_trim()
        self.start_bytes = self.peak_bytes = self._proc.memory_info().rss
        self._thread = threading.Thread(target=self._loop, name="rss-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._sample()
        self._stop.set()
        self._thread.join()

    @property
    def increase_bytes(self) -> int:
        return max(0, self.peak_bytes - self.start_bytes)


@dataclass
class PeakReading:
    """Filled in when a `peak_increase` block exits: bytes above what was held when it began."""

    bytes: int = 0


@contextmanager
def peak_increase(device: torch.device) -> Iterator[PeakReading]:
    """Peak memory above the level at the start of the block: CUDA allocator peak, or sampled RSS on CPU."""
    reading = PeakReading()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        yield reading
        torch.cuda.synchronize(device)
        reading.bytes = max(0, torch.cuda.max_memory_allocated(device) - before)
        return
    with RssPeakSampler() as sampler:
        yield reading
    reading.bytes = sampler.increase_bytes


def forward_memory(model: nn.Module, forward: Callable[[], object], device: torch.device) -> MemoryStats:
    """Run `forward()` once and measure it (the model is already on `device`)."""
    weights = weights_bytes(model) / MB
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        out = forward()
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device)
        allocated, reserved = torch.cuda.memory_allocated(device), torch.cuda.memory_reserved(device)
        del out
        return MemoryStats("cuda_allocator", weights, peak / MB, (peak - before) / MB, allocated / MB, reserved / MB)
    with RssPeakSampler() as sampler:
        out = forward()
        del out
    rise = sampler.increase_bytes / MB
    return MemoryStats("cpu_rss_sampler", weights, rise, rise)


def free_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


def is_oom(exc: BaseException) -> bool:
    """CUDA out-of-memory (typed or as a RuntimeError message), or a CPU allocation failure."""
    if isinstance(exc, (torch.cuda.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()

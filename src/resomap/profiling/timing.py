"""Timing that holds on a shared machine: interleaved rounds, robust statistics, interference detection.

- `time_rounds` runs several variants (e.g. inference and a training step, or benchmark options) in interleaved
  rounds (A B C, then B C A, ...), each round a short block of timed calls per variant, so a burst of load from
  another process hits every variant alike instead of one of them. Per call: CUDA events on GPU (the GPU time,
  no host sync per call), time.perf_counter on CPU.
- `LatencyStats` keeps the per-call percentiles plus the IQR and a distribution-free interval of the median
  (`resomap.stats.median_interval`; the timing statistics, `ratio_interval` among them, live in resomap.stats).
- `measure` watches the CPU while it times (`CpuLoad`: cores used by other processes, from psutil) and calls a
  measurement disturbed when the per-call spread (IQR / median) exceeds a threshold or, on CPU, when torch's
  threads plus the other processes' busy cores exceed the cores there are. It then re-measures a bounded number
  of times, on CPU with torch's threads lowered to the cores left free, and marks the result `noisy`, with its
  reasons, when no attempt was clean. It never keeps a disturbed figure silently.

Why threads are lowered (measured on this project's 2-core machine, torch 2.15 with GNU OpenMP, a
`python -c 'while 1: pass'` burner on one core; median batch-1 latency, scripts/benchmark_threads.py):
simple_cnn@32 quiet 1.0 ms with 2 threads / 1.4 ms with 1; under the burner 16 ms with 2 threads, 1.4 ms with 1.
resnet18@64: under the burner 548 ms with 2 threads, 39 ms with 1. libgomp's default wait policy spins at every
barrier of every parallel op; when one of the two workers is descheduled by the competing process, the other
spins until the scheduler runs it again, so each op costs a scheduler time slice instead of microseconds.
OMP_WAIT_POLICY=PASSIVE (set before torch is imported) softens it (resnet18@64: 72 ms) but still loses to one
thread; so with `system.threads: 0` profile and bench use only the cores other processes leave free
(runtime.measurement_threads at the start, fewer threads on a retry).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from resomap.runtime import CpuLoad, free_cores
from resomap.stats import MedianInterval, median_interval

# the timing intervals live in resomap.stats; `Interval` is the name training.bare still imports from here
Interval = MedianInterval


@dataclass(frozen=True)
class LatencyStats:
    """Latency of one call (a whole batch), in milliseconds, over `iters` timed calls.

    iqr_ms: interquartile range of the calls; median_low_ms/median_high_ms: the interval of the median
    (median_interval, 95%); calls_ms: every timed call in the order timed (the summary's interval of the median at
    its own level: stats.timing_interval). Profiles written before these were kept read back with 0 / the median /
    no calls.
    """

    median_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    std_ms: float
    min_ms: float
    max_ms: float
    iters: int
    iqr_ms: float = 0.0
    median_low_ms: float | None = None
    median_high_ms: float | None = None
    calls_ms: list[float] = field(default_factory=list)

    @classmethod
    def from_seconds(cls, samples: Sequence[float]) -> LatencyStats:
        ms = np.asarray(samples, dtype=np.float64) * 1000.0
        p25, p50, p75, p90, p99 = np.percentile(ms, [25, 50, 75, 90, 99])
        std = float(ms.std(ddof=1)) if ms.size > 1 else 0.0
        _, lo, hi = median_interval(ms)
        return cls(
            float(p50), float(p90), float(p99), float(ms.mean()), std, float(ms.min()), float(ms.max()), ms.size,
            float(p75 - p25), lo, hi, ms.tolist(),
        )  # fmt: skip

    @property
    def spread(self) -> float:
        """IQR / median: the relative spread used to detect interference."""
        return self.iqr_ms / self.median_ms if self.median_ms > 0 else math.inf


# ---------------------------------------------------------------------------------------------- CPU load


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run the block with `n` torch intra-op threads (None: unchanged), restoring the previous count."""
    before = torch.get_num_threads()
    if n is not None and n != before:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


# ---------------------------------------------------------------------------------------------- timed calls


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


def _split(total: int, rounds: int) -> list[int]:
    """`total` calls spread over `rounds` blocks as evenly as possible (each >= 1 when total >= rounds)."""
    base, extra = divmod(total, rounds)
    return [base + (1 if r < extra else 0) for r in range(rounds)]


@dataclass
class Rounds:
    """Per variant, per round, the seconds of each timed call; `errors`: variants that raised (then dropped)."""

    calls: dict[str, list[list[float]]] = field(default_factory=dict)
    errors: dict[str, BaseException] = field(default_factory=dict)

    def samples(self, name: str) -> list[float]:
        return [s for block in self.calls.get(name, []) for s in block]

    def round_medians(self, name: str) -> list[float]:
        return [float(np.median(b)) for b in self.calls.get(name, []) if b]

    def stats(self, name: str) -> LatencyStats:
        return LatencyStats.from_seconds(self.samples(name))


def time_rounds(
    variants: Mapping[str, Callable[[], object]],
    device: torch.device,
    *,
    iters: int | Mapping[str, int],
    warmup: int | Mapping[str, int],
    rounds: int,
) -> Rounds:
    """Time every variant in `rounds` interleaved rounds; each variant's `iters` calls are split over the rounds.

    Round r visits the variants in the order rotated by r (A B C, B C A, C A B, ...), so none always runs first
    or right after the same neighbour. A variant that raises is recorded in `errors` and dropped.
    """
    names = list(variants)
    per = {n: iters[n] if isinstance(iters, Mapping) else iters for n in names}
    warm = {n: warmup[n] if isinstance(warmup, Mapping) else warmup for n in names}
    rounds = max(1, min(rounds, max(per.values(), default=1)))
    out = Rounds({n: [] for n in names})
    for n in names:
        try:
            time_calls(variants[n], device, warmup=warm[n], iters=0)
        except Exception as exc:  # reported by the caller; the other variants still run
            out.errors[n] = exc
    blocks = {n: _split(per[n], rounds) for n in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)] if names else []
        for n in order:
            if n in out.errors or blocks[n][r] == 0:
                continue
            try:
                out.calls[n].append(time_calls(variants[n], device, warmup=0, iters=blocks[n][r]))
            except Exception as exc:
                out.errors[n] = exc
    for n in out.errors:
        out.calls.pop(n, None)
    return out


# ---------------------------------------------------------------------------------------------- interference


@dataclass(frozen=True)
class NoisePolicy:
    """When a measurement counts as disturbed and what is done about it (config `profiling`)."""

    spread_threshold: float = 0.5  # IQR / median of a variant's calls above this: disturbed
    retries: int = 2  # re-measurements after a disturbed one
    adapt_threads: bool = True  # CPU: re-measure with torch threads lowered to the cores other processes leave


@dataclass
class Measurement:
    """The kept attempt of `measure`: its rounds, whether it is noisy and why, and the conditions it ran in."""

    rounds: Rounds
    noisy: bool
    reasons: list[str]
    attempts: int
    threads: int
    others_cores: float


def noise_reasons(rounds: Rounds, device: torch.device, load: CpuLoad, threads: int, threshold: float) -> list[str]:
    """Why this measurement looks disturbed (empty when it does not)."""
    reasons = []
    for name, blocks in rounds.calls.items():
        if sum(len(b) for b in blocks) < 4:  # too few calls for a quartile
            continue
        spread = rounds.stats(name).spread
        if spread > threshold:
            reasons.append(f"{name}: spread (IQR/median) {spread:.2f} > {threshold:.2f}")
    if device.type == "cpu" and threads + load.others_cores > load.cores + 0.25:
        reasons.append(
            f"oversubscribed: {threads} torch threads + {load.others_cores:.1f} cores busy with other processes "
            f"> {load.cores} cores"
        )
    return reasons


def measure(
    variants: Mapping[str, Callable[[], object]],
    device: torch.device,
    *,
    iters: int | Mapping[str, int],
    warmup: int | Mapping[str, int],
    rounds: int,
    policy: NoisePolicy = NoisePolicy(),
) -> Measurement:
    """time_rounds, re-measured up to `policy.retries` times while disturbed. A clean attempt ends it; else the
    attempt with the fastest calls (geometric mean of the variants' medians) is kept, marked noisy."""
    kept: tuple | None = None
    threads = torch.get_num_threads() if device.type == "cpu" else 0
    for attempt in range(1, policy.retries + 2):
        with torch_threads(threads or None), CpuLoad() as load:
            done = time_rounds(variants, device, iters=iters, warmup=warmup if attempt == 1 else 1, rounds=rounds)
        reasons = noise_reasons(done, device, load, threads, policy.spread_threshold)
        # interference only slows calls down: among disturbed attempts the fastest is the least disturbed one
        # (a collapse under oversubscription can be steady, so the spread alone would not tell)
        speed = sum(math.log(max(np.median(done.samples(n)), 1e-12)) for n in done.calls if done.calls[n])
        score = (bool(reasons), speed)
        if kept is None or score < kept[0]:
            kept = (score, Measurement(done, bool(reasons), reasons, attempt, threads, load.others_cores))
        if not reasons or done.errors:
            break
        if device.type == "cpu" and policy.adapt_threads:
            threads = min(threads, free_cores(load.others_cores, load.cores))
    result = kept[1]
    result.attempts = attempt
    return result


# ---------------------------------------------------------------------------------------------- step callables


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
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
) -> Callable[[], None]:
    """A call running forward + loss + backward + AdamW step (GradScaler under fp16). The loss is `loss_fn`
    (logits in fp32, y), default cross-entropy; a segmenter passes its loss and per-pixel labels
    (profiler.step_task)."""
    device = x.device
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, fused=True if fused else None)
    scaler = torch.amp.GradScaler(device.type) if amp_dtype == torch.float16 else None
    loss_fn = loss_fn or F.cross_entropy

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with autocast(device, amp_dtype):
            out = model(x)
        loss = loss_fn(out.float(), y)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()

    return step


def images_per_s(batch_size: int, seconds: Sequence[float]) -> float:
    """Images per second from the median call (robust to a few disturbed calls)."""
    if not len(seconds):
        return math.nan
    med = float(np.median(np.asarray(seconds, dtype=np.float64)))
    return batch_size / med if med > 0 else float("inf")

"""Device selection and process-wide switches derived from `system` config (passed down, never global)."""

from __future__ import annotations

import functools
import logging
import math
import os
import platform
import random
import time
from typing import TYPE_CHECKING

import numpy as np
import psutil
import torch

from resomap.errors import DeviceError

if TYPE_CHECKING:  # annotations only: importing the config schema at run time is not needed here
    from resomap.config.schema import SystemConfig

log = logging.getLogger(__name__)


def resolve_device(system: SystemConfig) -> torch.device:
    """auto: CUDA when available, else CPU. cuda without a GPU is a DeviceError."""
    if system.device == "cpu":
        return torch.device("cpu")
    if system.device == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(
                "system.device is 'cuda' but no CUDA GPU is visible; set system.device=auto or system.device=cpu"
            )
        return torch.device("cuda")
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def describe_device(device: torch.device) -> str:
    """One line naming the device, with the GPU's name and memory on CUDA."""
    if device.type == "cuda":
        idx = device.index if device.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(idx)
        return f"cuda:{idx} ({props.name}, {props.total_memory / 2**30:.1f} GiB)"
    return f"cpu ({os.cpu_count()} cores, {torch.get_num_threads()} torch threads)"


def usable_cpus() -> list[int]:
    """The CPUs this process may run on (its affinity: a cpuset-limited container's own), else all."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(psutil.cpu_count() or os.cpu_count() or 1))


class CpuLoad:
    """Context manager: how many cores other processes kept busy while the block ran (psutil CPU times).

    others_cores = (busy time of the CPUs this process may use - this process's CPU time) / wall time. Busy time
    (user + system + nice + irq + softirq + steal, per CPU from psutil) sees any process, other users' too.
    """

    def __init__(self) -> None:
        self._proc = psutil.Process()
        self._cpus = usable_cpus()
        self.others_cores = 0.0
        self.cores = len(self._cpus)

    def _busy_all(self) -> float:
        per_cpu = psutil.cpu_times(percpu=True)
        return sum(self._busy(per_cpu[i]) for i in self._cpus if i < len(per_cpu))

    @staticmethod
    def _busy(t: object) -> float:
        return sum(getattr(t, k, 0.0) for k in ("user", "system", "nice", "irq", "softirq", "steal"))

    def __enter__(self) -> CpuLoad:
        self._t0 = time.perf_counter()
        self._sys0 = self._busy_all()
        c = self._proc.cpu_times()
        self._own0 = c.user + c.system
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.perf_counter() - self._t0
        c = self._proc.cpu_times()
        own = c.user + c.system - self._own0
        machine = self._busy_all() - self._sys0
        self.others_cores = max(0.0, (machine - own) / wall) if wall > 0 else 0.0


def free_cores(others_cores: float, cores: int | None = None) -> int:
    """Cores left to this process when others keep `others_cores` busy (at least 1)."""
    cores = cores or len(usable_cpus())
    return max(1, math.floor(cores - others_cores + 0.25))


_DEFAULT_THREADS = torch.get_num_threads()  # torch's own choice at start (honours OMP_NUM_THREADS)


def default_threads() -> int:
    """Torch's intra-op thread count when this process started (one per physical core, or OMP_NUM_THREADS)."""
    return _DEFAULT_THREADS


def others_busy_cores(window_s: float = 0.1) -> float:
    """Cores kept busy by other processes over a short window (psutil: machine busy time minus this process's)."""
    with CpuLoad() as load:
        time.sleep(window_s)
    return load.others_cores


def auto_threads(others_cores: float | None = None) -> int:
    """Threads for a measurement when system.threads is 0: torch's default, lowered to the cores other processes
    leave free.

    Two intra-op threads on two cores while another CPU-bound process runs made tiny models 10-15x slower here
    (OpenMP workers spin at every barrier while their partner is descheduled; the measured numbers are in
    resomap/profiling/timing.py and docs/performance.md "Threads"); one thread per free core does not collapse.
    """
    busy = others_busy_cores() if others_cores is None else others_cores
    return max(1, min(_DEFAULT_THREADS, free_cores(busy)))


def measurement_threads(system: SystemConfig) -> int:
    """Set torch's threads for `resomap profile` / `bench`: system.threads, or auto_threads() when it is 0."""
    threads = system.threads if system.threads > 0 else auto_threads()
    if threads != torch.get_num_threads():
        torch.set_num_threads(threads)
    return threads


def apply_system(system: SystemConfig, device: torch.device) -> None:
    """Backend switches that torch keeps per process (threads, cudnn autotuner, TF32).

    system.threads 0 sets torch's default thread count, restored if a profile or bench earlier in the same process
    lowered it, so nothing that ran before decides it; a CPU training fit then measures which count is fastest
    under the load of the moment (resomap.training.threads, in Trainer.fit) and a resumed fit keeps the count of
    the run it resumes (another count changes the floating-point reduction order; with bf16 that flipped test
    predictions). A positive count is used as it is. Profiles adapt on their own (profiling/timing.py).
    """
    threads = system.threads if system.threads > 0 else _DEFAULT_THREADS
    if threads != torch.get_num_threads():  # also undoes a lower count left by a profile earlier in this process
        torch.set_num_threads(threads)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = system.cudnn_benchmark
        torch.backends.cuda.matmul.allow_tf32 = system.tf32
        torch.backends.cudnn.allow_tf32 = system.tf32


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


_CPU_BF16_FLAGS = ("amx_bf16", "avx512_bf16")  # x86 flags of native bf16 arithmetic (AMX tiles, AVX-512 BF16)


@functools.cache
def cpu_bf16_feature() -> str | None:
    """The CPU feature that gives native bf16 arithmetic (amx_bf16 or avx512_bf16), or None.

    Reads the kernel's CPU flags (/proc/cpuinfo) where there are any, else asks torch's own CPU detection
    (cpuinfo, what oneDNN dispatches on). A CPU without either computes bf16 by converting to fp32 and back, which
    is slower than fp32."""
    found = cpu_bf16_flags()
    return found[0] if found else None


@functools.cache
def cpu_bf16_flags() -> tuple[str, ...]:
    """Every native-bf16 feature of this CPU, amx_bf16 before avx512_bf16 (see `cpu_bf16_feature`)."""
    text = _cpuinfo()
    if "flags" in text:
        return bf16_flags(text)
    probes = (("amx_bf16", "_is_amx_tile_supported"), ("avx512_bf16", "_is_avx512_bf16_supported"))
    found = []
    for flag, name in probes:  # every x86 CPU with AMX tiles so far has AMX-BF16
        probe = getattr(torch.cpu, name, None)
        try:
            if probe is not None and probe():
                found.append(flag)
        except RuntimeError:
            pass
    return tuple(found)


def _cpuinfo() -> str:
    """/proc/cpuinfo's text ('' where there is none: macOS, Windows)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def bf16_flag(cpuinfo: str) -> str | None:
    """The native-bf16 flag (amx_bf16 before avx512_bf16) of the first `flags` line of /proc/cpuinfo text."""
    found = bf16_flags(cpuinfo)
    return found[0] if found else None


def bf16_flags(cpuinfo: str) -> tuple[str, ...]:
    """Every native-bf16 flag (amx_bf16, avx512_bf16, in that order) of the first `flags` line of /proc/cpuinfo."""
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags = set(line.partition(":")[2].split())
            return tuple(f for f in _CPU_BF16_FLAGS if f in flags)
    return ()


@functools.cache
def cpu_model() -> str:
    """The CPU's model name: /proc/cpuinfo's `model name` (Linux), else platform.processor() (macOS: arm, i386;
    Windows: the model), else the machine type."""
    for line in _cpuinfo().splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and value.strip():
            return " ".join(value.split())
    return platform.processor() or platform.machine() or "unknown"


def cpu_capability() -> str:
    """The widest vector instruction set torch's CPU kernels dispatch to here (AVX512, AVX2, DEFAULT, SVE256...):
    the same seed and code take other summation orders under another, so float results differ in the last bits,
    and bf16 results (rounded at every step) visibly."""
    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except (AttributeError, RuntimeError):
        return "unknown"


def machine_record(device: torch.device | str | None = None) -> dict[str, str]:
    """What a result records of the machine it was computed on (result.json's `environment`): `cpu` (model),
    `cpu_capability` (torch's), `cpu_bf16` (the native-bf16 flags present: amx_bf16, avx512_bf16, or none) and,
    when `device` is a CUDA GPU, `gpu` (its name). bf16 results differ between machines that differ here, with the
    same seeds and code; a resume on one machine reproduces exactly."""
    found = {"cpu": cpu_model(), "cpu_capability": cpu_capability(), "cpu_bf16": " ".join(cpu_bf16_flags()) or "none"}
    device = torch.device(device) if device is not None else None
    if device is not None and device.type == "cuda":
        idx = device.index if device.index is not None else torch.cuda.current_device()
        found["gpu"] = torch.cuda.get_device_name(idx)
    return found


def resolve_precision(precision: str, device: torch.device | str) -> tuple[str, str]:
    """(precision, why) for `system.precision` on `device`: auto is bf16 where the hardware computes bf16
    natively (a CUDA GPU that supports it, a CPU with AMX or AVX-512 BF16), fp32 elsewhere; any other value is
    kept as it is."""
    if precision != "auto":
        return precision, "set in the config"
    device = torch.device(device)
    if device.type == "cuda":
        idx = device.index if device.index is not None else torch.cuda.current_device()
        name = torch.cuda.get_device_name(idx)
        if torch.cuda.is_bf16_supported(including_emulation=False):
            return "bf16", f"auto: native bf16 on {name}"
        return "fp32", f"auto: {name} has no native bf16"
    if device.type == "cpu":
        feature = cpu_bf16_feature()
        if feature is not None:
            return "bf16", f"auto: native bf16 on this CPU, {feature}"
        return "fp32", "auto: this CPU has no native bf16 (no avx512_bf16 or amx_bf16)"
    return "fp32", f"auto: fp32 on {device.type}"


def autocast_dtype(precision: str, device: torch.device | str = "cpu") -> torch.dtype | None:
    """The autocast dtype of `precision` (auto: resolved for `device`); None for fp32."""
    precision, _ = resolve_precision(precision, device)
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)


def resolve_channels_last(channels_last: bool | str, precision: str) -> bool:
    """system.channels_last: a bool as it is; auto: on with a resolved bf16/fp16 precision (the NHWC kernels of
    oneDNN and cuDNN are the fast ones for reduced precision), off with fp32 (what it has always been)."""
    if isinstance(channels_last, bool):
        return channels_last
    return precision in ("bf16", "fp16")

"""run_benchmark: optimisation options side by side, throughput and memory per batch size, and cpu vs cuda.

Every measurement runs on a private deep copy of the model, so the caller's model is never changed. Peak
memory figures are the rise above what was held before the warm-up calls (model weights already on the
device): the CUDA allocator peak on GPU, sampled RSS on CPU (see memory.py); training peaks include
gradients and AdamW state.

Timing (profiling/timing.py): the options of --compare-opts are timed together in interleaved rounds (every
option's inference and training step once per round, the order rotated), throughputs come from the median
call, and each ratio to the baseline has the interval of its per-round ratios (`ratio_intervals`). A
measurement that stays disturbed after its re-measurements is kept with noisy=True and the reasons.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from resomap.atomic import write_text
from resomap.errors import ConfigError
from resomap.profiling.memory import MB, free_memory, is_oom, peak_increase
from resomap.profiling.options import (
    OPTIONS,
    BenchOption,
    OptionUnsupported,
    backend_flags,
    graphed_inference,
    prepare_model,
    skip_reason,
)
from resomap.profiling.profiler import CLASSIFICATION, PRECISIONS, step_task
from resomap.profiling.report import num
from resomap.profiling.timing import (
    Measurement,
    NoisePolicy,
    images_per_s,
    inference_step,
    measure,
    training_step,
)
from resomap.runtime import autocast_dtype, describe_device, resolve_precision
from resomap.stats import ratio_interval
from resomap.tasks import step_words

log = logging.getLogger(__name__)

FIGURES = ("infer_images_per_s", "train_images_per_s", "infer_peak_mb", "train_peak_mb")


@dataclass
class BenchEntry:
    """One measurement. section: options | batch_sizes | devices; status: ok | skipped | failed | oom."""

    section: str
    device: str
    option: str
    batch_size: int
    status: str
    reason: str = ""
    infer_images_per_s: float | None = None
    train_images_per_s: float | None = None
    infer_peak_mb: float | None = None
    train_peak_mb: float | None = None
    ratios: dict[str, float] = field(default_factory=dict)  # options: vs baseline; devices: cuda / cpu
    ratio_intervals: dict[str, list[float]] = field(default_factory=dict)  # options: [median, low, high] per round
    noisy: bool = False  # still disturbed after the re-measurements (profiling/timing.py); `noise` says why
    noise: list[str] = field(default_factory=list)
    threads: int = 0  # torch intra-op threads on CPU (0 on CUDA)


@dataclass
class BenchReport:
    model_name: str
    resolution: int
    in_channels: int
    precision: str
    iters: int
    warmup: int
    options_batch_size: int
    torch_version: str
    device_names: dict[str, str] = field(default_factory=dict)
    entries: list[BenchEntry] = field(default_factory=list)
    rounds: int = 5  # interleaved rounds per measurement
    task: str = CLASSIFICATION  # from the model's logits (profiler.step_task): the labels and loss of the step

    def section(self, name: str) -> list[BenchEntry]:
        return [e for e in self.entries if e.section == name]

    def get(self, section: str, device: str, option: str, batch_size: int) -> BenchEntry | None:
        for e in self.entries:
            if (e.section, e.device, e.option, e.batch_size) == (section, device, option, batch_size):
                return e
        return None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def as_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2) + "\n"

    def table(self) -> str:
        return bench_table(self)


@dataclass(frozen=True)
class _Case:
    resolution: int
    in_channels: int
    num_classes: int
    precision: str
    iters: int
    warmup: int
    rounds: int = 5
    noise: NoisePolicy = field(default_factory=NoisePolicy)
    cfg: Any = None  # the config whose loss the training step uses (the segmentation loss terms), None: defaults


@dataclass
class _Built:
    """One option ready to time: its calls (warmed up) and the memory peaks of the warm-up."""

    infer: Any
    train: Any | None
    infer_peak_mb: float
    train_peak_mb: float | None
    keep: list = field(default_factory=list)  # the prepared models, alive while timed


def _build(model: nn.Module, option: BenchOption, device: torch.device, bs: int, case: _Case) -> _Built:
    setup = option.setup
    amp = setup.amp_dtype or autocast_dtype(case.precision, device)
    fmt = torch.channels_last if setup.channels_last else torch.contiguous_format
    x = torch.randn(bs, case.in_channels, case.resolution, case.resolution, device=device)
    x = x.contiguous(memory_format=fmt)
    warm = max(1, case.warmup)
    with backend_flags(setup, device):
        base = copy.deepcopy(model).to(device).eval()
        task = step_task(base, x, case.cfg)  # labels and loss from the logits, before compile & co.
        net = prepare_model(base, setup)
        with peak_increase(device) as mem:
            call = graphed_inference(net, x, amp) if setup.cuda_graphs else inference_step(net, x, amp)
            for _ in range(warm):
                call()
        built = _Built(_with_flags(call, setup, device), None, mem.bytes / MB, None, [net])
        if setup.cuda_graphs:  # inference-only option
            return built
        tnet = prepare_model(copy.deepcopy(model).to(device).train(), setup)
        with peak_increase(device) as mem:
            step = training_step(tnet, x, task.targets, amp_dtype=amp, fused=setup.fused_adamw, loss_fn=task.loss)
            for _ in range(warm):
                step()
        built.train, built.train_peak_mb = _with_flags(step, setup, device), mem.bytes / MB
        built.keep.append(tnet)
    return built


def _with_flags(fn: Any, setup: Any, device: torch.device) -> Any:
    """`fn` run under the option's process-wide backend flags, restored after each call, so options with and
    without them can be timed in the same rounds."""
    if not (setup.cudnn_benchmark_tf32 and device.type == "cuda"):
        return fn

    def call() -> Any:
        with backend_flags(setup, device):
            return fn()

    return call


def _timed(variants: dict[str, Any], device: torch.device, case: _Case) -> Measurement:
    return measure(variants, device, iters=case.iters, warmup=0, rounds=case.rounds, policy=case.noise)


def _noise_of(timed: Measurement, name: str) -> list[str]:
    return [r for r in timed.reasons if r.startswith(f"{name}:") or r.startswith("oversubscribed")]


def _measure(model: nn.Module, option: BenchOption, device: torch.device, bs: int, case: _Case) -> dict[str, Any]:
    """One option at one batch size: inference and training step interleaved in rounds."""
    built = _build(model, option, device, bs, case)
    variants = {"infer": built.infer} | ({"train": built.train} if built.train is not None else {})
    timed = _timed(variants, device, case)
    for exc in timed.rounds.errors.values():
        raise exc
    out: dict[str, Any] = {
        "infer_images_per_s": images_per_s(bs, timed.rounds.samples("infer")),
        "infer_peak_mb": built.infer_peak_mb,
        "noisy": timed.noisy,
        "noise": list(timed.reasons),
        "threads": timed.threads,
    }
    if built.train is not None:
        out["train_images_per_s"] = images_per_s(bs, timed.rounds.samples("train"))
        out["train_peak_mb"] = built.train_peak_mb
    return out


def _run(model: nn.Module, option: BenchOption, device: torch.device, bs: int, case: _Case, section: str) -> BenchEntry:
    entry = BenchEntry(section, device.type, option.name, bs, "ok")
    reason = skip_reason(option, device)
    if reason:
        entry.status, entry.reason = "skipped", reason
        return entry
    try:
        for key, value in _measure(model, option, device, bs, case).items():
            setattr(entry, key, value)
    except Exception as exc:  # one failing option must not stop the others; the reason is reported
        _failed(entry, exc)
    finally:
        free_memory(device)
    return entry


def _failed(entry: BenchEntry, exc: BaseException) -> None:
    """Record why an option did not run: skipped (OptionUnsupported), oom or failed, with the first line."""
    if isinstance(exc, OptionUnsupported):
        entry.status, entry.reason = "skipped", str(exc)
        return
    entry.status = "oom" if is_oom(exc) else "failed"
    entry.reason = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]}"
    log.warning("bench %s on %s (batch %d) %s: %s", entry.option, entry.device, entry.batch_size, entry.status,
                entry.reason)  # fmt: skip


def _ratios(entry: BenchEntry, base: BenchEntry) -> dict[str, float]:
    out = {}
    for key, name in zip(FIGURES, ("infer_x", "train_x", "infer_mem_x", "train_mem_x")):
        a, b = getattr(entry, key), getattr(base, key)
        if a is not None and b:
            out[name] = a / b
    return out


def _batch_sweep(model: nn.Module, device: torch.device, sizes: list[int], case: _Case) -> list[BenchEntry]:
    """Baseline figures per batch size, smallest first; growth stops at the first out-of-memory."""
    entries = []
    for bs in sizes:
        entry = _run(model, OPTIONS.get("baseline"), device, bs, case, "batch_sizes")
        entries.append(entry)
        if entry.status == "oom":
            log.info("batch %d does not fit on %s; larger sizes not tried", bs, device)
            break
    return entries


def _compare(
    model: nn.Module, device: torch.device, options: list[BenchOption], bs: int, case: _Case
) -> list[BenchEntry]:
    """Every option at batch `bs`, timed together in interleaved rounds (baseline first in the list)."""
    entries = [BenchEntry("options", device.type, o.name, bs, "ok") for o in options]
    built: dict[str, _Built] = {}
    for option, entry in zip(options, entries):
        reason = skip_reason(option, device)
        if reason:
            entry.status, entry.reason = "skipped", reason
            continue
        try:
            built[option.name] = _build(model, option, device, bs, case)
        except Exception as exc:
            _failed(entry, exc)
            free_memory(device)
    variants: dict[str, Any] = {}
    for name, b in built.items():
        variants[f"{name}:infer"] = b.infer
        if b.train is not None:
            variants[f"{name}:train"] = b.train
    timed = _timed(variants, device, case) if variants else None
    for option, entry in zip(options, entries):
        b = built.get(option.name)
        if b is None or timed is None:
            continue
        errors = [e for k, e in timed.rounds.errors.items() if k.split(":")[0] == option.name]
        if errors:
            _failed(entry, errors[0])
            continue
        entry.infer_images_per_s = images_per_s(bs, timed.rounds.samples(f"{option.name}:infer"))
        entry.infer_peak_mb = b.infer_peak_mb
        if b.train is not None:
            entry.train_images_per_s = images_per_s(bs, timed.rounds.samples(f"{option.name}:train"))
            entry.train_peak_mb = b.train_peak_mb
        entry.noise = _noise_of(timed, option.name)
        entry.noisy, entry.threads = bool(entry.noise), timed.threads
    built.clear()
    free_memory(device)
    baseline = entries[0]
    if baseline.status == "ok" and timed is not None:
        for entry in entries:
            if entry.status == "ok":
                entry.ratios = _ratios(entry, baseline)
                entry.ratio_intervals = _ratio_intervals(timed, entry.option, baseline.option)
    return entries


def _ratio_intervals(timed: Measurement, name: str, base: str) -> dict[str, list[float]]:
    """Throughput ratios option / baseline per round (baseline time / option time), median and interval."""
    out = {}
    for kind, key in (("infer", "infer_x"), ("train", "train_x")):
        a, b = timed.rounds.round_medians(f"{base}:{kind}"), timed.rounds.round_medians(f"{name}:{kind}")
        if a and b:
            out[key] = ratio_interval(a, b).as_list()
    return out


def _device_ratios(report: BenchReport) -> list[BenchEntry]:
    out = []
    for cpu in report.section("batch_sizes"):
        gpu = report.get("batch_sizes", "cuda", "baseline", cpu.batch_size)
        if cpu.device != "cpu" or gpu is None or cpu.status != "ok" or gpu.status != "ok":
            continue
        ratios = _ratios(gpu, cpu)
        out.append(BenchEntry("devices", "cuda/cpu", "baseline", cpu.batch_size, "ok", ratios=ratios))
    return out


def _devices(devices: Sequence[str | torch.device]) -> list[tuple[torch.device, str | None]]:
    out = []
    for d in devices:
        try:
            dev = torch.device(d)
        except RuntimeError:
            raise ConfigError(f"bench: unknown device {d!r}; use cpu or cuda") from None
        if dev.type not in ("cpu", "cuda"):
            raise ConfigError(f"bench: device {d!r} is not supported; use cpu or cuda")
        unavailable = dev.type == "cuda" and not torch.cuda.is_available()
        out.append((dev, "no CUDA GPU is visible" if unavailable else None))
    return out


def run_benchmark(
    model: nn.Module,
    resolution: int,
    *,
    in_channels: int,
    num_classes: int,
    options: Sequence[str] = ("baseline",),
    batch_sizes: Sequence[int] = (1,),
    devices: Sequence[str | torch.device] = ("cpu",),
    precision: str = "fp32",
    iters: int = 20,
    warmup: int = 5,
    options_batch_size: int | None = None,
    model_name: str | None = None,
    rounds: int = 5,
    noise: NoisePolicy | None = None,
    cfg: Any = None,
) -> BenchReport:
    """Measure `model` per device: per batch size (baseline), then each option at `options_batch_size`
    (default: the largest batch size), with ratios to the baseline and cuda/cpu ratios per batch size.

    The training step follows the model's logits (profiler.step_task): classifier logits [B, C] get one label
    per image and cross-entropy, segmentation logits [B, K, H, W] a label per pixel and the segmentation loss of
    `cfg` (None: the default config's)."""
    if precision not in PRECISIONS:
        raise ConfigError(f"bench: precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    sizes = sorted(set(batch_sizes))
    if not sizes or sizes[0] < 1 or iters < 1 or warmup < 0 or resolution < 1 or rounds < 1:
        raise ConfigError("bench: need batch sizes >= 1, iters >= 1, rounds >= 1, warmup >= 0 and resolution >= 1")
    opts = [OPTIONS.get(n) for n in dict.fromkeys(["baseline", *options])]  # baseline first, no duplicates
    obs = options_batch_size or sizes[-1]
    case = _Case(resolution, in_channels, num_classes, precision, iters, warmup, rounds, noise or NoisePolicy(), cfg)
    report = BenchReport(
        model_name or type(model).__name__, resolution, in_channels, precision, iters, warmup, obs, torch.__version__
    )
    report.rounds = min(rounds, iters)
    weights = next(iter(model.parameters()), None)
    probe = torch.zeros(1, in_channels, resolution, resolution, device=weights.device if weights is not None else None)
    report.task = step_task(model, probe, cfg).task
    for dev, unavailable in _devices(devices):
        if unavailable:
            report.entries.append(BenchEntry("devices", dev.type, "baseline", 0, "skipped", unavailable))
        else:
            _bench_device(report, model, dev, sizes, opts, case)
    report.entries += _device_ratios(report)
    return report


def _bench_device(
    report: BenchReport, model: nn.Module, dev: torch.device, sizes: list[int], opts: list[BenchOption], case: _Case
) -> None:
    """One device's rows into `report`: an untimed warm-up (one-time allocations such as the autograd engine and
    thread pools would inflate the first row), the batch sweep, then the options at the options batch size."""
    report.device_names[dev.type] = f"{describe_device(dev)}, {resolve_precision(case.precision, dev)[0]}"
    _run(model, OPTIONS.get("baseline"), dev, sizes[0], dataclasses.replace(case, iters=1, warmup=0), "warm-up")
    report.entries += _batch_sweep(model, dev, sizes, case)
    obs = report.options_batch_size
    if len(opts) > 1:
        report.entries += _compare(model, dev, opts, obs, case)
        return
    # the baseline alone is the batch sweep's row at the options batch size
    base = report.get("batch_sizes", dev.type, "baseline", obs) or _run(model, opts[0], dev, obs, case, "batch_sizes")
    entry = dataclasses.replace(base, section="options", ratios={})
    if entry.status == "ok":
        entry.ratios = _ratios(entry, entry)
    report.entries.append(entry)


def save_benchmark(report: BenchReport, out_dir: str | os.PathLike) -> tuple[Path, Path]:
    """Write out_dir/benchmark.json and out_dir/benchmark.txt atomically; returns (json_path, table_path)."""
    folder = Path(out_dir)
    js, txt = folder / "benchmark.json", folder / "benchmark.txt"
    write_text(js, report.as_json())
    write_text(txt, report.table())
    return js, txt


def _grid(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
        for r in [header, *rows]
    ]


def _figures(e: BenchEntry) -> list[str]:
    if e.status != "ok":
        return ["-"] * 4
    return [
        num(e.infer_images_per_s, ".1f"),
        num(e.train_images_per_s, ".1f"),
        num(e.infer_peak_mb, ".1f"),
        num(e.train_peak_mb, ".1f"),
    ]


def _status(e: BenchEntry) -> str:
    return f"{e.status} (noisy)" if e.noisy else e.status


def _ratio(e: BenchEntry, key: str) -> str:
    if not e.ratios:
        return ""
    ci = e.ratio_intervals.get(key)
    if ci and e.option != "baseline":  # the per-round median with its interval (JSON `ratios`: pooled medians)
        return f"{ci[0]:.2f}x [{ci[1]:.2f}, {ci[2]:.2f}]"
    return num(e.ratios.get(key), ".2f", "x")


def bench_table(report: BenchReport) -> str:
    """Plain-text tables of a BenchReport: options, batch sizes, cuda/cpu ratios, then skipped/failed reasons."""
    r = report
    lines = [
        f"benchmark: {r.model_name} @ {r.resolution}px, {r.in_channels} ch, {r.precision}, "
        f"torch {r.torch_version}, {r.iters} timed iters after {r.warmup} warm-up"
    ]
    if r.task != CLASSIFICATION:  # the training step's labels and loss
        lines.append(f"  task: {r.task} ({step_words(r.task)})")
    lines += [f"  {dev}: {name}" for dev, name in r.device_names.items()]
    head = ["device", "option", "status", "infer img/s", "train img/s", "infer MB", "train MB"]
    opts = r.section("options")
    if opts:
        lines += [
            "",
            f"options (batch {r.options_batch_size}; ratios vs baseline, [95% interval over {r.rounds} interleaved "
            "rounds]; MB = peak rise above weights)",
        ]
        rows = [
            [e.device, e.option, _status(e), *_figures(e)]
            + [_ratio(e, k) for k in ("infer_x", "train_x", "train_mem_x")]
            for e in opts
        ]
        lines += _grid([*head, "infer x", "train x", "train mem x"], rows)
    sizes = r.section("batch_sizes")
    if sizes:
        lines += ["", "batch sizes (baseline)"]
        lines += _grid(
            ["device", "batch", "status", *head[3:]],
            [[e.device, str(e.batch_size), _status(e), *_figures(e)] for e in sizes],
        )
    ratios = [e for e in r.section("devices") if e.status == "ok"]
    if ratios:
        lines += ["", "cuda / cpu (above 1: the GPU pays off)"]
        cells = [[num(e.ratios.get(k), ".2f", "x") for k in ("infer_x", "train_x")] for e in ratios]
        rows = [[e.device, str(e.batch_size), "", *c] for e, c in zip(ratios, cells)]
        lines += _grid(["devices", "batch", "", "infer x", "train x"], rows)
    noisy = [e for e in r.entries if e.noisy]
    if noisy:
        lines += ["", "noisy (disturbed in every attempt; figures kept but not trustworthy)"]
        lines += [f"  {e.device} {e.option} (batch {e.batch_size}): {'; '.join(e.noise)}" for e in noisy]
    notes = [e for e in r.entries if e.reason]
    if notes:
        lines += ["", "not measured"]
        lines += [
            f"  {e.device} {e.option}{f' (batch {e.batch_size})' if e.batch_size else ''}: {e.status}: {e.reason}"
            for e in notes
        ]
    return "\n".join(lines) + "\n"

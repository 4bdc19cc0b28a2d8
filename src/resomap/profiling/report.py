"""Text report of a ModelProfile and its files (profile.txt + profile.json, written atomically)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from resomap.atomic import write_text
from resomap.profiling.profiler import ModelProfile


def num(value: float | None, fmt: str = ".2f", unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:{fmt}}{unit}"


def _interval(lat: Any) -> str:
    if lat.median_low_ms is None or lat.median_high_ms is None:
        return ""
    return f" [{lat.median_low_ms:.3f}, {lat.median_high_ms:.3f}]"


def _timing(p: ModelProfile) -> str:
    """How the figures were taken, and NOISY with the reasons when no attempt was clean."""
    threads = f", {p.threads} torch thread(s)" if p.threads else ""
    others = f", other processes {p.others_cpu_cores:.1f} cores" if p.others_cpu_cores is not None else ""
    text = f"{p.rounds} interleaved round(s), {p.attempts} attempt(s){threads}{others}"
    if p.noisy:
        text += f"; NOISY (disturbed in every attempt): {'; '.join(p.noise_reasons)}"
    return text


def _step(p: ModelProfile) -> str:
    """What the timed training step ran (the loss follows the task the profiler read from the logits)."""
    from resomap.tasks import step_words

    loss = step_words(p.task)
    return f"fwd + {loss} + bwd + AdamW"


def print_profiling_report(profile: ModelProfile) -> str:
    """The profile as aligned text lines (returned; the CLI prints it)."""
    p, lat, mem = profile, profile.latency, profile.memory
    rows = [
        ("model", f"{p.model_name} @ {p.resolution}x{p.resolution}, {p.in_channels} channel(s)"),
        (
            "device",
            f"{p.device_name}, {p.precision}{', channels_last' if p.channels_last else ''}, torch {p.torch_version}",
        ),
        ("parameters", f"{p.params_total:,} total ({p.params_m:.2f} M), {p.params_trainable:,} trainable"),
        ("MACs / image", f"{num(p.gmacs, '.3f')} G (fvcore, 1 per multiply-add)"),
        ("FLOPs / image", f"{num(p.gflops, '.3f')} G (torch FlopCounterMode, 2 per multiply-add)"),
        ("FLOPs / (2 MACs)", num(p.flops_to_2macs, ".3f")),
        (
            f"latency (batch {p.batch_size})",
            f"median {lat.median_ms:.3f} ms{_interval(lat)}, IQR {lat.iqr_ms:.3f}, p90 {lat.p90_ms:.3f}, "
            f"p99 {lat.p99_ms:.3f}, mean {lat.mean_ms:.3f} +- {lat.std_ms:.3f} ms over {lat.iters} calls",
        ),
        ("timing", _timing(p)),
        ("inference", f"{num(p.inference_images_per_s, '.1f')} images/s"),
        (f"training (batch {p.train_batch_size})", f"{num(p.train_images_per_s, '.1f')} images/s ({_step(p)})"),
        ("weights memory", f"{mem.weights_mb:.1f} MB"),
        (f"forward peak ({mem.method})", f"{mem.peak_mb:.1f} MB, activations {mem.activation_mb:.1f} MB"),
    ]
    if mem.allocated_mb is not None:
        rows.append(("CUDA allocated/reserved", f"{mem.allocated_mb:.1f} / {num(mem.reserved_mb, '.1f')} MB"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows) + "\n"


def save_profile(profile: ModelProfile, folder: str | os.PathLike) -> tuple[Path, Path]:
    """Write folder/profile.txt and folder/profile.json atomically; returns (txt_path, json_path)."""
    folder = Path(folder)
    txt, js = folder / "profile.txt", folder / "profile.json"
    write_text(txt, print_profiling_report(profile))
    write_text(js, json.dumps(profile.as_dict(), indent=2, sort_keys=True) + "\n")
    return txt, js


def load_profile(path: str | os.PathLike) -> ModelProfile:
    """Read a profile.json written by save_profile."""
    return ModelProfile.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))

"""Text report of a ModelProfile and atomic files (profile.txt + profile.json)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

from resomap.atomic import write_text
from resomap.profiling.profiler import ModelProfile

if TYPE_CHECKING:
    from resomap.profiling.bench import BenchEntry, BenchReport


def atomic_write_text(path: Path, text: str) -> None:
    write_text(path, text)


def _num(value: float | None, fmt: str = ".2f", unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:{fmt}}{unit}"


def print_profiling_report(profile: ModelProfile) -> str:
    """The profile as aligned text lines (returned; the CLI prints it)."""
    p, lat, mem = profile, profile.latency, profile.memory
    rows = [
        ("model", f"{p.model_name} @ {p.resolution}x{p.resolution}, {p.in_channels} channel(s)"),
        ("device", f"{p.device_name}, {p.precision}, torch {p.torch_version}"),
        ("parameters", f"{p.params_total:,} total ({p.params_m:.2f} M), {p.params_trainable:,} trainable"),
        ("MACs / image", f"{_num(p.gmacs, '.3f')} G (fvcore, 1 per multiply-add)"),
        ("FLOPs / image", f"{_num(p.gflops, '.3f')} G (torch FlopCounterMode, 2 per multiply-add)"),
        ("FLOPs / (2 MACs)", _num(p.flops_to_2macs, ".3f")),
        (
            f"latency (batch {p.batch_size})",
            f"median {lat.median_ms:.3f} ms, p90 {lat.p90_ms:.3f}, p99 {lat.p99_ms:.3f}, "
            f"mean {lat.mean_ms:.3f} +- {lat.std_ms:.3f} ms over {lat.iters} calls",
        ),
        ("inference", f"{_num(p.inference_images_per_s, '.1f')} images/s"),
        (f"training (batch {p.train_batch_size})", f"{_num(p.train_images_per_s, '.1f')} images/s (fwd+bwd+AdamW)"),
        ("weights memory", f"{mem.weights_mb:.1f} MB"),
        (f"forward peak ({mem.method})", f"{mem.peak_mb:.1f} MB, activations {mem.activation_mb:.1f} MB"),
    ]
    if mem.allocated_mb is not None:
        rows.append(("CUDA allocated/reserved", f"{mem.allocated_mb:.1f} / {_num(mem.reserved_mb, '.1f')} MB"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows) + "\n"


def save_profile(profile: ModelProfile, folder: str | os.PathLike) -> tuple[Path, Path]:
    """Write folder/profile.txt and folder/profile.json atomically; returns (txt_path, json_path)."""
    folder = Path(folder)
    txt, js = folder / "profile.txt", folder / "profile.json"
    atomic_write_text(txt, print_profiling_report(profile))
    atomic_write_text(js, json.dumps(profile.as_dict(), indent=2, sort_keys=True) + "\n")
    return txt, js


def load_profile(path: str | os.PathLike) -> ModelProfile:
    """Read a profile.json written by save_profile."""
    return ModelProfile.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


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
        _num(e.infer_images_per_s, ".1f"),
        _num(e.train_images_per_s, ".1f"),
        _num(e.infer_peak_mb, ".1f"),
        _num(e.train_peak_mb, ".1f"),
    ]


def bench_table(report: BenchReport) -> str:
    """Plain-text tables of a BenchReport: options, batch sizes, cuda/cpu ratios, then skipped/failed reasons."""
    r = report
    lines = [
        f"benchmark: {r.model_name} @ {r.resolution}px, {r.in_channels} ch, {r.precision}, "
        f"torch {r.torch_version}, {r.iters} timed iters after {r.warmup} warm-up"
    ]
    lines += [f"  {dev}: {name}" for dev, name in r.device_names.items()]
    head = ["device", "option", "status", "infer img/s", "train img/s", "infer MB", "train MB"]
    opts = r.section("options")
    if opts:
        lines += ["", f"options (batch {r.options_batch_size}; ratios vs baseline; MB = peak rise above weights)"]
        rows = [
            [e.device, e.option, e.status, *_figures(e)]
            + [_num(e.ratios.get(k), ".2f", "x") if e.ratios else "" for k in ("infer_x", "train_x", "train_mem_x")]
            for e in opts
        ]
        lines += _grid([*head, "infer x", "train x", "train mem x"], rows)
    sizes = r.section("batch_sizes")
    if sizes:
        lines += ["", "batch sizes (baseline)"]
        lines += _grid(
            ["device", "batch", "status", *head[3:]],
            [[e.device, str(e.batch_size), e.status, *_figures(e)] for e in sizes],
        )
    ratios = [e for e in r.section("devices") if e.status == "ok"]
    if ratios:
        lines += ["", "cuda / cpu (above 1: the GPU pays off)"]
        lines += _grid(
            ["devices", "batch", "", "infer x", "train x"],
            [
                [
                    e.device,
                    str(e.batch_size),
                    "",
                    _num(e.ratios.get("infer_x"), ".2f", "x"),
                    _num(e.ratios.get("train_x"), ".2f", "x"),
                ]
                for e in ratios
            ],
        )
    notes = [e for e in r.entries if e.reason]
    if notes:
        lines += ["", "not measured"]
        lines += [
            f"  {e.device} {e.option}{f' (batch {e.batch_size})' if e.batch_size else ''}: {e.status}: {e.reason}"
            for e in notes
        ]
    return "\n".join(lines) + "\n"

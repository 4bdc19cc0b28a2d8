"""Training efficiency against this machine's measured peak: the GFLOP/s a large matrix multiply reaches in fp32
and in bf16 (the achievable peak, measured here, not a datasheet figure), then each model's training GFLOP/s at
each resolution (images/s of a training step x fvcore MACs per image x 2 FLOPs per MAC x 3 for forward and
backward) as a fraction of the peak of its precision, under `today`'s settings (fp32, NCHW: the defaults before
`auto`) and under `auto` (the defaults now), all timed in interleaved rounds, e.g.

    python scripts/benchmark_efficiency.py                       # quickstart models at 32/64/128 px + resnet18
    python scripts/benchmark_efficiency.py --models simple_cnn --resolutions 128 --profile

Target (issue 20): simple_cnn at 128 px reaches at least half of resnet18's fraction at 128 px, under the settings a
trial uses now (auto). --profile also prints torch.profiler's top operators of simple_cnn's training step under
both settings (where the time goes). Exit status 0 (a missed target is printed as MISS); --json PATH writes the
figures.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from pathlib import Path

import torch

import resomap.sweep.builtins  # noqa: F401  (the registries' config groups, before a config is loaded)
from _steps import AUTO, TODAY, steps, verdict
from resomap.config import load
from resomap.models import build_model
from resomap.profiling.flops import count_macs
from resomap.profiling.timing import time_rounds
from resomap.runtime import auto_threads


def peak_gflops(dtype: torch.dtype, n: int, rounds: int) -> float:
    """Best GFLOP/s over `rounds` blocks of n x n @ n x n matrix multiplies (2 n^3 FLOPs each)."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    a @ b  # warm-up
    best = 0.0
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(3):
            a @ b
        best = max(best, 3 * 2 * n**3 / (time.perf_counter() - t) / 1e9)
    return best


def macs(model_name: str, resolution: int, channels: int) -> float:
    model, _ = build_model(model_name, 2, channels, load(None).models)
    return count_macs(model.eval(), torch.zeros(1, channels, resolution, resolution))


def rows(args: argparse.Namespace, device: torch.device, peaks: dict[str, float]) -> list[dict]:
    out = []
    pairs = [(m, r) for m in args.models for r in args.resolutions] + [(args.reference, args.reference_resolution)]
    for model, res in dict.fromkeys(pairs):
        per_image = macs(model, res, args.channels)
        calls = {s.name: steps(model, res, args.batch_size, args.channels, s, device)[0] for s in (TODAY, AUTO)}
        done = time_rounds(calls, device, iters=args.iters, warmup=2, rounds=args.rounds)
        row = {"model": model, "resolution": res, "gmacs_per_image": per_image / 1e9}
        for s in (TODAY, AUTO):
            seconds = statistics.median(done.samples(s.name))
            gflops = args.batch_size / seconds * per_image * 2 * 3 / 1e9
            precision, _ = s.resolved(device)
            row[s.name] = {"images_per_s": args.batch_size / seconds, "gflops": gflops}
            row[s.name]["fraction"] = gflops / peaks["bf16" if precision == "bf16" else "fp32"]
        out.append(row)
        t, a = row["today"], row["auto"]
        print(
            f"{model}@{res}: {per_image / 1e6:.1f} MMACs/image; today {t['images_per_s']:.0f} images/s, "
            f"{t['gflops']:.1f} GFLOP/s = {t['fraction']:.1%} of peak; auto {a['images_per_s']:.0f} images/s, "
            f"{a['gflops']:.1f} GFLOP/s = {a['fraction']:.1%} of peak",
            flush=True,
        )
    return out


def where_time_goes(args: argparse.Namespace, device: torch.device) -> None:
    """torch.profiler's top operators (self CPU time) of simple_cnn's training step at the largest resolution."""
    from torch.profiler import ProfilerActivity, profile

    res = max(args.resolutions)
    for s in (TODAY, AUTO):
        train = steps("simple_cnn", res, args.batch_size, args.channels, s, device)[0]
        train()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(3):
                train()
        print(f"\nsimple_cnn@{res}, {s.describe(device)}, 3 training steps of {args.batch_size}:")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=40))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["tiny_cnn", "simple_cnn"])
    p.add_argument("--resolutions", nargs="+", type=int, default=[32, 64, 128])
    p.add_argument("--reference", default="resnet18", help="the model whose efficiency the small ones are held to")
    p.add_argument("--reference-resolution", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=64, help="quickstart: 64")
    p.add_argument("--channels", type=int, default=1, help="input channels (ELPV: 1)")
    p.add_argument("--iters", type=int, default=10, help="timed steps per setting, split over the rounds")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--matmul", type=int, default=2048, help="side of the peak's matrices")
    p.add_argument("--threads", type=int, default=0, help="torch threads; 0: the cores other processes leave free")
    p.add_argument("--profile", action="store_true", help="print where simple_cnn's training step spends its time")
    p.add_argument("--json", help="also write the figures here")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    device = torch.device("cpu")
    torch.set_num_threads(args.threads or auto_threads())
    peaks = {"fp32": peak_gflops(torch.float32, args.matmul, args.rounds)}
    peaks["bf16"] = peak_gflops(torch.bfloat16, args.matmul, args.rounds)
    threads = torch.get_num_threads()
    print(f"measured peak ({threads} thread(s), {args.matmul}^2 matmul): fp32 {peaks['fp32']:.1f} GFLOP/s, bf16 "
          f"{peaks['bf16']:.1f} GFLOP/s; {TODAY.describe(device)}; {AUTO.describe(device)}", flush=True)  # fmt: skip
    found = rows(args, device, peaks)
    if args.profile:
        where_time_goes(args, device)
    print(_targets(found, args))
    if args.json:
        Path(args.json).write_text(json.dumps({"peaks": peaks, "rows": found}, indent=2) + "\n")


def _targets(found: list[dict], args: argparse.Namespace) -> str:
    by = {(r["model"], r["resolution"]): r for r in found}
    ref = by[(args.reference, args.reference_resolution)]
    lines = ["", "targets:"]
    for (model, res), row in by.items():
        if model != "simple_cnn" or res != 128:
            continue
        for name in ("today", "auto"):
            share = row[name]["fraction"] / ref[name]["fraction"]
            lines.append(
                f"efficiency {name} simple_cnn@128 / {args.reference}@{args.reference_resolution}: "
                f"{row[name]['fraction']:.1%} / {ref[name]['fraction']:.1%} of peak = {share:.2f} (target >= 0.5) "
                f"{verdict(share >= 0.5)}"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    main()

"""Profiles under load: batch-1 latency of small models on a quiet CPU and while a CPU-bound competitor runs
(a `while True` loop in another process, ended after the measurement), first with torch's threads fixed (1, then
the default) and no re-measurement, to show how intra-op threads collapse under load, then as `resomap profile`
takes it (system.threads auto, interleaved rounds, re-measured while disturbed). Prints, per model, the target
line: the busy profile within 2x of the quiet one, or marked noisy. E.g.

    python scripts/benchmark_threads.py                    # simple_cnn@32 and resnet18@64
    python scripts/benchmark_threads.py --models resnet50:224 --burners 2

OMP_WAIT_POLICY=PASSIVE python scripts/benchmark_threads.py shows the effect of OpenMP's passive wait policy
(it must be set before torch is imported). --json PATH also writes the figures. Exit status 0.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import torch

from resomap.config.schema import Config
from resomap.models import build_model
from resomap.profiling import profile
from resomap.profiling.timing import NoisePolicy, inference_step, measure, torch_threads
from resomap.runtime import measurement_threads

BURN = "import time\nt = time.time() + {s}\nwhile time.time() < t: pass"


@contextlib.contextmanager
def burners(n: int, seconds: float = 120.0) -> Iterator[None]:
    """`n` CPU-bound processes, each ending itself after `seconds` and killed on exit."""
    procs = [subprocess.Popen([sys.executable, "-c", BURN.format(s=seconds)]) for _ in range(n)]
    try:
        time.sleep(0.3)
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def fixed_latency(model: torch.nn.Module, x: torch.Tensor, threads: int, iters: int) -> float:
    """Median ms of batch-1 inference with `threads` fixed and no re-measurement."""
    with torch_threads(threads):
        done = measure(
            {"infer": inference_step(model, x, None)},
            torch.device("cpu"),
            iters=iters,
            warmup=5,
            rounds=5,
            policy=NoisePolicy(retries=0, adapt_threads=False),
        )
    return done.rounds.stats("infer").median_ms


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["simple_cnn:32", "resnet18:64"], help="name:resolution")
    p.add_argument("--burners", type=int, default=1, help="competing CPU-bound processes")
    p.add_argument("--iters", type=int, default=40)
    p.add_argument("--json", help="also write the figures here")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    cfg = Config()
    default_threads = torch.get_num_threads()
    wait = os.environ.get("OMP_WAIT_POLICY", "default")
    print(f"{os.cpu_count()} cores, torch default {default_threads} threads, OMP_WAIT_POLICY={wait}")
    results, lines = {}, []
    for spec in args.models:
        name, res = spec.split(":")
        model, _ = build_model(name, 10, 3, cfg.models)
        model.eval()
        x = torch.randn(1, 3, int(res), int(res))
        row: dict[str, float | bool | str] = {}
        counts = sorted({1, default_threads})
        for t in counts:
            row[f"quiet_{t}t_ms"] = fixed_latency(model, x, t, args.iters)
        with burners(args.burners):
            for t in counts:
                row[f"busy_{t}t_ms"] = fixed_latency(model, x, t, args.iters)
        print(f"{spec}: fixed threads, no re-measurement: " + ", ".join(f"{k} {v:.2f}" for k, v in row.items()))
        kwargs = dict(in_channels=3, device="cpu", batch_size=1, warmup=5, iters=args.iters, train_iters=4)
        measurement_threads(cfg.system)
        quiet = profile(model, int(res), model_name=name, **kwargs)
        with burners(args.burners):
            measurement_threads(cfg.system)  # auto threads, as `resomap profile` does
            busy = profile(model, int(res), model_name=name, **kwargs)
        torch.set_num_threads(default_threads)
        ratio = busy.latency.median_ms / quiet.latency.median_ms
        row.update(
            quiet_ms=quiet.latency.median_ms, busy_ms=busy.latency.median_ms, busy_threads=busy.threads,
            busy_noisy=busy.noisy, busy_reasons="; ".join(busy.noise_reasons), ratio=ratio,
        )  # fmt: skip
        results[spec] = row
        ok = ratio <= 2.0 or busy.noisy
        verdict = "PASS" if ok else "MISS"
        state = f"noisy: {'; '.join(busy.noise_reasons)}" if busy.noisy else "not noisy"
        low, high = (
            busy.latency.median_low_ms / quiet.latency.median_ms,
            busy.latency.median_high_ms / quiet.latency.median_ms,
        )
        lines.append(
            f"profile busy/quiet {spec}: {ratio:.2f} [{low:.2f}, {high:.2f}] (target <= 2 or noisy; {busy.threads} "
            f"thread(s), {state}) {verdict}"
        )
        print(f"{spec}: profile quiet {quiet.latency.median_ms:.2f} ms ({quiet.threads} thread(s)), busy "
              f"{busy.latency.median_ms:.2f} ms ({busy.threads} thread(s), {busy.attempts} attempt(s))")  # fmt: skip
    print("\n".join(["", "targets:", *lines]))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()

"""Threads under load, in two parts.

Profiles (the default): batch-1 latency of small models on a quiet CPU and while a CPU-bound competitor runs
(a `while True` loop in another process, ended after the measurement), first with torch's threads fixed (1, then
the default) and no re-measurement, to show how intra-op threads collapse under load, then as `resomap profile`
takes it (system.threads auto, interleaved rounds, re-measured while disturbed). Prints, per model, the target
line: the busy profile within 2x of the quiet one, or marked noisy. E.g.

    python scripts/benchmark_threads.py                    # simple_cnn@32 and resnet18@64
    python scripts/benchmark_threads.py --models resnet50:224 --burners 2

Training (--train): images/s of one Trainer.fit epoch on the synthetic data set (the project's data build) with
system.threads fixed at 1, fixed at every usable core, and auto (0: the fit measures which count is faster,
resomap.training.threads, then trains at it; its images/s are the epoch's, the measuring seconds are shown
apart), in interleaved rounds (order rotated per round) from the same initial weights, idle and beside
--burners busy processes. Prints a table (condition, fixed 1, fixed all, auto with the counts chosen, auto / the
best fixed count as the median of the per-round ratios with its 95% interval) and the target: auto >= 0.9 x the
best fixed count in both conditions. E.g.

    python scripts/benchmark_threads.py --train            # resnet18@128 and simple_cnn@64, 3 rounds
    python scripts/benchmark_threads.py --train --models simple_cnn:64 --rounds 2 --images 160

OMP_WAIT_POLICY=PASSIVE python scripts/benchmark_threads.py shows the effect of OpenMP's passive wait policy
(it must be set before torch is imported). --json PATH also writes the figures. Exit status 0.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import logging
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from resomap.config.schema import Config
from resomap.models import build_model
from resomap.profiling import profile
from resomap.profiling.timing import NoisePolicy, inference_step, measure, torch_threads
from resomap.runtime import default_threads, measurement_threads, usable_cpus
from resomap.stats import ratio_interval

REPO = Path(__file__).resolve().parents[1]

# a `while True: pass` that also ends after `s` seconds or when this script is gone (killed without cleanup)
BURN = (
    "import os, time\nparent, t = os.getppid(), time.time() + {s}\n"
    "while os.getppid() == parent and time.time() < t:\n    for _ in range(100_000): pass"
)
TRAIN_MODELS = ["resnet18:128", "simple_cnn:64"]
PROFILE_MODELS = ["simple_cnn:32", "resnet18:64"]
TARGET = 0.9  # auto / the best fixed count


@contextlib.contextmanager
def burners(n: int, seconds: float = 120.0) -> Iterator[None]:
    """`n` CPU-bound processes, killed on exit (Ctrl-C included); each also ends itself after `seconds`."""
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
    p.add_argument("--train", action="store_true", help="training images/s: fixed 1, fixed all cores, auto")
    p.add_argument("--models", nargs="+", help=f"name:resolution (profiles: {PROFILE_MODELS}; --train: {TRAIN_MODELS})")
    p.add_argument("--burners", type=int, default=1, help="competing CPU-bound processes")
    p.add_argument("--iters", type=int, default=40, help="profiles: timed calls")
    p.add_argument("--rounds", type=int, default=3, help="--train: interleaved rounds")
    p.add_argument("--images", type=int, default=192, help="--train: synthetic images (70%% of them train)")
    p.add_argument("--json", help="also write the figures here")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    if args.train:
        train_benchmark(args)
    else:
        profile_benchmark(args)


def profile_benchmark(args: argparse.Namespace) -> None:
    """Profiles under load (fixed threads, then as `resomap profile` takes them) and their target lines."""
    args.models = args.models or PROFILE_MODELS
    cfg = Config()
    torch_default = torch.get_num_threads()
    wait = os.environ.get("OMP_WAIT_POLICY", "default")
    print(f"{os.cpu_count()} cores, torch default {torch_default} threads, OMP_WAIT_POLICY={wait}")
    results, lines = {}, []
    for spec in args.models:
        name, res = spec.split(":")
        model, _ = build_model(name, 10, 3, cfg.models)
        model.eval()
        x = torch.randn(1, 3, int(res), int(res))
        row: dict[str, float | bool | str] = {}
        counts = sorted({1, torch_default})
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
        torch.set_num_threads(torch_default)
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


# ---------------------------------------------------------------------------------------------- training


def train_configs(args: argparse.Namespace, out: str, size: int) -> dict[str, Any]:
    """The three settings compared: system.threads 1, every usable core, and 0 (auto: measured per fit)."""
    from resomap.config import load

    base = [
        f"experiment.output_dir={out}",
        "system.device=cpu",  # CPU threads, also on a machine with a GPU
        "mlflow.enabled=false",
        "training.epochs=1",
        "training.progress='off'",
        f"data.synthetic.num_images={args.images}",
        f"data.synthetic.size={size}",
    ]
    cores = len(usable_cpus())
    counts = {"fixed 1": 1, f"fixed {cores}": cores, "auto": 0}
    return {name: load(REPO / "configs", "smoke", [*base, f"system.threads={n}"]) for name, n in counts.items()}


def epoch_rate(cfg: Any, data: Any, initial: torch.nn.Module) -> tuple[float, dict[str, Any]]:
    """(images/s of one training epoch of Trainer.fit on a copy of `initial`, the fit's thread record). Each fit
    gets an empty machine record (resomap.training.threads.cache_dir), so `auto` measures under this round's load
    as a first fit of the step on a machine does; a user's record is neither read nor written."""
    import tempfile

    from resomap.training import Trainer
    from resomap.training.threads import CACHE_ENV

    before = os.environ.get(CACHE_ENV)
    with tempfile.TemporaryDirectory(prefix="resomap-bench-cache-") as folder:
        os.environ[CACHE_ENV] = folder
        try:
            trainer = Trainer(cfg, torch.device("cpu"))
            history = trainer.fit(copy.deepcopy(initial), data).history
        finally:
            if before is None:
                os.environ.pop(CACHE_ENV, None)
            else:
                os.environ[CACHE_ENV] = before
    return history[-1]["train/images_per_s"], trainer.meta.get("threads", {})


def train_rounds(cfgs: dict[str, Any], data: Any, initial: torch.nn.Module, rounds: int) -> dict[str, Any]:
    """Each setting once per round, the order rotated per round; medians, the auto counts and measuring time."""
    names, runs = list(cfgs), {name: [] for name in cfgs}
    chosen, measuring = [], []
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            rate, record = epoch_rate(cfgs[name], data, initial)
            runs[name].append(rate)
            if name == "auto":
                chosen.append(int(record.get("chosen", 0)))
                measuring.append(float(record.get("seconds", 0.0)))
    med = {name: statistics.median(v) for name, v in runs.items()}
    best = max((name for name in names if name != "auto"), key=med.__getitem__)  # the best fixed count
    ratio = ratio_interval(runs["auto"], runs[best])  # per round: load that drifts between rounds cancels
    return {"runs": runs, "median": med, "auto_chosen": chosen, "measuring_s": measuring, "best_fixed": best,
            "ratio": ratio.value, "ratio_interval": ratio.as_list()}  # fmt: skip


def train_benchmark(args: argparse.Namespace) -> None:
    """Training images/s per model x condition (idle, beside `--burners` busy processes): table and targets."""
    from resomap.data import build as build_data
    from resomap.sweep.builtins import register_builtins

    register_builtins()
    specs = [(name, int(res)) for name, res in (m.split(":") for m in args.models or TRAIN_MODELS)]
    print(f"{_machine()}; torch default {default_threads()} threads; {args.rounds} round(s), {args.images} images")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as out:
        cfgs = train_configs(args, out, max(res for _, res in specs))
        for name, res in specs:
            data = build_data(cfgs["auto"], res, 42, torch.device("cpu"))
            torch.manual_seed(0)
            initial, _ = build_model(name, data.num_classes, data.channels, cfgs["auto"].models)
            for cfg in cfgs.values():  # untimed: first-call kernels at each count
                epoch_rate(cfg, data, initial)
            for condition in ("idle", "busy"):
                guard = burners(args.burners, seconds=3600) if condition == "busy" else contextlib.nullcontext()
                load_before = os.getloadavg()[0]
                with guard:
                    row = train_rounds(cfgs, data, initial, args.rounds)
                row.update(model=f"{name}@{res}", condition=condition, load_before=load_before)
                rows.append(row)
                print(_train_line(row), flush=True)
    _train_table(rows, list(cfgs))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


def _machine() -> str:
    name = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    return f"{name}, {len(usable_cpus())} usable cores"


def _train_line(row: dict[str, Any]) -> str:
    runs = "; ".join(f"{k} " + ", ".join(f"{v:.1f}" for v in vals) for k, vals in row["runs"].items())
    return f"{row['condition']} {row['model']} (load {row['load_before']:.1f} before): images/s per round {runs}"


def _train_table(rows: list[dict[str, Any]], names: list[str]) -> None:
    head = ["condition", "model@px", *names[:-1], "auto (counts chosen)", "auto / best fixed, per round", "measuring s"]
    lines = [head]
    for row in rows:
        med = row["median"]
        chosen = ",".join(map(str, row["auto_chosen"]))
        lines.append(
            [row["condition"], row["model"], *(f"{med[n]:.1f}" for n in names[:-1]), f"{med['auto']:.1f} ({chosen})",
             _ratio_text(row), f"{statistics.median(row['measuring_s']):.1f}"]
        )  # fmt: skip
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    print("\nimages/s, median of the rounds; auto / best fixed: median of the per-round ratios [95% interval]:")
    for line in lines:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)))
    print("\ntargets:")
    for row in rows:
        verdict = "PASS" if row["ratio"] >= TARGET else "MISS"
        print(f"auto / best fixed {row['condition']} {row['model']}: {_ratio_text(row)} (target >= {TARGET}) {verdict}")


def _ratio_text(row: dict[str, Any]) -> str:
    low, high = row["ratio_interval"][1:]
    return f"{row['ratio']:.2f} [{low:.2f}, {high:.2f}] vs {row['best_fixed']}"


if __name__ == "__main__":
    main()

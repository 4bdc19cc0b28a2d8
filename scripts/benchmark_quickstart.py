"""The quickstart's training throughput, today's settings against the defaults now: for each model x resolution of
configs/presets/quickstart.yaml, one training epoch of Trainer.fit on the real data path (ELPV, 1,200 cells, the
uint8 cache with batched augmentation, batch 64) under `today` (system.precision=fp32, channels_last=false: the
defaults before issue 20) and under the defaults (`auto`: bf16 autocast + channels_last on a CPU with native
bf16), in interleaved rounds (today first in even rounds, the defaults first in odd ones), from the same initial
weights. Prints images/s of each and the ratio (defaults / today, median of the per-round ratios) with its 95%
interval, e.g.

    python scripts/benchmark_quickstart.py                          # all six, 3 rounds (long on a 2-core CPU)
    python scripts/benchmark_quickstart.py --models simple_cnn --resolutions 128 --rounds 5

Target (issue 20): >= 2x images/s per trial. Exit status 0 (a missed target is printed as MISS); --json PATH
writes the figures.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import statistics
import tempfile
from pathlib import Path

import torch

import resomap.sweep.builtins  # noqa: F401  (the registries' config groups, before a config is loaded)
from resomap.config import load
from resomap.data import build as build_data
from resomap.models import build_model
from resomap.stats import ratio_interval
from resomap.sweep.identity import pin_precision
from resomap.training import Trainer

REPO = Path(__file__).resolve().parents[1]
TARGET = 2.0
SETTINGS = {"today": ["system.precision=fp32", "system.channels_last=false"], "defaults": []}


def configs(args: argparse.Namespace, tmp: str) -> dict:
    base = ["training.epochs=1", "training.progress='off'", "mlflow.enabled=false", f"experiment.output_dir={tmp}"]
    if args.threads:
        base.append(f"system.threads={args.threads}")
    return {name: pin_precision(load(REPO / "configs", "quickstart", base + extra)) for name, extra in SETTINGS.items()}


def epoch_speed(cfg, data, initial: torch.nn.Module) -> float:
    """images/s of one training epoch of Trainer.fit on a copy of `initial`."""
    history = Trainer(cfg, torch.device("cpu")).fit(copy.deepcopy(initial), data).history
    return history[-1]["train/images_per_s"]


def measure(model: str, res: int, cfgs: dict, rounds: int) -> dict:
    data = build_data(cfgs["today"], res, 42, torch.device("cpu"))
    torch.manual_seed(0)
    initial, _ = build_model(model, data.num_classes, data.channels, cfgs["today"].models)
    runs: dict[str, list[float]] = {name: [] for name in cfgs}
    for r in range(rounds):
        for name in list(cfgs) if r % 2 == 0 else list(cfgs)[::-1]:
            runs[name].append(epoch_speed(cfgs[name], data, initial))
    ratio = ratio_interval(runs["defaults"], runs["today"])
    row = {"model": model, "resolution": res, "runs": runs, "ratio": ratio.as_list()}
    row["today"], row["defaults"] = statistics.median(runs["today"]), statistics.median(runs["defaults"])
    print(
        f"{model}@{res}: today {row['today']:.1f} images/s {_runs(runs['today'])}, defaults {row['defaults']:.1f} "
        f"images/s {_runs(runs['defaults'])}, ratio {ratio.text()}",
        flush=True,
    )
    return row


def _runs(values: list[float]) -> str:
    return "(" + ", ".join(f"{v:.1f}" for v in values) + ")"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["tiny_cnn", "simple_cnn"])
    p.add_argument("--resolutions", nargs="+", type=int, default=[32, 64, 128])
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (5+ for a tighter interval)")
    p.add_argument("--threads", type=int, default=0, help="system.threads for both (0: torch's default, as a trial)")
    p.add_argument("--json", help="also write the figures here")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    with tempfile.TemporaryDirectory() as tmp:
        cfgs = configs(args, tmp)
        sysc = cfgs["defaults"].system
        print(f"today: fp32, NCHW; defaults: {sysc.precision}{', channels_last' if sysc.channels_last else ''}; "
              f"{sysc.threads or torch.get_num_threads()} torch thread(s)", flush=True)  # fmt: skip
        found = [measure(m, r, cfgs, args.rounds) for m in args.models for r in args.resolutions]
    lines = ["", "targets:"]
    for row in found:
        value, low, high = row["ratio"]
        verdict = "PASS" if value >= TARGET else ("MISS (interval reaches it)" if high >= TARGET else "MISS")
        lines.append(
            f"quickstart throughput {row['model']}@{row['resolution']} defaults/today: {value:.2f} [{low:.2f}, "
            f"{high:.2f}] (target >= {TARGET}) {verdict}"
        )
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps(found, indent=2) + "\n")


if __name__ == "__main__":
    main()

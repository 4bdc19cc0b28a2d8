"""A preset against the default on a short sweep through the real data path: for each model x resolution, the
Trainer fits the same synthetic images (uint8 resolution cache, batched augmentation, the preset's loader
settings) under the default config and under the preset, alternating which runs first, and the training
images/s of the epochs after the first (compile and autotuning happen in the first) are compared. Prints one
ratio per model x resolution with the interval over `--rounds` rounds, e.g.

    python scripts/benchmark_presets.py --preset gpu_optimized --device cuda        # what scripts/gpu_check.sh runs
    python scripts/benchmark_presets.py --preset gpu_optimized --device cpu --models tiny_cnn --resolutions 32

--json PATH also writes the figures. Exit status 1 when a fit fails, else 0.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
from pathlib import Path

import torch

import resomap.sweep.builtins  # noqa: F401  (the registries' config groups, before a config is loaded)
from resomap.config import load
from resomap.data import build as build_data
from resomap.models import build_model
from resomap.stats import MedianInterval
from resomap.training.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]


def fit_speed(preset: str | None, model: str, resolution: int, args: argparse.Namespace, out: str) -> float:
    """Training images/s (mean of the epochs after the first) of one short fit under `preset` (None: default)."""
    overrides = [
        f"experiment.output_dir={out}",
        f"system.device={args.device}",
        "data.dataset=synthetic",
        f"data.synthetic.num_images={args.images}",
        f"data.synthetic.size={max(resolution, 64)}",
        f"training.epochs={args.epochs + 1}",
        f"training.batch_size={args.batch_size}",
        "training.progress='off'",
        "mlflow.enabled=false",
    ]
    cfg = load(ROOT / "configs", preset, overrides)
    device = torch.device(args.device)
    bundle = build_data(cfg, resolution, seed=0, device=device)
    torch.manual_seed(0)
    net, _ = build_model(model, bundle.num_classes, bundle.channels, cfg.models)
    history = Trainer(cfg, device).fit(net, bundle).history
    return statistics.mean(h["train/images_per_s"] for h in history[1:])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="gpu_optimized")
    p.add_argument("--models", nargs="+", default=["resnet18"])
    p.add_argument("--resolutions", type=int, nargs="+", default=[64, 128])
    p.add_argument("--images", type=int, default=1024)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--epochs", type=int, default=2, help="timed epochs per fit (one more runs first)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--device", default="cuda")
    p.add_argument("--json", help="also write the figures here")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    results, lines, failed = {}, [], False
    with tempfile.TemporaryDirectory() as out:
        for model in args.models:
            for res in args.resolutions:
                key = f"{model}@{res}"
                speeds: dict[str, list[float]] = {"default": [], args.preset: []}
                try:
                    for r in range(args.rounds):
                        order = [None, args.preset] if r % 2 == 0 else [args.preset, None]
                        for preset in order:
                            speeds[preset or "default"].append(fit_speed(preset, model, res, args, out))
                except Exception as exc:  # reported, the other cases still run
                    failed = True
                    lines.append(f"preset {args.preset}/default {key}: FAILED {type(exc).__name__}: {exc}")
                    print(lines[-1], file=sys.stderr)
                    continue
                ci = MedianInterval.of([a / b for a, b in zip(speeds[args.preset], speeds["default"])])
                results[key] = {"speeds": speeds, "ratio": ci.as_list()}
                lines.append(
                    f"preset {args.preset}/default train images/s {key} {args.device}: {ci.text()} "
                    f"(default {statistics.median(speeds['default']):.0f}, {args.preset} "
                    f"{statistics.median(speeds[args.preset]):.0f} images/s)"
                )
                print(lines[-1], flush=True)
    print("\n".join(["", "results:", *lines]))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

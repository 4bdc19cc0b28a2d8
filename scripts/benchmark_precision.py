"""fp32 against `system.precision: auto` (bf16 autocast + channels_last where the CPU or GPU computes bf16
natively; fp32 elsewhere, and then the ratios are ~1): the training step and inference (batch 1 and a whole batch)
of each model, timed in interleaved rounds, with the speed-up (fp32 time / auto time, median of the per-round
ratios) and its 95% interval; then the accuracy both reach on the synthetic set (same seeds, splits and initial
weights), compared on the same test images (resomap.stats.paired_test: McNemar's exact test for one seed, its
clustered form, images as units, for several), e.g.

    python scripts/benchmark_precision.py                                   # quickstart models, 64 and 128 px
    python scripts/benchmark_precision.py --models resnet18 --resolutions 128 --rounds 9 --skip-accuracy

Targets: auto trains faster than fp32 (speed-up > 1) where it picks bf16, and its accuracy is not significantly
different (p >= 0.05). Exit status 0 (a missed target is printed as MISS). --json PATH writes the figures.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import tempfile
from pathlib import Path

import torch

import resomap.sweep.builtins  # noqa: F401  (the registries' config groups, before a config is loaded)
from _steps import AUTO, TODAY, speedup, steps, verdict
from resomap.config import load
from resomap.profiling.timing import time_rounds
from resomap.runtime import auto_threads

REPO = Path(__file__).resolve().parents[1]


def speed_rows(args: argparse.Namespace, device: torch.device) -> list[dict]:
    rows = []
    for model in args.models:
        for res in args.resolutions:
            calls = {}
            for s in (TODAY, AUTO):
                train, one, batch = steps(model, res, args.batch_size, args.channels, s, device)
                calls.update({f"{s.name} train": train, f"{s.name} infer1": one, f"{s.name} infer": batch})
            done = time_rounds(calls, device, iters=args.iters, warmup=2, rounds=args.rounds)
            row = {"model": model, "resolution": res}
            for kind in ("train", "infer1", "infer"):
                fp32, auto = done.round_medians(f"today {kind}"), done.round_medians(f"auto {kind}")
                ratio = speedup(fp32, auto)
                row[kind] = {"fp32_ms": 1e3 * statistics.median(fp32), "auto_ms": 1e3 * statistics.median(auto)}
                row[kind]["speedup"] = ratio.as_list()
            rows.append(row)
            print(_speed_line(row, args.batch_size), flush=True)
    return rows


def _speed_line(row: dict, batch: int) -> str:
    parts = []
    for kind, label in (("train", f"train step (batch {batch})"), ("infer1", "inference batch 1"), ("infer", "batch")):
        r = row[kind]
        lo, hi = r["speedup"][1], r["speedup"][2]
        parts.append(f"{label} {r['fp32_ms']:.1f} -> {r['auto_ms']:.1f} ms x{r['speedup'][0]:.2f} [{lo:.2f}, {hi:.2f}]")
    return f"{row['model']}@{row['resolution']}: " + "; ".join(parts)


def accuracy(args: argparse.Namespace, device: torch.device) -> dict:
    """Both settings trained on the synthetic set with the same seeds, compared on the same test images."""
    from resomap.data import build as build_data
    from resomap.models import build_model
    from resomap.stats import paired_test
    from resomap.training import Trainer

    correct: dict[str, list] = {"today": [], "auto": []}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            for s in (TODAY, AUTO):
                cfg = load(REPO / "configs", "smoke", [*_synthetic(args), f"experiment.output_dir={tmp}",
                           f"experiment.seed={seed}", f"system.precision={s.precision}",
                           f"system.channels_last={str(s.channels_last).lower()}"])  # fmt: skip
                data = build_data(cfg, args.accuracy_resolution, seed, device)
                model, _ = build_model(args.accuracy_model, data.num_classes, data.channels, cfg.models)
                trainer = Trainer(cfg, device)
                trainer.fit(model, data)
                _, y_true, y_pred = trainer.evaluate(model, data.test, prefix="test")
                correct[s.name].append(y_true == y_pred)
    # McNemar: exact with one seed, clustered over images with several (resomap.stats.paired_test)
    return paired_test(correct["today"], correct["auto"]).to_dict()


def _synthetic(args: argparse.Namespace) -> list[str]:
    return [
        f"training.epochs={args.epochs}",
        "training.progress='off'",
        "mlflow.enabled=false",
        f"data.synthetic.num_images={args.images}",
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["tiny_cnn", "simple_cnn", "resnet18"])
    p.add_argument("--resolutions", nargs="+", type=int, default=[64, 128])
    p.add_argument("--batch-size", type=int, default=64, help="training step and batch inference (quickstart: 64)")
    p.add_argument("--channels", type=int, default=1, help="input channels (ELPV: 1)")
    p.add_argument("--iters", type=int, default=10, help="timed calls per variant, split over the rounds")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=0, help="torch threads; 0: the cores other processes leave free")
    p.add_argument("--skip-accuracy", action="store_true")
    p.add_argument("--skip-speed", action="store_true", help="only the accuracy comparison")
    p.add_argument("--accuracy-model", default="tiny_cnn")
    p.add_argument("--accuracy-resolution", type=int, default=64)
    p.add_argument("--images", type=int, default=600, help="synthetic images (15%% of them are the test set)")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--seeds", nargs="+", type=int, default=[42, 43])
    p.add_argument("--json", help="also write the figures here")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    device = torch.device("cpu")
    torch.set_num_threads(args.threads or auto_threads())
    print(f"{TODAY.describe(device)}; {AUTO.describe(device)}; {torch.get_num_threads()} thread(s)", flush=True)
    rows = [] if args.skip_speed else speed_rows(args, device)
    acc = None if args.skip_accuracy else accuracy(args, device)
    print(_report(rows, acc, args))
    if args.json:
        Path(args.json).write_text(json.dumps({"speed": rows, "accuracy": acc}, indent=2) + "\n")


def _report(rows: list[dict], acc: dict | None, args: argparse.Namespace) -> str:
    lines = ["", "targets:"]
    for row in rows:
        ratio = row["train"]["speedup"]
        lines.append(
            f"precision speed-up {row['model']}@{row['resolution']} training: x{ratio[0]:.2f} [{ratio[1]:.2f}, "
            f"{ratio[2]:.2f}] (target > 1) {verdict(ratio[0] > 1, ratio[2] > 1)}"
        )
    if acc is not None:
        lines.insert(0, f"\naccuracy on the synthetic set ({args.accuracy_model}@{args.accuracy_resolution}, "
                     f"{args.epochs} epochs, seeds {args.seeds}, {acc['n_images']} test images each): fp32 "
                     f"{acc['accuracy_a']:.3f}, auto {acc['accuracy_b']:.3f}, difference {acc['effect']:+.3f} "
                     f"[{acc['low']:+.3f}, {acc['high']:+.3f}], {acc['method']} p = {acc['p_value']:.3f}")  # fmt: skip
        ok = acc["p_value"] >= 0.05
        lines.append(f"precision accuracy auto vs fp32: p = {acc['p_value']:.3f} (target: not significant, p >= 0.05) "
                     f"{verdict(ok)}")  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    main()

"""Trainer overhead: images/s of Trainer.fit against a bare PyTorch loop on the same model, in-memory data and
options, in interleaved rounds; prints the ratio per model with its 95% interval and the target (>= 0.97), e.g.

    python scripts/benchmark_trainer.py                       # tiny_cnn and resnet18 at 64 px on CPU
    python scripts/benchmark_trainer.py --models resnet18 --device cuda --images 2048 --batch-size 64

Exit status 0 (a missed target is printed as MISS, not an error: the lead judges it on a quiet machine);
--json PATH also writes the results.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
from pathlib import Path

import resomap.sweep.builtins  # noqa: F401  (the registries' config groups, before a config is loaded)
from resomap.profiling.bare import BenchResult, benchmark_vs_bare

TARGET = 0.97


def target_line(name: str, res: BenchResult, target: float = TARGET) -> str:
    verdict = "PASS" if res.ratio >= target else ("MISS (interval reaches it)" if res.ratio_high >= target else "MISS")
    return (
        f"trainer/bare {name}: {res.ratio:.3f} [{res.ratio_low:.3f}, {res.ratio_high:.3f}] (target >= {target}) "
        f"{verdict}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["tiny_cnn", "resnet18"], help="registry names (small_cnn: built in)")
    p.add_argument("--resolution", type=int, default=64)
    p.add_argument("--images", type=int, default=256, help="training images per epoch")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--epochs", type=int, default=1, help="timed epochs per run (one warm-up epoch is added)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds (>= 5 for the interval)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads; 0: auto (cores left free)")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    lines, results = [], {}
    for name in args.models:
        res = benchmark_vs_bare(
            model=name,
            resolution=args.resolution,
            num_images=args.images,
            batch_size=args.batch_size,
            epochs=args.epochs,
            rounds=args.rounds,
            device=args.device,
            overrides={
                "system": {"precision": args.precision, "channels_last": args.channels_last, "threads": args.threads}
            },
        )
        results[name] = dataclasses.asdict(res)
        print(f"{name}: settings {res.settings}")
        print(f"  bare loop : {res.bare_images_per_s:9.1f} images/s  rounds {[round(v, 1) for v in res.bare_runs]}")
        print(
            f"  Trainer   : {res.trainer_images_per_s:9.1f} images/s  rounds {[round(v, 1) for v in res.trainer_runs]}"
        )
        lines.append(target_line(f"{name}@{args.resolution} {args.device}", res))
        print(lines[-1], flush=True)
    print("\n".join(["", "targets:", *lines]))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()

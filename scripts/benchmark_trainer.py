"""Trainer overhead: images/s of Trainer.fit vs a bare PyTorch loop on the same in-memory data."""

from __future__ import annotations

import argparse
import logging

from resomap.training.bare import benchmark_vs_bare


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default=None, help="registry model name (default: a small CNN defined here)")
    p.add_argument("--resolution", type=int, default=64)
    p.add_argument("--images", type=int, default=512, help="training images per epoch")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--epochs", type=int, default=2, help="timed epochs (one warm-up epoch is added)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp16"])
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads; 0 leaves the default")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    res = benchmark_vs_bare(
        model=args.model,
        resolution=args.resolution,
        num_images=args.images,
        batch_size=args.batch_size,
        epochs=args.epochs,
        repeats=args.repeats,
        device=args.device,
        overrides={
            "system": {"precision": args.precision, "channels_last": args.channels_last, "threads": args.threads}
        },
    )
    print(f"settings: {res.settings}")
    print(f"bare loop : {res.bare_images_per_s:9.1f} images/s  runs {[round(v, 1) for v in res.bare_runs]}")
    print(f"Trainer   : {res.trainer_images_per_s:9.1f} images/s  runs {[round(v, 1) for v in res.trainer_runs]}")
    print(f"ratio (Trainer / bare): {res.ratio:.3f}")


if __name__ == "__main__":
    main()

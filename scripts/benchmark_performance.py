"""Benchmark a model: optimisation options side by side, batch sizes, cpu vs cuda (thin wrapper).

    python scripts/benchmark_performance.py --model resnet18 --resolution 64 --compare-opts \
        --batch-sizes 1 8 32 --devices cpu --iters 10 --output-dir bench_out
"""

from __future__ import annotations

import argparse
import logging
import sys

from torch import nn

from resomap.errors import ResoMapError
from resomap.profiling import ALL_OPTIONS, run_benchmark, save_benchmark


def build(name: str, num_classes: int, in_channels: int) -> nn.Module:
    """resomap.models by name; torchvision.models.<name> (random weights) while resomap.models is not there."""
    try:
        from resomap.config.schema import ModelsConfig
        from resomap.models import build_model
    except ImportError:
        import torchvision

        if in_channels != 3 or not hasattr(torchvision.models, name):
            raise ResoMapError(f"model {name!r} needs resomap.models (torchvision fallback: 3-channel only)") from None
        return getattr(torchvision.models, name)(weights=None, num_classes=num_classes)
    return build_model(name, num_classes, in_channels, ModelsConfig())[0]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet18")
    p.add_argument("--resolution", type=int, default=64)
    p.add_argument("--num-classes", type=int, default=10)
    p.add_argument("--in-channels", type=int, default=3)
    p.add_argument(
        "--compare-opts",
        nargs="*",
        default=None,
        metavar="OPT",
        help=f"options to compare with the baseline; no value: all ({', '.join(ALL_OPTIONS)})",
    )
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--options-batch-size", type=int, default=None, help="batch for --compare-opts (default: largest)")
    p.add_argument("--devices", default="cpu,cuda", help="comma-separated: cpu,cuda")
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.add_argument("--output-dir", default=None, help="also write benchmark.json and benchmark.txt here")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    options = ["baseline"] if args.compare_opts is None else (args.compare_opts or list(ALL_OPTIONS))
    try:
        model = build(args.model, args.num_classes, args.in_channels)
        report = run_benchmark(
            model,
            args.resolution,
            in_channels=args.in_channels,
            num_classes=args.num_classes,
            options=options,
            batch_sizes=args.batch_sizes,
            devices=[d.strip() for d in args.devices.split(",") if d.strip()],
            precision=args.precision,
            iters=args.iters,
            warmup=args.warmup,
            options_batch_size=args.options_batch_size,
            model_name=args.model,
        )
    except ResoMapError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report.as_json() if args.json else report.table(), end="")
    if args.output_dir:
        for path in save_benchmark(report, args.output_dir):
            print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

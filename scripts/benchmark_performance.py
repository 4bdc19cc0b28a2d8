"""Benchmark a model: optimisation options side by side, batch sizes, cpu vs cuda. A thin wrapper of
`resomap bench`, e.g.

    python scripts/benchmark_performance.py --model resnet18 --resolution 64 --compare-opts \
        --batch-sizes 1 8 32 --devices cpu --iters 10 --output-dir bench_results
"""

from __future__ import annotations

import sys

from resomap.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))

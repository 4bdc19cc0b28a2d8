"""The error of the model-scope step test (resomap.stats.scope) when training seeds occasionally fail: each cell of
the printed table is the rate at which a resolution whose mean difference from the reference is exactly -margin
is called "not worse than the margin" (the error the test should hold at alpha) over seeded simulated sweeps, at
2, 3 and 5 seeds, with seeds that fail at the smaller resolution with probability q and lose d of accuracy there
(the healthy seeds' mean moved up so that the expected difference stays -margin). q = 0: the symmetric seed
effects the test assumes. resomap/stats/seeds.py's docstring quotes its output.

Usage: python scripts/simulate_seed_failures.py [--images 300] [--sweeps 3000]"""

from __future__ import annotations

import argparse

import numpy as np

MARGIN, ALPHA = 0.05, 0.05
CASES = ((0.0, 0.0), (0.1, 0.2), (0.2, 0.2), (0.1, 0.4))  # (q, d)


def error_rate(seeds: int, q: float, d: float, images: int, sweeps: int) -> float:
    from resomap.stats import scope

    rng = np.random.default_rng([7, seeds, int(q * 100), int(d * 100)])
    shown = []
    for _ in range(max(1, sweeps // 500)):
        ease = rng.uniform(0.55, 0.95, (500, 1, images))  # each image's chance to be right, shared by the seeds
        ref = rng.random((500, seeds, images)) < np.clip(ease + rng.normal(0, 0.01, (500, seeds, 1)), 0, 1)
        failed = rng.random((500, seeds, 1)) < q
        p = np.clip(ease - MARGIN + q * d + rng.normal(0, 0.01, (500, seeds, 1)) - d * failed, 0, 1)
        other = rng.random((500, seeds, images)) < p
        shown.append(scope.rejects(other.astype(float) - ref, -MARGIN, ALPHA, binary=True, scope="model"))
    return float(np.concatenate(shown).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=300)
    parser.add_argument("--sweeps", type=int, default=3000)
    args = parser.parse_args()
    print(f"one-step error at the margin {MARGIN} (alpha {ALPHA}), {args.images} images, {args.sweeps} sweeps a cell")
    print("seeds | " + " | ".join(f"q {q:g}, d {d:g}" for q, d in CASES))
    for seeds in (2, 3, 5):
        rates = [error_rate(seeds, q, d, args.images, args.sweeps) for q, d in CASES]
        print(f"{seeds} | " + " | ".join(f"{r:.3f}" for r in rates))


if __name__ == "__main__":
    main()

"""How good the sweep's ETA was: per progress line, the ETA given, the seconds the remaining trials then took, and
their ratio (max(eta/actual, actual/eta)); beside it what the old estimate (the mean time of the trials done x the
trials left) would have said on the same line. The target is every line within 1.5x.

Reads the eta.csv a sweep writes beside its summary (model_summaries/_sweep/<name>/eta.csv); with --run, first runs
`resomap sweep --preset <preset>` in a new folder (the quickstart: about 4-5 min on 2 cores) and reads its file.
With --replay FOLDER (a finished sweep of --preset there), the estimator of this code is replayed on the trials as
they ran (their seconds, training seconds and epochs from eta.csv and result.json) with the cost probe measured again
now (seconds: the cache is there): how an estimator change would have done on a sweep without running it again.

    python scripts/benchmark_eta.py --run [--preset quickstart] [overrides...]
    python scripts/benchmark_eta.py model_summaries/_sweep/resomap-quickstart/eta.csv
    python scripts/benchmark_eta.py --replay DIR --preset elpv_paper
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET = 1.5


def read(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def ratio(estimate: float, actual: float) -> float:
    return max(estimate / actual, actual / estimate) if estimate > 0 and actual > 0 else float("inf")


def table(rows: list[dict[str, str]]) -> tuple[list[float], list[float]]:
    """Prints the lines; returns the new and the old estimate's ratios over the lines with trials left."""
    new, old, seconds = [], [], []
    head = ("after", "trial s", "left", "ETA s", "actual s", "ratio", "mean-ETA s", "ratio")
    print("{:<28} {:>8} {:>5} {:>8} {:>9} {:>6} {:>11} {:>6}".format(*head))
    for row in rows:
        seconds.append(float(row["seconds"]))
        left, actual = int(row["trials_left"]), float(row["actual_s"])
        if not left:
            print(f"{row['trial']:<28} {seconds[-1]:>8.1f} {left:>5}")
            continue
        eta = float(row["eta_s"]) if row["eta_s"] else float("nan")
        mean = sum(seconds) / len(seconds) * left
        new.append(ratio(eta, actual))
        old.append(ratio(mean, actual))
        print(
            f"{row['trial']:<28} {seconds[-1]:>8.1f} {left:>5} {eta:>8.1f} {actual:>9.1f} {new[-1]:>6.2f} "
            f"{mean:>11.1f} {old[-1]:>6.2f}"
        )
    return new, old


def replay(folder: Path, preset: str, overrides: list[str]) -> list[dict[str, str]]:
    """eta.csv's rows of the sweep in `folder`, with eta_s and ratio as this code's estimator gives them: the
    sweep's own Progress, fed each trial's result.json and seconds in the order they ran."""
    import resomap.sweep.builtins  # noqa: F401  (the registries' config groups, before a config is loaded)
    from resomap.config import load
    from resomap.sweep.eta import probe
    from resomap.sweep.plan import plan
    from resomap.sweep.sweep import Progress
    from resomap.trial_result import TrialResult

    root = Path(__file__).resolve().parents[1]
    cfg = load(str(root / "configs"), preset, [f"experiment.output_dir={folder}", *overrides])
    trials = {t.name: t for t in plan(cfg, check=False)}
    rows = read(next(folder.glob(f"model_summaries/_sweep/{cfg.experiment.name}/eta.csv")))
    order = [trials[r["trial"]] for r in rows]
    progress = Progress(len(order), 0, cfg.experiment.task, order)
    progress.eta.probes = probe(order, print)
    left_s = sum(float(r["seconds"]) for r in rows)
    for row, trial in zip(rows, order, strict=True):
        result = TrialResult.from_json((trial.summary_dir / "result.json").read_text(encoding="utf-8"))
        progress.record(result, float(row["seconds"]))  # read as it is (the output folder is part of the key)
        left = progress.estimates[-1][-1]
        left_s -= float(row["seconds"])
        row["eta_s"] = "" if left is None else f"{left:.1f}"
        row["actual_s"] = f"{left_s:.1f}"  # the trials' own seconds (the live file adds the gaps between)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv", nargs="?", type=Path, help="a sweep's eta.csv")
    parser.add_argument("--run", action="store_true", help="run the preset first, in a new folder")
    parser.add_argument("--replay", type=Path, metavar="FOLDER", help="replay this code's estimator on a sweep there")
    parser.add_argument("--preset", default="quickstart")
    parser.add_argument("overrides", nargs="*", help="dotted config overrides for --run / --replay")
    args = parser.parse_args()
    if args.replay:
        rows = replay(args.replay.resolve(), args.preset, args.overrides)
        new, _ = table(rows)
        print(f"ETA (this code, replayed): {sum(r <= TARGET for r in new)}/{len(new)} lines within {TARGET}x, "
              f"worst {max(new):.2f}x")  # fmt: skip
        return 0
    if args.run:
        root = Path(__file__).resolve().parents[1]
        folder = Path(tempfile.mkdtemp(prefix="resomap-eta-"))
        cmd = [str(Path(sys.executable).with_name("resomap")), "sweep", "--config-dir", str(root / "configs"),
               "--preset", args.preset, *args.overrides]  # fmt: skip
        start = time.perf_counter()
        subprocess.run(cmd, cwd=folder, check=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        print(f"sweep in {time.perf_counter() - start:.0f} s ({folder}); load average now {os.getloadavg()[0]:.2f}")
        found = sorted(folder.glob("model_summaries/_sweep/*/eta.csv"))
        if not found:
            print("no eta.csv: the sweep ran fewer than two trials here")
            return 1
        args.csv = found[0]
    if args.csv is None:
        parser.error("give an eta.csv or --run")
    new, old = table(read(args.csv))
    if not new:
        print("no line with trials left")
        return 1
    inside = sum(r <= TARGET for r in new)
    print(f"ETA (cost probe): {inside}/{len(new)} lines within {TARGET}x, worst {max(new):.2f}x")
    within = sum(r <= TARGET for r in old)
    print(f"mean of trials done: {within}/{len(old)} lines within {TARGET}x, worst {max(old):.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

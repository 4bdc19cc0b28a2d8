"""Where a sweep's summary phase spends its time (after the last trial: statistics and tables, figures, the
explanation comparison, the HTML report, the parent run's probe images, MLflow): the summary of a finished sweep is
made again in a copy of its folder with a fresh MLflow store (as after a first run), `--repeats` times, and each
part's median seconds is printed with the total, e.g.

    python scripts/benchmark_summary.py --from /path/to/project --preset quickstart
    python scripts/benchmark_summary.py                      # makes a small synthetic sweep first (seconds)

--from names a project folder holding a finished sweep's model_summaries/ (and checkpoints/), run from that folder
(experiment.output_dir `.`); the preset and key=value overrides must be those it ran with (a sweep run before
`system.precision: auto` needs system.precision=fp32 system.channels_last=false). Target (issue 20): <= 10 s for the
quickstart. Nothing in --from is touched.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import resomap.sweep.builtins  # noqa: F401  (the registries' config groups, before a config is loaded)
from resomap.config import load
from resomap.sweep.plan import plan, summary_folder, sweep_key
from resomap.sweep.summarise import _results, _summarise, summary_line
from resomap.tracking import make_tracker
from resomap.tracking.parent import open_parent

REPO = Path(__file__).resolve().parents[1]
TARGET_S = 10.0
SMALL = ["--preset", "smoke", "sweep.models=[tiny_cnn,simple_cnn]", "sweep.resolutions=[24,32,48]", "sweep.seeds=[1,2]"]


def small_sweep(folder: Path) -> tuple[str, list[str]]:
    """A finished 12-trial synthetic sweep in `folder` (about a minute on a 2-core CPU)."""
    cmd = [sys.executable, "-m", "resomap.cli", "sweep", "--config-dir", str(REPO / "configs"), *SMALL]
    subprocess.run(cmd, check=True, capture_output=True, cwd=folder)
    return "smoke", SMALL[2:]


def once(source: Path, preset: str, overrides: list[str]) -> dict[str, float]:
    """The summary made again in a fresh copy of `source` with an empty MLflow store; seconds per part."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for name in ("model_summaries", "checkpoints"):
            if (source / name).is_dir():
                shutil.copytree(source / name, work / name, ignore=shutil.ignore_patterns("_sweep"))
        here = os.getcwd()
        os.chdir(work)  # experiment.output_dir is part of the trial keys: the copy is used as `.`, as it ran
        try:
            cfg = load(REPO / "configs", preset, overrides)
            trials = plan(cfg, check=False)
            results = _results(trials)
            if len(results) != len(trials):
                raise SystemExit(f"{len(results)} of {len(trials)} trials have results: check --preset and overrides")
            tracker = make_tracker(cfg)
            parent = open_parent(tracker, cfg, sweep_key(trials), len(trials))
            seconds: dict[str, float] = {}
            _summarise(results, cfg, summary_folder(cfg), tracker, parent, trials, seconds)
        finally:
            os.chdir(here)
        return seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from", dest="source", help="a project folder with a finished sweep (default: make a small one)")
    p.add_argument("--preset", default="quickstart")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("overrides", nargs="*", metavar="key=value")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    with tempfile.TemporaryDirectory() as tmp:
        source, preset, overrides = Path(args.source or tmp), args.preset, list(args.overrides)
        if args.source is None:
            preset, overrides = small_sweep(source)
        runs = [once(source, preset, overrides) for _ in range(args.repeats)]
    for i, seconds in enumerate(runs, 1):
        print(f"run {i}: " + summary_line(seconds).removeprefix("[sweep] "))
    median = {name: statistics.median(r[name] for r in runs) for name in runs[0]}
    total = statistics.median(sum(r.values()) for r in runs)
    print("median: " + summary_line(median).removeprefix("[sweep] "))
    verdict = "PASS" if total <= TARGET_S else "MISS"
    print(f"\ntargets:\nsummary phase ({preset}): {total:.1f} s (target <= {TARGET_S:.0f} s) {verdict}")


if __name__ == "__main__":
    main()

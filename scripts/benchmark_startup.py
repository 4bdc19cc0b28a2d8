"""How fast the command line answers: listing commands, --help, config errors and a no-op sweep rerun, each timed
as a fresh process against `python -c "import torch"` in the same rounds (interleaved, repeated).

    python scripts/benchmark_startup.py [--rounds 5] [--json out.json]

Prints per command the median wall time, its interquartile range, and the ratio to the torch import (median of
the per-round ratios, so a slow moment hits both sides of a ratio alike). Targets (issue 9): listing commands,
--help and config errors within 1.5x the torch import; the rerun of a finished 6-trial sweep within 10 s plus one
torch import; (issue 20) every mistake, the README's among them, answered in one line within 3 s on an idle
machine (they are answered before torch is imported: resomap.cli.preflight).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
CLI = [PY, "-m", "resomap.cli"]
SWEEP = [
    "--config-dir",
    str(REPO / "configs"),
    "--preset",
    "smoke",
    "sweep.models=[tiny_cnn,simple_cnn]",
    "sweep.resolutions=[16,24,32]",
    "experiment.name=startup-bench",
]


def commands(sweep_dir: Path) -> dict[str, tuple[list[str], int]]:
    """name -> (argv, expected exit code)."""
    bad = ["train", "--config-dir", str(REPO / "configs"), "--model", "tiny_cnn", "--resolution", "32"]
    out = {
        "import torch": ([PY, "-c", "import torch"], 0),
        "resomap --help": ([*CLI, "--help"], 0),
        "resomap train --help": ([*CLI, "train", "--help"], 0),
        "resomap models": ([*CLI, "models"], 0),
        "resomap explainers": ([*CLI, "explainers"], 0),
        "resomap datasets": ([*CLI, "datasets"], 0),
        "resomap executors": ([*CLI, "executors"], 0),
        "resomap config --doc": ([*CLI, "config", "--doc"], 0),
        "config error (data.dataset=elvp)": ([*CLI, *bad, "data.dataset=elvp"], 2),
        "config error (trainig.epochs=3)": ([*CLI, *bad, "trainig.epochs=3"], 2),
        "unknown model (resnet81)": ([*CLI, *bad[:4], "resnet81", *bad[5:]], 2),
        "train --resolution 100000": ([*CLI, *bad[:6], "100000"], 2),
        "profile --resolution 100000": ([*CLI, "profile", "--model", "tiny_cnn", "--resolution", "100000"], 2),
        "explain, unknown method (gradcm)": ([*CLI, "explain", "--checkpoint", "x.pt", "--method", "gradcm"], 2),
        "rerun of a finished 6-trial sweep": ([*CLI, "sweep", *SWEEP, f"experiment.output_dir={sweep_dir}"], 0),
    }
    import torch

    if not torch.cuda.is_available():
        out["no GPU (system.device=cuda)"] = ([*CLI, *bad, "system.device=cuda"], 2)
    return out


ERROR_TARGET_S = 3.0  # issue 20: every bad input of the README answered within 3 s on an idle machine


def commands_exit(name: str) -> int:
    """The expected exit code of a timed command, by its name (2: a mistake, answered in one line)."""
    return 2 if name.startswith(("config error", "unknown", "train --res", "profile --res", "explain", "no GPU")) else 0


def run_once(argv: list[str], expect: int, cwd: Path) -> float:
    env = dict(os.environ, MPLBACKEND="Agg")
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != expect:
        raise SystemExit(f"{' '.join(argv)}: exit {proc.returncode}, expected {expect}\n{proc.stderr[-2000:]}")
    return seconds


def quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) < 2:
        return values[0], values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], statistics.median(values), q[2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="resomap-startup-"))
    try:
        sweep_dir = work / "sweep"
        print(f"preparing a finished 6-trial sweep in {sweep_dir} ...", flush=True)
        first = subprocess.run(
            [*CLI, "sweep", *SWEEP, f"experiment.output_dir={sweep_dir}"],
            cwd=work,
            text=True,
            capture_output=True,
            env=dict(os.environ, MPLBACKEND="Agg"),
        )
        if first.returncode != 0:
            raise SystemExit(f"the sweep to rerun failed:\n{first.stderr[-3000:]}")
        cmds = commands(sweep_dir)
        times: dict[str, list[float]] = {name: [] for name in cmds}
        for r in range(args.rounds):
            for name, (argv, expect) in cmds.items():  # interleaved: every command once per round
                times[name].append(run_once(argv, expect, work))
            print(f"round {r + 1}/{args.rounds} done", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = times["import torch"]
    rows = []
    print(f"\n{'command':<40}{'median s':>10}{'IQR s':>16}{'x torch import':>16}")
    for name, values in times.items():
        q1, med, q3 = quartiles(values)
        ratio = statistics.median(v / b for v, b in zip(values, base))
        rows.append({"command": name, "median_s": med, "q1_s": q1, "q3_s": q3, "ratio_to_torch_import": ratio})
        print(f"{name:<40}{med:>10.2f}{f'{q1:.2f}-{q3:.2f}':>16}{ratio:>15.2f}x")
    torch_s = statistics.median(base)
    rerun = statistics.median(times["rerun of a finished 6-trial sweep"])
    listing = [r for r in rows if r["command"] not in ("import torch", "rerun of a finished 6-trial sweep")]
    worst = max(listing, key=lambda r: r["ratio_to_torch_import"])
    print(
        f"\nworst listing/help/error command: {worst['command']} at {worst['ratio_to_torch_import']:.2f}x (target 1.5x)"
    )
    print(f"no-op rerun: {rerun:.2f} s = torch import {torch_s:.2f} s + {rerun - torch_s:.2f} s (target + 10 s)")
    errors = [r for r in rows if commands_exit(r["command"]) == 2]
    slowest = max(errors, key=lambda r: r["median_s"])
    verdict = "PASS" if slowest["median_s"] <= ERROR_TARGET_S else "MISS"
    print(f"\ntargets:\nslowest one-line error: {slowest['command']} {slowest['median_s']:.2f} s "
          f"(target <= {ERROR_TARGET_S:.0f} s on an idle machine) {verdict}")  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps({"rounds": args.rounds, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

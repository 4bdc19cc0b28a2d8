"""How fast `resomap ui` answers and what it costs while idle, against MLflow's own `mlflow server` defaults.

Each round starts the server over the same store (interleaved: resomap ui, then plain `mlflow server`), times the
first 200 from /health and the first page (/), then sums the CPU time of the server's whole process tree over
`--idle` seconds of no requests. Prints the medians, the ratios and the targets (answer within 5 s; idle under 2%
of one core). Needs a store: run a sweep first (default: the project in the current folder).

    python scripts/benchmark_ui.py [--rounds 3] [--idle 60] [--project DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def measure(cmd: list[str], port: int, cwd: Path, idle_s: float, env: dict[str, str]) -> dict[str, float]:
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{' '.join(cmd[:4])} exited with {proc.returncode}")
            try:
                with urllib.request.urlopen(url + "/health", timeout=2):
                    break
            except OSError:
                time.sleep(0.2)
        health_s = time.monotonic() - start
        with urllib.request.urlopen(url + "/", timeout=30) as resp:
            resp.read()
        page_s = time.monotonic() - start
        time.sleep(3)  # let start-up work finish before the idle window
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        before = {p.pid: sum(p.cpu_times()[:4]) for p in tree}
        time.sleep(idle_s)
        used = 0.0
        for p in tree:
            with contextlib.suppress(psutil.NoSuchProcess):
                used += sum(p.cpu_times()[:4]) - before[p.pid]
        return {"health_s": health_s, "page_s": page_s, "idle_cpu_pct": 100 * used / idle_s, "processes": len(tree)}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--idle", type=float, default=60.0, help="seconds of idling measured per start")
    parser.add_argument("--project", type=Path, default=Path.cwd(), help="folder with mlflow.db (default: here)")
    args = parser.parse_args()
    db = (args.project / "mlflow.db").resolve()
    if not db.is_file():
        print(f"no store at {db}: run a sweep first (e.g. resomap sweep --preset smoke)", file=sys.stderr)
        return 2
    env = dict(os.environ, GIT_PYTHON_REFRESH="quiet")
    results: dict[str, list[dict[str, float]]] = {"resomap ui": [], "mlflow server (defaults)": []}
    for _ in range(args.rounds):
        port = free_port()
        ui = [sys.executable, "-m", "resomap.cli", "ui", "--port", str(port)]
        results["resomap ui"].append(measure(ui, port, args.project, args.idle, env))
        port = free_port()
        plain = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{db}",
                 "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]  # fmt: skip
        results["mlflow server (defaults)"].append(measure(plain, port, args.project, args.idle, env))
    med = {k: {m: statistics.median(r[m] for r in v) for m in v[0]} for k, v in results.items()}
    print(f"{'server':<26} {'/health s':>10} {'first page s':>13} {'idle CPU %':>11} {'processes':>10}")
    for name, m in med.items():
        print(
            f"{name:<26} {m['health_s']:>10.1f} {m['page_s']:>13.1f} {m['idle_cpu_pct']:>11.2f} {m['processes']:>10.0f}"
        )
    ours, theirs = med["resomap ui"], med["mlflow server (defaults)"]
    print(f"(medians of {args.rounds} interleaved rounds, {args.idle:.0f} s idle each, {os.cpu_count()} cores)")
    print(f"answer: {ours['page_s']:.1f} s (target <= 5 s) {'PASS' if ours['page_s'] <= 5 else 'FAIL'}; "
          f"ratio to mlflow server {ours['page_s'] / theirs['page_s']:.2f}")  # fmt: skip
    print(
        f"idle CPU: {ours['idle_cpu_pct']:.2f}% of one core (target < 2%) "
        f"{'PASS' if ours['idle_cpu_pct'] < 2 else 'FAIL'}; mlflow server's defaults: {theirs['idle_cpu_pct']:.1f}%"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

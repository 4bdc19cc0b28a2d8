"""The test suite's time, per file and per test: runs pytest (the README's default selection unless told otherwise)
with a JUnit XML report and prints the wall time of the whole run, each file's summed test time (setup, call and
teardown of its tests) and the 20 slowest tests, with the machine named.

    .venv/bin/python scripts/benchmark_tests.py                 # the default suite
    .venv/bin/python scripts/benchmark_tests.py -- -m slow      # any pytest arguments after --
    .venv/bin/python scripts/benchmark_tests.py --xml report.xml  # read an earlier run's JUnit XML instead

A file's summed time can exceed its share of the wall time when pytest runs tests in parallel (pytest-xdist): the
per-file column says where the work is, the wall time what a user waits. Time it on a quiet machine (the load
average is printed before and after)."""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), else the platform's processor string."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def run(pytest_args: list[str], xml: Path) -> float:
    """Run pytest with a JUnit XML report at `xml`; the wall time in seconds (the exit code is not checked: a failed
    test still has its time)."""
    start = time.perf_counter()
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}", *pytest_args]
    subprocess.run(cmd, cwd=REPO, check=False)
    return time.perf_counter() - start


def read(xml: Path) -> list[tuple[str, str, float]]:
    """(file, test, seconds) per test case of a JUnit XML report."""
    out = []
    for case in ET.parse(xml).iter("testcase"):
        parts = case.get("classname", "").split(".")  # tests.test_x or tests.test_x.TestClass
        last = max((i for i, p in enumerate(parts) if p.startswith("test_")), default=len(parts) - 1)
        out.append(("/".join(parts[: last + 1]) + ".py", case.get("name", ""), float(case.get("time") or 0.0)))
    return out


def report(cases: list[tuple[str, str, float]], wall: float | None) -> str:
    per_file: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for file, _, seconds in cases:
        per_file[file] += seconds
        counts[file] += 1
    lines = [f"machine: {cpu_name()}, {os.cpu_count()} cores; {len(cases)} tests"]
    if wall is not None:
        lines.append(f"wall time: {wall:.0f} s ({wall / 60:.1f} min)")
    lines.append(f"summed test time: {sum(per_file.values()):.0f} s")
    lines += ["", f"{'seconds':>8}  {'tests':>5}  file"]
    lines += [f"{t:8.1f}  {counts[f]:5d}  {f}" for f, t in sorted(per_file.items(), key=lambda x: -x[1])]
    lines += ["", "the 20 slowest tests (setup + call + teardown):"]
    slowest = sorted(cases, key=lambda c: -c[2])[:20]
    lines += [f"{t:8.1f}  {f}::{name}" for f, name, t in slowest]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--xml", type=Path, help="read this JUnit XML report instead of running pytest")
    parser.add_argument("pytest_args", nargs="*", help="arguments for pytest (after --)")
    args = parser.parse_args(argv)
    if args.xml is not None:
        print(report(read(args.xml), None))
        return 0
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "tests.xml"
        wall = run(args.pytest_args, xml)
        cases = read(xml) if xml.is_file() else []
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print(report(cases, wall))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

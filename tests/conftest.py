"""Fixtures shared by the test files."""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

# pytest-xdist's workers share the machine's cores: each worker's torch (and every process it starts) keeps to one
# intra-op thread, so two workers on two cores do not oversubscribe them (two threads per process beside another
# busy process made tiny models 10-15x slower: resomap.runtime.auto_threads). Set before torch is imported.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["OMP_NUM_THREADS"] = "1"

# this machine's thread-count records (resomap.training.threads.cache_dir) are kept out of the user's cache: the
# tests' fits neither read a count measured outside them nor leave one behind; each test gets its own folder
# (`own_machine_records`), this one holds what module-scoped fixtures measure
SESSION_CACHE = os.environ["RESOMAP_CACHE_DIR"] = tempfile.mkdtemp(prefix="resomap-tests-cache-")
# no test touches the network: weights asked for with `models.pretrained: {<model>: hub}` come from caches the tests
# prepare (resomap.models.hub downloads nothing while HF_HUB_OFFLINE is set)
os.environ["HF_HUB_OFFLINE"] = "1"

import resomap.sweep.builtins  # noqa: F401  (the registries' config groups, before any test loads a config)

REPO = Path(__file__).resolve().parents[1]
SMOKE = "resomap-smoke"  # experiment.name of the smoke preset
MAX_WORKERS = 4  # pytest-xdist's workers with -n auto: one per core up to this (each sweep test takes memory)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """-n auto: a worker per core, at most MAX_WORKERS."""
    return max(1, min(os.cpu_count() or 1, MAX_WORKERS))


# ------------------------------------------------------------------------------------------------ the order of files

# pytest-xdist's --dist loadfile hands a worker a whole file at a time, in the collection's order (addopts has
# --no-loadscope-reorder: by default xdist hands out the files with the most tests first, which left the longest
# file, test_report_html_seg.py with its 2 tests, among the last while the other worker ran out of work). The
# slowest files go first, so the last ones handed out are short and the workers finish together (longest processing
# time first). A file's seconds are its tests' setup, call and teardown in the last run that ran it under the same
# -m selection (pytest's cache, written by the controller at the end of a run); a file never timed by this checkout
# takes its estimate below (the default suite under -n auto, seconds), else 0.2 s a test.
FILE_SECONDS = "resomap/file_seconds"
ESTIMATED_SECONDS = {  # a quiet run on the 2-core AVX-512 host, 2026-12-05: a fresh clone has no cache of its own,
    # and a file missing here (test_interrupts.py, 56 s, missing until then) ran last, on one worker
    "tests/test_interrupts.py": 55,
    "tests/test_registries.py": 45,
    "tests/test_adaptive_model.py": 45,
    "tests/test_models.py": 40,
    "tests/test_segmentation.py": 40,
    "tests/test_adaptive.py": 40,
    "tests/test_profiling.py": 40,
    "tests/test_report_html_seg.py": 35,
    "tests/test_figures.py": 35,
    "tests/test_eta.py": 35,
    "tests/test_trial_files.py": 30,
    "tests/test_partial_finetune.py": 30,  # measured 2026-12-05 (its 5 tests, one a 2-trial sweep)
    "tests/test_report_html.py": 25,
    "tests/test_mlflow_views.py": 25,
    "tests/test_classical.py": 25,
    "tests/test_cli.py": 25,
    "tests/test_where.py": 25,
    "tests/test_decide.py": 25,
    "tests/test_sections.py": 20,
    "tests/test_per_image.py": 20,
    "tests/test_parent_follows.py": 15,
    "tests/test_sweep.py": 15,
    "tests/test_startup.py": 15,
    "tests/test_analysis.py": 15,
    "tests/test_experiments_isolated.py": 15,
    "tests/test_timing.py": 15,
    "tests/test_training.py": 10,
    "tests/test_answer_error.py": 10,
    "tests/test_reports.py": 10,
    "tests/test_scope.py": 10,
    "tests/test_train_test.py": 10,  # measured 2026-12-05: 6 s
    "tests/test_sharing.py": 10,
}
PER_TEST_SECONDS = 0.2


class FileOrder:
    """The files of a run ordered slowest first (stable: a file's tests keep their order and stay together), and
    each file's seconds recorded for the next run. A plugin of its own: `-p no:resomap_file_order` keeps the order
    the files were given in (with --no-loadscope-reorder, the order xdist hands them out)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.seconds: dict[str, float] = {}

    def _known(self) -> dict[str, float]:
        cache = getattr(self.config, "cache", None)  # None under -p no:cacheprovider
        stored = cache.get(FILE_SECONDS, {}) if cache is not None else {}
        return dict(stored.get(self.config.option.markexpr or "", {})) if isinstance(stored, dict) else {}

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        known = self._known()
        files = [item.nodeid.split("::", 1)[0] for item in items]
        counts = {f: files.count(f) for f in set(files)}

        def cost(f: str) -> float:
            return known.get(f, ESTIMATED_SECONDS.get(f, PER_TEST_SECONDS * counts[f]))

        order = {f: (-cost(f), -counts[f], i) for i, f in enumerate(dict.fromkeys(files))}
        items[:] = [item for _, item in sorted(zip(files, items), key=lambda pair: order[pair[0]])]

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        file = report.nodeid.split("::", 1)[0]
        self.seconds[file] = self.seconds.get(file, 0.0) + report.duration

    def pytest_sessionfinish(self) -> None:
        cache = getattr(self.config, "cache", None)
        if cache is None or hasattr(self.config, "workerinput") or not self.seconds:  # the controller writes it
            return
        stored = cache.get(FILE_SECONDS, {})
        stored = stored if isinstance(stored, dict) else {}
        selection = self.config.option.markexpr or ""
        stored[selection] = {**stored.get(selection, {}), **{f: round(s, 1) for f, s in self.seconds.items()}}
        cache.set(FILE_SECONDS, stored)


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(SESSION_CACHE, ignore_errors=True)


def pytest_configure(config: pytest.Config) -> None:
    # A shell's background job (`pytest &` in a script) starts with SIGINT ignored, and every process it starts
    # inherits that: the sweeps the interrupt tests start would never see their Ctrl-C. The suite's processes take
    # Python's own handler back, so the processes they start get the default, as from a terminal.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if not config.pluginmanager.is_blocked("resomap_file_order"):
        config.pluginmanager.register(FileOrder(config), "resomap_file_order")


def trial_summary(root: Path, model: str, res: int, seed: int = 42, experiment: str = SMOKE) -> Path:
    """A trial's summary folder (result.json, predictions.csv) in output folder `root` (resomap.layout)."""
    from resomap.layout import Layout

    return Layout(Path(root), "model_summaries", "checkpoints", experiment).trial_summary(model, res, seed)


def trial_checkpoints(
    root: Path, model: str, res: int, seed: int = 42, experiment: str = SMOKE, family: str = "cnn"
) -> Path:
    """A trial's checkpoint folder in output folder `root` (resomap.layout)."""
    from resomap.layout import Layout

    return Layout(Path(root), "model_summaries", "checkpoints", experiment).trial_checkpoints(family, model, res, seed)


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    """`resomap <args>` in this process: (exit code, stdout, stderr)."""
    from resomap.cli import main

    try:
        code = main(args)
    except SystemExit as exc:  # argparse usage errors exit by themselves
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def own_machine_records(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test's own record of this machine's thread counts: no test reuses a count another one measured."""
    folder = tmp_path_factory.mktemp("machine-cache")
    monkeypatch.setenv("RESOMAP_CACHE_DIR", str(folder))
    return folder


# the smoke preset without explanations, profiling or checkpoint logging, at one torch thread: a count measured per
# run may differ from a reference run's (the sweeps of tests/test_interrupts.py and tests/test_sweep_faults.py)
def imagenet_photo(name: str, side: int) -> Any:
    """scikit-image's photo `name` (chelsea: a cat, coffee: a cup) as a [1, 3, side, side] batch of 0..1 pixels
    (antialiased resize): what an ImageNet classifier must name."""
    import torch
    import torch.nn.functional as F
    from skimage import data as skdata

    img = torch.from_numpy(getattr(skdata, name)()).permute(2, 0, 1)[None].float() / 255.0
    return F.interpolate(img, size=(side, side), mode="bilinear", antialias=True, align_corners=False)


QUIET_SMOKE = [
    "--preset",
    "smoke",
    "explainability.enabled=false",
    "profiling.enabled=false",
    "mlflow.log_checkpoint=false",
    "system.threads=1",
]


def project_at(root: Path) -> Path:
    """`root` made (with its parents) as a project folder: a copy of the repo's configs inside."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO / "configs", root / "configs")
    return root


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh project folder holding a copy of the repo's configs, the tests running inside it, with no tracking
    URI from the environment."""
    project_at(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path


def plugin_folder(root: Path, module: str) -> Path:
    """`root` made a folder that installs test module `module` as a ResoMap plugin (a dist-info whose entry point in
    the `resomap.plugins` group names it); put it and tests/ on PYTHONPATH to load it."""
    name = module.replace("_", "-")
    info = root / f"resomap_{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: resomap-{name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[resomap.plugins]\n{module} = {module}\n")
    return root


def tiny_sweep_config(root: Path, models, resolutions, methods, probes: int, *extra: str):
    """The config of a sweep that finishes in about a minute: the smoke preset on 60 synthetic images of 32 px,
    explanations without sanity check or ROAD, short profiles, MLflow off; `extra` overrides on top."""
    from resomap.config import load

    return load(
        str(REPO / "configs"),
        "smoke",
        [
            f"experiment.output_dir={root}",
            f"sweep.models=[{','.join(models)}]",
            f"sweep.resolutions=[{','.join(map(str, resolutions))}]",
            f"explainability.methods=[{','.join(methods)}]",
            f"explainability.probe_size={probes}",
            "explainability.sanity_methods=[]",
            "explainability.road=false",
            "data.synthetic.num_images=60",
            "data.synthetic.size=32",
            "profiling.warmup=1",
            "profiling.iters=2",
            "stats.resamples=200",
            "mlflow.enabled=false",
            *extra,
        ],
    )


def smoke_sweep_at_16(root: Path, models: str) -> int:
    """`resomap -q sweep --preset smoke` of `models` (comma-separated) at 16 px into `root`, without MLflow,
    profiles or explanations: its exit code."""
    from resomap.cli import main

    return main(
        [
            "-q",
            "sweep",
            "--preset",
            "smoke",
            f"sweep.models=[{models}]",
            "sweep.resolutions=[16]",
            "mlflow.enabled=false",
            "profiling.enabled=false",
            "explainability.enabled=false",
            "stats.resamples=300",
            f"experiment.output_dir={root}",
        ]
    )


@pytest.fixture
def fresh_memory_cache():
    """The in-process resolution cache empty before and after the test (no test sees another's images)."""
    from resomap.data.cache import clear_memory_cache

    clear_memory_cache()
    yield
    clear_memory_cache()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(what: str, cond: Callable[[], bool], proc: subprocess.Popen | None, timeout: float) -> None:
    """Poll `cond` until true; fail the test when `proc` exits first or after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"process exited with {proc.returncode} before: {what}")
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for: {what}")


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen]]:
    """Processes a test starts (`start_logged`); each in its own process group, all stopped at the end whatever
    happened: SIGTERM first (`resomap server` then stops the MLflow server it started in a group of its own),
    SIGKILL after 30 s."""
    started: list[subprocess.Popen] = []
    yield started
    for proc in started:
        if proc.poll() is not None:  # ended: what is left of its group (a test that found orphans) goes too
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            continue
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)


def start_logged(procs: list, cmd: list[str], cwd: Path, log_name: str) -> subprocess.Popen:
    """`cmd` in `cwd`, its output appended to cwd/log_name, in a new process group, without a tracking URI or a
    Ray address from the environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS")}
    log = open(cwd / log_name, "ab")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    procs.append(proc)
    return proc


class _Calls:
    """An object whose pickle calls `func(*args)` when it is unpickled (what a booby-trapped checkpoint holds)."""

    def __init__(self, func: Callable, *args: object) -> None:
        self.func, self.args = func, args

    def __reduce__(self):
        return (self.func, self.args)


def bad_checkpoints(folder: Path) -> dict[str, tuple[Path, str]]:
    """Files no checkpoint loader may load, by name: (the file, the words its one-line refusal must hold).

    Pickled code (os.system, builtins.eval) inside a torch zip and as a bare pickle of protocol 2 and 4, each
    creating `folder`/pwned if it ever ran; a real state_dict saved with torch.save and cut in half; a plain
    pickle of protocol 4 (no checkpoint at all)."""
    import pickle

    import torch

    folder.mkdir(parents=True, exist_ok=True)
    marker = folder / "pwned"
    calls = {
        "os.system": _Calls(os.system, f"touch {marker}"),
        "builtins.eval": _Calls(eval, f"open({str(marker)!r}, 'w')"),
    }
    files: dict[str, tuple[Path, str]] = {}
    for name, payload in calls.items():
        short = name.split(".")[1]
        files[f"{short}-zip"] = (folder / f"{short}-zip.pt", f"calls {name} when loaded")
        torch.save({"format": "resomap-ckpt-1", "model": {}, "x": payload}, files[f"{short}-zip"][0])
        for protocol in (2, 4):
            path = folder / f"{short}-p{protocol}.pt"
            path.write_bytes(pickle.dumps({"model": {}, "x": payload}, protocol=protocol))
            files[f"{short}-p{protocol}"] = (path, f"calls {name} when loaded")
    whole = folder / "whole.pt"
    torch.save(torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.Linear(16, 2)).state_dict(), whole)
    data = whole.read_bytes()
    (folder / "half.pt").write_bytes(data[: len(data) // 2])
    whole.unlink()
    files["half"] = (folder / "half.pt", "truncated or corrupt (cut short")
    (folder / "plain-p4.pt").write_bytes(pickle.dumps({"weights": [0.5] * 8}, protocol=4))
    files["plain-p4"] = (folder / "plain-p4.pt", "not a PyTorch checkpoint (a plain pickle of protocol 4")
    return files


# ------------------------------------------------------------------------------------------------ lower bounds

LOWER_BOUND = re.compile(r"(?:^|[_/])(?:ci_)?low(?:$|[_/])")  # test_accuracy_ci_low, score_low, median_low_ms, low
# a bound of a difference may be below zero: over a baseline or the trivial predictor, against the reference, an
# explanation score's excess over random maps, a paired effect
DIFFERENCE = re.compile(r"over_|reference|vs_random|baselines|effect|difference")
FRONT_AXES = ("score", "cost")  # front3's [estimate, low, high] of a nonnegative quantity (quality: an excess)


def lower_bounds(tree: Any, where: str = "") -> Iterator[tuple[str, float, bool]]:
    """(where, value, whether it bounds a nonnegative quantity) of every lower bound in a JSON-like tree (a
    summary.json, a CSV's rows, a run's metrics): a key naming one (..._ci_low, score_low, latency_median_low_ms,
    low), or the low of front3's [estimate, low, high] on score and cost. A bound is of a difference when its name
    or place says so (DIFFERENCE), or it sits beside an effect or a difference; a CSV row in long form names its
    quantity in its `score` or `metric` column (explanations/quality.csv), which counts as its place."""
    if isinstance(tree, Mapping):
        place = f"{where}/{next((v for v in (tree.get('score'), tree.get('metric')) if isinstance(v, str)), '')}"
        beside = "effect" in tree or "difference" in tree
        for key, value in tree.items():
            name = f"{place}/{key}"
            if LOWER_BOUND.search(str(key)) and _number(value) is not None:
                yield name, _number(value), not (beside or DIFFERENCE.search(name))
            elif key in FRONT_AXES and isinstance(value, list) and len(value) == 3 and _number(value[1]) is not None:
                yield name, _number(value[1]), True
            else:
                yield from lower_bounds(value, name)
    elif isinstance(tree, list):
        for i, item in enumerate(tree):
            yield from lower_bounds(item, f"{where}[{i}]")


def _number(value: Any) -> float | None:
    """A finite number, from a JSON value or a CSV cell; None for anything else (an empty cell, a word)."""
    if isinstance(value, bool):
        return None
    try:
        found = float(value)
    except (TypeError, ValueError):
        return None
    return found if math.isfinite(found) else None


def summary_lower_bounds(summary_dir: Path) -> dict[str, list[tuple[str, float, bool]]]:
    """source -> its lower bounds (`lower_bounds`): summary.json and every CSV under the summary folder."""
    import csv
    import json

    found = {"summary.json": list(lower_bounds(json.loads((summary_dir / "summary.json").read_text())))}
    for path in sorted(summary_dir.rglob("*.csv")):
        with path.open(newline="", encoding="utf-8") as fh:
            found[str(path.relative_to(summary_dir))] = list(lower_bounds(list(csv.DictReader(fh))))
    return found

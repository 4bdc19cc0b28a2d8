"""Fault handling of the sweep with real processes: a sweep killed with SIGKILL at several points and started
again ends with every trial exactly once and the same metrics as an uninterrupted sweep; a tracking server killed
mid-sweep does not stop training, and `resomap sync` after its restart logs everything it missed; two identical
sweeps started together train each trial once (the second waits) beside a sweep of another experiment on the same
store; a SIGKILL during the summary swap leaves the old or the new summary, whole."""

from __future__ import annotations

import csv
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import QUIET_SMOKE, free_port, project_at, start_logged, trial_checkpoints, trial_summary, wait_for
from resomap.cli import main
from resomap.training import load_checkpoint

MLFLOW = Path(sys.executable).with_name("mlflow")
ARGS = [*QUIET_SMOKE, "sweep.models=[tiny_cnn,simple_cnn]", "sweep.resolutions=[16,24]", "training.epochs=3"]
TRIALS = [(m, r) for m in ("tiny_cnn", "simple_cnn") for r in (16, 24)]

pytestmark = pytest.mark.slow


def _sweep_cmd(*extra: str) -> list[str]:
    return [sys.executable, "-m", "resomap.cli", "sweep", *ARGS, *extra]


def _kill(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def _results(root: Path) -> list[Path]:
    return [trial_summary(root, m, r) / "result.json" for m, r in TRIALS]


def _result(root: Path, model: str, res: int) -> dict:
    return json.loads((trial_summary(root, model, res) / "result.json").read_text())


def _parent_exists(root: Path) -> bool:
    db = root / "mlflow.db"
    if not db.exists():
        return False
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as con:
            return bool(con.execute("SELECT count(*) FROM tags WHERE key = 'resomap.sweep_key'").fetchone()[0])
    except sqlite3.Error:
        return False


def _training_without_result(root: Path) -> bool:
    for model, res in TRIALS:
        last = trial_checkpoints(root, model, res) / "last.pt"
        if last.exists() and not (trial_summary(root, model, res) / "result.json").exists():
            return True
    return False


def _runs(uri: str) -> tuple[object, list, list]:
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("resomap-smoke").experiment_id
    children = client.search_runs([exp], "tags.`resomap.trial_key` != ''")
    parents = client.search_runs([exp], "tags.`resomap.kind` = 'sweep'")
    return client, children, parents


def test_sigkill_at_several_points_then_resume_equals_uninterrupted(tmp_path: Path, procs, monkeypatch):
    root = project_at(tmp_path / "killed")
    kills = [
        ("the MLflow parent run exists", lambda: _parent_exists(root)),
        ("a trial has last.pt and no result", lambda: _training_without_result(root)),
        ("a new result.json exists", lambda: sum(p.exists() for p in _results(root)) > done),
        ("a later trial has last.pt and no result", lambda: _training_without_result(root)),
    ]
    for what, cond in kills:
        done = sum(p.exists() for p in _results(root))
        proc = start_logged(procs, _sweep_cmd(), root, "sweep.log")
        wait_for(what, cond, proc, timeout=240)
        _kill(proc)
    assert sum(p.exists() for p in _results(root)) < len(TRIALS)  # the kills did interrupt the sweep
    proc = start_logged(procs, _sweep_cmd(), root, "sweep.log")
    assert proc.wait(timeout=400) == 0, (root / "sweep.log").read_text()[-3000:]

    rows = list(csv.DictReader((root / "model_summaries/_sweep/resomap-smoke/summary.csv").open()))
    assert sorted((r["model"], int(r["resolution"])) for r in rows) == sorted(TRIALS)
    _, children, parents = _runs(f"sqlite:///{root / 'mlflow.db'}")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    keys = [c.data.tags["resomap.trial_key"] for c in children]
    assert sorted(keys) == sorted(_result(root, m, r)["key"] for m, r in TRIALS)  # one run per trial key
    for run in children:
        assert run.info.status == "FINISHED" and run.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
    checkpoints = list((root / "checkpoints").rglob("*.pt"))
    assert len(checkpoints) >= len(TRIALS)
    for path in checkpoints:
        assert "model" in load_checkpoint(path)

    ref = project_at(tmp_path / "reference")
    monkeypatch.chdir(ref)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert main(["-q", "sweep", *ARGS]) == 0
    for model, res in TRIALS:
        got, want = _result(root, model, res), _result(ref, model, res)
        assert got["test"] == pytest.approx(want["test"], abs=1e-6), (model, res)
        assert got["best_val"] == pytest.approx(want["best_val"], abs=1e-6)
        assert got["cross_resolution"].keys() == want["cross_resolution"].keys()
        for res, metrics in want["cross_resolution"].items():
            assert got["cross_resolution"][res] == pytest.approx(metrics, abs=1e-6), (model, res)


def test_a_trial_killed_then_resumed_beside_busy_processes_keeps_its_threads_and_its_results(
    tmp_path: Path, procs, monkeypatch
):
    """system.threads 0 (measured): the trial is killed once its count is measured, then run again while two
    CPU-bound processes keep the cores busy (a new measurement would pick for that load); it keeps the count its
    first attempt stored and ends with the numbers of an uninterrupted run at that count. (Two separate
    measurements may pick different counts on their own: the reference is pinned to the one the trial chose.)"""
    from conftest import trial_checkpoints

    args = [a for a in ARGS if not a.startswith(("system.threads", "sweep.models", "sweep.resolutions"))]
    args += ["system.threads=0", "sweep.models=[simple_cnn]", "sweep.resolutions=[24]"]
    cmd = [sys.executable, "-m", "resomap.cli", "sweep", *args]
    root = project_at(tmp_path / "killed")
    store = trial_checkpoints(root, "simple_cnn", 24) / "threads.json"
    proc = start_logged(procs, cmd, root, "sweep.log")
    wait_for("the trial's thread count is stored", store.exists, proc, timeout=240)
    _kill(proc)
    assert not (trial_summary(root, "simple_cnn", 24) / "result.json").exists()
    chosen = json.loads(store.read_text())["record"]["chosen"]
    busy = [start_logged(procs, [sys.executable, "-c", "while True: pass"], root, "busy.log") for _ in range(2)]
    proc = start_logged(procs, cmd, root, "sweep.log")
    assert proc.wait(timeout=600) == 0, (root / "sweep.log").read_text()[-3000:]
    for p in busy:
        _kill(p)
    got = _result(root, "simple_cnn", 24)
    assert got["environment"]["threads"] == str(chosen)

    ref = project_at(tmp_path / "reference")
    monkeypatch.chdir(ref)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert main(["-q", "sweep", *args, f"system.threads={chosen}"]) == 0
    want = _result(ref, "simple_cnn", 24)
    assert got["test"] == pytest.approx(want["test"], abs=1e-6)
    assert got["best_val"] == pytest.approx(want["best_val"], abs=1e-6)
    for res, metrics in want["cross_resolution"].items():
        assert got["cross_resolution"][res] == pytest.approx(metrics, abs=1e-6), res


def _start_server(procs: list, root: Path, port: int) -> subprocess.Popen:
    cmd = [str(MLFLOW), "server", "--backend-store-uri", f"sqlite:///{root / 'server.db'}"]
    cmd += ["--artifacts-destination", str(root / "server-artifacts"), "--host", "127.0.0.1", "--port", str(port)]
    proc = start_logged(procs, [*cmd, "--workers", "1"], root, "server.log")

    def healthy() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    wait_for("the MLflow server answers /health", healthy, proc, timeout=180)
    return proc


def test_tracking_server_killed_mid_sweep_then_sync_logs_everything(tmp_path: Path, procs):
    root = project_at(tmp_path / "p")
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    server = _start_server(procs, root, port)
    sweep = start_logged(procs, _sweep_cmd(f"mlflow.tracking_uri={uri}", "mlflow.retries=2"), root, "sweep.log")
    first = _results(root)[0]
    wait_for("the first trial's result.json", first.exists, sweep, timeout=300)
    _kill(server)
    assert sweep.wait(timeout=400) == 0, (root / "sweep.log").read_text()[-3000:]
    assert all(p.exists() for p in _results(root))
    tracked = [_result(root, m, r)["tracked"] for m, r in TRIALS]
    assert tracked[1:] == [False] * (len(TRIALS) - 1), tracked  # trained after the server died

    _start_server(procs, root, port)
    sync = subprocess.run(
        [sys.executable, "-m", "resomap.cli", "sync", *ARGS, f"mlflow.tracking_uri={uri}"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert sync.returncode == 0, sync.stdout + sync.stderr
    assert f"{tracked.count(False)} logged" in sync.stdout, sync.stdout
    client, children, parents = _runs(uri)
    assert len(parents) == 1
    by_key = {c.data.tags["resomap.trial_key"]: c for c in children}
    assert len(by_key) == len(children) == len(TRIALS)
    for model, res in TRIALS:
        result = _result(root, model, res)
        run = by_key[result["key"]]
        assert result["tracked"] is True and run.info.run_id == result["run_id"]
        assert run.info.status == "FINISHED" and run.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
        assert run.data.metrics["test/accuracy"] == pytest.approx(result["test"]["test/accuracy"])
        steps = sorted(m.step for m in client.get_metric_history(run.info.run_id, "val/loss"))
        assert steps == list(range(result["epochs_run"])), (model, res, steps)
        assert "result.json" in {a.path for a in client.list_artifacts(run.info.run_id)}


# ---------------------------------------------------------------- two sweeps at once, a kill during the summary swap


def _trial_lines(log: str) -> list[str]:
    return [line.split(" | ", 1)[1].split(" in ")[0] for line in log.splitlines() if " | " in line and " in " in line]


def _no_duplicate_points(client, run) -> None:
    for key in run.data.metrics:
        steps = [m.step for m in client.get_metric_history(run.info.run_id, key)]
        assert len(steps) == len(set(steps)), (run.info.run_name, key, steps)


def test_two_identical_sweeps_train_each_trial_once_beside_another_experiment(tmp_path: Path, procs):
    root = project_at(tmp_path / "p")
    # both wait: which of the two takes the lock first is a race (the refusal without --wait: tests/test_sharing.py)
    first = start_logged(procs, _sweep_cmd("--wait"), root, "first.log")
    second = start_logged(procs, _sweep_cmd("--wait"), root, "second.log")
    other = ["experiment.name=other", "sweep.resolutions=[20]"]  # its own trial folders, the same store
    beside = start_logged(procs, _sweep_cmd(*other), root, "other.log")
    for proc in (first, second, beside):
        assert proc.wait(timeout=900) == 0, (root / "first.log").read_text()[-3000:]
    logs = {name: (root / f"{name}.log").read_text() for name in ("first", "second", "other")}
    trained = _trial_lines(logs["first"]) + _trial_lines(logs["second"])
    assert sorted(trained) == sorted(f"{m}@{r}" for m, r in TRIALS), logs  # each trial trained once
    waited = [n for n in ("first", "second") if "waiting for sweep 'resomap-smoke'" in logs[n]]
    assert len(waited) == 1 and "nothing to do" in logs[waited[0]], logs
    assert "waiting" not in logs["other"] and len(_trial_lines(logs["other"])) == 2  # not held up by the lock
    for text in logs.values():
        assert "Traceback" not in text and "sqlalchemy" not in text.lower() and "OperationalError" not in text, text
    client, children, parents = _runs(f"sqlite:///{root / 'mlflow.db'}")
    assert len(parents) == 1
    keys = sorted(c.data.tags["resomap.trial_key"] for c in children)
    assert keys == sorted(_result(root, m, r)["key"] for m, r in TRIALS)  # one child run per trial key
    for run in children:
        _no_duplicate_points(client, run)
    other_runs = client.search_runs([client.get_experiment_by_name("other").experiment_id])
    assert len(other_runs) == 1 + 2


def _summary_files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def _whole(folder: Path, files: set[str]) -> float:
    """The summary's confidence level, after checking that the folder is one whole summary (old or new)."""
    assert _summary_files(folder) == files
    level = json.loads((folder / "summary.json").read_text())["stats"]["level"]
    assert json.loads((folder / "state.json").read_text())["inputs"]["stats"]["level"] == level
    with (folder / "summary.csv").open() as fh:
        assert len(list(csv.DictReader(fh))) == 2
    return level


def test_sigkill_during_the_summary_swap_leaves_the_old_or_the_new_summary_whole(tmp_path: Path, procs):
    root = project_at(tmp_path / "p")
    args = ["mlflow.enabled=false", "sweep.models=[tiny_cnn]", "training.epochs=1"]
    assert start_logged(procs, _sweep_cmd(*args), root, "sweep.log").wait(timeout=400) == 0
    folder = root / "model_summaries" / "_sweep" / "resomap-smoke"
    staging = root / "model_summaries" / "._sweep.staging" / "resomap-smoke"
    files = _summary_files(folder)
    assert _whole(folder, files) == 0.95 and "state.json" in files and "report.html" in files
    seen = set()
    for delay in (0.0, 0.5, 1.5, 4.0, None):  # kills from the start of the summary build to after the swap
        proc = start_logged(procs, _sweep_cmd(*args, "stats.level=0.9"), root, "sweep.log")
        if delay is None:
            wait_for("the new summary in place", lambda: _whole_or_none(folder, files) == 0.9, proc, timeout=400)
        else:
            wait_for("the summary being built", staging.exists, proc, timeout=400)
            time.sleep(delay)
        _kill(proc)
        seen.add(_whole(folder, files))
    assert 0.9 in seen
    assert start_logged(procs, _sweep_cmd(*args, "stats.level=0.9"), root, "sweep.log").wait(timeout=400) == 0
    assert _whole(folder, files) == 0.9 and not staging.exists()


def _whole_or_none(folder: Path, files: set[str]) -> float | None:
    try:
        return _whole(folder, files)
    except (AssertionError, OSError, ValueError):
        return None

"""The sweep's MLflow parent follows its summary (issue 34, item 4): after a seed is added, a stats setting changes
or adaptive rounds run, the parent's by_resolution points equal summary.csv with one point per (key, step); the
parent is closed FINISHED when the sweep ends, whatever the order in which an adaptive sweep decides its models; a
finished adaptive sweep run again does nothing; the ETA lines of a run killed in its summary phase reach the next
summary's eta.csv. Trials come from test_adaptive's fake executor (result.json and predictions, no training)."""

from __future__ import annotations

import csv
import json
import logging
from collections import Counter

import pytest

from resomap.config import load
from resomap.sweep import summarise as summarise_module
from resomap.sweep.adaptive import run_adaptive
from resomap.sweep.sweep import run_sweep, summary_folder
from test_adaptive import _fake_executor, _two_models


def _client(tmp_path):
    from mlflow import MlflowClient

    return MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")


def _points(client, run_id: str) -> dict[str, list[tuple[int, float]]]:
    """Every metric of the run with all its logged (step, value) points."""
    run = client.get_run(run_id)
    return {key: [(m.step, m.value) for m in client.get_metric_history(run_id, key)] for key in run.data.metrics}


def _assert_follows_summary(tmp_path, run_id: str, summary_dir) -> None:
    points = _points(_client(tmp_path), run_id)
    twice = {key: step for key, pts in points.items() for step, n in Counter(s for s, _ in pts).items() if n > 1}
    assert not twice, twice  # no (key, step) logged twice
    # summary.csv holds 6 decimals
    rows = list(csv.DictReader((summary_dir / "summary.csv").open()))
    assert rows
    for row in rows:
        for column in ("test_accuracy", "test_accuracy_ci_low", "test_accuracy_ci_high"):
            if not row.get(column):
                continue
            logged = dict(points[f"by_resolution/{row['model']}/{column}"])
            assert logged[int(row["resolution"])] == pytest.approx(float(row[column]), abs=5.1e-7), (row, column)
    resolutions = {(r["model"], int(r["resolution"])) for r in rows}
    for key, pts in points.items():
        if key.startswith("by_resolution/"):
            model = key.split("/")[1]
            assert {(model, step) for step, _ in pts} <= resolutions, key  # no point the summary lacks


def _cfg(tmp_path, *settings: str):
    return load(
        "configs",
        None,
        [
            f"experiment.output_dir={tmp_path}",
            "experiment.name=follows",
            "sweep.models=[tiny_cnn,simple_cnn]",
            "sweep.resolutions=[16,32,64]",
            "stats.margin=0.12",
            "stats.resamples=200",
            "explainability.enabled=false",
            f"mlflow.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}",
            *settings,
        ],
    )


def test_adding_a_seed_and_a_stats_change_rewrite_the_parent_points(tmp_path):
    """tiny_cnn at 32 px: 0.9 on seed 0, 1.0 on seed 1 (test_adaptive's trials): adding seed 1 moves its
    accuracy to 0.95 and every interval; a new stats.level moves the intervals again."""
    calls: list = []
    first = run_sweep(_cfg(tmp_path, "sweep.seeds=[0]"), executor=_fake_executor(calls, []), report=lambda _: None)
    points = _points(_client(tmp_path), first.parent_run_id)
    assert dict(points["by_resolution/tiny_cnn/test_accuracy"])[32] == pytest.approx(0.9)
    _assert_follows_summary(tmp_path, first.parent_run_id, first.summary_dir)

    added = run_sweep(_cfg(tmp_path, "sweep.seeds=[0,1]"), executor=_fake_executor(calls, []), report=lambda _: None)
    assert added.parent_run_id == first.parent_run_id and len(calls) == 2
    points = _points(_client(tmp_path), added.parent_run_id)
    assert dict(points["by_resolution/tiny_cnn/test_accuracy"])[32] == pytest.approx(0.95)
    _assert_follows_summary(tmp_path, added.parent_run_id, added.summary_dir)

    before = dict(_points(_client(tmp_path), added.parent_run_id)["by_resolution/tiny_cnn/test_accuracy_ci_low"])
    level = run_sweep(_cfg(tmp_path, "sweep.seeds=[0,1]", "stats.level=0.8"), report=lambda _: None)
    after = dict(_points(_client(tmp_path), level.parent_run_id)["by_resolution/tiny_cnn/test_accuracy_ci_low"])
    assert after[32] > before[32]  # a narrower interval, rewritten in place
    _assert_follows_summary(tmp_path, level.parent_run_id, level.summary_dir)
    assert _client(tmp_path).get_run(level.parent_run_id).info.status == "FINISHED"


def test_an_adaptive_sweep_closes_its_parent_follows_its_summary_and_reruns_as_a_no_op(tmp_path):
    """simple_cnn is decided at look 1, tiny_cnn at look 2 on six seeds (test_adaptive): the parent ends FINISHED
    with tiny_cnn's six-seed values; the same sweep again trains nothing and rebuilds nothing."""
    cfg = _two_models(tmp_path, "sweep.adaptive.seeds_per_round=plan")
    calls: list = []
    out = run_adaptive(cfg, executor=_fake_executor(calls, []), report=lambda _: None)
    assert len(calls) == 2 and out.record["stopped"] == "every model is decided"
    summary_dir = out.outcome.summary_dir
    client = _client(tmp_path)
    parent = client.get_run(out.outcome.parent_run_id)
    assert parent.info.status == "FINISHED"
    assert json.loads((summary_dir / "state.json").read_text())["published"] is True
    _assert_follows_summary(tmp_path, parent.info.run_id, summary_dir)
    tiny32 = dict(_points(client, parent.info.run_id)["by_resolution/tiny_cnn/test_accuracy"])[32]
    assert tiny32 == pytest.approx(1 - 0.1 / 6)  # six seeds, not look 1's two (0.95)

    stamp = {p.name: p.stat().st_mtime_ns for p in summary_dir.iterdir()}
    lines: list[str] = []
    again = run_adaptive(cfg, executor=_fake_executor(calls, []), report=lines.append)
    assert len(calls) == 2  # no round ran
    assert lines == ["[adaptive] nothing to do: every model is decided, and the summary is current"]
    assert again.record == json.loads(json.dumps(out.record, default=str))  # as summary.json holds it
    assert again.outcome.parent_run_id == parent.info.run_id
    assert {p.name: p.stat().st_mtime_ns for p in summary_dir.iterdir()} == stamp

    changed = run_adaptive(  # another config is not the finished sweep: its rounds run again (no training)
        _two_models(tmp_path, "sweep.adaptive.seeds_per_round=plan", "stats.resamples=300"),
        executor=_fake_executor(calls, []),
        report=lambda _: None,
    )
    assert len(calls) == 2 and changed.record["stopped"] == "every model is decided"
    _assert_follows_summary(tmp_path, parent.info.run_id, summary_dir)


def test_a_store_that_cannot_rewrite_gets_the_missing_points_and_one_warning(tmp_path, monkeypatch, caplog):
    from resomap.tracking.mlflow_store import Tracker

    calls: list = []
    first = run_sweep(_cfg(tmp_path, "sweep.seeds=[0]"), executor=_fake_executor(calls, []), report=lambda _: None)
    monkeypatch.setattr(Tracker, "replace_metrics", lambda self, run_id, points: False)
    with caplog.at_level(logging.WARNING):
        run_sweep(_cfg(tmp_path, "sweep.seeds=[0,1]"), executor=_fake_executor(calls, []), report=lambda _: None)
    warned = [r.getMessage() for r in caplog.records if "cannot rewrite a logged metric" in r.getMessage()]
    assert len(warned) == 1 and "summary.csv is current" in warned[0]
    points = _points(_client(tmp_path), first.parent_run_id)
    assert dict(points["by_resolution/tiny_cnn/test_accuracy"])[32] == pytest.approx(0.9)  # kept, not doubled
    assert Counter(s for s, _ in points["by_resolution/tiny_cnn/test_accuracy"])[32] == 1


def test_the_eta_lines_of_a_run_killed_in_its_summary_phase_reach_the_next_summary(tmp_path, monkeypatch):
    cfg = _cfg(tmp_path, "sweep.seeds=[0]", "sweep.models=[tiny_cnn]", "mlflow.enabled=false")

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # as a kill would: nothing after this point runs

    monkeypatch.setattr(summarise_module, "_build_summary", killed)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(cfg, executor=_fake_executor([], []), report=lambda _: None)
    assert not (summary_folder(cfg) / "eta.csv").exists()
    monkeypatch.undo()
    run_sweep(cfg, executor=_fake_executor([], []), report=lambda _: None)  # nothing to train: the summary only
    rows = list(csv.DictReader((summary_folder(cfg) / "eta.csv").open()))
    assert sorted(r["trial"] for r in rows) == [f"tiny_cnn@{r}" for r in (16, 32, 64)]
    assert not list(summary_folder(cfg).parent.glob(".*.eta.csv"))  # the pending lines, now in the summary


def test_log_metric_points_rewrites_a_changed_point_and_removes_what_the_summary_lacks(tmp_path):
    from resomap.tracking import make_tracker
    from resomap.tracking.sweep_run import log_metric_points

    tracker = make_tracker(_cfg(tmp_path))
    run_id = tracker.start_run("parent")
    log_metric_points(tracker, run_id, {"by_resolution/m/a": {16: 0.5, 32: 0.6}, "by_resolution/m/b": {16: 1.0}})
    log_metric_points(tracker, run_id, {"by_resolution/m/a": {32: 0.7}}, namespace="by_resolution/")
    points = _points(_client(tmp_path), run_id)
    assert points == {"by_resolution/m/a": [(32, 0.7)]}  # 16 px gone from it, b gone, 32 px rewritten once
    log_metric_points(tracker, run_id, {"by_resolution/m/a": {32: 0.7}, "other": {0: 1.0}}, namespace="by_resolution/")
    assert _points(_client(tmp_path), run_id) == {"by_resolution/m/a": [(32, 0.7)], "other": [(0, 1.0)]}

"""One experiment, one writer (issue 62 item 5): two project folders logging the same experiment to one tracking
store each keep runs of their own (their host and folder in a tag), so no (run, metric, step) is written twice and
neither folder's trials or parent land in the other's runs."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from conftest import QUIET_SMOKE, SMOKE, project_at, run_cli

ARGS = [*QUIET_SMOKE, "sweep.models=[tiny_cnn]", "sweep.resolutions=[16,24]", "training.epochs=2"]


@pytest.fixture
def shared_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    uri = f"sqlite:///{tmp_path / 'server.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    return uri


def _sweep_in(folder: Path, monkeypatch: pytest.MonkeyPatch, capsys, *extra: str) -> tuple[int, str]:
    monkeypatch.chdir(folder if (folder / "configs").is_dir() else project_at(folder))
    code, out, err = run_cli(["sweep", *ARGS, *extra], capsys)
    return code, out + err


def test_two_folders_logging_one_experiment_to_one_store_never_share_a_run(
    tmp_path, shared_store, monkeypatch, capsys, caplog
):
    import mlflow

    errs = {}
    for name in ("a", "b"):
        code, errs[name] = _sweep_in(tmp_path / name, monkeypatch, capsys)
        assert code == 0, errs[name]
    said = [r.getMessage() for r in caplog.records if "logs runs of its own beside them" in r.getMessage()]
    assert len(said) == 1 and str((tmp_path / "a").resolve()) in said[0], said
    client = mlflow.MlflowClient(shared_store)
    experiment = client.get_experiment_by_name(SMOKE).experiment_id
    trials = client.search_runs([experiment], "tags.`resomap.kind` = 'trial'")
    parents = client.search_runs([experiment], "tags.`resomap.kind` = 'sweep'")
    folders = {str((tmp_path / name).resolve()) for name in ("a", "b")}
    # a run per trial and folder, each tagged with the host and folder that wrote it, under its own folder's parent
    assert Counter(r.data.tags["resomap.trial_key"] for r in trials) == Counter(
        {key: 2 for key in {r.data.tags["resomap.trial_key"] for r in trials}}
    )
    assert len(trials) == 4 and len(parents) == 2
    origin = {r.info.run_id: r.data.tags["resomap.origin"] for r in [*trials, *parents]}
    assert {o.split(":", 1)[1] for o in origin.values()} == folders
    parent_of = {origin[p.info.run_id]: p.info.run_id for p in parents}
    for run in trials:
        assert run.data.tags["mlflow.parentRunId"] == parent_of[origin[run.info.run_id]]
        for key in run.data.metrics:  # no (run, key, step) written twice
            steps = [m.step for m in client.get_metric_history(run.info.run_id, key)]
            assert len(steps) == len(set(steps)), (run.info.run_name, key, steps)
    # a second run in folder a writes nothing new: it finds its own runs
    code, err = _sweep_in(tmp_path / "a", monkeypatch, capsys)
    assert code == 0, err
    assert len(client.search_runs([experiment], "tags.`resomap.kind` = 'trial'")) == 4

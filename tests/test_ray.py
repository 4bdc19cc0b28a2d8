"""The `ray` executor on a local Ray (this machine's cores): a smoke sweep with every trial a Ray task, nested
MLflow runs, a second run that skips everything, and a task that fails only its own trial.
The executor starting (and shutting down) a Ray of its own is left to `resomap sweep --executor ray` by hand."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="Ray is not installed (pip install -e '.[dev]' or '.[ray]')")

from conftest import trial_summary
from resomap.cli import main

REPO = Path(__file__).resolve().parents[1]
MODELS = ["tiny_cnn", "simple_cnn"]
SWEEP = [
    "sweep",
    "--executor",
    "ray",
    "--preset",
    "smoke",
    f"sweep.models=[{','.join(MODELS)}]",
    "sweep.resolutions=[32]",
    "explainability.enabled=false",
]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def local_ray():
    """One local 2-CPU Ray for the module (its idle workers keep their imports between tests); the executor
    attaches to it and leaves it running. Shut down at the end of the module."""
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, local_ray) -> Path:
    """A fresh project folder; its path differs from the Ray workers' start folder, as on a cluster."""
    shutil.copytree(REPO / "configs", tmp_path / "configs")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path


def _runs(project: Path) -> list:
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    return client.search_runs([client.get_experiment_by_name("resomap-smoke").experiment_id])


def test_ray_sweep_runs_each_trial_as_a_task_then_skips(project: Path, local_ray, capsys):
    assert main(SWEEP) == 0, capsys.readouterr().err
    assert local_ray.is_initialized()  # the executor leaves a Ray it did not start running
    for model in MODELS:
        result = json.loads((trial_summary(project, model, 32) / "result.json").read_text())
        assert result["status"] == "FINISHED" and 0.0 <= result["test"]["test/accuracy"] <= 1.0, result
    runs = _runs(project)
    (parent,) = [r for r in runs if r.data.tags.get("resomap.kind") == "sweep"]
    children = [r for r in runs if r.data.tags.get("resomap.kind") == "trial"]
    assert sorted(r.info.run_name for r in children) == sorted(f"{m}@32" for m in MODELS)
    assert all(r.data.tags.get("mlflow.parentRunId") == parent.info.run_id for r in children)
    assert all(r.info.status == "FINISHED" for r in runs) and len(runs) == 3
    capsys.readouterr()

    assert main(SWEEP) == 0  # the same command again: every trial is done, Ray is not even started
    out = capsys.readouterr().out
    assert f"{len(MODELS)} done, 0 failed, 0 remaining" in out
    assert len(_runs(project)) == 3


def test_a_failing_task_fails_only_its_trial(project: Path, monkeypatch: pytest.MonkeyPatch, capsys):
    from resomap.sweep import executors

    real = executors.trial_spec

    def broken_for_simple_cnn(trial, *args):
        spec = real(trial, *args)
        if trial.model == "simple_cnn":
            spec["config"]["training"]["epochs"] = "many"  # the task raises while rebuilding its config
        return spec

    monkeypatch.setattr(executors, "trial_spec", broken_for_simple_cnn)
    assert main(SWEEP) == 1
    out = capsys.readouterr().out
    assert "FAILED simple_cnn@32: Ray task failed: ConfigError" in out, out
    ok = json.loads((trial_summary(project, "tiny_cnn", 32) / "result.json").read_text())
    bad = json.loads((trial_summary(project, "simple_cnn", 32) / "result.json").read_text())
    assert ok["status"] == "FINISHED" and bad["status"] == "FAILED"

"""The task axis as a registered strategy: the built-in tasks, the checks at config load, and a third task from a
plugin (tests/task_example.py: regression) running a sweep end to end with no file of ResoMap edited."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import plugin_folder, trial_summary
from resomap.config import load
from resomap.errors import ConfigError
from resomap.tasks import TASKS, get_task, task_names

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent


def test_builtin_tasks_are_registered_with_their_target_forms():
    assert {"classification", "segmentation"} <= set(task_names())
    assert get_task("classification").target_form == "class"
    assert get_task("segmentation").target_form == "region"
    assert get_task().name == "classification"  # the default


def test_unknown_task_is_one_line_with_suggestions():
    with pytest.raises(ConfigError) as info:
        load(REPO / "configs", overrides=["experiment.task=segmentaton"])
    text = str(info.value)
    assert "experiment.task" in text and "segmentation" in text and "\n" not in text


def test_unknown_loss_term_is_refused_with_suggestions():
    with pytest.raises(ConfigError, match=re.escape("no loss term 'dise'; did you mean dice?")) as info:
        load(REPO / "configs", preset="seg_quickstart", overrides=["segmentation.loss=[dise]"])
    assert "\n" not in str(info.value)


def test_the_step_of_each_task_follows_its_outputs():
    cls, seg = get_task("classification"), get_task("segmentation")
    y, loss = cls.step_targets(torch.zeros(4, 3))
    assert y.shape == (4,) and loss(torch.zeros(4, 3), y) > 0
    y, loss = seg.step_targets(torch.zeros(2, 3, 8, 8))
    assert y.shape == (2, 8, 8) and float(loss(torch.zeros(2, 3, 8, 8), y)) > 0


def test_region_targets_explain_the_region_sum_of_a_class_logit():
    """A captum explainer on region targets attributes the class's logits summed over the region: here a model
    whose logit map is the input itself, so saliency is 1 inside the region and 0 outside."""
    from resomap.explain import build_explainer, explaining
    from resomap.explain.methods.targets import region_targets
    from resomap.models import ModelSpec

    class Identity(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(()))

        def forward(self, x):
            return torch.cat([x[:, :1] * self.w, -x[:, :1] * self.w], dim=1)  # 2 classes, [B, 2, r, r]

    model = Identity()
    region = torch.zeros(1, 8, 8, dtype=torch.bool)
    region[0, 2:4, 5:7] = True
    targets = region_targets(torch.tensor([0]), region)
    spec = ModelSpec("identity", "test", ())
    from resomap.config.schema import ExplainabilityConfig

    with (
        explaining(model),
        build_explainer("saliency", model, spec=spec, resolution=8, cfg=ExplainabilityConfig()) as e,
    ):
        maps = e(torch.randn(1, 1, 8, 8), targets)
    assert torch.equal(maps[0] > 0, region[0])


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory) -> Path:
    """A folder that makes `task_example` an installed ResoMap plugin: a dist-info with its entry point."""
    return plugin_folder(tmp_path_factory.mktemp("plugin"), "task_example")


def _run(args: list[str], plugin_path: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(plugin_path), str(TESTS)]), MPLBACKEND="Agg")
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_a_third_task_from_a_plugin_runs_a_sweep_end_to_end(plugin_path, tmp_path):
    assert "regression" not in TASKS  # nothing in ResoMap names it: only the plugin brings it
    args = [sys.executable, "-m", "resomap.cli", "sweep", "--config-dir", str(REPO / "configs"), "--preset", "smoke"]
    args += [f"experiment.output_dir={tmp_path}", "experiment.name=third-task", "experiment.task=regression"]
    args += ["data.dataset=toy_counts", "sweep.models=[toy_regressor]", "sweep.resolutions=[16,32]"]
    args += ["sweep.seeds=[42,43]", "training.epochs=2", "explainability.methods=[saliency,gradcam]"]
    args += ["explainability.sanity_methods=[]", "profiling.iters=2", "profiling.warmup=1"]
    out = _run(args, plugin_path, tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    for res in (16, 32):
        for seed in (42, 43):
            folder = trial_summary(tmp_path, "toy_regressor", res, seed, experiment="third-task")
            result = json.loads((folder / "result.json").read_text())
            assert result["status"] == "FINISHED", result.get("error")
            assert result["test"]["test/mae"] >= 0 and 0 <= result["test"]["test/accuracy"] <= 1
            assert "explain/saliency/deletion_auc" in result["explain"]["metrics"]
            assert (folder / "predictions.csv").is_file() and (folder / "explanations.npz").is_file()
            assert result["profile"]["gmacs"] > 0
    out_dir = tmp_path / "model_summaries" / "_sweep" / "third-task"
    summary = (out_dir / "summary.csv").read_text()
    assert "toy_regressor,toy,16" in summary and "toy_regressor,toy,32" in summary
    assert (out_dir / "paired_tests.csv").read_text().count("toy_regressor") == 1
    agreement = (out_dir / "explanations" / "agreement.csv").read_text()
    assert ",seed," in agreement and ",resolution," in agreement  # the floor and the comparison
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("third-task").experiment_id
    assert len(client.search_runs([exp], "tags.`resomap.trial_key` != ''")) == 4

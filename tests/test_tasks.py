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


# ---------------------------------------------------------------- task and loss options as config groups


@pytest.fixture
def counting():
    """tests/loss_task_example.py registered in this process (a plugin task with its own options and loss terms),
    taken out again after the test."""
    import importlib

    module = importlib.import_module("loss_task_example")
    module.CALLS.clear()
    yield module
    module.unregister()
    sys.modules.pop("loss_task_example", None)


def _counting_args(root: Path, *extra: str) -> list[str]:
    args = ["sweep", "--config-dir", str(REPO / "configs"), "--preset", "smoke", f"experiment.output_dir={root}"]
    args += ["experiment.name=counting", "experiment.task=counting", "data.dataset=count_squares"]
    args += ["sweep.models=[count_net]", "sweep.resolutions=[16]", "sweep.seeds=[42,43]", "sweep.cost_probe=false"]
    args += ["training.batch_size=8", "explainability.enabled=false", "mlflow.enabled=false", "stats.resamples=200"]
    return [*args, "profiling.warmup=1", "profiling.iters=2", "profiling.train_batch_size=3", *extra]


def test_a_plugin_task_with_its_own_loss_option_runs_a_sweep_and_profiles_with_that_loss(counting, tmp_path, capsys):
    """The task option task.counting.loss picks the plugin's loss term, loss.l1_spy.scale its option; training
    and the profile's timed training step (a batch of profiling.train_batch_size) both call that term."""
    from conftest import run_cli

    code, out, err = run_cli(_counting_args(tmp_path, "task.counting.loss=l1_spy", "loss.l1_spy.scale=2.5"), capsys)
    assert code == 0, out[-2000:] + err[-2000:]
    for seed in (42, 43):
        folder = trial_summary(tmp_path, "count_net", 16, seed, experiment="counting")
        result = json.loads((folder / "result.json").read_text())
        assert result["status"] == "FINISHED", result.get("error")
        assert json.loads((folder / "profile.json").read_text())["task"] == "counting"  # the trial's task
    assert {name for name, _, _ in counting.CALLS} == {"l1_spy"}  # never mse_spy, never cross-entropy
    assert {scale for _, scale, _ in counting.CALLS} == {2.5}
    assert any(batch == 3 for _, _, batch in counting.CALLS)  # the profile's timed training step used it


SEG = ["experiment.task=segmentation", "data.dataset=synthetic_seg", "sweep.models=[tiny_segnet]"]
CLS = ["experiment.task=classification", "data.dataset=synthetic", "sweep.models=[tiny_cnn]"]


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["loss.l1_spy.scael=2"], "unknown key 'loss.l1_spy.scael'; did you mean 'loss.l1_spy.scale'?"),
        (["loss.l1_sp.scale=2"], "did you mean 'loss.l1_spy.scale'?"),
        (["task.counting.loss=l2_spy"], "no loss term 'l2_spy'; did you mean"),
        (["task.counting.loss=dice"], "'dice' is a segmentation loss"),
        (["loss.focal_tversky.gamma=2"], "loss.focal_tversky: expected options of a counting loss term"),
        ([*SEG, "task.counting.loss=l1_spy"], "task.counting: expected options of experiment.task (none"),
        ([*CLS, "loss.mse_spy.scale=2"], "loss.mse_spy: expected options of a classification loss term"),
    ],
)
def test_bad_task_and_loss_options_are_one_line_config_errors(counting, tmp_path, capsys, extra, needle):
    from conftest import run_cli

    code, _, err = run_cli(_counting_args(tmp_path, *extra), capsys)
    errors = [line for line in err.splitlines() if line.startswith("resomap")]
    assert code == 2 and len(errors) == 1 and needle in errors[0], err


def test_the_focal_tversky_options_moved_to_the_loss_group():
    cfg = load(REPO / "configs", preset="seg_quickstart", overrides=["loss.focal_tversky.gamma=1.0"])
    assert cfg.loss.focal_tversky.gamma == 1.0 and cfg.loss.focal_tversky.alpha == 0.3
    with pytest.raises(ConfigError) as info:
        load(REPO / "configs", preset="seg_quickstart", overrides=["segmentation.tversky_gamma=1.0"])
    assert str(info.value).endswith("segmentation.tversky_gamma has moved: set loss.focal_tversky.gamma instead")
    with pytest.raises(ConfigError, match=re.escape("loss.focal_tversky.beta: expected a positive number")):
        load(REPO / "configs", preset="seg_quickstart", overrides=["loss.focal_tversky.beta=0"])


def test_the_moved_focal_tversky_keys_keep_the_trial_keys():
    """loss.focal_tversky.* sit in the trial key where segmentation.tversky_* were: unset and set to the defaults
    give one key (the key of sweeps from before the move), another value another key."""
    from resomap.sweep.trial import trial_key

    def key(*extra: str) -> str:
        return trial_key(load(REPO / "configs", preset="seg_quickstart", overrides=list(extra)), "tiny_segnet", 32, 42)

    assert key() == key("loss.focal_tversky.gamma=0.75", "loss.focal_tversky.alpha=0.3")
    assert key() != key("loss.focal_tversky.gamma=1.0")

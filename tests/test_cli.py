"""The `resomap` command end to end on tiny synthetic data: a train run into MLflow, and the bad-input list
(each a one-line error, exit code 2, no traceback, nothing written)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from PIL import Image

from conftest import run_cli, trial_checkpoints, trial_summary

REPO = Path(__file__).resolve().parents[1]


SMOKE = ["--preset", "smoke"]


def _written(project: Path) -> list[str]:
    return sorted(
        str(p.relative_to(project))
        for p in project.rglob("*")
        if p.is_file() and "configs" not in p.parts and ".cache" not in p.parts
    )


def test_train_logs_a_complete_run_to_mlflow(project: Path, capsys):
    code, out, _ = run_cli(
        ["train", "--model", "tiny_cnn", "--resolution", "32", *SMOKE, "training.epochs=2", "mlflow.log_model=true"],
        capsys,
    )
    assert code == 0, out
    assert out.startswith("device: cpu")
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    exp = client.get_experiment_by_name("resomap-smoke")
    (run,) = client.search_runs([exp.experiment_id])
    assert run.info.status == "FINISHED" and run.info.run_name == "tiny_cnn@32"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "val/loss")] == [0, 1]
    assert 0.0 <= run.data.metrics["test/accuracy"] <= 1.0
    assert run.data.params["resolution"] == "32" and "training.epochs" not in run.data.params
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"config.yaml", "figures", "checkpoints", "result.json"} <= artifacts
    saved = client.download_artifacts(run.info.run_id, "config.yaml", str(project))  # the whole config
    assert yaml.safe_load(Path(saved).read_text())["training"]["epochs"] == 2
    assert [a.path for a in client.list_artifacts(run.info.run_id, "figures")] == ["figures/confusion_matrix.png"]
    assert client.search_logged_models([exp.experiment_id])
    folder = trial_checkpoints(project, "tiny_cnn", 32)
    assert (folder / "last.pt").exists() and (folder / "config.yaml").exists()
    assert (trial_summary(project, "tiny_cnn", 32) / "result.json").exists()


def test_same_command_twice_reuses_the_run(project: Path, capsys):
    args = ["train", "--model", "tiny_cnn", "--resolution", "32", *SMOKE]
    assert run_cli(args, capsys)[0] == 0
    code, out, _ = run_cli(args, capsys)
    assert code == 0 and "resumed from last.pt" in out
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    exp = client.get_experiment_by_name("resomap-smoke")
    assert len(client.search_runs([exp.experiment_id])) == 1


def _imagefolder(root: Path, classes: dict[str, int]) -> Path:
    for name, count in classes.items():
        (root / name).mkdir(parents=True)
        for i in range(count):
            Image.new("L", (16, 16), color=i * 10).save(root / name / f"{i}.png")
    return root


BAD_INPUTS = [
    (["--model", "resnet81", "--resolution", "32"], "did you mean resnet18"),
    (["--model", "tiny_cnn", "--resolution", "0"], "positive integer"),
    (["--model", "tiny_cnn", "--resolution", "-3"], "positive integer"),
    (["--model", "tiny_cnn", "--resolution", "abc"], "positive integer"),
    (["--model", "tiny_cnn", "--resolution", "32", "trainig.epochs=2"], "did you mean 'training.epochs'"),
    (["--model", "tiny_cnn", "--resolution", "32", "training.epochs=two"], "expected an integer"),
    (["--model", "tiny_cnn", "--resolution", "32", "system.device=cuda"], "no CUDA GPU"),
    (
        ["--model", "tiny_cnn", "--resolution", "32", "data.dataset=imagefolder", "data.imagefolder.root=nowhere"],
        "nowhere",
    ),
    (["--model", "tiny_cnn", "--resolution", "32", "data.dataset=imagefolder", "data.imagefolder.root=empty"], "empty"),
    (
        ["--model", "tiny_cnn", "--resolution", "32", "data.dataset=imagefolder", "data.imagefolder.root=oneempty"],
        "no images",
    ),
    (["--model", "tiny_cnn", "--resolution", "32", "data.dataset=csv", "data.csv.manifest=missing.csv"], "missing.csv"),
    (["--model", "tiny_cnn", "--resolution", "32", "models.pretrained={tiny_cnn: other.pt}"], "other.pt"),
    (["--model", "tiny_cnn", "--resolution", "32", "models.pretrained={tiny_cnn: code.pt}"], "code.pt"),
    (["--model", "hog_svm", "--resolution", "12"], "models.hog.cells_per_side: expected at most 6"),
]


@pytest.mark.parametrize(("args", "needle"), BAD_INPUTS, ids=[" ".join(a[1:2] + a[4:]) for a, _ in BAD_INPUTS])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(project: Path, capsys, args, needle):
    if torch.cuda.is_available() and "system.device=cuda" in args:
        pytest.skip("a GPU is present")
    (project / "empty").mkdir()
    _imagefolder(project / "oneempty", {"a": 3, "b": 0})
    bad_model, _ = __import__("resomap.models", fromlist=["build_model"]).build_model(
        "simple_cnn", 5, 1, __import__("resomap.config", fromlist=["load"]).load(None).models
    )
    torch.save(bad_model.state_dict(), project / "other.pt")
    torch.save({"model": print}, project / "code.pt")  # a pickled callable: must be refused, never run
    before = _written(project)
    code, _, err = run_cli(["train", *args, *SMOKE], capsys)
    assert code == 2
    lines = [ln for ln in err.strip().splitlines() if ln]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert needle in lines[0], lines[0]
    assert _written(project) == before


def test_malformed_yaml_exits_2(project: Path, capsys):
    (project / "configs" / "training.yaml").write_text("training:\n  epochs: [1\n")
    code, _, err = run_cli(["train", "--model", "tiny_cnn", "--resolution", "32"], capsys)
    assert code == 2 and "training.yaml: line" in err and "malformed YAML" in err


def test_real_process_exit_code_and_no_traceback(project: Path):
    proc = subprocess.run(
        [sys.executable, "-m", "resomap.cli", "train", "--model", "resnt18", "--resolution", "32"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("resomap: error: no model 'resnt18'; did you mean resnet18")
    assert line.endswith("(see: resomap models)")


@pytest.mark.parametrize("command", [["models"], ["config", "--doc"]], ids=["short", "longer than a buffer"])
def test_a_closed_pipe_ends_the_command_quietly(project: Path, command: list[str]):
    """`resomap models | head -1`: the reader gone before the command writes (its output under or over Python's
    8 KB stdout buffer) ends it with 141 (128 + SIGPIPE) and nothing on stderr, not a BrokenPipeError traceback
    or Python's "Exception ignored" at exit."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "resomap.cli", *command], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    proc.stdout.close()  # before the interpreter is even up: its first write finds no reader
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and err == "", err


def test_models_and_config_commands(project: Path, capsys):
    code, out, _ = run_cli(["models"], capsys)
    assert code == 0 and "resnet18" in out and "tiny_cnn" in out and "timm:" in out
    code, out, _ = run_cli(["config", *SMOKE, "training.epochs=3"], capsys)
    assert code == 0 and "epochs: 3" in out

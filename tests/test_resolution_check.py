"""Resolutions below a model's smallest input side: refused before anything is created (one line, exit 2), or with
sweep.skip_invalid_resolutions left out of the grid and of the model's cross-resolution tests, so the valid trials
finish; the dry run names them skipped."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_cli, trial_summary

REPO = Path(__file__).resolve().parents[1]
QUIET = [
    "--preset",
    "smoke",
    "mlflow.enabled=false",
    "explainability.enabled=false",
    "profiling.enabled=false",
    "system.threads=1",
]
SIMPLE = ["sweep.models=[simple_cnn]", "sweep.resolutions=[12,16,24]"]


def _written(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


def test_smallest_side_and_the_sides_a_model_takes():
    from resomap.config.schema import ModelsConfig
    from resomap.models import build_model, smallest_input_side, usable_resolutions

    model, _ = build_model("simple_cnn", 2, 1, ModelsConfig())
    assert smallest_input_side(model, 1) == 15  # three 2x2 poolings and a 3x3 conv without padding
    assert usable_resolutions(model, [24, 12, 16], 1) == [16, 24]
    assert usable_resolutions(model, [16, 24], 1) == [16, 24]
    tiny, _ = build_model("small_resnet10", 2, 1, ModelsConfig())
    assert smallest_input_side(tiny, 1) == 1  # adaptive pooling: any side


def test_common_cam_layer_leaves_out_the_sides_the_model_cannot_take():
    from resomap.config import load
    from resomap.explain.methods.cam import sweep_cam_spec
    from resomap.models import build_model

    cfg = load(str(REPO / "configs"), "smoke", [*SIMPLE, "sweep.skip_invalid_resolutions=true"])
    model, spec = build_model("simple_cnn", 2, 1, cfg.models)
    found = sweep_cam_spec(spec, cfg, model)
    assert found.cam_resolutions == (16, 24)
    assert found.cam_layer(model, 16, 4).name  # a dry forward at 12 px would fail


@pytest.mark.parametrize("dry", [True, False])
def test_a_resolution_below_the_models_smallest_side_is_refused_before_anything_is_created(project: Path, capsys, dry):
    out = project / "out"
    args = ["sweep", *(["--dry-run"] if dry else []), *QUIET, *SIMPLE, f"experiment.output_dir={out}"]
    before = _written(project)
    code, stdout, err = run_cli(args, capsys)
    assert code == 2, err
    lines = [ln for ln in err.strip().splitlines() if ln]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0] == (
        "resomap: error: sweep.resolutions: simple_cnn needs inputs of at least 15 px (its layers shrink smaller "
        "ones away), got 12; drop 12 or set sweep.skip_invalid_resolutions=true"
    )
    assert stdout == ""
    assert not out.exists() and _written(project) == before


@pytest.mark.parametrize(("resolutions", "needle"), [("[0]", "sweep.resolutions[0]"), ("[1]", "at least 4 px")])
@pytest.mark.parametrize("skip", ["false", "true"])
def test_resolutions_0_and_1_are_refused_at_load(project: Path, capsys, resolutions, needle, skip):
    out = project / "out"
    for dry in (["--dry-run"], []):
        args = ["sweep", *dry, *QUIET, f"sweep.resolutions={resolutions}", f"sweep.skip_invalid_resolutions={skip}"]
        code, _, err = run_cli([*args, f"experiment.output_dir={out}"], capsys)
        assert code == 2, err
        (line,) = err.strip().splitlines()
        assert needle in line and "Traceback" not in err, line
        assert not out.exists()


def test_train_below_the_smallest_side_is_refused_before_anything_is_created(project: Path, capsys):
    out = project / "out"
    args = ["train", "--model", "simple_cnn", "--resolution", "12", *QUIET, f"experiment.output_dir={out}"]
    code, _, err = run_cli(args, capsys)
    assert code == 2
    (line,) = err.strip().splitlines()
    assert "simple_cnn needs inputs of at least 15 px" in line and "got 12" in line
    assert not out.exists()


def test_dry_run_names_the_skipped_pairs(project: Path, capsys):
    out = project / "out"
    args = ["sweep", "--dry-run", *QUIET, *SIMPLE, "sweep.skip_invalid_resolutions=true"]
    code, stdout, err = run_cli([*args, f"experiment.output_dir={out}"], capsys)
    assert code == 0, err
    rows = {ln.split()[0]: ln for ln in stdout.splitlines() if ln.startswith("  simple_cnn@")}
    assert sorted(rows) == ["simple_cnn@12", "simple_cnn@16", "simple_cnn@24"]
    assert "skipped" in rows["simple_cnn@12"] and "at least 15 px" in rows["simple_cnn@12"]
    assert "pending" not in rows["simple_cnn@12"]
    assert rows["simple_cnn@16"].endswith("pending") and rows["simple_cnn@24"].endswith("pending")
    assert "2 trials" in stdout and "2 pending, 1 skipped" in stdout
    assert "12 px" not in next(ln for ln in stdout.splitlines() if ln.startswith("power per step"))
    assert not out.exists()


def test_skipping_lets_the_valid_trials_finish_without_the_skipped_side(tmp_path: Path):
    """The real command in its own process: a warning line naming the pair, the 16 and 24 px trials finished with
    no 12 px entry in their cross-resolution records, no 12 px trial, and the summary written."""
    out = tmp_path / "out"
    args = [*QUIET, *SIMPLE, "sweep.skip_invalid_resolutions=true", "sweep.cost_probe=false", "stats.resamples=200"]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    env.pop("MLFLOW_TRACKING_URI", None)
    proc = subprocess.run(
        [sys.executable, "-m", "resomap.cli", "-q", "sweep", *args, f"experiment.output_dir={out}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    warned = [ln for ln in proc.stderr.splitlines() if "skip_invalid_resolutions" in ln]
    assert len(warned) == 1 and "simple_cnn at 12 px" in warned[0] and "15 px" in warned[0], proc.stderr
    summaries = out / "model_summaries"
    assert not trial_summary(out, "simple_cnn", 12).parent.exists()
    for res in (16, 24):
        folder = trial_summary(out, "simple_cnn", res)
        result = json.loads((folder / "result.json").read_text())
        assert result["status"] == "FINISHED", result.get("error")
        assert sorted(result["cross_resolution"], key=int) == ["16", "24"]
        with open(folder / "predictions.csv", newline="") as fh:
            assert {row["test_resolution"] for row in csv.DictReader(fh)} == {"16", "24"}
    sweep = summaries / "_sweep" / "resomap-smoke"
    assert (sweep / "summary.csv").is_file()
    rows = json.loads((sweep / "summary.json").read_text())["rows"]
    assert sorted(r["resolution"] for r in rows) == [16, 24]
    assert all("12" not in (r.get("cross_resolution") or {}) for r in rows)

"""Seeds as an axis: one folder layout whatever the number of seeds (`<res>/seed<S>/`), folders of the older
single-seed layout reused in place, the probe set fixed across trial seeds; per-image records (predictions.csv)
and the environment every result records."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

from resomap.cli import main
from resomap.config import load
from resomap.records import LIBRARIES, PREDICTIONS_FILE, read_predictions
from resomap.sweep import plan
from resomap.sweep.trial import TrialResult, _resume_point, run_trial
from resomap.tracking.publish import TRIAL_KEY_TAG

REPO = Path(__file__).resolve().parents[1]
# small and quick: 60 images, one epoch, no profile, no explanations, no MLflow
FAST = [
    "sweep.models=[tiny_cnn]",
    "data.synthetic.num_images=60",
    "profiling.enabled=false",
    "explainability.enabled=false",
    "mlflow.enabled=false",
]


def _cfg(*overrides: str):
    return load("configs", "smoke", [*FAST, *overrides])


def _states(capsys, *overrides: str) -> dict[str, str]:
    assert main(["sweep", "--dry-run", "--preset", "smoke", *FAST, *overrides]) == 0
    out = capsys.readouterr().out
    return {ln.split()[0]: ln.split()[-1] for ln in out.splitlines() if " key " in ln}


def _snapshot(*roots: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p): (p.read_bytes(), p.stat().st_mtime_ns) for root in roots for p in root.rglob("*") if p.is_file()}


# ---------------------------------------------------------------- layout


def test_seed_is_always_in_the_path_and_in_the_name_only_with_several(project: Path):
    (one,) = plan(_cfg("sweep.resolutions=[16]"))
    assert one.name == "tiny_cnn@16"
    assert one.summary_dir == Path("model_summaries/resomap-smoke/tiny_cnn/16/seed42")  # the experiment's folders
    assert one.checkpoint_dir("cnn") == Path("checkpoints/resomap-smoke/cnn/tiny_cnn/16/seed42")
    two = plan(_cfg("sweep.resolutions=[16]", "sweep.seeds=[42,43]"))
    assert [t.name for t in two] == ["tiny_cnn@16/seed42", "tiny_cnn@16/seed43"]
    assert [t.summary_dir.name for t in two] == ["seed42", "seed43"]
    assert two[0].key == one.key and two[0].summary_dir == one.summary_dir  # adding a seed moves nothing


def test_old_single_seed_folder_is_reused_not_retrained(project: Path, capsys):
    cfg = _cfg("sweep.resolutions=[16]")
    (trial,) = plan(cfg)
    result = run_trial(dataclasses.replace(trial, legacy=True))  # trained where the single-seed layout put it
    assert result.status == "FINISHED"
    summaries, checkpoints = project / "model_summaries/tiny_cnn/16", project / "checkpoints/cnn/tiny_cnn/16"
    assert (summaries / "result.json").is_file() and (checkpoints / "last.pt").is_file()
    assert not (summaries / "seed42").exists() and not (checkpoints / "seed42").exists()

    (again,) = plan(cfg)
    assert again.summary_dir == Path("model_summaries/tiny_cnn/16") and again.checkpoint_dir("cnn") == Path(
        "checkpoints/cnn/tiny_cnn/16"
    )
    assert _states(capsys, "sweep.resolutions=[16]") == {"tiny_cnn@16": "done"}
    before = _snapshot(summaries, checkpoints)
    assert main(["-q", "sweep", "--preset", "smoke", *FAST, "sweep.resolutions=[16]"]) == 0
    assert _snapshot(summaries, checkpoints) == before  # nothing retrained, nothing rewritten, nothing moved
    assert not (summaries / "seed42").exists() and not (checkpoints / "seed42").exists()
    # a second seed: the first stays done where it is, only the new one is to train (in the experiment's folders)
    states = _states(capsys, "sweep.resolutions=[16]", "sweep.seeds=[42,43]")
    assert states == {"tiny_cnn@16/seed42": "done", "tiny_cnn@16/seed43": "pending"}
    new = plan(_cfg("sweep.resolutions=[16]", "sweep.seeds=[42,43]"))[1]
    assert new.summary_dir == Path("model_summaries/resomap-smoke/tiny_cnn/16/seed43")


def test_old_layout_checkpoints_count_only_for_their_own_config(project: Path, capsys):
    """A last.json of this config hash in `<res>/` is this trial's interrupted run (resumed in place); one of
    another config belongs to nobody here (the trial gets its seed folder, the old files are left alone)."""
    cfg = _cfg("sweep.resolutions=[16,24]")
    t16, t24 = plan(cfg)
    for trial, key in ((t16, t16.key), (t24, "0123456789ab")):
        folder = project / "checkpoints/cnn/tiny_cnn" / str(trial.resolution)
        folder.mkdir(parents=True)
        (folder / "last.json").write_text(json.dumps({"config_hash": key}))
        (folder / "last.pt").write_bytes(b"x")
    assert t16.checkpoint_dir("cnn") == Path("checkpoints/cnn/tiny_cnn/16")
    assert t16.summary_dir == Path("model_summaries/tiny_cnn/16")
    assert t24.checkpoint_dir("cnn") == Path("checkpoints/resomap-smoke/cnn/tiny_cnn/24/seed42")
    assert _states(capsys, "sweep.resolutions=[16,24]") == {"tiny_cnn@16": "partial", "tiny_cnn@24": "pending"}
    # a result.json of another key in the old folder is not this trial's either
    (project / "model_summaries/tiny_cnn/24").mkdir(parents=True)
    (project / "model_summaries/tiny_cnn/24/result.json").write_text(json.dumps({"key": "0123456789ab"}))
    assert t24.summary_dir == Path("model_summaries/resomap-smoke/tiny_cnn/24/seed42")


def test_starting_afresh_in_an_old_folder_keeps_the_other_seeds_folders(tmp_path: Path):
    folder = tmp_path / "16"
    (folder / "seed43").mkdir(parents=True)
    (folder / "seed43" / "last.pt").write_bytes(b"other seed")
    (folder / "last.pt").write_bytes(b"x")
    (folder / "epoch=0-val_accuracy=0.5.pt").write_bytes(b"x")
    assert _resume_point(folder, "anykey", fresh=True) is None
    assert sorted(p.name for p in folder.iterdir()) == ["seed43"]
    assert (folder / "seed43" / "last.pt").read_bytes() == b"other seed"


# ---------------------------------------------------------------- probe set, records, environment


def test_probe_set_is_the_same_for_every_trial_seed(project: Path):
    import torch

    from resomap import data
    from resomap.explain.run import probe_batch

    cfg = _cfg("sweep.resolutions=[16]", "sweep.seeds=[42,43]")
    a, b = data.build(cfg, 16, 42), data.build(cfg, 16, 43)
    assert a.data_seed == b.data_seed == 42 and np.array_equal(a.splits["test"], b.splits["test"])
    (xa, ya, ma), (xb, yb, mb) = probe_batch(a, 4, 42, "cpu"), probe_batch(b, 4, 43, "cpu")
    assert torch.equal(xa, xb) and torch.equal(ya, yb) and np.array_equal(ma, mb)


def test_predictions_and_environment_of_a_trial(project: Path):
    from resomap import data
    from resomap.explain.methods.probe import load_maps
    from resomap.explain.run import PROBE_MASKS_KEY

    on = ["explainability.enabled=true", "explainability.methods=[saliency]", "explainability.sanity_methods=[]"]
    cfg = _cfg("sweep.resolutions=[16,24]", *on)
    trial = plan(cfg)[0]
    result = run_trial(trial)
    assert result.status == "FINISHED" and result.predictions == PREDICTIONS_FILE
    saved = TrialResult.from_json((trial.summary_dir / "result.json").read_text())

    records = read_predictions(trial.summary_dir)
    assert sorted(records) == [16, 24]
    test_index = data.build(cfg, 16, 42).splits["test"]
    for res, rec in records.items():
        bundle = data.build(cfg, res, 42)
        assert len(rec.index) == len(bundle.splits["test"]) == len(test_index)  # one row per test image
        assert np.array_equal(rec.index, np.sort(bundle.splits["test"]))
        by_index = dict(zip(bundle.splits["test"].tolist(), bundle.labels("test").tolist(), strict=True))
        assert [by_index[i] for i in rec.index.tolist()] == rec.label.tolist()
        assert rec.accuracy == pytest.approx(saved.cross_resolution[str(res)].accuracy, abs=1e-9)
    assert records[16].accuracy == pytest.approx(saved.test["test/accuracy"], abs=1e-9)

    env = json.loads((trial.summary_dir / "result.json").read_text())["environment"]
    assert env["python"] == ".".join(map(str, sys.version_info[:3]))
    for dist in LIBRARIES:
        assert env[dist] == metadata.version(dist)
    assert env["platform"] and env["device"].startswith("cpu")

    maps, _ = load_maps(trial.summary_dir / "explanations.npz")
    masks = maps[PROBE_MASKS_KEY]
    assert masks.dtype == bool and masks.shape == (4, 16, 16) and masks.any()


def test_results_written_before_the_environment_was_kept_say_nothing_of_it():
    old = {"key": "k", "name": "m@16", "model": "m", "family": "cnn", "resolution": 16, "seed": 1, "status": "X"}
    assert TrialResult.from_dict(old).environment == {}


def test_environment_names_mlflow_skinny_when_the_full_mlflow_is_not_installed(monkeypatch):
    from resomap import records

    real = metadata.version

    def installed(skinny: bool):
        def version(name: str) -> str:
            if name == "mlflow" or (name == "mlflow-skinny" and not skinny):
                raise metadata.PackageNotFoundError(name)
            return "3.17.2" if name == "mlflow-skinny" else real(name)

        return version

    for skinny, want in ((True, "3.17.2"), (False, None)):
        monkeypatch.setattr(metadata, "version", installed(skinny))
        records._environment.cache_clear()
        assert records.environment()["mlflow"] == want
        assert records.environment()["torch"] == real("torch")
    records._environment.cache_clear()


# ---------------------------------------------------------------- adding seeds to a finished sweep (processes)


@pytest.mark.slow
def test_adding_a_seed_to_a_finished_sweep_trains_only_the_new_trials(project: Path):
    """A finished 1-seed sweep (MLflow on, SQLite in the project), rerun by the same command plus a second seed:
    only the new seed trains; the first seed's files are untouched; MLflow holds one run per trial."""
    grid = ["sweep.resolutions=[16,24]", "data.synthetic.num_images=60"]
    grid += ["profiling.enabled=false", "explainability.enabled=false"]
    base = [sys.executable, "-m", "resomap.cli", "-q", "sweep", "--preset", "smoke", *grid]

    def sweep(*extra: str) -> subprocess.CompletedProcess:
        proc = subprocess.run([*base, *extra], capture_output=True, text=True, timeout=400)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout

    sweep()
    old = plan(load("configs", "smoke", grid))
    before = _snapshot(*(t.summary_dir for t in old), *(t.checkpoint_dir("cnn") for t in old))
    names = [Path(p).name for p in before]
    assert names.count("result.json") == names.count("last.pt") == names.count(PREDICTIONS_FILE) == 2

    dry = sweep("sweep.seeds=[42,43]", "--dry-run")
    states = {ln.split()[0]: ln.split()[-1] for ln in dry.splitlines() if " key " in ln}
    assert states == {
        "tiny_cnn@16/seed42": "done",
        "tiny_cnn@16/seed43": "pending",
        "tiny_cnn@24/seed42": "done",
        "tiny_cnn@24/seed43": "pending",
    }
    started = time.time()
    sweep("sweep.seeds=[42,43]")
    assert _snapshot(*(t.summary_dir for t in old), *(t.checkpoint_dir("cnn") for t in old)) == before
    trials = plan(load("configs", "smoke", [*grid, "sweep.seeds=[42,43]"]))
    for trial in trials:
        result = json.loads((trial.summary_dir / "result.json").read_text())
        assert result["status"] == "FINISHED" and result["tracked"] is True
        assert (result["finished_at"] > started) == (trial.seed == 43), trial.name  # only the new seed trained

    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    exp = client.get_experiment_by_name("resomap-smoke").experiment_id
    runs = client.search_runs([exp], f"tags.`{TRIAL_KEY_TAG}` != ''")
    assert len(runs) == 4 and len({r.data.tags[TRIAL_KEY_TAG] for r in runs}) == 4
    for run in runs:
        assert run.info.status == "FINISHED"
        assert "predictions.csv" in {a.path for a in client.list_artifacts(run.info.run_id)}
        assert run.data.tags["resomap.env.torch"] == metadata.version("torch")
    assert {t.key for t in trials} == {r.data.tags[TRIAL_KEY_TAG] for r in runs}

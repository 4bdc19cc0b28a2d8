"""The sweep: plan expansion and stable keys, config errors before any training, --dry-run states, failing
trials (an exception, a NaN loss) closed as FAILED with the reason while the others finish, --rerun-failed,
`resomap sync` of results trained while the store was down, and the Tracker's bounded retries."""

from __future__ import annotations

import dataclasses
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import run_cli, trial_checkpoints, trial_summary
from resomap.config import load
from resomap.sweep import plan
from resomap.sweep.plan import sweep_key
from resomap.tracking import Tracker
from resomap.tracking import sync as sync_mod
from resomap.tracking.mlflow_store import HTTP_ENV, TrackingUnavailable
from resomap.tracking.publish import TRIAL_KEY_TAG

REPO = Path(__file__).resolve().parents[1]
FAST = ["--preset", "smoke", "explainability.enabled=false", "profiling.enabled=false", "mlflow.log_checkpoint=false"]


def _cfg(*overrides: str):
    return load("configs", "smoke", list(overrides))


def _client(project: Path):
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    exp = client.get_experiment_by_name("resomap-smoke")
    return client, exp.experiment_id


def _result(project: Path, model: str, res: int) -> dict:
    return json.loads((trial_summary(project, model, res) / "result.json").read_text())


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: nothing listens there


# ---------------------------------------------------------------- plan and keys


def test_plan_expands_grid_with_include_exclude_and_overrides(project: Path):
    cfg = _cfg(
        "sweep.models=[tiny_cnn,simple_cnn]",
        "sweep.resolutions=[16,24]",
        "sweep.seeds=[1,2]",
        "sweep.include=[[resnet18,32]]",
        "sweep.exclude=[[simple_cnn,24]]",
    )
    trials = plan(cfg)
    got = sorted((t.model, t.resolution, t.seed) for t in trials)
    want = sorted(
        [
            (m, r, s)
            for m in ("tiny_cnn", "simple_cnn")
            for r in (16, 24)
            for s in (1, 2)
            if (m, r) != ("simple_cnn", 24)
        ]
        + [("resnet18", 32, 1), ("resnet18", 32, 2)]
    )
    assert got == want
    assert len({t.key for t in trials}) == len(trials)
    assert trials[0].name.endswith("/seed1") and trials[0].summary_dir.name == "seed1"

    base = {(t.model, t.resolution, t.seed): t for t in trials}
    over = _cfg(
        "sweep.models=[tiny_cnn,simple_cnn]",
        "sweep.resolutions=[16,24]",
        "sweep.seeds=[1,2]",
        "sweep.include=[[resnet18,32]]",
        "sweep.exclude=[[simple_cnn,24]]",
        "sweep.model_overrides={simple_cnn: {training.batch_size: 8}}",
    )
    for t in plan(over):
        same = base[(t.model, t.resolution, t.seed)]
        changed = t.model == "simple_cnn"
        assert (t.key != same.key) == changed, t.name
        assert t.cfg.training.batch_size == (8 if changed else same.cfg.training.batch_size)


@pytest.mark.slow
def test_keys_stable_across_processes_and_only_training_settings_change_them(project: Path):
    args = ["sweep.models=[tiny_cnn,simple_cnn]", "sweep.resolutions=[16,24]"]
    keys = {t.name: t.key for t in plan(_cfg(*args))}
    proc = subprocess.run(
        [sys.executable, "-m", "resomap.cli", "-q", "sweep", "--dry-run", "--preset", "smoke", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    printed = {ln.split()[0]: ln.split()[2] for ln in proc.stdout.splitlines() if " key " in ln}
    assert printed == keys
    same = _cfg(
        *args, "sweep.executor=local-gpus", "mlflow.retries=1", "mlflow.tracking_uri=http://x", "sweep.seeds=[42]"
    )
    assert {t.name: t.key for t in plan(same)} == keys
    other = _cfg(*args, "training.epochs=3")
    assert not set(keys.values()) & {t.key for t in plan(other)}
    assert sweep_key(plan(other)) != sweep_key(plan(_cfg(*args)))


SWEEP_ERRORS = [
    (["sweep.exclude=[[tiny_cnn,32]]"], "empty"),
    (["sweep.models=[tiny_cnn,tiny_cnn]"], "duplicate tiny_cnn"),
    (["sweep.resolutions=[32,abc]"], "sweep.resolutions"),
    (["sweep.resolutions=[32.5]"], "sweep.resolutions"),
    (["sweep.executor=slurm"], "sweep.executor"),
    (["sweep.model_overrides={resnt18: {training.epochs: 2}}"], "did you mean resnet18"),
    (["stats.baselines=[small_resnet10]"], "stats.baselines: expected models of the sweep (tiny_cnn"),
]


@pytest.mark.parametrize(("overrides", "needle"), SWEEP_ERRORS, ids=[e[0][0] for e in SWEEP_ERRORS])
def test_sweep_config_errors_are_one_line_before_training(project: Path, capsys, overrides, needle):
    code, out, err = run_cli(["sweep", "--preset", "smoke", *overrides], capsys)
    assert code == 2, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and needle in lines[0], err
    assert not (project / "checkpoints").exists() and not (project / "model_summaries").exists()


def test_state_json_is_rewritten_after_the_swap_only_when_it_changed(project: Path):
    from resomap.sweep.summarise import _save_state

    cfg = _cfg("mlflow.enabled=false")
    trials, folder = plan(cfg), project / "summary"
    folder.mkdir()
    (folder / "summary.csv").write_text("model\n")
    _save_state(cfg, trials, folder, None, published=False)
    before = (folder / "state.json").stat()
    _save_state(cfg, trials, folder, None, published=False)  # the same record: nothing written (no temp file)
    assert (folder / "state.json").stat().st_ino == before.st_ino
    _save_state(cfg, trials, folder, None, published=True)
    assert (folder / "state.json").stat().st_ino != before.st_ino
    assert json.loads((folder / "state.json").read_text())["published"] is True
    assert sorted(p.name for p in folder.iterdir()) == ["state.json", "summary.csv"]

    assert not (project / "mlflow.db").exists()


def test_trial_key_is_computed_once_per_trial(project: Path, monkeypatch: pytest.MonkeyPatch):
    from resomap.sweep import identity as trial_mod

    real, calls = trial_mod.trial_key, []
    monkeypatch.setattr(trial_mod, "trial_key", lambda *a: calls.append(a) or real(*a))
    (trial,) = plan(_cfg())
    calls.clear()  # whatever plan needed
    keys = {trial.key for _ in range(5)} | {trial.pinned().key}
    assert calls == [(trial.cfg, "tiny_cnn", 32, 42)]  # once, its pinned copy (run_trial's) included
    assert keys == {real(trial.cfg, "tiny_cnn", 32, 42)}
    other = dataclasses.replace(trial, resolution=48)
    assert other.key == real(trial.cfg, "tiny_cnn", 48, 42) != trial.key  # a changed trial gets its own key


def test_trial_callbacks_are_the_training_defaults(project: Path, monkeypatch: pytest.MonkeyPatch):
    """A trial's Trainer gets training.default_callbacks (one place decides checkpointing and early stopping)."""
    from resomap import training
    from resomap.sweep.trial import _callbacks

    cfg = _cfg("training.early_stopping.enabled=true", "training.checkpoint.top_k=2")
    real, seen = training.default_callbacks, []
    monkeypatch.setattr(training, "default_callbacks", lambda *a: seen.append(a) or real(*a))
    callbacks = _callbacks(cfg, project / "ck", {"model": "m"}, None, None)
    assert seen == [(cfg, project / "ck", {"model": "m"})]
    assert [type(c).__name__ for c in callbacks] == ["EarlyStopping", "TopKCheckpoint"] and callbacks[1].top_k == 2


# ---------------------------------------------------------------- failures, dry run, rerun


@pytest.mark.slow
def test_failing_trials_end_failed_with_reason_others_finish(project: Path, capsys):
    """A missing pretrained file (raises while preparing) and lr 1e30 (loss goes NaN) each fail only their trial."""
    args = [
        "sweep",
        *FAST,
        "sweep.models=[tiny_cnn,simple_cnn,mobilenet_v3_small]",
        "sweep.resolutions=[16]",
        "sweep.model_overrides={simple_cnn: {training.optimizer.lr: 1.0e+30}, "
        "mobilenet_v3_small: {models.pretrained: {mobilenet_v3_small: missing.pt}}}",
    ]
    code, out, _ = run_cli(args, capsys)
    assert code == 1, out
    assert _result(project, "tiny_cnn", 16)["status"] == "FINISHED"
    nan, missing = _result(project, "simple_cnn", 16), _result(project, "mobilenet_v3_small", 16)
    assert nan["status"] == "FAILED" and "NaN" in nan["error"], nan["error"]
    assert missing["status"] == "FAILED" and "missing.pt" in missing["error"], missing["error"]
    assert "FAILED simple_cnn@16" in out and "FAILED mobilenet_v3_small@16" in out
    assert "[sweep] summary in " in out and "figures " in out  # where the summary phase's time went

    client, exp = _client(project)
    runs = {r.info.run_name: r for r in client.search_runs([exp], f"tags.`{TRIAL_KEY_TAG}` != ''")}
    assert runs["tiny_cnn@16"].info.status == "FINISHED"
    for name, res in (("simple_cnn@16", nan), ("mobilenet_v3_small@16", missing)):
        run = runs[name]
        assert run.info.status == "FAILED" and run.data.tags["resomap.failure"] == res["error"]
        assert "failure.txt" in {a.path for a in client.list_artifacts(run.info.run_id)}
    (parent,) = client.search_runs([exp], "tags.`resomap.kind` = 'sweep'")
    assert parent.info.status == "FAILED"

    trial_checkpoints(project, "tiny_cnn", 24).mkdir(parents=True)
    (trial_checkpoints(project, "tiny_cnn", 24) / "last.pt").write_bytes(b"x")
    code, out, _ = run_cli([*args[:-2], "sweep.resolutions=[16,24,32]", args[-1], "--dry-run"], capsys)
    assert code == 0
    states = {ln.split()[0]: ln.split()[-1] for ln in out.splitlines() if " key " in ln}
    assert states["tiny_cnn@16"] == "done" and states["tiny_cnn@24"] == "partial"
    assert states["simple_cnn@16"] == "failed" and states["mobilenet_v3_small@16"] == "failed"
    assert states["tiny_cnn@32"] == "pending" and "2 failed, 1 partial" in out
    assert not trial_summary(project, "tiny_cnn", 32).parent.exists()  # the dry run trained nothing

    done_at = _result(project, "tiny_cnn", 16)["finished_at"]
    failed_at = {m: _result(project, m, 16)["finished_at"] for m in ("simple_cnn", "mobilenet_v3_small")}
    code, out, _ = run_cli([*args, "--rerun-failed"], capsys)
    assert code == 1 and "[sweep] 1 done, 0 failed, 2 remaining" in out
    assert _result(project, "tiny_cnn", 16)["finished_at"] == done_at
    assert all(_result(project, m, 16)["finished_at"] > t for m, t in failed_at.items())
    assert len(client.search_runs([exp], f"tags.`{TRIAL_KEY_TAG}` != ''")) == 3  # rerun reused the runs


def test_out_of_memory_retry_saves_the_config_that_ran(project: Path, monkeypatch: pytest.MonkeyPatch):
    """The first fit raises CUDA out-of-memory: the retry runs at half the batch with twice the accumulation, and
    the trial's config.yaml (summary and checkpoint folders) records that, not the batch that did not fit."""
    import torch
    import yaml

    from resomap.sweep.trial import run_trial
    from resomap.training import Trainer

    fit, calls = Trainer.fit, []

    def fit_once_out_of_memory(self, *args, **kwargs):
        calls.append(self.cfg.training.batch_size)
        if len(calls) == 1:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")
        return fit(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "fit", fit_once_out_of_memory)
    cfg = _cfg("explainability.enabled=false", "profiling.enabled=false", "mlflow.enabled=false")
    (trial,) = plan(cfg)
    result = run_trial(trial)
    assert result.status == "FINISHED" and calls == [32, 16]
    assert result.notes == ["CUDA out of memory at batch 32; retried with batch 16 x 2 accumulation steps"]
    for folder in (trial.summary_dir, trial.checkpoint_dir("cnn")):
        saved = yaml.safe_load((folder / "config.yaml").read_text())["training"]
        assert (saved["batch_size"], saved["grad_accum_steps"]) == (16, 2), folder


# ---------------------------------------------------------------- sync


def test_sync_logs_untracked_results_once(project: Path, capsys):
    """Trained with a dead store (results say tracked: false), then synced to the project store, twice."""
    grid = ["sweep.resolutions=[16,24]", "training.epochs=2"]
    dead = [f"mlflow.tracking_uri=http://127.0.0.1:{_dead_port()}", "mlflow.retries=1"]
    start = time.perf_counter()
    code, out, _ = run_cli(["sweep", *FAST, *grid, *dead], capsys)
    assert code == 0, out
    assert time.perf_counter() - start < 120  # a dead store costs seconds, not minutes (MLflow alone: ~4 min a call)
    assert [_result(project, "tiny_cnn", r)["tracked"] for r in (16, 24)] == [False, False]

    code, out, _ = run_cli(["sync", *FAST, *grid], capsys)
    assert code == 0 and "[sync] 2 logged" in out, out
    client, exp = _client(project)
    (parent,) = client.search_runs([exp], "tags.`resomap.kind` = 'sweep'")
    children = client.search_runs([exp], f"tags.`{TRIAL_KEY_TAG}` != ''")
    assert sorted(r.info.run_name for r in children) == ["tiny_cnn@16", "tiny_cnn@24"]
    for run in children:
        res = _result(project, "tiny_cnn", int(run.data.tags["resolution"]))
        assert res["tracked"] is True and res["run_id"] == run.info.run_id
        assert run.info.status == "FINISHED" and run.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert [m.step for m in client.get_metric_history(run.info.run_id, "val/loss")] == [0, 1]
        assert run.data.metrics["test/accuracy"] == res["test"]["test/accuracy"]
        assert {"test_at_16/accuracy", "test_at_24/accuracy"} <= set(run.data.metrics)
        assert run.data.params["model"] == "tiny_cnn" and "training.epochs" not in run.data.params
        arts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert {"result.json", "summary.txt", "config.yaml", "figures"} <= arts
        saved = client.download_artifacts(run.info.run_id, "config.yaml", str(project / run.info.run_id))
        assert yaml.safe_load(Path(saved).read_text())["training"]["epochs"] == 2
    assert parent.info.status == "FINISHED"
    assert "summary" in {a.path for a in client.list_artifacts(parent.info.run_id)}

    code, out, _ = run_cli(["sync", *FAST, *grid], capsys)
    assert code == 0 and "[sync] 0 logged, 2 already tracked" in out, out
    assert len(client.search_runs([exp])) == 3
    run = children[0]
    assert len(client.get_metric_history(run.info.run_id, "val/loss")) == 2


def test_sync_into_a_partly_logged_run_adds_only_missing_points(project: Path):
    """A run that got epoch 0 before the store went away: sync fills the rest and repeats nothing."""
    cfg = _cfg("sweep.resolutions=[16]", "training.epochs=2", *FAST[2:])
    (trial,) = plan(cfg)
    trial.summary_dir.mkdir(parents=True)
    history = [{"epoch": float(e), "val/loss": 1.0 - e / 10} for e in range(2)]
    data = {"key": trial.key, "name": trial.name, "model": "tiny_cnn", "family": "cnn", "resolution": 16, "seed": 42}
    data.update(status="FINISHED", test={"test/accuracy": 0.5}, history=history, tracked=False, error=None)
    (trial.summary_dir / "result.json").write_text(json.dumps(data))
    tracker = Tracker(cfg)
    run_id = tracker.start_run(trial.name, tags={TRIAL_KEY_TAG: trial.key})
    tracker.log_metrics(run_id, {"val/loss": 1.0}, step=0)

    report = sync_mod.sync_results([trial], tracker, None)  # publish finds the run by its trial-key tag
    assert report.synced == [trial.name] and report.ok
    hist = tracker.client.get_metric_history(run_id, "val/loss")
    assert sorted((m.step, m.value) for m in hist) == [(0, 1.0), (1, 0.9)]
    assert json.loads((trial.summary_dir / "result.json").read_text())["tracked"] is True
    assert sync_mod.sync_results([trial], tracker, None).already == [trial.name]
    assert len(tracker.find_runs(f"tags.`{TRIAL_KEY_TAG}` = '{trial.key}'")) == 1


def test_a_trial_looks_its_run_up_once_and_writes_its_result_once(project: Path, capsys, monkeypatch):
    """The live run's id goes on to publish (one trial-key search per trial, the live run's), and result.json is
    written once, after publishing, saying `tracked` with that run id."""
    from resomap import trial_result

    searches, writes = [], []
    find, write = Tracker.find_runs, trial_result.write_text
    monkeypatch.setattr(Tracker, "find_runs", lambda self, f: searches.append(f) or find(self, f))
    monkeypatch.setattr(trial_result, "write_text", lambda path, text: writes.append(Path(path)) or write(path, text))
    code, out, _ = run_cli(["sweep", *FAST, "sweep.resolutions=[16,24]", "training.epochs=1"], capsys)
    assert code == 0, out
    assert len([f for f in searches if f.startswith(f"tags.`{TRIAL_KEY_TAG}` = ")]) == 2, searches
    folders = [trial_summary(project, "tiny_cnn", r) for r in (16, 24)]
    written = sorted(p.resolve() for p in writes if p.name == "result.json")
    assert written == sorted((f / "result.json").resolve() for f in folders)
    client, _ = _client(project)
    for resolution in (16, 24):
        res = _result(project, "tiny_cnn", resolution)
        assert res["tracked"] is True
        run = client.get_run(res["run_id"])
        assert run.data.tags[TRIAL_KEY_TAG] == res["key"] and run.info.status == "FINISHED"


def test_one_trial_key_tag_defined_in_tracking_publish():
    """The tag that finds a trial's run is spelled once (tracking.publish); sync and the sweep import it."""
    src = REPO / "src" / "resomap"
    spelled = sorted(str(p.relative_to(src)) for p in src.rglob("*.py") if '"resomap.trial_key"' in p.read_text())
    assert spelled == ["tracking/publish.py"]
    assert sync_mod.TRIAL_KEY_TAG is TRIAL_KEY_TAG == "resomap.trial_key"


# ---------------------------------------------------------------- Tracker retries


def test_tracker_gives_up_fast_then_stays_offline(project: Path, monkeypatch: pytest.MonkeyPatch):
    for name in HTTP_ENV:
        monkeypatch.delenv(name, raising=False)
    tracker = Tracker(_cfg(f"mlflow.tracking_uri=http://127.0.0.1:{_dead_port()}"), retries=3, backoff_s=0.01)
    assert all(__import__("os").environ[k] == v for k, v in HTTP_ENV.items())
    calls = []

    def down():
        calls.append(1)
        raise ConnectionError("refused")

    assert tracker._soft("x", down) is None and len(calls) == 3 and tracker.offline
    assert tracker._soft("y", down) is None and len(calls) == 3  # offline: not even tried
    with pytest.raises(TrackingUnavailable):
        tracker._call("z", down)
    assert len(tracker.failures) == 2
    tracker._offline_until = 0.0
    assert tracker._call("ok", lambda: 7) == 7 and not tracker.offline


def test_tracker_does_not_retry_a_bad_request(project: Path):
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE

    tracker = Tracker(_cfg(), retries=5, backoff_s=5.0)
    calls = []

    def bad():
        calls.append(1)
        raise MlflowException("bad tag name", error_code=INVALID_PARAMETER_VALUE)

    start = time.perf_counter()
    assert tracker._soft("set tags", bad) is None
    assert len(calls) == 1 and time.perf_counter() - start < 1.0 and not tracker.offline


# ---------------------------------------------------------------- the machine in the record


def test_results_name_their_machine_and_a_summary_of_two_machines_says_so(project: Path, capsys, caplog):
    """result.json's environment names the CPU (model, torch's capability, native-bf16 flags); the summary lists the
    machines its trials ran on, one line each; a trial recorded on another machine (faked in its result.json) makes
    the rerun that rebuilds the summary warn in one line and the summary say so; a resume that trains here while a
    finished trial ran elsewhere warns, in one line, before training."""
    import torch

    from resomap.runtime import cpu_model

    args = ["sweep", *FAST, "sweep.seeds=[1,2]", "sweep.resolutions=[16]", "mlflow.enabled=false", "system.threads=1"]
    assert run_cli(args, capsys)[0] == 0
    summary_dir = project / "model_summaries" / "_sweep" / "resomap-smoke"
    results = sorted(project.glob("model_summaries/resomap-smoke/tiny_cnn/16/seed*/result.json"))
    assert len(results) == 2
    env = json.loads(results[0].read_text())["environment"]
    assert env["cpu"] == cpu_model() and env["cpu"] not in ("", "unknown")
    assert env["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert env["cpu_bf16"] and "gpu" not in env  # 'none', or the flags present (amx_bf16 avx512_bf16)
    here = json.loads((summary_dir / "summary.json").read_text())
    assert [m["trials"] for m in here["machines"]] == [2] and here["machines_warning"] == ""
    assert f"- {here['machines'][0]['machine']}: 2 trials" in (summary_dir / "summary.md").read_text()

    fake = json.loads(results[1].read_text())
    fake["environment"].update(cpu="Intel(R) Xeon(R) Platinum 8480+", cpu_capability="AVX512", cpu_bf16="amx_bf16")
    results[1].write_text(json.dumps(fake))
    caplog.clear()
    assert run_cli(args, capsys)[0] == 0  # nothing to train: the summary is rebuilt from the changed results
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "machines" in r.getMessage()]
    assert len(warned) == 1 and "ran on 2 different machines" in warned[0], warned
    mixed = json.loads((summary_dir / "summary.json").read_text())
    assert [m["trials"] for m in mixed["machines"]] == [1, 1] and "2 different machines" in mixed["machines_warning"]
    assert {m["cpu"] for m in mixed["machines"]} == {env["cpu"], "Intel(R) Xeon(R) Platinum 8480+"}
    text = (summary_dir / "summary.md").read_text()
    assert "- Intel(R) Xeon(R) Platinum 8480+ (AVX512; bf16: amx_bf16): 1 trial\n" in text
    assert f"- {here['machines'][0]['machine']}: 1 trial\n" in text and "Warning: the trials ran on 2" in text

    results[0].unlink()  # seed 1 trains again, here, beside seed 2 "of the Xeon"
    caplog.clear()
    assert run_cli(args, capsys)[0] == 0
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "machine" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith("this sweep resumes on another machine: 1 of its 1 finished")
    assert "Intel(R) Xeon(R) Platinum 8480+" in warned[0] and env["cpu"] in warned[0]


def test_a_rerun_failed_trial_logs_each_epoch_once(project: Path, capsys, monkeypatch: pytest.MonkeyPatch):
    """A trial that failed after training is run again by --rerun-failed into the same MLflow run: a closed-form
    model refits every penalty from the start (epochs 0..4, the same scores), and the run keeps one point per
    penalty of its grid (`penalty/*`, step = the penalty's index) and metric, not two (the live callback skips the
    penalties the run already holds, as publish does), and its chosen fit's train/* and val/* once."""
    import resomap.stages

    evaluate = resomap.stages.evaluate_trained

    def fails(*args, **kwargs):
        raise RuntimeError("evaluation failed")

    args = ["sweep", *FAST, "sweep.models=[pixel_logreg]", "sweep.resolutions=[16]", "system.threads=1"]
    monkeypatch.setattr(resomap.stages, "evaluate_trained", fails)
    code, out, _ = run_cli(args, capsys)
    assert code == 1 and "FAILED pixel_logreg@16: RuntimeError: evaluation failed" in out, out
    monkeypatch.setattr(resomap.stages, "evaluate_trained", evaluate)
    code, out, _ = run_cli([*args, "--rerun-failed"], capsys)
    assert code == 0, out
    result = _result(project, "pixel_logreg", 16)
    epochs = [int(h["epoch"]) for h in result["history"]]
    assert result["status"] == "FINISHED" and epochs == list(range(len(epochs))) and len(epochs) > 1
    client, exp = _client(project)
    (run,) = client.search_runs([exp], f"tags.`{TRIAL_KEY_TAG}` != ''")
    assert run.info.run_id == result["run_id"]
    for key in ("penalty/C", "penalty/val_loss", "penalty/val_accuracy", "penalty/train_loss"):
        assert sorted(m.step for m in client.get_metric_history(run.info.run_id, key)) == epochs, key
    for key in ("val/loss", "val/accuracy", "train/loss", "train/penalty_C"):
        assert [m.step for m in client.get_metric_history(run.info.run_id, key)] == [0], key

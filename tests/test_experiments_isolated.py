"""Experiments sharing an output folder never touch each other's trials (issue 34, item 3): every experiment has
folders of its own (resomap.layout: model_summaries/<experiment>/..., checkpoints/<experiment>/...), run one after
the other or at once; trials of the layout before experiment folders are moved into their experiment's on its next
run, never retrained, and another experiment's are left where they are. Real processes, tiny sweeps: the smoke
preset on 60 synthetic images, tiny_cnn at 16 px, one epoch, one thread, MLflow off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_cli, start_logged, trial_checkpoints, trial_summary
from resomap.atomic import move_to
from resomap.config import load
from resomap.errors import ConfigError
from resomap.layout import Layout

SEEDS = (42, 43)
ARGS = [
    "--preset",
    "smoke",
    "sweep.models=[tiny_cnn]",
    "sweep.resolutions=[16]",
    "training.epochs=1",
    "data.synthetic.num_images=60",
    "system.threads=1",
    "mlflow.enabled=false",
    "profiling.enabled=false",
    "explainability.enabled=false",
    "stats.resamples=200",
    "sweep.cost_probe=false",
]


def _cmd(name: str, seeds=SEEDS) -> list[str]:
    seeds_arg = f"sweep.seeds=[{','.join(map(str, seeds))}]"
    return [sys.executable, "-m", "resomap.cli", "sweep", *ARGS, seeds_arg, f"experiment.name={name}"]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS")}


def _sweep(root: Path, name: str, seeds=SEEDS) -> str:
    """`resomap sweep` of experiment `name` in `root` (its own process): its output; it must succeed."""
    proc = subprocess.run(_cmd(name, seeds), cwd=root, env=_env(), capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    return out


def _sweep_here(root: Path, name: str, capsys, monkeypatch, seeds=SEEDS) -> str:
    """The same sweep in this process (no start-up: quicker for a run that has nothing to train): its output."""
    monkeypatch.chdir(root)
    code, out, err = run_cli(_cmd(name, seeds)[3:], capsys)
    assert code == 0, (out + err)[-3000:]
    return out + err


def _trained(log: str) -> list[str]:
    """The trials a sweep's output says it ran (its one line per finished trial)."""
    return [ln.split(" | ", 1)[1].split(" in ")[0] for ln in log.splitlines() if " | " in ln and " in " in ln]


def _names(seeds=SEEDS) -> list[str]:
    return [f"tiny_cnn@16/seed{s}" for s in seeds] if len(seeds) > 1 else ["tiny_cnn@16"]


def _results(root: Path, name: str, seeds=SEEDS) -> dict[int, dict]:
    return {s: json.loads((trial_summary(root, "tiny_cnn", 16, s, name) / "result.json").read_text()) for s in seeds}


def _snapshot(*folders: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p): (p.read_bytes(), p.stat().st_mtime_ns) for f in folders for p in f.rglob("*") if p.is_file()}


def _trial_folders(root: Path, name: str, seeds=SEEDS) -> list[Path]:
    return [f(root, "tiny_cnn", 16, s, name) for s in seeds for f in (trial_summary, trial_checkpoints)]


def _summary_keys(root: Path, name: str) -> list[str]:
    folder = Layout(root, "model_summaries", "checkpoints", name).sweep_folder()
    data = json.loads((folder / "summary.json").read_text())
    for trial in data["trials"]:  # each recorded folder is the experiment's own
        assert (folder / trial["folder"]).resolve().is_relative_to((root / "model_summaries" / name).resolve())
    return sorted(t["key"] for t in data["trials"])


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "configs").symlink_to(Path(__file__).resolve().parents[1] / "configs")
    return tmp_path


def test_two_experiments_one_after_the_other_keep_their_own_trials(root: Path, capsys, monkeypatch):
    a = _sweep(root, "exp-a")
    first_a = _results(root, "exp-a")
    kept_a = _snapshot(*_trial_folders(root, "exp-a"))
    b = _sweep(root, "exp-b")
    assert _snapshot(*_trial_folders(root, "exp-a")) == kept_a  # b wrote nothing of a's
    assert _trained(a) == _trained(b) == _names()  # each trial trained once, in its own experiment
    for log in (a, b):
        assert "starting afresh" not in log and "moved" not in log, log[-3000:]
    results = {"exp-a": _results(root, "exp-a"), "exp-b": _results(root, "exp-b")}
    assert results["exp-a"] == first_a
    keys = {name: sorted(r["key"] for r in found.values()) for name, found in results.items()}
    assert not set(keys["exp-a"]) & set(keys["exp-b"])  # the trial key holds the experiment's name
    for name, found in results.items():
        for result in found.values():
            assert result["status"] == "FINISHED" and len(result["history"]) == 1 and not result["notes"]
            assert f"checkpoints/{name}/cnn/tiny_cnn/16/seed" in result["best_checkpoint"]
        assert _summary_keys(root, name) == keys[name]  # each summary holds only its own trials
    assert not (root / "model_summaries" / "tiny_cnn").exists()  # nothing in the layout without experiments

    kept = _snapshot(*_trial_folders(root, "exp-a"), *_trial_folders(root, "exp-b"))
    for name in ("exp-a", "exp-b"):  # rerunning either trains nothing
        again = _sweep_here(root, name, capsys, monkeypatch)
        assert _trained(again) == [] and "nothing to do" in again, again[-3000:]
    assert _snapshot(*_trial_folders(root, "exp-a"), *_trial_folders(root, "exp-b")) == kept

    # analysing the whole checkpoint folder would put both experiments' trials in one summary: refused
    argv = ["analyze", "--checkpoint-dir", str(root / "checkpoints"), "--output-dir", str(root / "x")]
    code, _, err = run_cli(argv, capsys)
    assert code == 2 and "holds checkpoints of 2 experiments (exp-a, exp-b)" in err, err
    assert str(root / "checkpoints" / "exp-a") in err and not (root / "x").exists()


@pytest.mark.slow  # two sweeps in subprocesses / three sweeps: about 30 s each
def test_two_experiments_at_once_both_finish_each_trial_trained_once(root: Path, procs):
    started = {name: start_logged(procs, _cmd(name), root, f"{name}.log") for name in ("exp-a", "exp-b")}
    for name, proc in started.items():
        assert proc.wait(timeout=600) == 0, (root / f"{name}.log").read_text()[-3000:]
    for name in started:
        log = (root / f"{name}.log").read_text()
        assert _trained(log) == _names(), log[-3000:]  # each trial once, neither held up by the other's lock
        assert "starting afresh" not in log and "waiting" not in log and "Traceback" not in log, log[-3000:]
        results = _results(root, name)
        for result in results.values():
            assert result["status"] == "FINISHED" and len(result["history"]) == 1 and not result["notes"]
        assert _summary_keys(root, name) == sorted(r["key"] for r in results.values())


def _to_seed_layout(root: Path, name: str, seed: int) -> None:
    """A finished trial of experiment `name` put back where the code before experiment folders kept it
    (model_summaries/<model>/<res>/seed<S>/, checkpoints/<family>/<model>/<res>/seed<S>/), its result.json naming
    those folders as that code wrote them (paths relative to the output folder, the sweep's working folder)."""
    lay = Layout(Path("."), "model_summaries", "checkpoints", name)
    moves = [
        (lay.trial_summary("tiny_cnn", 16, seed), lay.seed_layout_summary("tiny_cnn", 16, seed)),
        (lay.trial_checkpoints("cnn", "tiny_cnn", 16, seed), lay.seed_layout_checkpoints("cnn", "tiny_cnn", 16, seed)),
    ]
    result = root / moves[0][0] / "result.json"
    text = result.read_text()
    for new, old in moves:
        text = text.replace(f'"{new.as_posix()}/', f'"{old.as_posix()}/')
        assert move_to(root / new, root / old)
    result_old = root / moves[0][1] / "result.json"
    result_old.write_text(text)
    assert json.loads(text)["best_checkpoint"].startswith(f"{moves[1][1].as_posix()}/")


@pytest.mark.slow  # two sweeps in subprocesses / three sweeps: about 30 s each
def test_the_layout_before_experiment_folders_is_moved_never_retrained(root: Path, capsys, monkeypatch):
    _sweep_here(root, "exp-a", capsys, monkeypatch, seeds=(42,))
    _sweep_here(root, "exp-b", capsys, monkeypatch, seeds=(43,))
    _to_seed_layout(root, "exp-a", 42)  # both trials now where the code before experiment folders put them
    _to_seed_layout(root, "exp-b", 43)
    old_a, old_b = root / "model_summaries/tiny_cnn/16/seed42", root / "model_summaries/tiny_cnn/16/seed43"
    before_a = json.loads((old_a / "result.json").read_text())
    key_b = json.loads((old_b / "result.json").read_text())["key"]
    (old_b / "result.json").unlink()  # b: interrupted after its epoch (last.pt written, no result yet)
    kept_b = _snapshot(old_b, root / "checkpoints/cnn/tiny_cnn/16/seed43")

    log = _sweep(root, "exp-a", seeds=(42,))
    assert _trained(log) == [] and "starting afresh" not in log, log[-3000:]  # nothing retrained
    moved = [ln for ln in log.splitlines() if "moved" in ln]
    assert moved == [
        "[sweep] moved tiny_cnn@16 into experiment exp-a's folders: "
        "checkpoints/cnn/tiny_cnn/16/seed42 -> checkpoints/exp-a/cnn/tiny_cnn/16/seed42, "
        "model_summaries/tiny_cnn/16/seed42 -> model_summaries/exp-a/tiny_cnn/16/seed42"
    ], log[-3000:]
    assert not old_a.exists() and not (root / "checkpoints/cnn/tiny_cnn/16/seed42").exists()
    after = _results(root, "exp-a", (42,))[42]
    paths = {"best_checkpoint": after.pop("best_checkpoint"), "maps": after["explain"].pop("maps", None)}
    before_a.pop("best_checkpoint"), before_a["explain"].pop("maps", None)
    assert after == before_a  # the same result: only its paths follow the folders
    assert paths["best_checkpoint"].startswith("checkpoints/exp-a/cnn/tiny_cnn/16/seed42/")
    assert (root / paths["best_checkpoint"]).is_file()
    assert _snapshot(old_b, root / "checkpoints/cnn/tiny_cnn/16/seed43") == kept_b  # another experiment's: left
    assert _summary_keys(root, "exp-a") == [after["key"]]

    from resomap.results import load_sweep

    sweep = load_sweep("exp-a", root=root / "model_summaries")  # the rebuilt summary reads the moved folder
    assert sweep.trials["has_predictions"].tolist() == [True] and len(sweep.predictions) > 0

    log = _sweep(root, "exp-b", seeds=(43,))  # its own run moves b's folders and resumes from their last.pt
    assert "starting afresh" not in log and "moved tiny_cnn@16" in log, log[-3000:]
    assert _trained(log) == ["tiny_cnn@16"], log[-3000:]
    result_b = _results(root, "exp-b", (43,))[43]
    assert result_b["key"] == key_b and result_b["notes"] == ["resumed from last.pt after epoch 0"]
    assert result_b["best_checkpoint"].startswith("checkpoints/exp-b/cnn/tiny_cnn/16/seed43/")
    assert not (root / "model_summaries/tiny_cnn/16").exists()  # the emptied <res> folders are gone
    again = _sweep_here(root, "exp-a", capsys, monkeypatch, seeds=(42,))
    assert "nothing to do" in again and "moved" not in again, again[-3000:]


# ---------------------------------------------------------------- pieces


def test_an_experiment_name_must_be_one_folder_name(project: Path):
    for bad in ("a/b", "..", "_sweep", ""):
        with pytest.raises(ConfigError, match=r"experiment\.name"):
            load("configs", "smoke", [f"experiment.name={bad}"])
    assert load("configs", "smoke", ["experiment.name=my-exp.v2"]).experiment.name == "my-exp.v2"


def test_move_to_never_replaces_what_is_there(tmp_path: Path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "f").write_text("a")
    (tmp_path / "b").mkdir()  # even an empty folder is kept
    assert not move_to(tmp_path / "a", tmp_path / "b")
    assert (tmp_path / "a" / "f").read_text() == "a" and not any((tmp_path / "b").iterdir())
    assert move_to(tmp_path / "a", tmp_path / "deep" / "c")  # parents made
    assert (tmp_path / "deep" / "c" / "f").read_text() == "a" and not (tmp_path / "a").exists()
    assert not move_to(tmp_path / "a", tmp_path / "d")  # gone: nothing to move

"""Safe to share: files that follow the umask, whole-folder swaps, the sweep lock that names its holder and is taken
over after a SIGKILL, one parent run per sweep, a summary that follows its statistics settings, a sweep folder a
second user (or a read-only copy) can list and report on, and messages that name the real fault."""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import run_cli, trial_summary
from resomap import atomic
from resomap.cli import main
from resomap.config import load
from resomap.errors import BusyError, CheckpointError, ConfigError
from resomap.locks import hold, owner
from resomap.training import load_checkpoint

REPO = Path(__file__).resolve().parents[1]
FAST = ["--preset", "smoke", "explainability.enabled=false", "profiling.enabled=false", "mlflow.log_checkpoint=false"]
SWEEP = "model_summaries/_sweep/resomap-smoke"


def _one_line_error(code: int, err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


# ---------------------------------------------------------------- files and folders


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_atomic_files_follow_the_umask(tmp_path: Path, mask: int, mode: int):
    old = os.umask(mask)
    try:
        path = atomic.write_text(tmp_path / "sub" / "a.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert [p.name for p in path.parent.iterdir()] == ["a.txt"]  # no temp file left


def _tree(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_replace_dir_swaps_a_whole_folder(tmp_path: Path):
    target = tmp_path / "_sweep" / "a"
    for content in ("old", "new"):
        staging = atomic.staging_dir(target)
        assert staging.name == "a" and len(staging.parents) == len(target.parents)  # same name and depth
        (staging / "figures").mkdir()
        (staging / "summary.json").write_text(content)
        (staging / "figures" / f"{content}.png").write_text(content)
        atomic.replace_dir(staging, target)
        assert _tree(target) == {"summary.json": content, f"figures/{content}.png": content}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["_sweep"]  # the staging root is gone


def test_replace_dir_without_an_atomic_swap_recovers_the_old_folder(tmp_path: Path, monkeypatch):
    target = tmp_path / "_sweep" / "a"
    target.mkdir(parents=True)
    (target / "summary.json").write_text("old")
    staging = atomic.staging_dir(target)
    (staging / "summary.json").write_text("new")
    monkeypatch.setattr(atomic, "_exchange", lambda a, b: False)
    renames = []

    def rename(src, dst):  # the second rename (new -> target) dies: a kill between the two
        renames.append(src)
        if len(renames) == 2:
            raise KeyboardInterrupt
        os.replace(src, dst)

    monkeypatch.setattr(atomic.os, "rename", rename)
    with pytest.raises(KeyboardInterrupt):
        atomic.replace_dir(staging, target)
    assert not target.exists()
    monkeypatch.undo()
    atomic.recover_dir(target)
    assert _tree(target) == {"summary.json": "old"}


# ---------------------------------------------------------------- the sweep lock


def _holder(lock: Path) -> subprocess.Popen:
    """A process holding `lock` (resomap.locks.hold) until killed."""
    code = "import sys, time\nfrom resomap.locks import hold\nwith hold(sys.argv[1], 'x'):\n"
    code += "    print('held', flush=True)\n    time.sleep(600)\n"
    proc = subprocess.Popen([sys.executable, "-c", code, str(lock)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_sweep_refuses_naming_the_holder_then_takes_over_after_sigkill(project: Path, capsys, caplog):
    from resomap.sweep.sweep import lock_path, sweep_lock

    cfg = load("configs", "smoke", [])
    lock = lock_path(cfg)
    lock.parent.mkdir(parents=True)
    proc = _holder(lock)
    try:
        code, out, err = run_cli(["sweep", *FAST], capsys)
        line = _one_line_error(code, err)
        assert out == ""  # no device, precision or power line before the refusal
        assert f"sweep 'resomap-smoke' in {project} is already running: pid {proc.pid} on {socket.gethostname()}" in (
            line
        )
        assert "--wait" in line
        with pytest.raises(BusyError, match=f"pid {proc.pid}"), sweep_lock(cfg, wait=0.3):
            pass
    finally:
        proc.kill()  # SIGKILL: the holder cannot clean up; the OS releases its lock
        proc.wait()
    assert owner(lock)["pid"] == proc.pid  # its record is left behind
    with caplog.at_level("INFO", logger="resomap.locks"), sweep_lock(cfg):
        assert owner(lock)["pid"] == os.getpid()
    assert f"took over {lock} from pid {proc.pid}" in caplog.text
    assert owner(lock) is None


_LATE_HOLDER = """
import sys, time
from filelock import FileLock
from resomap import locks
lock = FileLock(sys.argv[1])
lock.acquire()
print("held", flush=True)
time.sleep(0.5)  # the moment between taking the lock and recording itself
locks._record_owner(locks.Path(sys.argv[1]))
time.sleep(600)
"""


def test_the_wait_line_names_the_holder_that_took_the_lock_a_moment_ago(tmp_path: Path):
    """(issue 49, item 6) A run that finds the lock taken before its holder recorded itself (two sweeps started
    together), over the record a killed holder left: the `--wait` line names the new holder's pid and host, not
    the dead one's and not "another process"."""
    lock = tmp_path / ".sweep.lock"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    record = {"pid": int(dead.stdout), "host": socket.gethostname(), "started": 0.0, "command": []}
    (tmp_path / ".sweep.lock.owner").write_text(json.dumps(record))  # left by a holder killed before
    proc = subprocess.Popen([sys.executable, "-c", _LATE_HOLDER, str(lock)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        said: list[str] = []
        with (
            pytest.raises(BusyError, match=f"pid {proc.pid} on"),
            hold(lock, "sweep 's'", wait=1.0, on_wait=said.append),
        ):
            pass
    finally:
        proc.kill()
        proc.wait()
    assert said == [said[0]] and said[0].startswith(f"waiting for sweep 's': pid {proc.pid} on {socket.gethostname()}")


def test_leftovers_of_interrupted_saves_stay_while_another_run_holds_the_lock(project: Path):
    """(issue 49, item 6) The sweep removes them only once it holds its lock: a run refused because another
    holds it (which may be saving them right now) leaves them."""
    from resomap.sweep.sweep import lock_path, run_sweep

    cfg = load("configs", "smoke", ["mlflow.enabled=false"])
    lock = lock_path(cfg)
    lock.parent.mkdir(parents=True)
    temp = trial_summary(project, "tiny_cnn", 16) / ".result.json.1a2b3c4d.tmp"
    temp.parent.mkdir(parents=True)
    temp.write_text("{")
    proc = _holder(lock)
    try:
        with pytest.raises(BusyError, match=f"pid {proc.pid}"):
            run_sweep(cfg)
    finally:
        proc.kill()
        proc.wait()
    assert temp.is_file()


def test_sweeps_of_other_experiments_do_not_wait_for_each_other(project: Path):
    from resomap.sweep.sweep import sweep_lock

    with sweep_lock(load("configs", "smoke", [])), sweep_lock(load("configs", "smoke", ["experiment.name=other"])):
        pass


def test_lock_in_a_folder_without_write_permission_is_one_line(tmp_path: Path, monkeypatch):
    import filelock

    def denied(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(filelock.FileLock, "acquire", denied)
    with (
        pytest.raises(Exception, match=r"cannot lock .*Permission denied.*experiment.output_dir") as err,
        hold(tmp_path / "x.lock", "x"),
    ):
        pass
    assert "\n" not in str(err.value)


# ---------------------------------------------------------------- statistics settings


def test_stats_resamples_below_a_valid_interval_are_refused_at_load():
    for resamples in (1, 2, 199):
        with pytest.raises(ConfigError, match=r"stats\.resamples: expected at least 200 at stats\.level=0\.95"):
            load("configs", None, [f"stats.resamples={resamples}"])
    assert load("configs", None, ["stats.resamples=200"]).stats.resamples == 200
    with pytest.raises(ConfigError, match=r"at least 1000 at stats\.level=0\.99"):
        load("configs", None, ["stats.level=0.99", "stats.resamples=500"])


def test_changed_stats_recompute_the_summary_without_training(project: Path, capsys, monkeypatch):
    args = ["sweep", *FAST, "mlflow.enabled=false", "sweep.resolutions=[16,24]", "stats.resamples=200"]
    assert main(args) == 0
    summary = project / SWEEP / "summary.json"
    assert json.loads(summary.read_text())["stats"]["level"] == 0.95
    results = {p: p.read_bytes() for p in trial_summary(project, "tiny_cnn", 16).parents[1].rglob("result.json")}
    assert len(results) == 2
    capsys.readouterr()
    assert main(args) == 0
    assert "nothing to do" in capsys.readouterr().out

    import resomap.sweep.trial as trial_mod

    def no_training(*a, **k):
        raise AssertionError("a trial was run again")

    monkeypatch.setattr(trial_mod, "run_trial", no_training)
    assert main([*args, "stats.level=0.9"]) == 0
    out = capsys.readouterr().out
    assert "nothing to do" not in out
    assert json.loads(summary.read_text())["stats"]["level"] == 0.9
    state = json.loads((project / SWEEP / "state.json").read_text())
    assert state["inputs"]["stats"]["level"] == 0.9
    assert {p: p.read_bytes() for p in results} == results  # no trial touched
    assert main([*args, "stats.level=0.9"]) == 0
    assert "nothing to do" in capsys.readouterr().out


def test_adding_a_seed_keeps_one_parent_run_with_every_child(project: Path):
    from mlflow import MlflowClient

    args = ["sweep", *FAST, "sweep.resolutions=[16]", "stats.resamples=200"]
    assert main([*args, "sweep.seeds=[42]"]) == 0
    assert main([*args, "sweep.seeds=[42,43]"]) == 0
    client = MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    exp = client.get_experiment_by_name("resomap-smoke").experiment_id
    (parent,) = client.search_runs([exp], "tags.`resomap.kind` = 'sweep'")
    children = client.search_runs([exp], "tags.`resomap.kind` = 'trial'")
    assert sorted(c.data.tags["seed"] for c in children) == ["42", "43"]
    assert all(c.data.tags["mlflow.parentRunId"] == parent.info.run_id for c in children)
    assert parent.info.status == "FINISHED" and parent.data.tags["resomap.trials"] == "2"
    assert parent.data.tags["resomap.grid.seeds"] == "[42, 43]"
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    artifacts |= {a.path for a in client.list_artifacts(parent.info.run_id, "figures")}
    assert [p for p in artifacts if p.endswith("report.html")] == ["report.html"]  # logged once


# ---------------------------------------------------------------- a second user, a read-only copy


def _as_second_user(run) -> tuple[int, str]:
    """run() in a forked child that is another user (root: nobody) or, for a user who cannot switch, this user on a
    read-only tree; (exit code, output). The imports are done by the caller first: nobody may not read them."""
    out_r, out_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 3
        try:
            sys.stdout = sys.stderr = os.fdopen(out_w, "w")  # what main prints, past pytest's capture
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
            code = run()
        except BaseException as exc:  # the child reports, never returns into pytest
            print(f"Traceback: {type(exc).__name__}: {exc}", flush=True)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code if isinstance(code, int) else 3)
    os.close(out_w)
    with os.fdopen(out_r) as fh:
        text = fh.read()
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), text


@pytest.mark.slow
def test_under_umask_022_outputs_are_0644_and_a_second_user_can_list_and_report(project: Path, umask_022):
    from resomap.data import clear_memory_cache

    clear_memory_cache()  # so that the disk cache is written here
    args = ["sweep", *FAST, "sweep.resolutions=[16,24]", "stats.resamples=200"]
    assert main(args) == 0
    modes = {str(p.relative_to(project)): stat.S_IMODE(p.stat().st_mode) for p in project.rglob("*")}
    outputs = {p: m for p, m in modes.items() if not p.startswith("configs")}
    assert len(outputs) > 50
    assert {p: m for p, m in outputs.items() if m not in (0o644, 0o755)} == {}
    assert any(p.startswith("mlartifacts/") for p in outputs) and any(p.startswith(".cache/") for p in outputs)

    shared = Path(tempfile.mkdtemp(prefix="resomap-shared-"))  # outside pytest's private tmp folder
    try:
        copy = shared / "copy"
        shutil.copytree(project, copy, symlinks=True)
        copy.chmod(0o755)  # pytest's own tmp folder is private to this user; the project folder need not be
        out = shared / "out"
        out.mkdir()
        shared.chmod(0o755)
        out.chmod(0o777)
        for path in [copy, *copy.rglob("*")]:
            if not path.is_symlink():
                path.chmod(stat.S_IMODE(path.stat().st_mode) & ~0o222)  # read-only
        before = _tree_bytes(copy)
        os.chdir(copy)
        dry = ["-q", "sweep", "--dry-run", *args[1:]]
        report = ["-q", "report", "--out", str(out / "report.html")]
        assert main(dry) == 0 and main(report) == 0  # imports done here, before the child leaves root
        assert _as_second_user(lambda: _cannot_write(copy / SWEEP / "x")) == (0, "")  # the barrier is real
        for command in (dry, report):
            code, text = _as_second_user(lambda command=command: main(command))
            assert code == 0 and "Traceback" not in text, text
        assert "2 done" in _as_second_user(lambda: main(dry))[1]
        assert (out / "report.html").stat().st_size > 1000
        assert _tree_bytes(copy) == before  # nothing written into the copy
    finally:
        os.chdir(project)
        for path in [shared, *shared.rglob("*")]:
            if not path.is_symlink():
                path.chmod(0o755)
        shutil.rmtree(shared)


def _cannot_write(path: Path) -> int:
    try:
        path.write_text("x")
    except PermissionError:
        return 0
    return 1


def _tree_bytes(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_result_this_user_cannot_read_is_named_not_a_traceback(project: Path, capsys, monkeypatch):
    from resomap.sweep import plan

    cfg = load("configs", "smoke", [])
    (trial,) = plan(cfg)
    trial.summary_dir.mkdir(parents=True)
    (trial.summary_dir / "result.json").write_text("{}")
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: "result.json" not in str(p) and real_access(p, mode))
    code, out, err = run_cli(["sweep", "--dry-run", "--preset", "smoke"], capsys)
    assert code == 0 and "unreadable" in out, out + err
    line = _one_line_error(*run_cli(["sweep", "--preset", "smoke"], capsys)[::2])
    assert "result.json: no permission to read it" in line and "chmod" in line


# ---------------------------------------------------------------- messages that name the real fault


def test_random_bytes_are_corrupt_not_pickled_code(tmp_path: Path):
    rng = random.Random(0)
    for i in range(30):
        path = tmp_path / f"r{i}.pt"
        path.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randrange(10, 3000))))
        with pytest.raises(CheckpointError) as err:
            load_checkpoint(path)
        assert "pickled code" not in str(err.value) and ("corrupt" in str(err.value)), str(err.value)


class _Evil:
    def __reduce__(self):
        return (os.system, ("true",))


def test_pickled_code_names_the_refused_global(tmp_path: Path):
    torch.save({"x": _Evil()}, tmp_path / "evil.pt")
    with pytest.raises(
        CheckpointError, match=r"refused: the file contains pickled code that calls os\.system when loaded"
    ):
        load_checkpoint(tmp_path / "evil.pt")


def test_analyze_on_a_refused_checkpoint_says_why(tmp_path: Path, capsys):
    (tmp_path / "ck").mkdir()
    torch.save({"x": _Evil()}, tmp_path / "ck" / "model.pt")
    line = _one_line_error(*run_cli(["analyze", "--checkpoint-dir", str(tmp_path / "ck")], capsys)[::2])
    assert "model.pt: refused: the file contains pickled code" in line and "no trained checkpoints" not in line


def test_a_mask_with_an_unknown_class_names_the_mask_and_the_index(project: Path, capsys):
    from PIL import Image

    root = project / "pairs"
    for sub in ("images", "masks"):
        (root / sub).mkdir(parents=True)
    for i in range(12):
        Image.fromarray(np.full((16, 16), 100, np.uint8)).save(root / "images" / f"im{i}.png")
        Image.fromarray(np.full((16, 16), 5, np.uint8)).save(root / "masks" / f"im{i}.png")
    args = ["train", "--model", "tiny_segnet", "--resolution", "16", "experiment.task=segmentation"]
    args += ["data.dataset=segfolder", f"data.segfolder.root={root}", "data.segfolder.classes=[background,crack]"]
    line = _one_line_error(*run_cli(args, capsys)[::2])
    assert "12 of 12 images have an invalid mask" in line and "masks/im0.png holds class index 5" in line, line
    assert "could not be read" not in line


@pytest.mark.parametrize(
    ("overrides", "meant"),
    [
        (["data.root=x"], "data.imagefolder.root"),
        (["data.root=x", "data.dataset=segfolder"], "data.segfolder.root"),
        (["data.roots=x"], "data.imagefolder.root"),
        (["data.size=3"], "data.synthetic.size"),
        (["data.imagefolder.rot=x"], "data.imagefolder.root"),
    ],
)
def test_suggestions_rank_the_key_most_likely_meant(overrides, meant):
    with pytest.raises(ConfigError, match=f"did you mean '{meant}'"):
        load("configs", None, overrides)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["sweep", "--dry-run", "sweep.resolutions=[100000]"], "sweep.resolutions[0]: expected a positive integer up"),
        (["profile", "--model", "tiny_cnn", "--resolution", "1"], "tiny_cnn needs inputs of at least 4 px"),
        (["profile", "--model", "tiny_cnn", "--resolution", "100000"], "at most 8192 px"),
        (["train", "--model", "simple_cnn", "--resolution", "8", *FAST[:2]], "simple_cnn needs inputs of at least 15"),
        (["ui", "--port", "99999"], "expected a port from 1 to 65535"),
    ],
)
def test_out_of_range_inputs_are_one_line(project: Path, capsys, args, needle):
    (project / "mlflow.db").write_bytes(b"")  # a store is present: ui gets as far as the port
    line = _one_line_error(*run_cli(args, capsys)[::2])
    assert needle in line, line

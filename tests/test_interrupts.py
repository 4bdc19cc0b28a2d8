"""Interrupts with real processes (issue 62 items 1, 4 and 6): Ctrl-C (SIGINT) or SIGTERM to a sweep's process group
while a trial trains ends it with `resomap: interrupted` (130, 143), leaves no result.json, closes the trial's and
the sweep's MLflow runs KILLED, and a plain rerun resumes the trial from its last.pt, reusing its run, with the
predictions of an uninterrupted sweep. A last.pt that does not load (garbage bytes, pickled code the safe loader
refuses) is set aside as last.pt.refused in one warning and the trial trains from the start. resomap.interrupts:
a second signal during the clean-up ends the process at once; an interrupt whose KeyboardInterrupt is lost in a
garbage-collector callback still stops it. A result without an error never prints `FAILED <trial>: None`. A sweep
killed in its summary phase (SIGTERM, SIGKILL, SIGINT to its own process) leaves no figure worker behind (item 4)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import (
    QUIET_SMOKE,
    bad_checkpoints,
    project_at,
    run_cli,
    start_logged,
    trial_checkpoints,
    trial_summary,
    wait_for,
)

REPO = Path(__file__).resolve().parents[1]
MODEL, RES = "tiny_cnn", 32
EPOCHS = 8
ARGS = [*QUIET_SMOKE, f"sweep.models=[{MODEL}]", f"sweep.resolutions=[{RES}]", f"training.epochs={EPOCHS}"]


def _sweep(root: Path) -> subprocess.CompletedProcess:
    """A plain `resomap sweep` of ARGS in `root`, to its end."""
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS")}
    cmd = [sys.executable, "-m", "resomap.cli", "sweep", *ARGS]
    return subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)


def _predictions(root: Path) -> str:
    return (trial_summary(root, MODEL, RES) / "predictions.csv").read_text()


def _result(root: Path) -> dict:
    return json.loads((trial_summary(root, MODEL, RES) / "result.json").read_text())


def _runs(root: Path) -> tuple[list, list]:
    """(the trial runs, the sweep runs) of the smoke experiment in root's store."""
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    exp = client.get_experiment_by_name("resomap-smoke").experiment_id
    return (
        client.search_runs([exp], "tags.`resomap.trial_key` != ''"),
        client.search_runs([exp], "tags.`resomap.kind` = 'sweep'"),
    )


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> str:
    """predictions.csv of the sweep run once, uninterrupted."""
    root = project_at(tmp_path_factory.mktemp("uninterrupted"))
    done = _sweep(root)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return _predictions(root)


@pytest.mark.parametrize(
    "sig", [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow)], ids=["SIGINT", "SIGTERM"]
)
def test_an_interrupted_trial_resumes_on_a_plain_rerun_with_the_uninterrupted_results(
    tmp_path: Path, procs, uninterrupted: str, sig: int
):
    root = project_at(tmp_path / "p")
    last = trial_checkpoints(root, MODEL, RES) / "last.pt"
    proc = start_logged(procs, [sys.executable, "-m", "resomap.cli", "sweep", *ARGS], root, "first.log")
    wait_for("the trial's first last.pt", last.exists, proc, timeout=180)
    os.killpg(proc.pid, sig)  # as a terminal's Ctrl-C does: to the whole process group
    assert proc.wait(timeout=60) == 128 + sig
    log = (root / "first.log").read_text()
    assert log.rstrip().endswith("resomap: interrupted"), log[-2000:]
    assert "Traceback" not in log and "Exception ignored" not in log, log[-2000:]
    assert not (trial_summary(root, MODEL, RES) / "result.json").exists()  # nothing says it failed
    assert last.exists()
    (child,), (parent,) = _runs(root)
    assert child.info.status == "KILLED" and parent.info.status == "KILLED"

    again = _sweep(root)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert "FAILED" not in again.stdout and "not run again" not in again.stdout, again.stdout
    result = _result(root)
    assert result["status"] == "FINISHED" and result["epochs_run"] == EPOCHS
    (note,) = [n for n in result["notes"] if n.startswith("resumed from last.pt after epoch")]
    assert int(note.rsplit(" ", 1)[1]) < EPOCHS - 1, note  # it stopped mid-training and went on from there
    (rerun_child,), (rerun_parent,) = _runs(root)
    assert rerun_child.info.run_id == child.info.run_id == result["run_id"]  # the interrupted run, reused
    assert rerun_child.info.status == "FINISHED" and rerun_parent.info.status == "FINISHED"
    assert _predictions(root) == uninterrupted


@pytest.mark.parametrize("bad", ["garbage", "system-zip"])
def test_a_last_pt_that_does_not_load_is_set_aside_and_the_trial_trains_from_the_start(
    tmp_path: Path, uninterrupted: str, bad: str
):
    """An unfinished trial's last.pt of random bytes, or a torch zip whose pickle calls os.system (what
    torch.load(weights_only=True) refuses): one warning names it and why, it is renamed last.pt.refused, the trial
    trains from the start (the predictions of the uninterrupted sweep) and the sweep ends 0; nothing ran."""
    root = project_at(tmp_path / "p")
    folder = trial_checkpoints(root, MODEL, RES)
    folder.mkdir(parents=True)
    if bad == "garbage":
        content, why = os.urandom(4096), "corrupt or not a checkpoint"
        (folder / "last.pt").write_bytes(content)
    else:
        path, why = bad_checkpoints(tmp_path / "bad")[bad]
        content = path.read_bytes()
        shutil.copy(path, folder / "last.pt")
    done = _sweep(root)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    warnings = [ln for ln in (done.stdout + done.stderr).splitlines() if "last.pt" in ln]
    assert len(warnings) == 1 and "WARNING" in warnings[0], warnings
    assert f"{folder.relative_to(root) / 'last.pt'}: " in warnings[0] and why in warnings[0], warnings
    assert warnings[0].endswith("set aside as last.pt.refused, the trial trains from the start"), warnings
    assert (folder / "last.pt.refused").read_bytes() == content
    assert not (tmp_path / "bad" / "pwned").exists()
    result = _result(root)
    assert result["status"] == "FINISHED" and not any(n.startswith("resumed") for n in result["notes"])
    assert _predictions(root) == uninterrupted


# ---------------------------------------------------------------- resomap.interrupts on its own


def _python(code: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def test_a_second_signal_during_the_clean_up_ends_at_once():
    proc = _python(
        """
        import time
        from resomap import interrupts

        with interrupts.handled():
            try:
                print("ready", flush=True)
                time.sleep(60)
            except KeyboardInterrupt:
                print("cleaning up", flush=True)
                time.sleep(60)  # a clean-up that hangs: a tracking server that does not answer
        """
    )
    assert proc.stdout.readline().strip() == "ready"
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.stdout.readline().strip() == "cleaning up"
    start = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=20) == 130 and time.monotonic() - start < 10
    assert proc.stderr.read().strip() == "resomap: interrupted"


def test_an_interrupt_lost_in_a_garbage_collector_callback_still_stops_the_command():
    """Python runs the handler inside a weakref callback, where its KeyboardInterrupt is only printed and the
    program runs on: the flag raises it again at the next check, and the printed notice is left out."""
    proc = _python(
        """
        import os, signal, weakref
        from resomap import interrupts

        class Thing:
            pass

        def callback(_ref):
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(100_000):  # the handler runs in here
                pass

        with interrupts.handled():
            thing = Thing()
            ref = weakref.ref(thing, callback)
            del thing
            print("ran on", flush=True)
            try:
                interrupts.check()
                print("not stopped")
            except KeyboardInterrupt:
                print("stopped", interrupts.exit_code())
        """
    )
    out, err = proc.communicate(timeout=60)
    assert out.split("\n")[:2] == ["ran on", "stopped 130"], (out, err)
    assert "Exception ignored" not in err and "KeyboardInterrupt" not in err, err


def test_a_signal_while_the_handlers_are_restored_is_said_and_coded_not_a_death_by_sigint():
    """Ctrl-C in the instant `handled()` puts the handlers back, as a command ends (a sweep stopped once in 29 runs
    died of SIGINT, exit -2, instead of exiting 143): the signal waits until they are back, then ends the command
    with its line and code. The instant is made here: the signal is sent from inside the first restore."""
    proc = _python(
        """
        import os, signal
        from resomap import interrupts
        from resomap.cli import main

        real, sent = signal.signal, []

        def restoring(sig, handler):
            if handler is not interrupts._handler and not sent:  # the first handler put back
                sent.append(sig)
                os.kill(os.getpid(), signal.SIGINT)
            return real(sig, handler)

        signal.signal = restoring
        raise SystemExit(main(["explainers"]))
        """
    )
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (proc.returncode, err[-2000:])
    assert err.strip().splitlines()[-1] == "resomap: interrupted" and "Traceback" not in err, err


def test_handlers_come_back_and_an_ignored_signal_stays_ignored():
    from resomap import interrupts

    before = signal.getsignal(signal.SIGINT)
    old_term = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with interrupts.handled():
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN  # nohup, a background job: left alone
            assert signal.getsignal(signal.SIGINT) is not before
        assert signal.getsignal(signal.SIGINT) is before and interrupts.received() is None
    finally:
        signal.signal(signal.SIGTERM, old_term)


# ---------------------------------------------------------------- a failure always carries its cause


def test_a_result_without_an_error_is_resumed_or_named_with_its_cause(project: Path, capsys):
    """result.json of an interrupted attempt of an earlier version (RUNNING, no error): a plain rerun resumes the
    trial; a FAILED one without an error (written by hand) prints its status and where to look, never `None`."""
    from resomap.config import load
    from resomap.sweep import plan
    from resomap.sweep.plan import trial_state
    from resomap.trial_result import TrialResult

    overrides = ["sweep.resolutions=[16]", "mlflow.enabled=false", "explainability.enabled=false"]
    overrides += ["profiling.enabled=false", "stats.resamples=200"]
    (trial,) = plan(load(str(project / "configs"), "smoke", overrides))
    stale = TrialResult(trial.key, trial.name, "tiny_cnn", "cnn", 16, 42, "RUNNING")
    stale.save_result(trial.summary_dir)
    assert trial_state(trial) == "partial"

    failed = TrialResult(trial.key, trial.name, "tiny_cnn", "cnn", 16, 42, "FAILED")
    failed.save_result(trial.summary_dir)
    code, out, err = run_cli(["-q", "sweep", "--preset", "smoke", *overrides], capsys)
    assert code == 1, out + err
    (line,) = [ln for ln in out.splitlines() if ln.startswith("FAILED ")]
    assert line == f"FAILED {trial.name}: ended FAILED with no error recorded (see failure.txt in its summary folder)"
    assert "None" not in out


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL, signal.SIGINT])
def test_a_sweep_killed_in_its_summary_phase_leaves_no_process_of_its_group(tmp_path: Path, procs, sig):
    """The signal to the sweep's own process only (`kill <pid>`, not its group), once its figure workers run (the
    summary phase): within 10 s no process of its group is left (the workers watch the sweep; SIGKILL gives the
    sweep no clean-up of its own)."""
    import psutil

    root = project_at(tmp_path / "p")
    args = [a for a in ARGS if not a.startswith(("explainability", "training.epochs"))] + ["training.epochs=1"]
    args += ["mlflow.enabled=false", "explainability.methods=[saliency]", "explainability.probe_size=4"]
    proc = start_logged(procs, [sys.executable, "-m", "resomap.cli", "sweep", *args], root, "sweep.log")
    sweep = psutil.Process(proc.pid)
    wait_for("the summary phase's figure workers", lambda: len(sweep.children()) >= 1, proc, timeout=300)
    workers = sweep.children(recursive=True)
    os.kill(proc.pid, sig)
    deadline = time.monotonic() + 10
    while not _group_gone(proc.pid) and time.monotonic() < deadline:
        proc.poll()  # reap the sweep itself (a zombie still counts as a member of the group)
        time.sleep(0.1)
    left = [p for p in workers if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert _group_gone(proc.pid) or not left, [(p.pid, p.cmdline()) for p in left]
    assert not left, [(p.pid, p.cmdline()) for p in left]

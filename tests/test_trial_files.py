"""A trial's files damaged after it finished, and a full disk while it writes (issue 34, items 5 and 6).

A finished trial whose per-image table, explanations.npz or best checkpoint was cut short (a copy, a full disk, a
hand) is done again on the next run of the sweep, with one warning line naming the file and what is wrong, and the
summary is the uninterrupted run's, on the whole test set. A write that meets a full disk (ENOSPC) ends the trial
with one line naming the file and no traceback, leaves no half-written file, and a plain rerun retries the trial;
on the summary it ends the sweep in one line and leaves the old summary. MLflow stops at the first full-disk error.
A file of the sweep's summary folder cut short is rebuilt on the next run, and what interrupted saves left is removed
(issue 49). Every file checked here is one the real command wrote."""

from __future__ import annotations

import csv
import errno
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_cli
from resomap.atomic import DiskFullError, write_atomic
from resomap.errors import DataError
from resomap.filecheck import check_table, check_zip

ARGS = [
    "sweep",
    "--preset",
    "smoke",
    "sweep.models=[tiny_cnn]",
    "sweep.resolutions=[16]",
    "training.epochs=1",
    "system.threads=1",  # fixed: a count measured per fit may differ between the runs compared
    "mlflow.enabled=false",
    "profiling.enabled=false",
    "stats.resamples=300",
]
NO_MAPS = ["explainability.enabled=false"]
MAPS = [
    "explainability.methods=[saliency]",
    "explainability.sanity_methods=[]",
    "explainability.road=false",
    "explainability.probe_size=2",
]
TRIAL = Path("model_summaries/resomap-smoke/tiny_cnn/16/seed42")
CHECKPOINTS = Path("checkpoints/resomap-smoke/cnn/tiny_cnn/16/seed42")
SUMMARY = Path("model_summaries/_sweep/resomap-smoke")
TEST_IMAGES = 18  # the smoke preset's synthetic test split
VOLATILE = ("time", "seconds", "memory", "throughput", "latency")  # columns of what a run took, not what it found


def _summary(root: Path) -> dict[str, str]:
    """The summary row of tiny_cnn at 16 px without the columns of time and memory taken."""
    (row,) = list(csv.DictReader((root / SUMMARY / "summary.csv").open()))
    return {k: v for k, v in row.items() if not any(word in k for word in VOLATILE)}


def _found(root: Path) -> dict:
    """What the trial found (test metrics, cross-resolution metrics, explanation scores without their cost)."""
    result = json.loads((root / TRIAL / "result.json").read_text())
    explain = {k: v for k, v in (result["explain"].get("metrics") or {}).items() if not any(w in k for w in VOLATILE)}
    return {"status": result["status"], "test": result["test"], "cross": result["cross_resolution"], "maps": explain}


def _best(root: Path) -> Path:
    result = json.loads((root / TRIAL / "result.json").read_text())
    return root / CHECKPOINTS / Path(result["best_checkpoint"]).name


def _cut_mid_row(path: Path) -> str:
    data = path.read_bytes()
    start = data.rstrip(b"\n").rfind(b"\n") + 1
    path.write_bytes(data[: start + 8])  # the last row keeps "16,<index>,<label>": no prediction, no newline
    return "cut mid-row"


def _cut_on_row_boundary(path: Path) -> str:
    data = path.read_bytes()
    path.write_bytes(data[: data.rstrip(b"\n").rfind(b"\n") + 1])  # the last test image's row is gone
    return f"{TEST_IMAGES - 1} rows at 16 px, expected {TEST_IMAGES}"


def _truncate(path: Path) -> str:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return "truncated"


CASES = {
    "predictions cut mid-row": (NO_MAPS, lambda root: root / TRIAL / "predictions.csv", _cut_mid_row),
    "predictions cut on a row boundary": (NO_MAPS, lambda root: root / TRIAL / "predictions.csv", _cut_on_row_boundary),
    "explanations.npz truncated": (MAPS, lambda root: root / TRIAL / "explanations.npz", _truncate),
    "best checkpoint truncated": (NO_MAPS, _best, _truncate),
}


def _redone_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and "does the trial again" in r.getMessage()
    ]


@pytest.mark.parametrize("case", list(CASES))
def test_a_damaged_file_of_a_finished_trial_redoes_it_with_one_warning(project: Path, capsys, caplog, case):
    extra, where, damage = CASES[case]
    code, out, _ = run_cli([*ARGS, *extra], capsys)
    assert code == 0, out
    summary, found = _summary(project), _found(project)
    assert summary["n_test_images"] == str(TEST_IMAGES)
    path = where(project)
    what = damage(path)
    if path.name == "predictions.csv" and "mid-row" in what:  # the reader says which file, not a TypeError
        from resomap.records import read_predictions

        with pytest.raises(DataError, match=r"predictions\.csv: line \d+ is not a whole row"):
            read_predictions(path.parent)

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="resomap"):
        code, out, _ = run_cli([*ARGS, *extra], capsys)
    assert code == 0, out
    assert "[sweep] 0 done, 0 failed, 1 remaining" in out, out  # the trial ran again
    (line,) = _redone_lines(caplog)
    assert str(path.relative_to(project)) in line and what in line, line
    assert _summary(project) == summary  # the uninterrupted run's statistics, on all 18 test images
    assert _found(project) == found
    if path.suffix == ".csv":
        assert check_table(path, TEST_IMAGES, [16]) is None
    else:
        assert check_zip(path) is None

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="resomap"):
        code, out, _ = run_cli([*ARGS, *extra], capsys)
    assert code == 0 and "nothing to do" in out, out  # whole again: not redone a second time
    assert _redone_lines(caplog) == []


# ---------------------------------------------------------------- a full disk

_FULL_DISK = """
import errno, sys
import torch
def full(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")
torch.save = full  # every checkpoint write meets a full disk
from resomap.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_full_disk_ends_the_trial_in_one_line_and_a_plain_rerun_retries_it(project: Path, capsys, caplog):
    """torch.save raising ENOSPC (as torch does on a full disk: its RuntimeError holds the OSError): the sweep's
    console says it in one line naming the checkpoint, no traceback, no temp or torn file left; a plain rerun (no
    --rerun-failed) retries the trial and ends as an uninterrupted sweep."""
    proc = subprocess.run(
        [sys.executable, "-c", _FULL_DISK, *ARGS, *NO_MAPS], cwd=project, capture_output=True, text=True, timeout=600
    )
    console = proc.stdout + proc.stderr
    assert proc.returncode == 1, console
    assert "Traceback" not in console, console
    (line,) = [line for line in console.splitlines() if "disk full writing" in line]
    path = line.split("disk full writing ", 1)[1].split(": no space left on device", 1)[0]
    assert Path(path).parent == CHECKPOINTS and path.endswith(".pt"), line  # the checkpoint being saved
    assert sum(path in other for other in console.splitlines()) == 1, console  # said once
    assert "FAILED tiny_cnn@16: the disk was full" in proc.stdout
    result = json.loads((project / TRIAL / "result.json").read_text())
    assert result["status"] == "FAILED" and result["failure_kind"] == "disk_full", result
    assert "No space left on device" in (project / TRIAL / "failure.txt").read_text()  # the traceback, for a report
    assert not list(project.rglob("*.tmp")) and not list((project / CHECKPOINTS).glob("*.pt"))

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="resomap"):
        code, out, _ = run_cli([*ARGS, *NO_MAPS], capsys)
    assert code == 0, out
    assert "[sweep] 0 done, 0 failed, 1 remaining" in out, out
    retried = [r.getMessage() for r in caplog.records if "the sweep runs it again" in r.getMessage()]
    assert len(retried) == 1 and "the disk was full" in retried[0], retried
    assert not (project / TRIAL / "failure.txt").exists()

    reference = project / "reference"
    code, out, _ = run_cli([*ARGS, *NO_MAPS, f"experiment.output_dir={reference}"], capsys)
    assert code == 0, out
    assert _summary(project) == _summary(reference) and _found(project) == _found(reference)


def test_a_full_disk_on_the_summary_ends_the_sweep_in_one_line_and_keeps_the_old_summary(
    project: Path, capsys, monkeypatch
):
    import resomap.atomic as atomic

    code, out, _ = run_cli([*ARGS, *NO_MAPS], capsys)
    assert code == 0, out
    before = {p.name: p.read_bytes() for p in (project / SUMMARY).iterdir() if p.is_file()}
    create = atomic._create_temp

    def full_in_staging(path: Path):
        if ".staging" in str(path):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return create(path)

    monkeypatch.setattr(atomic, "_create_temp", full_in_staging)
    code, out, err = run_cli([*ARGS, *NO_MAPS, "stats.resamples=400"], capsys)  # new statistics: a summary to write
    assert code == 2, out + err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("resomap: error: disk full writing ") and str(SUMMARY) in err and "free" in err, err
    assert ".staging" not in err  # named where it goes, not where it was being built
    after = {p.name: p.read_bytes() for p in (project / SUMMARY).iterdir() if p.is_file()}
    assert after == before  # the old summary, whole
    assert not list((project / "model_summaries").glob(".*.staging"))

    monkeypatch.setattr(atomic, "_create_temp", create)
    code, out, _ = run_cli([*ARGS, *NO_MAPS, "stats.resamples=400"], capsys)
    assert code == 0 and "0 remaining" in out, out
    assert (project / SUMMARY / "summary.csv").read_bytes() != before["summary.csv"]  # rebuilt, without training


def test_write_atomic_names_the_file_on_a_full_disk_and_keeps_the_old_one(tmp_path: Path):
    """torch.save on a full disk raises RuntimeError('... unexpected pos ...') with the OSError as its context."""
    path = tmp_path / "ck.pt"
    path.write_bytes(b"old")

    def torch_like(fh):
        fh.write(b"partial")
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:671] . unexpected pos 704 vs 598")  # noqa: B904

    with pytest.raises(DiskFullError) as caught:
        write_atomic(path, torch_like)
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(path)
    message = str(caught.value)
    assert message.startswith(f"disk full writing {path}: no space left on device (") and " free" in message
    assert "\n" not in message
    assert path.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["ck.pt"]


def test_mlflow_stops_at_the_first_full_disk_error_with_one_warning(project: Path, caplog):
    from resomap.config import load
    from resomap.tracking import Tracker

    cfg = load(str(project / "configs"), "smoke", [])
    tracker = Tracker(cfg, retries=5, backoff_s=0.01)
    calls = []

    def full():
        calls.append(1)
        raise RuntimeError("(sqlite3.OperationalError) database or disk is full")  # SQLite's words, via MLflow

    with caplog.at_level(logging.DEBUG, logger="resomap.tracking"):
        assert tracker._soft("log metrics", full) is None
        assert tracker._soft("log params", full) is None
    assert calls == [1]  # not retried, and the next call is not even tried
    assert tracker.offline and tracker.disk_full and "mlflow.db" in tracker.disk_full
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "disk full" in warnings[0] and "log metrics" in warnings[0], warnings
    assert len(tracker.failures) == 2
    tracker._offline_until = 0.0
    assert tracker._call("ok", lambda: 7) == 7 and tracker.disk_full is None


# ---------------------------------------------------------------- the sweep's summary folder

SUMMARY_CASES = {  # a file of the summary folder cut in half: what the sweep's warning says of it
    "explanations/sensitive_maps.npz": "truncated",
    "summary.json": "not whole JSON",
    "report.html": "no closing </html>",
}


def _one_image_outside_the_probe_set_lost(monkeypatch: pytest.MonkeyPatch, project: Path) -> None:
    """The summary lists one test image outside tiny_cnn's probe set as lost, so that it explains it from the
    checkpoint into explanations/sensitive_maps.npz (which images are lost is tested in test_report_html)."""
    import resomap.summary.build as summary_module
    from resomap.explain.methods.probe import load_meta

    counted = summary_module.sensitivity

    def with_one_lost(records, recommendations, cfg):
        found = counted(records, recommendations, cfg)
        probe = {int(i) for i in load_meta(project / TRIAL / "explanations.npz")["index"]}
        with (project / TRIAL / "predictions.csv").open() as fh:
            index = next(int(r["index"]) for r in csv.DictReader(fh) if int(r["index"]) not in probe)
        found.images[:] = [{"model": "tiny_cnn", "resolution": 16, "reference": 16, "index": index, "status": "lost"}]
        return found

    monkeypatch.setattr(summary_module, "sensitivity", with_one_lost)


def _summary_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and "rebuilds the summary" in r.getMessage()
    ]


def test_a_damaged_summary_file_is_rebuilt_with_one_warning_and_report_names_it(
    project: Path, capsys, caplog, monkeypatch
):
    """(issue 49, item 4) A file of the summary folder cut in half: the next run of the sweep rebuilds the summary,
    without training, in one warning line naming the file; before that, `resomap report` says which file and the
    command that rebuilds it, in one line, exit 2. Every file the rebuilt summary wrote passes the check: a second
    run has nothing to do. A temp file or folder an interrupted save left in the sweep's folders goes with the next
    run (item 6), another experiment's stays."""
    from resomap.filecheck import check_file
    from resomap.summary_check import read_state

    args = [*ARGS, *MAPS]
    monkeypatch.setattr(sys, "argv", ["resomap", *args])  # the command state.json records
    _one_image_outside_the_probe_set_lost(monkeypatch, project)
    code, out, _ = run_cli(args, capsys)
    assert code == 0, out
    command = read_state(project / SUMMARY)["command"]
    assert command.startswith("resomap sweep --preset smoke ") and "explainability.probe_size=2" in command
    for name, what in SUMMARY_CASES.items():
        path = project / SUMMARY / name
        assert check_file(path) is None, name
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
        if name != "report.html":  # `resomap report` writes that one again itself
            code, out, err = run_cli(["report"], capsys)
            lines = err.strip().splitlines()
            assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
            assert lines[0].startswith(f"resomap: error: {SUMMARY / name}: ") and f"`{command}`" in lines[0], err
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="resomap"):
            code, out, _ = run_cli(args, capsys)
        assert code == 0 and "[sweep] 1 done, 0 failed, 0 remaining" in out and "nothing to do" not in out, out
        (line,) = _summary_warnings(caplog)
        assert line.startswith(f"{SUMMARY / name}: ") and what in line, line
        assert check_file(path) is None, name  # rebuilt whole

    leftovers = [  # as write_atomic and save_atomic name their temp files and folders
        project / TRIAL / ".confusion_matrix.png.1a2b3c4d.tmp" / "confusion_matrix.png",
        project / SUMMARY / ".summary.json.0badc0de.tmp",
        project / CHECKPOINTS / ".last.pt.5e6f7a8b.tmp",
        project / SUMMARY.parent / "..resomap-smoke.lock.owner.9c8d7e6f.tmp",  # its lock record's
    ]
    kept = [  # not a temp file of a save; another experiment's (which may be saving it now)
        project / TRIAL / ".notes.tmp",
        project / "model_summaries" / "other" / ".result.json.1a2b3c4d.tmp",
        project / SUMMARY.parent / "..other.lock.owner.9c8d7e6f.tmp",
    ]
    for path in [*leftovers, *kept]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"half")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="resomap"):
        code, out, _ = run_cli(args, capsys)
    assert code == 0 and "nothing to do" in out, out  # whole: not rebuilt a second time
    assert _summary_warnings(caplog) == []
    first = TRIAL / ".confusion_matrix.png.1a2b3c4d.tmp"
    assert f"[sweep] removed what interrupted saves left: {first} and 3 more" in out, out
    assert not any(p.exists() for p in [*leftovers, leftovers[0].parent]) and all(p.exists() for p in kept)


@pytest.mark.skipif(sys.platform != "linux", reason="shutil copies through sendfile on Linux")
def test_a_full_disk_met_by_a_copy_is_named_by_the_file_it_was_writing(project: Path, caplog, monkeypatch):
    """(issue 49, item 6) MLflow logs an artifact by copying it (shutil: sendfile), whose ENOSPC names the source
    first, a temp file on a disk with room, and the destination second: the warning names the destination."""
    import shutil

    from resomap.atomic import disk_full
    from resomap.config import load
    from resomap.tracking import Tracker

    source, store = project / "tmp" / "figure.png", project / "mlartifacts" / "figure.png"
    source.parent.mkdir()
    store.parent.mkdir()
    source.write_bytes(b"png" * 1000)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("os.sendfile", full)
    with pytest.raises(OSError) as caught:
        shutil.copyfile(source, store)
    assert (caught.value.filename, caught.value.filename2) == (str(source), str(store))  # as shutil says it
    assert disk_full(caught.value).filename == str(store)

    tracker = Tracker(load(str(project / "configs"), "smoke", []), retries=1, backoff_s=0.01)
    with caplog.at_level(logging.WARNING, logger="resomap.tracking"):
        assert tracker._soft("log artifact", lambda: shutil.copyfile(source, store)) is None
    (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert f"disk full writing {store}: no space left on device" in line and str(source) not in line, line

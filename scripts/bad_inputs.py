"""The bad-input battery: mistakes users make on every command, each run as a fresh `resomap` process in a fresh
project folder (a copy of the configs, a small image folder, broken data and files beside it).

    python scripts/bad_inputs.py [--only SUBSTRING] [--json out.json]

For each input it prints the exit code, the lines the command printed, the seconds it took and whether it wrote
anything into the project folder. The rule (issue 62): exit 2, one line (`resomap: error: ...`, or `resomap
<command>: error: ...` from the argument parser; nothing else on stdout or stderr), nothing written; and within 3 s
on an idle machine (a goal, so the time is printed, not asserted). Exits 1 when some input breaks the rule (the
time aside). tests/test_bad_inputs.py runs it (slow).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "resomap.cli"]
GOAL_S = 3.0
QUIET = ["mlflow.enabled=false", "profiling.enabled=false", "explainability.enabled=false"]
SMOKE = ["--preset", "smoke"]
TRAIN = ["train", "--model", "tiny_cnn", "--resolution", "16", *QUIET]
EXPLAIN = ["explain", "--method", "saliency", "--checkpoint"]


@dataclass(frozen=True)
class Case:
    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    setup: Callable[[Path], None] | None = None  # what the mistake needs beyond the shared project


def _image_folder(root: Path, classes: dict[str, int], broken: bool = False) -> None:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for name, count in classes.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(count):
            path = root / name / f"{i:02d}.png"
            if broken:
                path.write_bytes(b"not a png")
            else:
                Image.fromarray(rng.integers(0, 255, (16, 16), dtype=np.uint8)).save(path)


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def prepare(project: Path) -> None:
    """The shared project: configs, an image folder, broken data and files a user might point a command at."""
    shutil.copytree(REPO / "configs", project / "configs")
    _image_folder(project / "data", {"cat": 12, "dog": 12})
    _image_folder(project / "broken", {"cat": 6, "dog": 6}, broken=True)
    _image_folder(project / "oneclass", {"cat": 6})
    _image_folder(project / "emptyclass", {"cat": 6, "dog": 0})
    (project / "gone.csv").write_text("path,label\nnowhere/a.png,cat\nnowhere/b.png,dog\n")
    (project / "nolabel.csv").write_text("file\ndata/cat/00.png\n")
    (project / "notes.pt").write_text("not a checkpoint\n")
    (project / "evil.pt").write_bytes(pickle.dumps(_Evil()))
    (project / "afile").write_text("a file, not a folder\n")


def _broken_yaml(project: Path) -> None:
    (project / "configs" / "sweep.yaml").write_text("sweep:\n  models: [tiny_cnn\n")


def _cut_checkpoint(project: Path) -> None:
    import zipfile

    with zipfile.ZipFile(project / "cut.pt", "w") as archive:
        archive.writestr("cut/data.pkl", b"\x80\x02}q\x00." * 100)
    data = (project / "cut.pt").read_bytes()
    (project / "cut.pt").write_bytes(data[: len(data) // 2])


def cases() -> list[Case]:
    imagefolder = ["data.dataset=imagefolder"]
    pretrained = ["sweep", *SMOKE, "sweep.models=[tiny_cnn]"]
    hub = ["sweep", *SMOKE, "sweep.models=[timm:resnet18]", "models.pretrained={timm:resnet18: hub}"]
    csv = ["sweep", *SMOKE, "data.dataset=csv"]
    return [
        # the command line itself
        Case("unknown command", ["trian"]),
        Case("unknown option", ["sweep", "--presets", "smoke"]),
        Case("override without =", ["sweep", *SMOKE, "sweep.models"]),
        Case("config dir missing", ["sweep", "--config-dir", "nowhere", *SMOKE]),
        Case("config YAML broken", ["sweep", *SMOKE], setup=_broken_yaml),
        # the config
        Case("unknown preset", ["sweep", "--preset", "smok"]),
        Case("unknown key", ["sweep", *SMOKE, "trainig.epochs=3"]),
        Case("unknown model", ["sweep", *SMOKE, "sweep.models=[resnet81]"]),
        Case("unknown dataset", ["sweep", *SMOKE, "data.dataset=elvp"]),
        Case("unknown explainer", ["sweep", *SMOKE, "explainability.methods=[gradcm]"]),
        Case("unknown executor", ["sweep", *SMOKE, "sweep.executor=slurm"]),
        Case("unknown task", ["sweep", *SMOKE, "experiment.task=detection"]),
        Case("resolution zero", ["sweep", *SMOKE, "sweep.resolutions=[0]"]),
        Case("resolution negative", ["sweep", *SMOKE, "sweep.resolutions=[-32]"]),
        Case("resolution not a number", ["sweep", *SMOKE, "sweep.resolutions=[abc]"]),
        Case("resolution huge", ["sweep", *SMOKE, "sweep.resolutions=[100000]"]),
        Case("resolutions empty", ["sweep", *SMOKE, "sweep.resolutions=[]"]),
        Case("seeds empty", ["sweep", *SMOKE, "sweep.seeds=[]"]),
        Case("epochs negative", ["sweep", *SMOKE, "training.epochs=-1"]),
        Case("learning rate a word", ["sweep", *SMOKE, "training.lr=fast"]),
        Case("batch size zero", ["sweep", *SMOKE, "training.batch_size=0"]),
        Case("unknown precision", ["sweep", *SMOKE, "system.precision=fp8"]),
        Case("threads negative", ["sweep", *SMOKE, "system.threads=-3"]),
        Case("unknown device", ["sweep", *SMOKE, "system.device=tpu"]),
        Case("cuda on a CPU machine", ["sweep", *SMOKE, "system.device=cuda"]),
        Case("bit depth 7", ["sweep", *SMOKE, "data.bit_depth=7"]),
        Case("bad fraction over 1", ["sweep", *SMOKE, "data.max_bad_fraction=2"]),
        Case("split fractions over 1", ["sweep", *SMOKE, "data.split.val=0.6", "data.split.test=0.6"]),
        Case("probe set larger than the test set", ["sweep", *SMOKE, "explainability.probe_size=100000"]),
        Case("experiment name a path", ["sweep", *SMOKE, "experiment.name=../../etc"]),
        Case("output folder is a file", ["sweep", *SMOKE, "experiment.output_dir=afile"]),
        Case("tracking URI unknown scheme", ["sweep", *SMOKE, "mlflow.tracking_uri=ftp://host/store"]),
        Case("pretrained file missing", [*pretrained, "models.pretrained={tiny_cnn: w.pt}"]),
        Case("pretrained file not a checkpoint", [*pretrained, "models.pretrained={tiny_cnn: notes.pt}"]),
        Case("pretrained file with pickled code", [*pretrained, "models.pretrained={tiny_cnn: evil.pt}"]),
        Case("hub weights offline and not cached", hub, env={"HF_HUB_OFFLINE": "1"}),
        # the data
        Case("image folder missing", ["sweep", *SMOKE, *imagefolder, "data.imagefolder.root=nowhere"]),
        Case("image folder unset", ["sweep", *SMOKE, *imagefolder]),
        Case("image folder of broken files", ["sweep", *SMOKE, *imagefolder, "data.imagefolder.root=broken"]),
        Case("image folder with one class", ["sweep", *SMOKE, *imagefolder, "data.imagefolder.root=oneclass"]),
        Case("image folder with an empty class", ["sweep", *SMOKE, *imagefolder, "data.imagefolder.root=emptyclass"]),
        Case("csv manifest missing", [*csv, "data.csv.manifest=nowhere.csv"]),
        Case("csv manifest of missing files", [*csv, "data.csv.manifest=gone.csv"]),
        Case("csv manifest without a label column", [*csv, "data.csv.manifest=nolabel.csv"]),
        # train, profile, bench
        Case("train: unknown model", ["train", "--model", "resnet81", "--resolution", "16", *QUIET]),
        Case("train: resolution 0", ["train", "--model", "tiny_cnn", "--resolution", "0", *QUIET]),
        Case("train: resolution a word", ["train", "--model", "tiny_cnn", "--resolution", "big", *QUIET]),
        Case("train: broken data", [*TRAIN, *imagefolder, "data.imagefolder.root=broken"]),
        Case("profile: unknown model", ["profile", "--model", "resnet81", "--resolution", "32"]),
        Case("profile: resolution 100000", ["profile", "--model", "tiny_cnn", "--resolution", "100000"]),
        Case("profile: resolution 0", ["profile", "--model", "tiny_cnn", "--resolution", "0"]),
        Case("profile: unknown device", ["profile", "--model", "tiny_cnn", "--resolution", "32", "--device", "tpu"]),
        Case("bench: unknown model", ["bench", "--model", "resnet81", "--resolution", "32"]),
        Case("bench: batch size zero", ["bench", "--model", "tiny_cnn", "--resolution", "32", "--batch-sizes", "0"]),
        # explain, analyze, report
        Case("explain: checkpoint missing", [*EXPLAIN, "nowhere.pt"]),
        Case("explain: not a checkpoint", [*EXPLAIN, "notes.pt"]),
        Case("explain: pickled code", [*EXPLAIN, "evil.pt"]),
        Case("explain: checkpoint cut short", [*EXPLAIN, "cut.pt"], setup=_cut_checkpoint),
        Case("explain: unknown method", ["explain", "--checkpoint", "notes.pt", "--method", "gradcm"]),
        Case("analyze: checkpoint folder missing", ["analyze", "--checkpoint-dir", "nowhere"]),
        Case("analyze: a folder without checkpoints", ["analyze", "--checkpoint-dir", "data"]),
        Case("report: sweep missing", ["report", "--sweep", "doesnotexist"]),
        Case("report: summaries folder missing", ["report", "--summaries", "nowhere"]),
        # servers
        Case("ui: port out of range", ["ui", "--port", "99999"]),
        Case("ui: port a word", ["ui", "--port", "http"]),
        Case("server: port out of range", ["server", "--port", "70000"]),
        Case("config: unknown preset", ["config", "--preset", "smok"]),
    ]  # fmt: skip


def files_of(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under `folder`: (size, mtime in ns)."""
    out = {}
    for path in folder.rglob("*"):
        if path.is_file():
            stat = path.stat()
            out[path.relative_to(folder).as_posix()] = (stat.st_size, stat.st_mtime_ns)
    return out


def run_case(case: Case, base: Path, workdir: Path, timeout: float = 120.0) -> dict:
    """Run one bad input in a fresh copy of the project `base`: what it did and whether it keeps the rule."""
    project = workdir / "project"
    if project.exists():
        shutil.rmtree(project)
    shutil.copytree(base, project, symlinks=True)
    if case.setup is not None:
        case.setup(project)
    before = files_of(project)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "RESOMAP_"))}
    env.update({"HF_HUB_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1", **case.env})
    env["HOME"] = str(workdir / "home")  # no user cache, config or font list of the machine's user
    start = time.perf_counter()
    try:
        proc = subprocess.run([*CLI, *case.argv], cwd=project, env=env, capture_output=True, text=True, timeout=timeout)
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out, err = None, exc.stdout or "", f"timed out after {timeout:.0f} s"
    seconds = time.perf_counter() - start
    after = files_of(project)
    written = sorted(k for k in after if before.get(k) != after[k])
    lines = [line for line in f"{out}\n{err}".splitlines() if line.strip()]
    said = bool(lines) and re.match(r"resomap( [a-z]+)?: error: ", lines[0]) is not None  # argparse names the command
    ok = rc == 2 and len(lines) == 1 and said and not written
    return {
        "name": case.name,
        "argv": case.argv,
        "rc": rc,
        "lines": lines,
        "seconds": round(seconds, 2),
        "written": written,
        "ok": ok,
        "within_goal": seconds <= GOAL_S,
    }


def run_battery(only: str | None = None, report: Callable[[str], None] = print) -> list[dict]:
    chosen = [c for c in cases() if only is None or only in c.name]
    with tempfile.TemporaryDirectory(prefix="resomap-bad-inputs-") as tmp:
        base, workdir = Path(tmp) / "base", Path(tmp) / "work"
        base.mkdir()
        workdir.mkdir()
        prepare(base)
        results = []
        for case in chosen:
            found = run_case(case, base, workdir)
            results.append(found)
            mark = "ok  " if found["ok"] else "FAIL"
            first = found["lines"][0] if found["lines"] else "(nothing printed)"
            more = f" (+{len(found['lines']) - 1} lines)" if len(found["lines"]) > 1 else ""
            wrote = f" wrote {', '.join(found['written'][:3])}" if found["written"] else ""
            report(f"{mark} {found['seconds']:5.2f} s  rc {found['rc']}  {case.name}: {first[:150]}{more}{wrote}")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="run the inputs whose name holds this text")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    results = run_battery(args.only)
    ok = sum(r["ok"] for r in results)
    fast = sum(r["ok"] and r["within_goal"] for r in results)
    slowest = max((r["seconds"] for r in results), default=0.0)
    print(
        f"{ok} of {len(results)} bad inputs: exit 2 in one line, nothing written; {fast} of them within {GOAL_S:.0f} s "
        f"(slowest {slowest:.2f} s; time it on an idle machine)"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0 if ok == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())

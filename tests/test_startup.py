"""The command line answers without loading heavy libraries: --help, the listings and config mistakes import
none of captum, grad-cam, shap, lime, timm, mlflow, scikit-learn, matplotlib (or torchvision), and a mistake is
reported before anything is created. (How fast: scripts/benchmark_startup.py.)"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("captum", "pytorch_grad_cam", "shap", "lime", "timm", "mlflow", "sklearn", "matplotlib", "torchvision")
PROBE = """
import json, sys
from resomap.cli import main
try:
    rc = main(sys.argv[1:])
except SystemExit as exc:
    rc = exc.code
print(json.dumps({"rc": rc, "loaded": [m for m in HEAVY if m in sys.modules]}), file=sys.stderr)
""".replace("HEAVY", repr(HEAVY))

BAD = ["train", "--config-dir", str(REPO / "configs"), "--model", "tiny_cnn", "--resolution", "32"]
CASES = [
    (["--help"], 0, ""),
    (["train", "--help"], 0, ""),
    (["models"], 0, ""),
    (["explainers"], 0, ""),
    (["datasets"], 0, ""),
    (["executors"], 0, ""),
    (["tasks"], 0, ""),
    (["config", "--doc"], 0, ""),
    ([*BAD, "data.dataset=elvp"], 2, "did you mean elpv"),
    ([*BAD, "explainability.methods=[gradcm]"], 2, "did you mean gradcam"),
    ([*BAD, "sweep.executor=rey"], 2, "did you mean ray"),
    ([*BAD, "experiment.task=segmentaton"], 2, "did you mean segmentation"),
    ([*BAD, "trainig.epochs=3"], 2, "did you mean 'training.epochs'"),
    ([*BAD[:4], "resnet81", *BAD[5:]], 2, "did you mean resnet18"),
    (["sweep", "--config-dir", str(REPO / "configs"), "--preset", "smoke", "data.dataset=imagenet"], 2, "no dataset"),
]
if not torch.cuda.is_available():
    CASES.append(([*BAD, "system.device=cuda"], 2, "no CUDA GPU"))


@pytest.mark.parametrize(("args", "code", "needle"), CASES, ids=[" ".join(a[:1] + a[-1:]) for a, _, _ in CASES])
def test_answers_without_heavy_imports_and_writes_nothing(tmp_path, args, code, needle):
    env = dict(os.environ, MPLBACKEND="Agg")
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=tmp_path, env=env, capture_output=True, text=True)
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    assert report["rc"] == code, proc.stderr
    assert report["loaded"] == [], f"{' '.join(args)} imported {report['loaded']}"
    if needle:
        errors = [line for line in proc.stderr.splitlines() if re.match(r"resomap( \w+)?: error:", line)]
        assert len(errors) == 1 and needle in errors[0], proc.stderr
        assert list(tmp_path.iterdir()) == [], "a mistake must not create files"


# Mistakes answered before torch is imported (resomap.cli.preflight, names from resomap.catalog): one line, exit 2,
# nothing created, and `torch` not in sys.modules when the command returns.
TORCH_PROBE = PROBE.replace(repr(HEAVY), repr(("torch",)))
EARLY = [
    ([*BAD, "trainig.epochs=3"], "did you mean 'training.epochs'"),
    ([*BAD[:4], "resnet81", *BAD[5:]], "did you mean resnet18"),
    ([*BAD, "data.dataset=elvp"], "did you mean elpv"),
    ([*BAD, "data.elpv.tsk=defect"], "did you mean 'data.elpv.task'"),
    ([*BAD, "explainability.methods=[gradcm]"], "did you mean gradcam"),
    ([*BAD, "sweep.executor=rey"], "did you mean ray"),
    ([*BAD, "experiment.task=segmentaton"], "did you mean segmentation"),
    ([*BAD[:4], "tiny_segnet", *BAD[5:]], "segmentation model"),
    ([*BAD, "training.epochs=0"], "training.epochs: expected an integer >= 1"),
    ([*BAD, "data.dataset=imagefolder", "data.imagefolder.root=nowhere"], "nowhere does not exist"),
    ([*BAD, "models.pretrained={tiny_cnn: gone.pt}"], "gone.pt does not exist"),
    ([*BAD[:6], "448"], "at most the native 300 px of 'elpv'"),
    ([*BAD[:6], "8000", "data.upsample=bilinear"], "8000 px cannot fit in memory"),
    ([*BAD[:6], "100000"], "at most 8192 px"),
    (["sweep", "--config-dir", str(REPO / "configs"), "--preset", "smok"], "did you mean 'smoke'"),
    (
        ["sweep", "--config-dir", str(REPO / "configs"), "sweep.resolutions=[32,8000]", "data.upsample=bilinear"],
        "cannot fit in memory",
    ),
    (["sweep", "--config-dir", str(REPO / "configs"), "sweep.resolutions=[32,100000]"], "up to 8192"),
    (["profile", "--model", "tiny_cnn", "--resolution", "100000"], "at most 8192 px"),
    (["profile", "--model", "resnt18", "--resolution", "64"], "did you mean resnet18"),
    (["bench", "--model", "tiny_cnn", "--resolution", "8000"], "cannot fit in memory"),
    (["explain", "--checkpoint", "none.pt", "--method", "gradcm"], "did you mean gradcam"),
    (["explain", "--checkpoint", "none.pt", "--method", "gradcam"], "checkpoint not found"),
    (["analyze", "--checkpoint-dir", "none", "--output-dir", "out"], "checkpoint folder not found"),
    (["explain", "--checkpoint", "gone/best.pt", "--method", "gradcam"], "checkpoint not found"),
    (["report", "--sweep", "doesnotexist"], "no sweep 'doesnotexist'"),
    (["report"], "no finished sweep under model_summaries"),
]
if not torch.cuda.is_available():
    EARLY.append(([*BAD, "system.device=cuda"], "no CUDA GPU"))


@pytest.mark.parametrize(("args", "needle"), EARLY, ids=[" ".join(a[:1] + a[-1:]) for a, _ in EARLY])
def test_mistakes_are_answered_before_torch_is_imported(tmp_path, args, needle):
    env = dict(os.environ, MPLBACKEND="Agg")
    proc = subprocess.run(
        [sys.executable, "-c", TORCH_PROBE, *args], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    errors = [line for line in proc.stderr.splitlines() if re.match(r"resomap( \w+)?: error:", line)]
    assert report["rc"] == 2 and len(errors) == 1 and needle in errors[0], proc.stderr
    assert report["loaded"] == [], f"{' '.join(args)} imported torch before answering"
    assert list(tmp_path.iterdir()) == [], "a mistake must not create files"


def test_train_refuses_bad_data_before_torch_is_imported(tmp_path):
    """`resomap train` reads a dataset of the user's files before torch, as `resomap sweep` does: an image folder
    whose files are not images is refused in one line, exit 2, torch never imported, nothing written beside it."""
    for name in ("ok", "bad"):
        (tmp_path / "data" / name).mkdir(parents=True)
        for i in range(6):
            (tmp_path / "data" / name / f"{i}.png").write_bytes(b"not an image")
    args = [*BAD, "data.dataset=imagefolder", "data.imagefolder.root=data"]
    proc = subprocess.run([sys.executable, "-c", TORCH_PROBE, *args], cwd=tmp_path, capture_output=True, text=True)
    report = json.loads(proc.stderr.strip().splitlines()[-1])
    errors = [line for line in proc.stderr.splitlines() if re.match(r"resomap( \w+)?: error:", line)]
    assert report["rc"] == 2 and len(errors) == 1 and "12 of 12 images could not be read" in errors[0], proc.stderr
    assert report["loaded"] == [], "train imported torch before refusing its data"
    assert [p.name for p in tmp_path.iterdir()] == ["data"], "a refusal must not create files"


def test_help_imports_no_torch(tmp_path):
    proc = subprocess.run([sys.executable, "-c", TORCH_PROBE, "--help"], cwd=tmp_path, capture_output=True, text=True)
    assert json.loads(proc.stderr.strip().splitlines()[-1]) == {"rc": 0, "loaded": []}


def test_the_names_catalog_is_current():
    """resomap/catalog.json lists what the live registries hold, every entry with its option keys (regenerate:
    `resomap config --doc --write docs/config.md` or `python -m resomap.sweep.builtins`)."""
    from resomap.catalog import CATALOG_FILE
    from resomap.sweep.builtins import catalog

    stored = json.loads(CATALOG_FILE.read_text(encoding="utf-8"))
    assert stored == catalog(), f"{CATALOG_FILE} is stale: run `python -m resomap.sweep.builtins`"


def test_the_names_catalog_covers_every_registry():
    """Every Registry a module of resomap makes (read from the source, so a new registry whose package nothing
    imports is seen too) is in catalog.json, at the module and attribute that hold it."""
    import ast

    from resomap.catalog import load

    root = REPO / "src" / "resomap"
    made = set()
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            value = getattr(node, "value", None)
            call = isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(value, ast.Call)
            if call and isinstance(value.func, ast.Name) and value.func.id == "Registry":
                target = node.targets[0] if isinstance(node, ast.Assign) else node.target
                made.add((module, target.id))
    catalogued = {(data["module"], data["attribute"]) for data in load().values()}
    assert made, "no Registry found in the source"
    assert made == catalogued, "catalog.json misses a registry: run `python -m resomap.sweep.builtins`"

"""Fixtures shared by the test files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import resomap.sweep.builtins  # noqa: F401  (the registries' config groups, before any test loads a config)

REPO = Path(__file__).resolve().parents[1]


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    """`resomap <args>` in this process: (exit code, stdout, stderr)."""
    from resomap.cli import main

    try:
        code = main(args)
    except SystemExit as exc:  # argparse usage errors exit by themselves
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh project folder holding a copy of the repo's configs, the tests running inside it, with no tracking
    URI from the environment."""
    shutil.copytree(REPO / "configs", tmp_path / "configs")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path


def plugin_folder(root: Path, module: str) -> Path:
    """`root` made a folder that installs test module `module` as a ResoMap plugin (a dist-info whose entry point in
    the `resomap.plugins` group names it); put it and tests/ on PYTHONPATH to load it."""
    name = module.replace("_", "-")
    info = root / f"resomap_{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: resomap-{name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[resomap.plugins]\n{module} = {module}\n")
    return root


def tiny_sweep_config(root: Path, models, resolutions, methods, probes: int, *extra: str):
    """The config of a sweep that finishes in about a minute: the smoke preset on 60 synthetic images of 32 px,
    explanations without sanity check or ROAD, short profiles, MLflow off; `extra` overrides on top."""
    from resomap.config import load

    return load(
        str(REPO / "configs"),
        "smoke",
        [
            f"experiment.output_dir={root}",
            f"sweep.models=[{','.join(models)}]",
            f"sweep.resolutions=[{','.join(map(str, resolutions))}]",
            f"explainability.methods=[{','.join(methods)}]",
            f"explainability.probe_size={probes}",
            "explainability.sanity_methods=[]",
            "explainability.road=false",
            "data.synthetic.num_images=60",
            "data.synthetic.size=32",
            "profiling.warmup=1",
            "profiling.iters=2",
            "stats.resamples=200",
            "mlflow.enabled=false",
            *extra,
        ],
    )


@pytest.fixture
def fresh_memory_cache():
    """The in-process resolution cache empty before and after the test (no test sees another's images)."""
    from resomap.data.cache import clear_memory_cache

    clear_memory_cache()
    yield
    clear_memory_cache()

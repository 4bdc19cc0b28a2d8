"""Contracts every registered dataset and executor meets (parametrized from the registries), and an extension
module that plugs a dataset, an explainer and an executor in with one decorated function each."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import plugin_folder, trial_summary
from resomap.config import build as build_config
from resomap.config.docs import config_reference
from resomap.config.groups import group_options
from resomap.data import list_datasets, open_dataset
from resomap.errors import DataError
from resomap.explain import list_explainers
from resomap.sweep.executors import EXECUTORS, get_executor
from resomap.tasks import dataset_task

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
EXT = "extension_example"


def _cfg(tmp_path: Path, dataset: str):
    raw: dict = {"data": {"dataset": dataset}, "experiment": {"output_dir": str(tmp_path)}}
    if dataset_task(dataset) == "segmentation":  # a segmentation dataset needs the task and a segmentation model
        raw["experiment"]["task"] = "segmentation"
        raw["sweep"] = {"models": ["tiny_segnet"]}
    return build_config(raw)


@pytest.mark.parametrize("name", list_datasets())
def test_every_dataset_opens_with_its_defaults_or_names_the_key_to_set(tmp_path, name):
    cfg = _cfg(tmp_path, name)
    try:
        raw = open_dataset(cfg.data, seed=0)
    except DataError as exc:  # a dataset that needs a path says which key to set
        assert f"data.{name}." in str(exc) and "\n" not in str(exc)
        return
    labels = np.asarray(raw.labels)
    assert labels.dtype == np.int64 and len(labels) == len(raw) > 0
    assert raw.channels in (1, 3) and len(raw.class_names) >= 2
    assert set(np.unique(labels)) <= set(range(len(raw.class_names)))
    image = raw.load(0)
    assert image.dtype == np.uint8 and image.ndim in (2, 3)
    assert isinstance(raw.fingerprint, str) and raw.fingerprint


@pytest.mark.parametrize("name", EXECUTORS.names())
def test_every_executor_runs_an_empty_plan(tmp_path, name):
    class Progress:
        def line(self, current=None):
            return ""

        def record(self, result, seconds):
            raise AssertionError("no trial to record")

    cfg = build_config({"sweep": {"executor": name}, "experiment": {"output_dir": str(tmp_path)}})
    run = get_executor(name)
    out = run([], cfg=cfg, tracker=None, parent_run_id=None, progress=Progress(), report=lambda line: None)
    assert out == []


def _groups():
    cfg = build_config({})
    return [(section, name) for section in ("data", "explainability", "sweep") for name in _names(section, cfg)]


def _names(section, cfg):
    return getattr(cfg, section).GROUP.load().names()


@pytest.mark.parametrize(("section", "name"), _groups())
def test_every_registered_option_is_documented_and_validated(section, name):
    cfg = build_config({})
    options = group_options(getattr(cfg, section), name)
    if options is None:
        return
    reference = config_reference()
    for field in dataclasses.fields(options):
        row = next(line for line in reference.splitlines() if line.startswith(f"| `{section}.{name}.{field.name}` |"))
        assert row.rstrip("| ").split("|")[-1].strip(), f"{section}.{name}.{field.name} has no meaning in the docs"
    # a misspelt option key is an error that names the close key
    first = dataclasses.fields(options)[0].name
    with pytest.raises(Exception, match=f"did you mean '{section}.{name}.{first}'"):
        build_config({section: {name: {first + "x": 1}}})


# ---------------------------------------------------------------- an extension module, as a user's package


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory) -> Path:
    """A folder that makes `extension_example` an installed ResoMap plugin: a dist-info with its entry point."""
    return plugin_folder(tmp_path_factory.mktemp("plugin"), EXT)


def _run(args: list[str], plugin_path: Path, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(plugin_path), str(TESTS)]), MPLBACKEND="Agg")
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_extension_is_not_loaded_without_its_plugin():
    assert "toy_stripes" not in list_datasets() and "edge_map" not in list_explainers()
    assert "reversed" not in EXECUTORS.names()


def test_an_installed_plugin_appears_in_listings_config_and_reference(plugin_path, tmp_path):
    cli = [sys.executable, "-m", "resomap.cli"]
    for command, name in (("datasets", "toy_stripes"), ("explainers", "edge_map"), ("executors", "reversed")):
        out = _run([*cli, command], plugin_path, tmp_path)
        assert out.returncode == 0 and name in out.stdout.split(), out.stdout + out.stderr
    out = _run([*cli, "config", "--doc"], plugin_path, tmp_path)
    for key in ("data.toy_stripes.num_images", "explainability.edge_map.power", "sweep.reversed.note"):
        assert f"| `{key}` |" in out.stdout
    config = [*cli, "config", "--config-dir", str(REPO / "configs")]
    good = ["data.dataset=toy_stripes", "data.toy_stripes.size=16", "explainability.methods=[edge_map]"]
    out = _run([*config, *good, "explainability.edge_map.power=2", "sweep.executor=reversed"], plugin_path, tmp_path)
    assert out.returncode == 0, out.stderr
    assert "toy_stripes:" in out.stdout and "power: 2" in out.stdout and "note: last trial first" in out.stdout
    out = _run([*config, *good, "data.toy_stripes.sizes=16"], plugin_path, tmp_path)
    assert out.returncode == 2 and "did you mean 'data.toy_stripes.size'" in out.stderr


def test_the_registry_parametrized_tests_cover_the_extension(plugin_path):
    args = [sys.executable, "-m", "pytest", "-q", "-p", EXT, "-p", "no:cacheprovider"]
    args += [
        str(TESTS / "test_registries.py"),
        str(TESTS / "test_explain.py"),
        "-k",
        "toy_stripes or edge_map or reversed",
    ]
    out = _run(args, plugin_path, REPO)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    for needle in ("toy_stripes", "edge_map", "reversed"):
        assert needle in out.stdout or "passed" in out.stdout
    passed = int(out.stdout.strip().splitlines()[-1].split(" passed")[0].split()[-1])
    assert passed >= 6, out.stdout[-2000:]


def test_a_sweep_runs_on_the_extension_dataset_explainer_and_executor(plugin_path, tmp_path):
    args = [sys.executable, "-m", "resomap.cli", "sweep", "--config-dir", str(REPO / "configs"), "--preset", "smoke"]
    args += [f"experiment.output_dir={tmp_path}", "experiment.name=ext", "mlflow.enabled=false"]
    args += ["data.dataset=toy_stripes", "data.toy_stripes.num_images=40", "sweep.models=[tiny_cnn]"]
    args += ["sweep.resolutions=[16,32]", "explainability.methods=[edge_map]", "explainability.sanity_methods=[]"]
    args += ["sweep.executor=reversed", "profiling.enabled=false"]
    out = _run(args, plugin_path, tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "[reversed] last trial first" in out.stdout
    for res in (16, 32):
        result = trial_summary(tmp_path, "tiny_cnn", res, experiment="ext") / "result.json"
        text = result.read_text()
        assert '"FINISHED"' in text and "explain/edge_map/" in text

"""Fixtures shared by the test files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import resomap.sweep.builtins  # noqa: F401  (the registries' config groups, before any test loads a config)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh project folder holding a copy of the repo's configs, the tests running inside it, with no tracking
    URI from the environment."""
    shutil.copytree(REPO / "configs", tmp_path / "configs")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return tmp_path

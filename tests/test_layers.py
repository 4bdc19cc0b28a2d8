"""The import layers hold (docs/DESIGN.md, "Layers"; the contracts in pyproject.toml [tool.importlinter], run by
`lint-imports` in .ci/run): the package as it is keeps every contract, and an upward import added on purpose to a
copy of it, at module level or inside a function, breaks the layers contract, which names it; likewise an attribution
method importing the explanation evaluation, or the evaluation drawing, breaks the explain contracts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")
LAYERS = "resomap layers: each package imports only the layers below it"


def _lint(tree: Path) -> subprocess.CompletedProcess:
    """lint-imports with the repo's contracts over the copy of resomap under `tree`/src (first on the path)."""
    env = dict(os.environ, PYTHONPATH=str(tree / "src"), COLUMNS="200")
    return subprocess.run(
        [str(LINT), "--no-cache"], cwd=tree, env=env, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of src/resomap and of the pyproject.toml holding the contracts."""
    skip = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO / "src" / "resomap", tmp_path / "src" / "resomap", ignore=skip)
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text(encoding="utf-8") + text, encoding="utf-8")


def _function(statement: str) -> str:
    """A function at the end of a module whose body imports: the import runs only when it is called."""
    return f"\n\ndef _added_on_purpose():\n    {statement}\n"


def test_the_package_keeps_its_contracts(tree: Path):
    proc = _lint(tree)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


def test_an_upward_import_breaks_the_layers_contract(tree: Path):
    pkg = tree / "src" / "resomap"
    _append(pkg / "errors.py", "\nfrom resomap.stats import __name__ as _upward\n")  # errors sits below stats
    _append(pkg / "config" / "groups.py", _function("from resomap.sweep import plan"))
    _append(pkg / "tracking" / "publish.py", _function("from resomap.reports import explain_figures as figures"))
    proc = _lint(tree)
    out = proc.stdout + proc.stderr
    flat = " ".join(out.split())  # long lines may wrap
    assert proc.returncode != 0, out
    assert f"{LAYERS} BROKEN" in flat, out
    assert "resomap.errors -> resomap.stats" in flat, out  # a module-level import within the bottom layer
    assert "resomap.config.groups -> resomap.sweep" in flat, out  # an import inside a function counts too
    assert "resomap.tracking.publish -> resomap.reports.explain_figures" in flat, out  # tracking renders nothing


METHODS = "the attribution methods import no explanation evaluation"
EVALUATION = "explanation evaluation draws nothing: no matplotlib, no plot style, no figures module"


def test_methods_importing_evaluation_and_evaluation_drawing_break_the_explain_contracts(tree: Path):
    explain = tree / "src" / "resomap" / "explain"
    _append(explain / "methods" / "cam.py", _function("from resomap.explain.evaluation import quality"))
    _append(explain / "evaluation" / "compare.py", _function("import matplotlib.pyplot"))
    _append(explain / "evaluation" / "sanity.py", "\nfrom resomap import plotstyle as _drawn\n")
    proc = _lint(tree)
    out = proc.stdout + proc.stderr
    flat = " ".join(out.split())
    assert proc.returncode != 0, out
    assert f"{METHODS} BROKEN" in flat and f"{EVALUATION} BROKEN" in flat, out
    assert "resomap.explain.methods.cam -> resomap.explain.evaluation.quality" in flat, out
    assert "resomap.explain.evaluation.compare -> matplotlib" in flat, out  # a library, inside a function
    assert "resomap.explain.evaluation.sanity -> resomap.plotstyle" in flat, out


CIRCLES = "no import circles between the modules of a package"


def test_imports_for_annotations_count_an_upward_one_breaks_the_layers_and_a_circle_the_circles(tree: Path):
    """`if TYPE_CHECKING:` imports are dependencies too (exclude_type_checking_imports = false): the task contract
    naming a type of the stages above it breaks the layers; a strategy of the Trainer naming the Trainer, which
    imports it, is a circle."""
    pkg = tree / "src" / "resomap"
    guarded = "\nfrom typing import TYPE_CHECKING as _TC\n\nif _TC:\n    from {} import {}\n"
    _append(pkg / "tasks" / "segmentation.py", guarded.format("resomap.stages", "compare_stage"))
    _append(pkg / "training" / "closed_form.py", guarded.format("resomap.training.trainer", "Trainer"))
    proc = _lint(tree)
    out = proc.stdout + proc.stderr
    flat = " ".join(out.split())
    assert proc.returncode != 0, out
    assert f"{LAYERS} BROKEN" in flat and "resomap.tasks.segmentation -> resomap.stages" in flat, out
    assert f"{CIRCLES} BROKEN" in flat and "No cycles are allowed in resomap.training" in flat, out


def test_no_module_imports_itself_through_others():
    """No import circle between any two modules of the package, TYPE_CHECKING and function-level imports counted:
    the strongly connected components of grimp's import graph (Tarjan's algorithm) are single modules. A package
    whose __init__ loads its built-in entries keeps the contract they import in a module of its own (tasks.base)."""
    import grimp

    graph = grimp.build_graph("resomap", exclude_type_checking_imports=False, cache_dir=None)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in sorted(graph.modules)}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(v: str) -> None:  # Tarjan, recursive: the package's import depth is small
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, []):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                circles.append(sorted(part))

    for module in edges:
        if module not in index:
            visit(module)
    assert circles == []
    assert len(edges) > 150 and sum(map(len, edges.values())) > 500  # the graph is the package's, not empty

"""The package's shape (issue 32, docs/DESIGN.md "Shape"): no module of src/resomap over 500 lines, no function or
method over 60 (from its `def` to its last line, docstring included), so a newcomer reads any piece in one sitting.
The checks read the source with ast; each failure names the file and the function."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
MODULE_LINES, FUNCTION_LINES = 500, 60


def long_modules(root: Path, limit: int = MODULE_LINES) -> list[str]:
    """'path: N lines' (relative to `root`) for each module under `root` over `limit` lines."""
    out = []
    for path in sorted(root.rglob("*.py")):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > limit:
            out.append(f"{path.relative_to(root)}: {lines} lines")
    return out


def long_functions(root: Path, limit: int = FUNCTION_LINES) -> list[str]:
    """'path:line name: N lines' for each function or method under `root` over `limit` lines."""
    out = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    out.append(f"{path.relative_to(root)}:{node.lineno} {node.name}: {lines} lines")
    return out


def test_no_module_is_over_500_lines():
    assert long_modules(SRC / "resomap") == []


def test_no_function_is_over_60_lines():
    assert long_functions(SRC / "resomap") == []


def test_the_checks_name_a_long_module_and_a_long_function_and_pass_ones_at_the_limit(tmp_path: Path):
    body = "".join(f"    x{i} = {i}\n" for i in range(58))
    fits = f"def fits():\n{body}    return x0\n"  # 60 lines
    too_long = f"def too_long():\n{body}    y = 1\n    return y\n"  # 61 lines
    (tmp_path / "at_limit.py").write_text(fits + "\n" * (500 - 60), encoding="utf-8")
    (tmp_path / "over.py").write_text(too_long + "\n" * (501 - 61), encoding="utf-8")
    assert long_modules(tmp_path) == ["over.py: 501 lines"]
    assert long_functions(tmp_path) == ["over.py:1 too_long: 61 lines"]

"""Every script under scripts/ still imports against the package (they are run by hand, so nothing else notices
when a name they import moves: benchmark_summary.py once imported `open_parent` from its old module)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((REPO / "scripts").glob("*.py"))


def test_every_script_imports_and_has_a_main():
    assert len(SCRIPTS) >= 10
    code = (
        "import importlib, sys; sys.path.insert(0, sys.argv[1]); bad = []\n"
        "for name in sys.argv[2:]:\n"
        "    module = importlib.import_module(name)\n"
        "    if not name.startswith('_') and not callable(getattr(module, 'main', None)): bad.append(name)\n"
        "print('no main:', bad) if bad else print('ok')\n"
    )
    names = [p.stem for p in SCRIPTS]
    done = subprocess.run(
        [sys.executable, "-c", code, str(REPO / "scripts"), *names], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:] or done.stdout

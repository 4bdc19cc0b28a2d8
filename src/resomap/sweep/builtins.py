"""Make ResoMap's registries known to the config layer: call `register_builtins()` (or import this module) before
loading a config.

The config layer imports nothing of resomap above it: each registry pushes its config group when its package is
imported (datasets -> `data.*`, explainers -> `explainability.*`, executors -> `sweep.*`: resomap.sweep imports
them before this module runs) and the task check is pushed as a load-time check. Whoever loads a config (the CLI,
a sweep's worker, `resomap analyze`, the tests, the scripts) calls this first. It imports what the loader imported
before (the registries and their built-in entries): no explanation, tracking or plotting library.
"""

from __future__ import annotations

import resomap.data  # datasets: data.*
import resomap.explain  # explainers: explainability.*
import resomap.tasks
from resomap.config import register_check


def register_builtins() -> None:
    """Idempotent: the groups are pushed when their packages are imported (above); the task check is added once."""
    register_check(resomap.tasks.check)  # (pushed by resomap.tasks itself once it is a task-strategy package)


register_builtins()

"""Make ResoMap's registries known to the config layer: call `register_builtins()` (or import this module) before
loading a config.

The config layer imports nothing of resomap above it: each registry pushes its config group when its package is
imported (datasets -> `data.*`, explainers -> `explainability.*`, executors -> `sweep.*`: resomap.sweep imports
them before this module runs) and the task and explainer-target checks are pushed as load-time checks. Whoever
loads a config (the CLI, a sweep's worker, `resomap analyze`, the tests, the scripts) calls this first. It imports
what the loader imported before (the registries and their built-in entries): no explanation, tracking or plotting
library.
"""

from __future__ import annotations

import resomap.data  # datasets: data.*
import resomap.explain  # explainers: explainability.*, and the check that they take the task's targets
import resomap.tasks  # noqa: F401  (the task check: models, dataset and loss fit experiment.task)


def register_builtins() -> None:
    """Idempotent: the groups and checks are pushed when their packages are imported (above)."""


register_builtins()

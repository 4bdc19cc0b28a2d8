"""The explainers' load-time config check, pushed to the config loader when resomap.explain is imported."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from resomap.config import register_check
from resomap.explain.methods.registry import EXPLAINERS


def check_task_targets(cfg: Any, fail: Callable[[str, str, Any], None]) -> None:
    """fail(path, expected, got) when a configured explainer does not take the target form of cfg's task (its
    registry meta `targets`; resomap.tasks' `target_form`). Run by the config loader."""
    ex = cfg.explainability
    if not ex.enabled:
        return
    from resomap.errors import UnknownNameError
    from resomap.tasks import get_task

    try:
        form = get_task(cfg.experiment.task).target_form
    except UnknownNameError:
        return  # reported by the task check
    for key in ("methods", "sanity_methods"):
        bad = []
        for method in getattr(ex, key):
            try:
                forms = EXPLAINERS.meta(method).get("targets", ("class",))
            except UnknownNameError:
                continue  # reported with its suggestions by the explainers' config group
            if form not in forms:
                bad.append(method)
        if bad:
            takes = [n for n in EXPLAINERS.names() if form in EXPLAINERS.meta(n).get("targets", ())]
            fail(f"explainability.{key}", f"explainers of {form} targets ({', '.join(takes)})", bad)


register_check(check_task_targets)  # run by the config loader on every load

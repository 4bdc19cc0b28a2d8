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


def catalog() -> dict:
    """The built-in entries of every registry, as resomap/catalog.json holds them (resomap.catalog): each
    registry's kind and list command, and per entry its option keys and the metadata a config check reads."""
    import dataclasses
    import importlib

    from resomap.catalog import LIVE
    from resomap.tasks import task_names

    task_names()  # the built-in tasks register on first use
    importlib.import_module("resomap.models")
    out: dict = {}
    for kind, (module, attr) in LIVE.items():
        reg = getattr(importlib.import_module(module), attr)
        entries = {}
        for name, obj in sorted(reg._items.items()):
            if not str(getattr(obj, "__module__", "")).startswith("resomap."):
                continue  # a plugin's or a test's entry: not built in
            meta, entry = reg._meta[name], {}
            if meta.get("options") is not None:
                entry["options"] = [f.name for f in dataclasses.fields(meta["options"])]
            for key in ("task", "channels", "targets", "native", "confidence", "revision"):
                if key in meta:
                    entry[key] = list(meta[key]) if isinstance(meta[key], tuple) else meta[key]
            entries[name] = entry
        out[kind] = {"kind": reg.kind, "list_command": reg.list_command, "entries": entries}
    return out


def sync_catalog() -> bool:
    """Rewrite resomap/catalog.json from the live registries (with `resomap config --doc --write`); True when it
    changed."""
    import json

    from resomap.atomic import write_text
    from resomap.catalog import CATALOG_FILE, load

    text = json.dumps(catalog(), indent=1, sort_keys=True) + "\n"
    try:
        old = CATALOG_FILE.read_text(encoding="utf-8")
    except OSError:
        old = None
    if text == old:
        return False
    write_text(CATALOG_FILE, text)
    load.cache_clear()
    return True

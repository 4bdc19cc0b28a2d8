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

from typing import Any

import resomap.data  # datasets: data.*
import resomap.explain  # explainers: explainability.*, and the check that they take the task's targets
import resomap.tasks  # noqa: F401  (the task check: models, dataset and loss fit experiment.task)
from resomap.config.checks import MODEL_FIT_KEYS


def register_builtins() -> None:
    """Idempotent: the groups and checks are pushed when their packages are imported (above)."""


register_builtins()


def catalog() -> dict:
    """The built-in entries of every registry, as resomap/catalog.json holds them (resomap.catalog): per registry
    (keyed by its kind) its list command, the module and attribute that hold it, the config section it selects
    entries for, and per entry its option keys and the metadata a config check reads. The registries are found,
    not listed: every package of resomap and every module that makes one are imported, and each Registry a module
    made is taken."""
    import dataclasses
    import importlib
    import pkgutil

    import resomap
    from resomap.config.groups import registered_groups
    from resomap.tasks import task_names

    for found in pkgutil.iter_modules(resomap.__path__):
        importlib.import_module(f"resomap.{found.name}")
    for module in registry_modules():
        importlib.import_module(module)
    task_names()  # the built-in tasks (and their loss terms) register on first use
    sections = {id(reg): section for section, reg in registered_groups().items()}
    out: dict = {}
    for attr, reg in live_registries():
        entries = {}
        for name, obj in sorted(reg._items.items()):
            if not str(getattr(obj, "__module__", "")).startswith("resomap."):
                continue  # a plugin's or a test's entry: not built in
            meta, entry = reg._meta[name], {}
            if meta.get("options") is not None:
                entry["options"] = [f.name for f in dataclasses.fields(meta["options"])]
            for key in ("task", "channels", "targets", "native", "confidence", "revision", "hub", *MODEL_FIT_KEYS):
                if key in meta:
                    entry[key] = list(meta[key]) if isinstance(meta[key], tuple) else meta[key]
            entries[name] = entry
        data = {"list_command": reg.list_command, "module": reg.home, "attribute": attr, "entries": entries}
        if id(reg) in sections:
            data["section"] = sections[id(reg)]
        out[reg.kind] = data
    return out


def registry_modules() -> list[str]:
    """The modules of resomap whose source makes a Registry at module level (`NAME: ... = Registry(`; read, not
    imported)."""
    import re
    from pathlib import Path

    import resomap

    root = Path(resomap.__file__).parent
    made = re.compile(r"^[A-Z_]+(: [^=]+)? = Registry\(", re.M)
    found = []
    for path in sorted(root.rglob("*.py")):
        if made.search(path.read_text(encoding="utf-8")):
            parts = path.relative_to(root.parent).with_suffix("").parts
            found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def live_registries() -> list[tuple[str, Any]]:
    """(attribute, Registry) of every registry made by a loaded module of resomap, in the module that made it."""
    import sys

    from resomap.registry import Registry

    found: dict[str, tuple[str, Any]] = {}
    for name, module in sorted(sys.modules.items()):
        if not name.startswith("resomap.") or module is None:
            continue
        for attr, value in vars(module).items():
            if not isinstance(value, Registry) or value.home != name:
                continue  # not a registry, or one imported from the module that made it
            held = found.get(value.kind)
            if held is not None and held[1] is not value:  # catalog.json is keyed by kind
                raise ValueError(f"two registries of kind '{value.kind}': each needs its own kind")
            found[value.kind] = (attr, value)
    return [found[kind] for kind in sorted(found)]


def sync_catalog() -> bool:
    """Rewrite resomap/catalog.json from the live registries (also done by `resomap config --doc --write`); True
    when it changed."""
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


if __name__ == "__main__":  # python -m resomap.sweep.builtins: regenerate resomap/catalog.json
    import sys

    from resomap.catalog import CATALOG_FILE

    sys.stdout.write(f"{CATALOG_FILE}: names catalog {'updated' if sync_catalog() else 'already current'}\n")

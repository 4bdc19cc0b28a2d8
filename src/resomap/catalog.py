"""The names of ResoMap's built-in registry entries, known without importing their modules (and so without torch).

`catalog.json` beside this file lists, per registry (keyed by the registry's `kind`: model, dataset, explainer,
executor, task, loss term, benchmark option), its list command, where the live registry lives (module and
attribute), the config section it selects entries for (when it is a config group), and each built-in entry with
the metadata a config check reads (its options' keys, its task, ...). The file is generated from the live
registries, never edited by hand: `resomap config --doc --write docs/config.md` (or `python -m
resomap.sweep.builtins`) rewrites it, and tests/test_startup.py fails when it is stale. A new entry is its
decorated function, then the regenerated file.

`registry(kind)` answers like the live Registry (names, resolve with the same "did you mean" message, meta,
options): it *is* the live one when its module has been imported already, else a stand-in built from the
catalog. The command line checks a config against it before torch is imported (resomap.cli.preflight); the full
check with the live registries runs after that as before. Plugins (the `resomap.plugins` entry points) can add
names that no catalog holds: `plugins_installed()` says when to leave the names to the full check.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import sys
from pathlib import Path
from typing import Any

from resomap.errors import UnknownNameError

CATALOG_FILE = Path(__file__).with_name("catalog.json")


@functools.cache
def load() -> dict[str, Any]:
    """The catalog file as a dict ({} when it is missing: every check is then left to the live registries)."""
    try:
        return json.loads(CATALOG_FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


@functools.cache
def plugins_installed() -> bool:
    """Whether any installed package declares a ResoMap plugin (its names are not in the catalog)."""
    from importlib.metadata import entry_points

    return any(True for _ in entry_points(group="resomap.plugins"))


class CatalogRegistry:
    """A read-only stand-in for a Registry: the catalog's built-in entries plus whatever the live registry holds
    when its module is loaded (entries registered in this process), with the same names, suggestions and
    error messages."""

    def __init__(self, kind: str, data: dict[str, Any], live: Any = None):
        self.kind = kind
        self.list_command = data["list_command"]
        self.entries: dict[str, dict[str, Any]] = dict(data["entries"])
        self.live = live
        self._options: dict[str, type] = {}

    def _live_names(self) -> set[str]:
        return set(getattr(self.live, "_items", {}))  # without loading plugins (the caller checked there are none)

    def names(self) -> list[str]:
        return sorted(set(self.entries) | self._live_names())

    def resolve(self, name: str) -> str:
        key = str(name).lower()
        if key in self.entries or key in self._live_names():
            return key
        raise UnknownNameError(f"no {self.kind} '{name}'{self.hint(key)} (see: {self.list_command})")

    def hint(self, name: str) -> str:
        close = difflib.get_close_matches(str(name).lower(), self.names(), n=3, cutoff=0.5)
        return f"; did you mean {' or '.join(close)}?" if close else f"; known: {', '.join(self.names())}"

    def meta(self, name: str) -> dict[str, Any]:
        key = self.resolve(name)
        return self.live.meta(key) if key in self._live_names() else self.entries[key]

    def options(self, name: str) -> type | None:
        """The live entry's options dataclass, else one with the catalogued option keys (any value: their types
        are checked by the full load)."""
        key = self.resolve(name)
        if key in self._live_names():
            return self.live.options(key)
        fields = self.entries[key].get("options")
        if fields is None:
            return None
        if key not in self._options:
            spec = [(f, Any, dataclasses.field(default=None)) for f in fields]
            self._options[key] = dataclasses.make_dataclass(f"{key}_options", spec, frozen=True)
        return self._options[key]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name.lower() in self.entries or name.lower() in self._live_names())


def registry(kind: str) -> CatalogRegistry | None:
    """The catalogued registry of `kind` (with the live one's entries when its module is loaded), or None."""
    data = load().get(kind)
    if not data:
        return None
    live = getattr(sys.modules.get(data["module"]), data["attribute"], None)
    return CatalogRegistry(kind, data, live)


def group_registries() -> dict[str, Any] | None:
    """{config section: registry} for the config groups (the catalogued registries that select a section's
    entries), or None when there is no catalog."""
    found = {data["section"]: registry(kind) for kind, data in load().items() if data.get("section")}
    return found or None

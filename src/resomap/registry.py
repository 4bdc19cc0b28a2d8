"""A name -> object registry with close-name suggestions (the one extension mechanism of ResoMap).

An entry may own an options dataclass (`register(name, options=MyOptions)`): the config loader then accepts and
validates `<section>.<name>.<field>` keys against it (see resomap.config.groups), and the config reference lists
them. Entries from other installed packages come in through the `resomap.plugins` entry-point group: each such
entry point names a module that registers things when imported (loaded once, on the first lookup).
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import sys
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from resomap.errors import UnknownNameError

T = TypeVar("T")
log = logging.getLogger(__name__)
PLUGIN_GROUP = "resomap.plugins"
_plugins_loaded = False


def load_plugins() -> None:
    """Import the modules of installed packages that extend ResoMap (entry-point group `resomap.plugins`).

    Only modules a package declares as its ResoMap plugin are imported: nothing is imported by a name taken
    from a config file."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    from importlib.metadata import entry_points

    for ep in entry_points(group=PLUGIN_GROUP):
        try:
            ep.load()
        except Exception as exc:  # a broken plugin must not take the built-ins down with it
            log.warning("resomap plugin %s (%s) failed to load: %s", ep.name, ep.value, exc)


class Registry(Generic[T]):
    """Case-insensitive registry. `kind` names the thing ("model"); `list_command` is shown in errors."""

    def __init__(self, kind: str, list_command: str):
        self.kind = kind
        self.list_command = list_command
        self.home = sys._getframe(1).f_globals.get("__name__", "")  # the module that made it (resomap.catalog)
        self._items: dict[str, T] = {}
        self._meta: dict[str, dict[str, Any]] = {}

    def register(self, name: str, *, options: type | None = None, **meta: Any) -> Callable[[T], T]:
        key = name.lower()
        if options is not None and not dataclasses.is_dataclass(options):
            raise TypeError(f"{self.kind} '{name}': options must be a dataclass, got {options!r}")

        def deco(obj: T) -> T:
            if key in self._items:
                raise ValueError(f"{self.kind} '{name}' is registered twice")
            self._items[key] = obj
            self._meta[key] = dict(meta, name=key, options=options)
            return obj

        return deco

    def unregister(self, name: str) -> None:
        """Remove an entry (tests that register temporary entries clean up with this)."""
        key = name.lower()
        self._items.pop(key, None)
        self._meta.pop(key, None)

    def names(self) -> list[str]:
        load_plugins()
        return sorted(self._items)

    def meta(self, name: str) -> dict[str, Any]:
        return self._meta[self.resolve(name)]

    def options(self, name: str) -> type | None:
        """The entry's options dataclass, or None when it has no options."""
        return self.meta(name).get("options")

    def resolve(self, name: str) -> str:
        key = str(name).lower()
        if key in self._items:
            return key
        load_plugins()
        if key in self._items:
            return key
        raise UnknownNameError(f"no {self.kind} '{name}'{self.hint(key)} (see: {self.list_command})")

    def hint(self, name: str) -> str:
        close = difflib.get_close_matches(str(name).lower(), self.names(), n=3, cutoff=0.5)
        return f"; did you mean {' or '.join(close)}?" if close else f"; known: {', '.join(self.names())}"

    def get(self, name: str) -> T:
        return self._items[self.resolve(name)]

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        load_plugins()
        return name.lower() in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        load_plugins()
        return len(self._items)

"""A name -> object registry with close-name suggestions (the one extension mechanism of ResoMap)."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from resomap.errors import UnknownNameError

T = TypeVar("T")


class Registry(Generic[T]):
    """Case-insensitive registry. `kind` names the thing ("model"); `list_command` is shown in errors."""

    def __init__(self, kind: str, list_command: str):
        self.kind = kind
        self.list_command = list_command
        self._items: dict[str, T] = {}
        self._meta: dict[str, dict[str, Any]] = {}

    def register(self, name: str, **meta: Any) -> Callable[[T], T]:
        key = name.lower()

        def deco(obj: T) -> T:
            if key in self._items:
                raise ValueError(f"{self.kind} '{name}' is registered twice")
            self._items[key] = obj
            self._meta[key] = dict(meta, name=key)
            return obj

        return deco

    def names(self) -> list[str]:
        return sorted(self._items)

    def meta(self, name: str) -> dict[str, Any]:
        return self._meta[self.resolve(name)]

    def resolve(self, name: str) -> str:
        key = str(name).lower()
        if key in self._items:
            return key
        close = difflib.get_close_matches(key, self.names(), n=3, cutoff=0.5)
        hint = f"; did you mean {' or '.join(close)}?" if close else f"; known: {', '.join(self.names())}"
        raise UnknownNameError(f"no {self.kind} '{name}'{hint} (see: {self.list_command})")

    def get(self, name: str) -> T:
        return self._items[self.resolve(name)]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._items)

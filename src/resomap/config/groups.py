"""Config groups: sections whose sub-keys belong to registry entries (the idea of Hydra's config groups).

A section (a schema dataclass) names a registry and the fields that select entries from it, e.g. `data.dataset`
selects a dataset, `explainability.methods` selects explainers, `sweep.executor` selects an executor. An entry
registered with an options dataclass owns the keys `<section>.<entry>.<field>`: the loader validates them against
that dataclass, fills the defaults of every selected entry, and the value is read as `cfg.<section>.<entry>`
(or `group_options(section, name)`, which also gives the defaults of an entry that is not selected).

The config layer imports nothing of resomap above it: each registry pushes itself here when its package is imported
(`register_group("data", DATASETS)` in resomap.data.registry, likewise resomap.explain.methods.registry and
resomap.sweep.executors), so whoever loads a config imports the registering packages first
(resomap.sweep.builtins.register_builtins() does it in one call, without heavy libraries). Adding a dataset, an
explainer or an executor still needs its decorated function and nothing else.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, ClassVar

_REGISTRIES: dict[str, Any] = {}  # section -> the Registry its package pushed (register_group)


def register_group(section: str, registry: Any) -> None:
    """Called by a registry's package when it is imported: `registry` selects the entries of config `section`."""
    _REGISTRIES[section] = registry


def registered_groups() -> dict[str, Any]:
    """{config section: the Registry pushed for it} (resomap.sweep.builtins writes them into resomap/catalog.json)."""
    return dict(_REGISTRIES)


def registry_of(section: str) -> Any:
    """The Registry pushed for config `section`; a ConfigError when its package has not been imported."""
    found = _REGISTRIES.get(section)
    if found is None:
        from resomap.errors import ConfigError

        raise ConfigError(
            f"config section '{section}': no registry has been registered for its entries; import the packages that "
            "register them before loading a config (resomap.sweep.builtins.register_builtins())"
        )
    return found


@dataclasses.dataclass(frozen=True)
class Group:
    section: str  # the config section; its registry is pushed by register_group when its package is imported
    selectors: tuple[str, ...]  # fields whose values (a name or a list of names) select entries

    def load(self) -> Any:
        return registry_of(self.section)


class GroupSection:
    """Mixin for schema sections that own a group: `self.options` holds {entry name: options instance}."""

    GROUP: ClassVar[Group]

    def __getattr__(self, name: str) -> Any:
        # only called when normal lookup fails: `cfg.data.synthetic` reads the synthetic dataset's options
        options = self.__dict__.get("options")
        if options is not None and name in options:
            return options[name]
        raise AttributeError(f"{type(self).__name__} has no attribute or selected group entry {name!r}")


def group_of(cls: type) -> Group | None:
    return getattr(cls, "GROUP", None) if isinstance(cls, type) and issubclass(cls, GroupSection) else None


def selected(section: Any) -> list[str]:
    """The entry names the section's selector fields hold, in order, without repeats."""
    names: list[str] = []
    for field in section.GROUP.selectors:
        value = getattr(section, field)
        for name in value if isinstance(value, list | tuple) else [value]:
            if name is not None and str(name).lower() not in names:
                names.append(str(name).lower())
    return names


def group_options(section: Any, name: str) -> Any:
    """The options of entry `name` in this section: as configured, else its defaults; None if it has none.

    A section built in code (not by the loader) may hold a plain mapping for an entry: it becomes the entry's
    options dataclass here; any other type is a ConfigError."""
    from resomap.errors import ConfigError

    registry = section.GROUP.load()
    key = registry.resolve(name)
    cls = registry.options(key)
    found = (section.__dict__.get("options") or {}).get(key)
    if cls is None or found is None:
        return cls() if cls is not None else None
    if isinstance(found, Mapping):
        return cls(**found)
    if not isinstance(found, cls):
        raise ConfigError(f"{key}: expected {cls.__name__} options, got {type(found).__name__}")
    return found


def option_items(options: Mapping[str, Any]) -> dict[str, Any]:
    """{entry: options dataclass} -> {entry: plain dict}, for to_dict and the resolved YAML."""
    return {name: dataclasses.asdict(value) for name, value in options.items()}

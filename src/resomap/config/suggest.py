"""'did you mean' for an unknown config key: the valid key the user most likely meant.

First the keys of the same section whose last part is the typed one or close to it (`data.root` ->
`data.imagefolder.root`), ranked: the same last part, the same entry typed (`data.imagefolder.rot`), an entry the
config selects (`data.dataset`), an entry serving the config's task (registry meta `task`, else classification),
then similarity. Else the closest key anywhere, by the whole path, then by its last part (`trainig.epochs`,
`epochs` -> `training.epochs`).
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Mapping
from typing import Any

from resomap.config.groups import group_of
from resomap.config.schema import Config, ExperimentConfig

LEAF_CUTOFF = 0.8  # difflib ratio above which a last part counts as a near miss of the typed one


def all_paths(cls: type, prefix: str = "", registries: Mapping[str, Any] | None = None) -> list[str]:
    """Every dotted key of `cls`, with the keys of each registered group entry's options (`registries`:
    {section: registry} standing in for the groups' own, before torch is imported: resomap.catalog)."""
    paths = []
    for f in dataclasses.fields(cls):
        if f.name == "options" and group_of(cls):
            continue
        path = f"{prefix}{f.name}"
        paths.append(path)
        hint = typing.get_type_hints(cls)[f.name]
        if dataclasses.is_dataclass(hint):
            paths.extend(all_paths(hint, path + ".", registries))
    group = group_of(cls)
    if group is not None:
        registry = (registries or {}).get(group.section) or group.load()
        for name in registry.names():
            options = registry.options(name)
            if options is not None:
                paths.extend(all_paths(options, f"{prefix}{name}."))
    return paths


def suggest(path: str, raw: Mapping[str, Any] | None = None, registries: Mapping[str, Any] | None = None) -> str:
    """'; did you mean '<key>'?' for the unknown dotted key `path` ('' when nothing is close); `raw`: the merged
    config as typed (for the selected entries and the task); `registries` as in all_paths."""
    registries = registries or {}
    candidates = all_paths(Config, registries=registries)
    best = _same_section(path, candidates, raw or {}, registries)
    if best is None:
        close = difflib.get_close_matches(path, candidates, n=1, cutoff=0.6)
        if not close:
            leaf = path.rsplit(".", 1)[-1]
            by_leaf = {c.rsplit(".", 1)[-1]: c for c in candidates}
            close = [by_leaf[m] for m in difflib.get_close_matches(leaf, list(by_leaf), n=1, cutoff=0.75)]
        best = close[0] if close else None
    return f"; did you mean '{best}'?" if best else ""


def _same_section(
    path: str, candidates: list[str], raw: Mapping[str, Any], registries: Mapping[str, Any]
) -> str | None:
    if "." not in path:
        return None  # a bare word: no section to stay in
    section, *middle, leaf = path.split(".")
    ranked = []
    for cand in candidates:
        if "." not in cand:
            continue
        c_section, *c_middle, c_leaf = cand.split(".")
        if c_section != section or cand == path:
            continue
        near = difflib.SequenceMatcher(None, leaf, c_leaf).ratio()
        if c_leaf != leaf and near < LEAF_CUTOFF:
            continue
        entry = c_middle[0] if c_middle else None
        score = (
            c_leaf == leaf,
            c_middle == middle,
            entry is not None and entry in _selected(section, raw),
            entry is not None and _serves_task(section, entry, raw, registries),
            difflib.SequenceMatcher(None, path, cand).ratio(),
        )
        ranked.append((score, cand))
    return max(ranked)[1] if ranked else None


def _registry(section: str, registries: Mapping[str, Any]) -> Any:
    cls = typing.get_type_hints(Config).get(section)
    group = group_of(cls) if cls is not None else None
    return (registries.get(section) or group.load()) if group is not None else None


def _selected(section: str, raw: Mapping[str, Any]) -> set[str]:
    """The entries the section's selector fields name, as typed or by default."""
    cls = typing.get_type_hints(Config).get(section)
    group = group_of(cls) if cls is not None else None
    if group is None:
        return set()
    typed = raw.get(section) if isinstance(raw.get(section), Mapping) else {}
    defaults = cls()
    names: set[str] = set()
    for field in group.selectors:
        value = typed.get(field, getattr(defaults, field))
        names |= {str(v).lower() for v in (value if isinstance(value, list) else [value])}
    return names


def _serves_task(section: str, entry: str, raw: Mapping[str, Any], registries: Mapping[str, Any]) -> bool:
    experiment = raw.get("experiment") if isinstance(raw.get("experiment"), Mapping) else {}
    task = experiment.get("task", ExperimentConfig.task)
    registry = _registry(section, registries)
    try:
        return registry is not None and registry.meta(entry).get("task", ExperimentConfig.task) == task
    except KeyError:
        return False

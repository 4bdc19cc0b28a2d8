"""Load, merge and validate the YAML config files into one frozen `Config`.

Merge order (later wins): the files of `FILE_ORDER` in the config folder, then `presets/<name>.yaml`, then
dotted `key=value` overrides from the command line. Dicts merge key by key; lists and scalars replace.
Every leaf remembers the file (or "command line") that last set it, so errors point at the right place.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import hashlib
import json
import re
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from resomap.atomic import write_text
from resomap.config.checks import run_checks
from resomap.config.groups import group_of, option_items
from resomap.config.schema import MOVED_KEYS, Config
from resomap.config.suggest import suggest
from resomap.errors import ConfigError, UnknownNameError

FILE_ORDER = (
    "config.yaml",
    "sweep.yaml",
    "training.yaml",
    "system.yaml",
    "data.yaml",
    "models.yaml",
    "explainability.yaml",
    "mlflow.yaml",
    "profiling.yaml",
    "stats.yaml",
)
DEFAULT_CONFIG_DIR = "configs"


def _read_yaml(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read file ({exc.strerror})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}: {where}malformed YAML ({problem})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of sections at the top level, got {type(data).__name__}")
    return data


def _merge(base: dict, new: Mapping, source: str, origins: dict[str, str], prefix: str = "") -> None:
    for key, value in new.items():
        key = str(key)
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value, source, origins, path + ".")
        else:
            base[key] = _plain(value)
            _record_origins(path, value, source, origins)


def _record_origins(path: str, value: Any, source: str, origins: dict[str, str]) -> None:
    origins[path] = source
    if isinstance(value, Mapping):
        for k, v in value.items():
            _record_origins(f"{path}.{k}", v, source, origins)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def parse_override(text: str) -> tuple[str, Any]:
    """`training.epochs=3` -> ("training.epochs", 3); the value is parsed as YAML (lists, null, numbers)."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(f"command line: override {text!r} is not of the form dotted.key=value")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key, value


def _nest(key: str, value: Any) -> dict:
    out: Any = value
    for part in reversed(key.split(".")):
        out = {part: out}
    return out


# ---------------------------------------------------------------- validation against the schema


def _first_leaf(value: Any) -> str:
    """'.epochs' for {'epochs': 3}: an unknown section is reported with the key below it."""
    suffix = ""
    while isinstance(value, dict) and len(value) == 1:
        key, value = next(iter(value.items()))
        suffix += f".{key}"
    return suffix


def _type_name(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(hint))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(hint))
    if hint is type(None):
        return "null"
    if origin is list:
        (arg,) = typing.get_args(hint) or (Any,)
        return f"a list of {_type_name(arg)}" if arg is not Any else "a list"
    if origin is dict:
        return "a mapping"
    if dataclasses.is_dataclass(hint):
        return "a mapping"
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(
        hint, getattr(hint, "__name__", str(hint))
    )


class _Validator:
    """Builds the typed Config from plain dicts; `registries` ({section: registry}) stand in for the config
    groups' own (the command line's check before torch is imported: resomap.catalog)."""

    def __init__(
        self, origins: dict[str, str], raw: Mapping[str, Any] | None = None, registries: Mapping[str, Any] | None = None
    ):
        self.origins = origins
        self.raw = raw or {}  # the whole merged config as typed: what the suggestions rank by
        self.registries = dict(registries or {})

    def where(self, path: str) -> str:
        probe = re.sub(r"\[\d+\]", "", path)
        while probe:
            if probe in self.origins:
                return self.origins[probe]
            probe = probe.rpartition(".")[0]
        return "defaults"

    def fail(self, path: str, hint: Any, value: Any) -> typing.NoReturn:
        raise ConfigError(
            f"{self.where(path)}: {path}: expected {_type_name(hint)}, got {value!r} ({type(value).__name__})"
        )

    def build(self, cls: type, data: Any, prefix: str = "") -> Any:
        if not isinstance(data, dict):
            self.fail(prefix.rstrip(".") or "(top level)", cls, data)
        hints = typing.get_type_hints(cls)
        group = group_of(cls)
        names = {f.name for f in dataclasses.fields(cls)} - ({"options"} if group else set())
        registry = (self.registries.get(group.section) or group.load()) if group else None
        entries: dict[str, Any] = {}
        for key in data:
            if key not in names:
                path = f"{prefix}{key}"
                if registry is not None and key in registry:
                    entries[registry.resolve(key)] = (data[key], path)
                    continue
                if path in MOVED_KEYS:
                    raise ConfigError(f"{self.where(path)}: {path} has moved: set {MOVED_KEYS[path]} instead")
                shown = path + _first_leaf(data[key])
                hint = suggest(shown, self.raw, self.registries)
                raise ConfigError(f"{self.where(path)}: unknown key '{shown}'{hint}")
        kwargs = {}
        for name in names & set(data):
            kwargs[name] = self.value(hints[name], data[name], f"{prefix}{name}")
        if registry is None:
            return cls(**kwargs)
        return self.build_group(cls(**kwargs), registry, entries, prefix)

    def build_group(self, section: Any, registry: Any, entries: dict[str, Any], prefix: str) -> Any:
        """Selector values checked against the registry (canonical names), each entry's options validated
        against its dataclass, and the defaults filled in for every selected entry."""
        changes: dict[str, Any] = {}
        chosen: list[str] = []
        for field in section.GROUP.selectors:
            value = getattr(section, field)
            many = isinstance(value, list)
            names = []
            for i, name in enumerate(value if many else [value]):
                path = f"{prefix}{field}[{i}]" if many else f"{prefix}{field}"
                try:
                    names.append(registry.resolve(name))
                except UnknownNameError as exc:
                    raise ConfigError(f"{self.where(path)}: {path}: {exc}") from None
            changes[field] = names if many else names[0]
            chosen += [n for n in names if n not in chosen]
        options: dict[str, Any] = {}
        for name, (value, path) in entries.items():
            cls = registry.options(name)
            if cls is None:
                raise ConfigError(f"{self.where(path)}: {path}: {registry.kind} '{name}' has no options to set")
            options[name] = self.build(cls, value, path + ".")
        for name in chosen:
            cls = registry.options(name)
            if cls is not None and name not in options:
                options[name] = self.build(cls, {}, f"{prefix}{name}.")
        changes["options"] = dict(sorted(options.items()))
        return dataclasses.replace(section, **changes)

    def value(self, hint: Any, value: Any, path: str) -> Any:
        origin = typing.get_origin(hint)
        if dataclasses.is_dataclass(hint):
            return self.build(hint, value, path + ".")
        if origin in (typing.Union, types.UnionType):
            args = typing.get_args(hint)
            if value is None and type(None) in args:
                return None
            for arg in args:
                if arg is type(None):
                    continue
                try:
                    return self.value(arg, value, path)
                except ConfigError:
                    continue
            self.fail(path, hint, value)
        if origin is typing.Literal:
            if value not in typing.get_args(hint) or isinstance(value, bool):
                self.fail(path, hint, value)
            return value
        if origin is list:
            if not isinstance(value, list):
                self.fail(path, hint, value)
            (arg,) = typing.get_args(hint) or (Any,)
            return [self.value(arg, v, f"{path}[{i}]") for i, v in enumerate(value)]
        if origin is dict:
            if not isinstance(value, dict):
                self.fail(path, hint, value)
            _, arg = typing.get_args(hint)
            return {str(k): self.value(arg, v, f"{path}.{k}") for k, v in value.items()}
        if hint is Any or hint is dict or hint is list:
            if hint in (dict, list) and not isinstance(value, hint):
                self.fail(path, hint, value)
            return value
        if hint is bool:
            if not isinstance(value, bool):
                self.fail(path, hint, value)
            return value
        if hint is int:
            if isinstance(value, bool) or not isinstance(value, int):
                self.fail(path, hint, value)
            return value
        if hint is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                self.fail(path, hint, value)
            return float(value)
        if hint is str:
            if not isinstance(value, str):
                self.fail(path, hint, value)
            return value
        raise TypeError(f"schema type {hint!r} at {path} is not supported")


# ---------------------------------------------------------------- public API


@dataclasses.dataclass(frozen=True)
class LoadedConfig:
    config: Config
    origins: dict[str, str]  # dotted key -> file that set it
    raw: dict  # the merged plain dict, before defaults


def build(raw: dict, origins: dict[str, str] | None = None) -> Config:
    """Validate a plain nested dict (missing keys take defaults) into a Config."""
    validator = _Validator(origins or {}, raw)
    cfg = validator.build(Config, raw)
    run_checks(cfg, validator.where)
    return cfg


def prebuild(raw: dict, origins: dict[str, str], registries: Mapping[str, Any]) -> Config:
    """`build` against stand-in group registries ({section: registry}, resomap.catalog) and with only this
    layer's own checks: what can be checked of a config before the registries' packages (and torch) are imported.
    Group entries' options are checked for their keys, not their values."""
    validator = _Validator(origins, raw, registries)
    cfg = validator.build(Config, raw)
    run_checks(cfg, validator.where, pushed=False)
    return cfg


def load_full(
    config_dir: str | Path | None = DEFAULT_CONFIG_DIR,
    preset: str | None = None,
    overrides: Iterable[str] = (),
    extra: Mapping[str, Any] | None = None,
) -> LoadedConfig:
    """Merge config files, preset, `extra` (dotted keys from CLI flags) and overrides, then validate."""
    raw, origins = merge(config_dir, preset, overrides, extra)
    return LoadedConfig(build(raw, origins), origins, raw)


def merge(
    config_dir: str | Path | None = DEFAULT_CONFIG_DIR,
    preset: str | None = None,
    overrides: Iterable[str] = (),
    extra: Mapping[str, Any] | None = None,
) -> tuple[dict, dict[str, str]]:
    """(the merged plain dict, {dotted key: the file that set it}): config files, preset, `extra`, overrides."""
    raw: dict = {}
    origins: dict[str, str] = {}
    folder = Path(config_dir) if config_dir is not None else None
    if folder is not None:
        if not folder.is_dir():
            raise ConfigError(f"{folder}: config folder not found (pass --config-dir)")
        for name in FILE_ORDER:
            path = folder / name
            if path.exists():
                _merge(raw, _read_yaml(path), str(path), origins)
    if preset:
        presets = folder / "presets" if folder is not None else Path(DEFAULT_CONFIG_DIR) / "presets"
        path = presets / f"{preset}.yaml"
        if not path.exists():
            names = sorted(p.stem for p in presets.glob("*.yaml")) if presets.is_dir() else []
            close = difflib.get_close_matches(preset, names, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise ConfigError(f"{path}: no preset '{preset}'{hint} (presets: {', '.join(names) or 'none'})")
        _merge(raw, _read_yaml(path), str(path), origins)
    for key, value in (extra or {}).items():
        _merge(raw, _nest(key, value), "command line", origins)
    for text in overrides:
        key, value = parse_override(text)
        _merge(raw, _nest(key, value), "command line", origins)
    return raw, origins


def load(
    config_dir: str | Path | None = DEFAULT_CONFIG_DIR,
    preset: str | None = None,
    overrides: Iterable[str] = (),
    extra: Mapping[str, Any] | None = None,
) -> Config:
    return load_full(config_dir, preset, overrides, extra).config


def to_dict(cfg: Any) -> dict:
    """The config as plain nested dicts; a group's entries appear as keys of their section (data.synthetic)."""
    out: dict[str, Any] = {}
    grouped = group_of(type(cfg)) is not None
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if grouped and f.name == "options":
            out.update(option_items(value))
        elif dataclasses.is_dataclass(value):
            out[f.name] = to_dict(value)
        else:
            out[f.name] = copy.deepcopy(value)
    return out


def with_overrides(cfg: Config, overrides: Mapping[str, Any], source: str = "override") -> Config:
    """A new Config with dotted-key overrides applied and validated (used for per-model sweep overrides)."""
    raw = to_dict(cfg)
    origins: dict[str, str] = {}
    for key, value in overrides.items():
        _merge(raw, _nest(key, value), source, origins)
    return build(raw, origins)


def flatten(cfg: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted leaf keys -> values (lists kept whole); used for MLflow params."""
    out: dict[str, Any] = {}
    items = to_dict(cfg).items() if dataclasses.is_dataclass(cfg) else cfg.items()
    for key, value in items:
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def config_hash(cfg: Config, length: int = 12) -> str:
    text = json.dumps(to_dict(cfg), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def dump_yaml(cfg: Config) -> str:
    return yaml.safe_dump(to_dict(cfg), sort_keys=False, default_flow_style=None)


def save_resolved(cfg: Config, path: str | Path) -> Path:
    """Write the resolved config as YAML atomically (temp file + rename)."""
    return write_text(path, dump_yaml(cfg))

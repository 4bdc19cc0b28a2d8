"""Typed, validated, frozen configuration (see schema.py for every key)."""

from resomap.config.adaptive import check_adaptive
from resomap.config.checks import register_check
from resomap.config.groups import register_group, registry_of
from resomap.config.loader import (
    DEFAULT_CONFIG_DIR,
    FILE_ORDER,
    LoadedConfig,
    build,
    config_hash,
    dump_yaml,
    flatten,
    load,
    load_full,
    merge,
    parse_override,
    prebuild,
    save_resolved,
    to_dict,
    with_overrides,
)
from resomap.config.schema import (
    AugmentationConfig,
    Config,
    DataConfig,
    ExperimentConfig,
    ExplainabilityConfig,
    MlflowConfig,
    ModelsConfig,
    SweepConfig,
    SystemConfig,
    TrainingConfig,
)
from resomap.errors import ConfigError

register_check(check_adaptive)  # sweep.adaptive and stats.look_alpha, on every load

__all__ = [
    "DEFAULT_CONFIG_DIR",
    "FILE_ORDER",
    "AugmentationConfig",
    "Config",
    "ConfigError",
    "DataConfig",
    "ExperimentConfig",
    "ExplainabilityConfig",
    "LoadedConfig",
    "MlflowConfig",
    "ModelsConfig",
    "SweepConfig",
    "SystemConfig",
    "TrainingConfig",
    "build",
    "config_hash",
    "dump_yaml",
    "flatten",
    "load",
    "load_full",
    "merge",
    "parse_override",
    "prebuild",
    "register_check",
    "register_group",
    "registry_of",
    "save_resolved",
    "to_dict",
    "with_overrides",
]

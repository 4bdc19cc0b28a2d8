"""Find trained checkpoints and load one with its metadata, its trial's config and a rebuilt model.

A trial's checkpoint folder (checkpoints/{experiment}/{family}/{model}/{resolution}/seed{S}/, resomap.layout; older
sweeps: without {experiment}/, or without seed{S}/) holds the best-k files
`epoch=E-<metric>=V.pt`, `last.pt`, a metadata JSON beside each and `config.yaml` (the trial's resolved config).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from resomap.checkpoint_files import best_checkpoint, find_checkpoints  # torch-free: `resomap analyze` finds first
from resomap.config import Config, load
from resomap.training.restore import CONFIG_FILE, TrainedModel, peek_meta, restore_checkpoint

__all__ = ["CONFIG_FILE", "CheckpointSource", "TrainedModel", "best_checkpoint", "find_checkpoints", "load_trained",
           "peek_meta"]  # fmt: skip

log = logging.getLogger(__name__)


def _trial_config(path: Path, config_dir: str | Path | None, preset: str | None, overrides: Sequence[str]) -> Config:
    from resomap.sweep.builtins import register_builtins

    register_builtins()  # the registries' config groups and checks, before any config is loaded
    if (path.parent / CONFIG_FILE).is_file():
        return load(path.parent, None, overrides)
    log.warning("%s: no %s beside the checkpoint; using the config of %s", path, CONFIG_FILE, config_dir)
    return load(config_dir, preset, overrides)


@dataclasses.dataclass(frozen=True)
class CheckpointSource:
    """How `resomap explain` / `resomap analyze` load checkpoints: the config for checkpoints without a
    config.yaml beside them, overrides of the trial's config, the device (None: the config's system.device)."""

    config_dir: str | None = "configs"
    preset: str | None = None
    overrides: tuple[str, ...] = ()
    device: str | None = None

    def load(self, path: str | Path, model: str | None = None, resolution: int | None = None) -> TrainedModel:
        kw = {"config_dir": self.config_dir, "preset": self.preset, "overrides": self.overrides}
        return load_trained(path, model=model, resolution=resolution, device=self.device, **kw)


def load_trained(
    path: str | Path,
    *,
    model: str | None = None,
    resolution: int | None = None,
    config_dir: str | Path | None = "configs",
    preset: str | None = None,
    overrides: Sequence[str] = (),
    device: torch.device | str | None = None,
) -> TrainedModel:
    """Load `path` safely (weights_only); `model`/`resolution`, when given, must match the checkpoint.

    The device defaults to the trial config's `system.device`; `overrides` (key=value) apply on top of that config.
    """
    expect: dict[str, Any] = {}
    if model is not None:
        expect["model"] = model.lower()
    if resolution is not None:
        expect["resolution"] = resolution
    trial_config = functools.partial(_trial_config, Path(path), config_dir, preset, overrides)
    return restore_checkpoint(path, trial_config, expect=expect, device=device)

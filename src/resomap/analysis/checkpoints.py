"""Find trained checkpoints and load one with its metadata, its trial's config and a rebuilt model.

A trial's checkpoint folder (checkpoints/{experiment}/{family}/{model}/{resolution}/seed{S}/, resomap.layout; older
sweeps: without {experiment}/, or without seed{S}/) holds the best-k files
`epoch=E-<metric>=V.pt`, `last.pt`, a metadata JSON beside each and `config.yaml` (the trial's resolved config).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from resomap.config import Config, load
from resomap.errors import CheckpointError
from resomap.training.restore import CONFIG_FILE, TrainedModel, peek_meta, restore_checkpoint
from resomap.training.restore import read_json as _json

__all__ = ["CONFIG_FILE", "CheckpointSource", "TrainedModel", "best_checkpoint", "find_checkpoints", "load_trained",
           "peek_meta"]  # fmt: skip

log = logging.getLogger(__name__)


def best_checkpoint(folder: str | Path) -> Path | None:
    """The best `epoch=*.pt` of a trial folder by its metadata JSON (value + mode); last.pt when none is left."""
    folder = Path(folder)
    ranked = []
    for path in folder.glob("epoch=*.pt"):
        meta = _json(path.with_suffix(".json"))
        value = meta.get("value")
        score = float(value) if isinstance(value, int | float) and math.isfinite(value) else math.inf
        if score != math.inf and meta.get("mode", "max") == "max":
            score = -score
        ranked.append((score, int(meta.get("epoch", 0)), path.name, path))
    if ranked:
        return min(ranked)[-1]
    last = folder / "last.pt"
    return last if last.is_file() else None


def find_checkpoints(root: str | Path) -> list[Path]:
    """The best checkpoint of every trial folder under `root` (a folder without ResoMap's epoch=*.pt / last.pt:
    each of its *.pt, so that a file that cannot be loaded is reported as such); a missing or empty root is an
    error."""
    root = Path(root)
    if not root.is_dir():
        raise CheckpointError(
            f"{root}: checkpoint folder not found; train first (resomap sweep) or fix --checkpoint-dir"
        )
    found = []
    for folder in sorted({p.parent for p in root.rglob("*.pt")}):
        best = best_checkpoint(folder)
        found += [best] if best is not None else sorted(folder.glob("*.pt"))  # other names: each tried as it is
    if not found:
        raise CheckpointError(f"{root}: no trained checkpoints (*.pt) found; train first (resomap sweep)")
    log.info("found %d trained checkpoint(s) under %s", len(found), root)
    return found


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

"""Find trained checkpoints and load one with its metadata, its trial's config and a rebuilt model.

A trial's checkpoint folder (checkpoints/{experiment}/{family}/{model}/{resolution}/seed{S}/, resomap.layout; older
sweeps: without {experiment}/, or without seed{S}/) holds the best-k files
`epoch=E-<metric>=V.pt`, `last.pt`, a metadata JSON beside each and `config.yaml` (the trial's resolved config).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from resomap import models as models_pkg
from resomap.config import Config, load
from resomap.errors import CheckpointError
from resomap.models import ModelSpec
from resomap.runtime import resolve_device
from resomap.training import load_checkpoint

log = logging.getLogger(__name__)

CONFIG_FILE = "config.yaml"
_META_KEYS = ("model", "family", "resolution", "num_classes", "in_channels", "class_names", "seed", "config_hash")


@dataclasses.dataclass
class TrainedModel:
    """A checkpoint loaded into its rebuilt model (eval mode, on `device`), with what the checkpoint says of it."""

    path: Path
    meta: dict[str, Any]
    cfg: Config
    model: nn.Module
    spec: ModelSpec
    device: torch.device

    @property
    def name(self) -> str:
        return str(self.meta["model"])

    @property
    def resolution(self) -> int:
        return int(self.meta["resolution"])

    @property
    def seed(self) -> int:
        return int(self.meta.get("seed", self.cfg.experiment.seed))

    @property
    def num_classes(self) -> int:
        return int(self.meta["num_classes"])

    @property
    def family(self) -> str:
        return str(self.meta.get("family") or self.spec.family)


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def peek_meta(path: str | Path) -> dict[str, Any]:
    """The metadata JSON beside a checkpoint ({} when absent); nothing is loaded or checked."""
    return _json(Path(path).with_suffix(".json"))


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


def _merged_meta(path: Path, payload: dict[str, Any]) -> dict[str, Any]:
    """The payload's meta, completed by the metadata JSON beside the file."""
    meta = dict(payload.get("meta") or {})
    for key, value in _json(path.with_suffix(".json")).items():
        meta.setdefault(key, value)
    missing = [k for k in ("model", "resolution", "num_classes", "in_channels") if meta.get(k) is None]
    if missing:
        raise CheckpointError(
            f"{path}: checkpoint metadata lacks {', '.join(missing)}; use a checkpoint written by resomap train/sweep"
        )
    return {k: meta[k] for k in _META_KEYS if k in meta} | {"epoch": meta.get("epoch")}


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
    path = Path(path)
    expect: dict[str, Any] = {}
    if model is not None:
        expect["model"] = model.lower()
    if resolution is not None:
        expect["resolution"] = resolution
    payload = load_checkpoint(path, expect=expect or None)
    meta = _merged_meta(path, payload)
    cfg = _trial_config(path, config_dir, preset, overrides)
    net, spec = models_pkg.build_model(
        str(meta["model"]), int(meta["num_classes"]), int(meta["in_channels"]), cfg.models
    )
    state = payload.get("model")
    if not isinstance(state, dict):
        raise CheckpointError(f"{path}: checkpoint holds no model state_dict; use a checkpoint written by resomap")
    try:
        net.load_state_dict(state)
    except RuntimeError as exc:
        first = str(exc).splitlines()[0]
        raise CheckpointError(
            f"{path}: weights do not fit {meta['model']} ({first}); retrain or pick another"
        ) from None
    device = torch.device(device) if device is not None else resolve_device(cfg.system)
    net.to(device).eval()
    log.info("loaded %s (%s at %s px, epoch %s)", path, meta["model"], meta["resolution"], meta.get("epoch"))
    return TrainedModel(path, meta, cfg, net, spec, device)

"""A saved checkpoint back into its model: `restore_checkpoint(path, cfg)` loads it safely (weights_only, through
`load_checkpoint`), rebuilds the model its metadata names with the trial's config and loads the weights, in eval
mode on the device; `load_bundle` gives the trial's data at the checkpoint's resolution and seed. What `resomap
explain` / `resomap analyze` (resomap.analysis.checkpoints.load_trained, which finds the trial's config first) and
the sweep's maps on demand (resomap.explain.on_demand) load checkpoints with."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from resomap.checkpoint_files import read_json
from resomap.config import Config
from resomap.errors import CheckpointError
from resomap.runtime import resolve_device
from resomap.training.checkpoint import load_checkpoint

if TYPE_CHECKING:
    from resomap.models import ModelSpec

log = logging.getLogger(__name__)

CONFIG_FILE = "config.yaml"  # the trial's resolved config, beside its checkpoints
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


def peek_meta(path: str | Path) -> dict[str, Any]:
    """The metadata JSON beside a checkpoint ({} when absent); nothing is loaded or checked."""
    return read_json(Path(path).with_suffix(".json"))


def _merged_meta(path: Path, payload: dict[str, Any]) -> dict[str, Any]:
    """The payload's meta, completed by the metadata JSON beside the file."""
    meta = dict(payload.get("meta") or {})
    for key, value in peek_meta(path).items():
        meta.setdefault(key, value)
    missing = [k for k in ("model", "resolution", "num_classes", "in_channels") if meta.get(k) is None]
    if missing:
        raise CheckpointError(
            f"{path}: checkpoint metadata lacks {', '.join(missing)}; use a checkpoint written by resomap train/sweep"
        )
    return {k: meta[k] for k in _META_KEYS if k in meta} | {"epoch": meta.get("epoch")}


def restore_checkpoint(
    path: str | Path,
    cfg: Config | Callable[[], Config],
    *,
    expect: Mapping[str, Any] | None = None,
    device: torch.device | str | None = None,
) -> TrainedModel:
    """Load `path` safely (weights_only) into the model its metadata names, built with `cfg`: the trial's config
    (its registries registered by the caller), or a function giving it, called once the file has loaded (so a bad
    file is named before any config is read); `expect` (model, resolution, num_classes), when given, must match.
    The device defaults to the config's `system.device`."""
    from resomap import models as models_pkg

    path = Path(path)
    payload = load_checkpoint(path, expect=expect or None)
    meta = _merged_meta(path, payload)
    cfg = cfg() if callable(cfg) else cfg
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


def checkpoint_config(path: str | Path, fallback: Config) -> Config:
    """The trial's config saved beside the checkpoint (config.yaml), else `fallback`; the caller has the
    registries registered (resomap.sweep.builtins)."""
    from resomap.config import load

    folder = Path(path).parent
    return load(folder, None, ()) if (folder / CONFIG_FILE).is_file() else fallback


def load_bundle(trained: TrainedModel, cfg: Config) -> Any:
    """The trial's data at the checkpoint's resolution and seed (same splits as in training)."""
    from resomap import data as data_pkg

    bundle = data_pkg.build(cfg, trained.resolution, trained.seed, trained.device)
    if bundle.num_classes != trained.num_classes or bundle.channels != int(trained.meta["in_channels"]):
        raise CheckpointError(
            f"{trained.path}: the data now has {bundle.num_classes} classes / {bundle.channels} channels, the "
            f"checkpoint {trained.num_classes} / {trained.meta['in_channels']}; use the trial's data config"
        )
    return bundle

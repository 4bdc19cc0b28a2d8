"""Maps on demand: chosen test images explained after the sweep from a trial's saved best checkpoint (the most
resolution-sensitive images of a model that are not in its probe set: resomap.reports.sensitive_maps chooses them),
kept in one npz of the summary folder, explanations/sensitive_maps.npz.

Each `MapRequest` (model, resolution, seed, checkpoint, raw dataset indices) is restored through
`training.restore` (weights_only), its data built at that resolution and seed (`load_bundle`) and its images
explained by `explain.run.explain_images` with the sweep's explainability settings, as the probe set is. An entry is
reused from the previous file while its checkpoint file (path, size, modification time), its images and the
explainability settings are the same; a checkpoint that is gone (or cannot be loaded) gives an entry saying so
(`unavailable`) instead of maps. `load_on_demand(path)` gives each entry back as (arrays, meta) in explanations.npz's
form, so the report and figures draw them as they draw the probe maps."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import shutil
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from resomap.atomic import disk_full
from resomap.config import Config, to_dict
from resomap.errors import ResoMapError
from resomap.explain.methods.probe import load_maps, save_maps
from resomap.runtime import auto_threads
from resomap.training.threads import kept_threads

log = logging.getLogger(__name__)

SENSITIVE_MAPS_FILE = "sensitive_maps.npz"  # in the summary folder's explanations/
_IDENTITY = ("model", "resolution", "seed", "checkpoint", "stamp", "index", "settings")


@dataclasses.dataclass(frozen=True)
class MapRequest:
    """The images (raw dataset indices, in the order shown) of one model x resolution to explain from its trial's
    best checkpoint (None: the trial recorded none)."""

    model: str
    resolution: int
    seed: int
    checkpoint: str | None
    index: tuple[int, ...]


def settings_key(cfg: Config) -> str:
    """A short hash of the explainability section: maps made under other settings are made again."""
    text = json.dumps(to_dict(cfg)["explainability"], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _stamp(checkpoint: str | None) -> list[int] | None:
    """[size, modification time in ns] of the checkpoint file, None when it is not there."""
    try:
        st = Path(checkpoint).stat() if checkpoint else None
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns] if st is not None else None


def load_on_demand(path: str | Path) -> list[tuple[dict[str, np.ndarray], dict[str, Any]]]:
    """Every entry of a sensitive_maps.npz as (arrays, meta) in explanations.npz's form (maps per method, the
    images under PROBE_KEY; meta: model, resolution, seed, index, methods, pred, prob, targets, class_names, the
    checkpoint, and `unavailable`, the reason an entry has no maps); [] for a missing or unreadable file."""
    try:
        arrays, meta = load_maps(path)
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        if Path(path).is_file():
            log.warning("maps on demand in %s not read: %s", path, exc)
        return []
    out = []
    for entry in meta.get("entries") or []:
        keys = entry.get("keys") or {}
        out.append(({name: arrays[key] for name, key in keys.items() if key in arrays}, entry))
    return out


def _reusable(
    old: list[tuple[dict[str, np.ndarray], dict[str, Any]]], wanted: dict[str, Any]
) -> tuple[dict[str, np.ndarray], dict[str, Any]] | None:
    for arrays, meta in old:
        if not meta.get("unavailable") and all(meta.get(k) == wanted[k] for k in _IDENTITY):
            return arrays, meta
    return None


def maps_on_demand(
    requests: Sequence[MapRequest],
    cfg: Config,
    path: str | Path,
    previous: str | Path | None = None,
    device: Any = None,
) -> Path | None:
    """Write `path` (a sensitive_maps.npz) with the maps of every request, reusing the entries of `previous` (the
    summary's earlier file) that still hold; `cfg`: the sweep's config (its explainability section is what is
    explained with; a checkpoint without its trial's config.yaml beside it is rebuilt with this one). Returns the
    path, or None when there is nothing to explain (no file is written)."""
    if not requests:
        return None
    path, settings = Path(path), settings_key(cfg)
    old = load_on_demand(previous) if previous is not None and Path(previous).is_file() else []
    wanted = [_identity(r, settings) for r in requests]
    found = [_reusable(old, w) if w["stamp"] is not None else None for w in wanted]
    with kept_threads():
        if not all(found):  # one intra-op thread per core the figure workers and other processes leave free: two
            torch.set_num_threads(auto_threads())  # spinning on two busy cores made it ten times slower (runtime)
        entries = [f or _explained(r, w, cfg, device) for r, w, f in zip(requests, wanted, found, strict=True)]
    if previous is not None and [m for _, m in entries] == [m for _, m in old]:  # every entry reused: kept as it was
        if Path(previous).resolve() != path.resolve():
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(previous, path)
        return path
    return _save(path, entries)


def _identity(req: MapRequest, settings: str) -> dict[str, Any]:
    """What an entry is made from (_IDENTITY): the request, its checkpoint's stamp and the settings' hash."""
    return {**dataclasses.asdict(req), "index": [int(i) for i in req.index], "stamp": _stamp(req.checkpoint),
            "settings": settings}  # fmt: skip


def _explained(req: MapRequest, wanted: dict[str, Any], cfg: Config, device: Any) -> tuple[dict, dict[str, Any]]:
    """(arrays, meta) of one request explained from its checkpoint, or ({}, meta with `unavailable`)."""
    meta = dict(wanted)
    if wanted["stamp"] is None:
        where = f" ({req.checkpoint})" if req.checkpoint else ""
        meta["unavailable"] = f"the checkpoint of seed {req.seed} at {req.resolution} px is missing{where}"
        log.warning("%s: no maps on demand: %s", req.model, meta["unavailable"])
        return {}, meta
    try:
        arrays, explained = _explain(req, cfg, device)
    except Exception as exc:  # a checkpoint that cannot be loaded, data that changed: said, the others still made
        if disk_full(exc) is not None:
            raise
        first = str(exc).splitlines()[0] if str(exc) else ""
        why = first if isinstance(exc, ResoMapError) else f"{type(exc).__name__}: {first}"
        meta["unavailable"] = f"seed {req.seed} at {req.resolution} px: {why}"
        log.warning("%s: no maps on demand: %s", req.model, meta["unavailable"])
        return {}, meta
    return arrays, {**explained, **meta}


def _explain(req: MapRequest, cfg: Config, device: Any) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    from resomap.explain.images import explain_images
    from resomap.training.restore import checkpoint_config, load_bundle, restore_checkpoint

    def trial_config() -> Config:  # the trial's own config with the sweep's explanation settings
        return dataclasses.replace(checkpoint_config(req.checkpoint, cfg), explainability=cfg.explainability)

    expect = {"model": req.model, "resolution": req.resolution}
    trained = restore_checkpoint(req.checkpoint, trial_config, expect=expect, device=device)
    bundle = load_bundle(trained, trained.cfg)
    log.info("maps on demand: %s at %d px, images %s", req.model, req.resolution, list(req.index))
    return explain_images(trained.model, trained.spec, bundle, trained.cfg, req.seed, req.index, trained.device)


def _save(path: Path, entries: list[tuple[dict[str, np.ndarray], dict[str, Any]]]) -> Path:
    arrays: dict[str, np.ndarray] = {}
    metas = []
    for n, (found, meta) in enumerate(entries):
        keys = {name: f"e{n}:{name}" for name in found}
        arrays.update({keys[name]: value for name, value in found.items()})
        metas.append({**meta, "keys": keys})
    return save_maps(path, arrays, {"entries": metas})

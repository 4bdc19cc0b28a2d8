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
from collections.abc import Callable, Sequence
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
    loaded: dict[tuple, Any] | None = None,
    threads: Callable[[], int] | None = None,
) -> Path | None:
    """Write `path` (a sensitive_maps.npz) with the maps of every request, reusing the entries of `previous` (the
    summary's earlier file) that still hold; `cfg`: the sweep's config (its explainability section is what is
    explained with; a checkpoint without its trial's config.yaml beside it is rebuilt with this one); `loaded`:
    `load_checkpoints`' answer for some of the requests (each used once, then let go); `threads`: torch's intra-op
    threads for the next request's explanations, asked before each (default: one per core other processes leave
    free, asked once). Returns the path, or None when there is nothing to explain (no file is written)."""
    if not requests:
        return None
    path, settings = Path(path), settings_key(cfg)
    old = load_on_demand(previous) if previous is not None and Path(previous).is_file() else []
    wanted = [_identity(r, settings) for r in requests]
    found = [_reusable(old, w) if w["stamp"] is not None else None for w in wanted]
    loaded = loaded if loaded is not None else {}
    entries = []
    with kept_threads():
        if not all(found) and threads is None:  # one intra-op thread per core the figure workers and other
            torch.set_num_threads(auto_threads())  # processes leave free: two spinning on two busy cores made it
        for req, want, reused in zip(requests, wanted, found, strict=True):  # ten times slower (runtime)
            if reused is None and threads is not None:
                torch.set_num_threads(threads())
            entries.append(reused or _explained(req, want, cfg, device, loaded.pop(_key(req), None)))
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


def _explained(
    req: MapRequest, wanted: dict[str, Any], cfg: Config, device: Any, loaded: Any = None
) -> tuple[dict, dict[str, Any]]:
    """(arrays, meta) of one request explained from its checkpoint (`loaded`: its model and data, or the error
    loading them raised, from `load_checkpoints`), or ({}, meta with `unavailable`)."""
    meta = dict(wanted)
    if wanted["stamp"] is None:
        where = f" ({req.checkpoint})" if req.checkpoint else ""
        meta["unavailable"] = f"the checkpoint of seed {req.seed} at {req.resolution} px is missing{where}"
        log.warning("%s: no maps on demand: %s", req.model, meta["unavailable"])
        return {}, meta
    try:
        if isinstance(loaded, BaseException):
            raise loaded
        trained, bundle = loaded or _load(req, cfg, device)
        log.info("maps on demand: %s at %d px, images %s", req.model, req.resolution, list(req.index))
        arrays, explained = _explain(req, trained, bundle)
    except Exception as exc:  # a checkpoint that cannot be loaded, data that changed: said, the others still made
        if disk_full(exc) is not None:
            raise
        first = str(exc).splitlines()[0] if str(exc) else ""
        why = first if isinstance(exc, ResoMapError) else f"{type(exc).__name__}: {first}"
        meta["unavailable"] = f"seed {req.seed} at {req.resolution} px: {why}"
        log.warning("%s: no maps on demand: %s", req.model, meta["unavailable"])
        return {}, meta
    return arrays, {**explained, **meta}


LOAD_BUDGET_MB = 1024.0  # models and data `load_checkpoints` holds at once


def _key(req: MapRequest) -> tuple:
    """What a request's model and data are loaded from (its images aside)."""
    return req.model, req.resolution, req.seed, req.checkpoint


def load_checkpoints(
    requests: Sequence[MapRequest], cfg: Config, device: Any = None, budget_mb: float = LOAD_BUDGET_MB
) -> dict[tuple, Any]:
    """The model and data of each request's checkpoint ({key: (trained, bundle), or the error loading raised}),
    loaded ahead of `maps_on_demand` (the sweep's summary does it while its statistics are computed), in order,
    until they hold `budget_mb` (the rest is loaded when explained); a checkpoint that is not there is left to
    `maps_on_demand` to say so."""
    out: dict[tuple, Any] = {}
    held = 0.0
    for req in requests:
        if held >= budget_mb or _key(req) in out or _stamp(req.checkpoint) is None:
            continue
        try:
            trained, bundle = out[_key(req)] = _load(req, cfg, device)
        except Exception as exc:  # said in the entry, as when loaded then
            if disk_full(exc) is not None:
                raise
            out[_key(req)] = exc
            continue
        held += _megabytes(trained.model, bundle)
    return out


def _megabytes(model: Any, bundle: Any) -> float:
    """The memory a loaded model's weights and its data's images (uint8, every split) hold."""
    weights = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))
    images = sum(len(rows) for rows in bundle.splits.values()) * bundle.channels * bundle.resolution**2
    return (weights + images) / 2**20


def _load(req: MapRequest, cfg: Config, device: Any) -> tuple[Any, Any]:
    """(the trained model restored from the request's checkpoint, its data at that resolution and seed)."""
    from resomap.training.restore import checkpoint_config, load_bundle, restore_checkpoint

    def trial_config() -> Config:  # the trial's own config with the sweep's explanation settings
        return dataclasses.replace(checkpoint_config(req.checkpoint, cfg), explainability=cfg.explainability)

    expect = {"model": req.model, "resolution": req.resolution}
    trained = restore_checkpoint(req.checkpoint, trial_config, expect=expect, device=device)
    return trained, load_bundle(trained, trained.cfg)


def _explain(req: MapRequest, trained: Any, bundle: Any) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    from resomap.explain.images import explain_images

    return explain_images(trained.model, trained.spec, bundle, trained.cfg, req.seed, req.index, trained.device)


def _save(path: Path, entries: list[tuple[dict[str, np.ndarray], dict[str, Any]]]) -> Path:
    arrays: dict[str, np.ndarray] = {}
    metas = []
    for n, (found, meta) in enumerate(entries):
        keys = {name: f"e{n}:{name}" for name in found}
        arrays.update({keys[name]: value for name, value in found.items()})
        metas.append({**meta, "keys": keys})
    return save_maps(path, arrays, {"entries": metas})

"""The probe set: fixed, class-stratified test images explained by every trial, and its maps on disk."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from resomap.atomic import write_atomic
from resomap.config.schema import ExplainabilityConfig
from resomap.errors import ExplainError
from resomap.explain.registry import EXPLAINERS, build_explainer, explaining
from resomap.models import ModelSpec

log = logging.getLogger(__name__)

META_KEY = "__meta__"


def probe_indices(labels: np.ndarray, size: int, seed: int) -> np.ndarray:
    """`size` indices into `labels`, stratified by class, fixed by `seed` (independent of the resolution).

    Each class's indices are shuffled; an index of rank k in a class of n gets the key k / n, and the smallest
    keys are taken: every class appears once before any appears twice, then in proportion to its frequency.
    """
    labels = np.asarray(labels).reshape(-1)
    if size < 1:
        raise ExplainError(f"probe size must be >= 1, got {size}")
    if len(labels) == 0:
        raise ExplainError("cannot draw a probe set from an empty split")
    rng = np.random.default_rng([seed, 1729])
    idx, keys, order = [], [], []
    for rank_c, c in enumerate(np.unique(labels)):
        members = rng.permutation(np.flatnonzero(labels == c))
        idx.append(members)
        keys.append(np.arange(len(members)) / len(members))
        order.append(np.full(len(members), rank_c))
    idx_all, key_all, cls_all = map(np.concatenate, (idx, keys, order))
    chosen = np.lexsort((cls_all, key_all))[: min(size, len(labels))]
    return idx_all[chosen].astype(np.int64)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def explain_probe_set(
    model: nn.Module,
    images: torch.Tensor,
    targets: torch.Tensor | np.ndarray | Sequence[int],
    methods: Sequence[str],
    *,
    spec: ModelSpec,
    resolution: int,
    cfg: ExplainabilityConfig,
    batch_size: int | None = None,
    min_cam_size: int = 4,
    options: Mapping[str, Any] | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Explain float (normalised) images [N,C,r,r] with each method in batches.

    The model guard is entered once for the whole probe set; each method is built once (its CAM layer, hooks,
    captum object) and called per batch. `options` (method -> options instance) overrides `cfg`'s options.
    Returns (maps: method -> float32 [N,r,r], failed: method -> one-line reason); one failing method does not
    stop the others (the model is reset to the guarded state before the next one).
    """
    batch_size = batch_size or cfg.batch_size
    param = next(model.parameters(), None)
    device = param.device if param is not None else torch.device("cpu")
    targets = torch.as_tensor(np.asarray(targets), dtype=torch.int64)
    maps: dict[str, np.ndarray] = {}
    failed: dict[str, str] = {}
    with explaining(model) as guard:
        for method in methods:
            try:
                key = EXPLAINERS.resolve(method)
                opts = (options or {}).get(key)
                kw = dict(spec=spec, resolution=resolution, cfg=cfg, min_cam_size=min_cam_size, options=opts)
                with build_explainer(key, model, **kw) as explainer:
                    parts = [
                        explainer(images[i : i + batch_size].to(device), targets[i : i + batch_size].to(device))
                        for i in range(0, len(images), batch_size)
                    ]
                maps[method] = torch.cat(parts).numpy().astype(np.float32)
            except Exception as exc:  # a method that fails is recorded with its reason; the others still run
                failed[method] = _reason(exc)
                guard.reset()  # hooks or flags a failed method left behind must not reach the next one
                log.warning("explainer %s failed on %s at %dpx: %s", method, spec.name, resolution, failed[method])
    return maps, failed


def save_maps(path: str | Path, maps: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> Path:
    """Write maps (method -> array) and JSON metadata to an .npz atomically (temp file + fsync + rename)."""
    arrays = {k: np.asarray(v) for k, v in maps.items()}
    arrays[META_KEY] = np.array(json.dumps(dict(meta), default=str))
    return write_atomic(path, lambda fh: np.savez_compressed(fh, **arrays))


def load_maps(path: str | Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(maps, meta) written by save_maps."""
    with np.load(path, allow_pickle=False) as data:
        maps = {k: data[k] for k in data.files if k != META_KEY}
        meta = json.loads(str(data[META_KEY])) if META_KEY in data.files else {}
    return maps, meta

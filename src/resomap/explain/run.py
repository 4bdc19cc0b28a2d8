"""Explain one trained model over the probe set at its resolution, score the maps, and save them.

The probe set is drawn from the test split by raw dataset index with the data's seed (bundle.data_seed), so every
model, resolution and seed explains the same original images (each at its own resolution).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from resomap.config import Config
from resomap.explain.probe import explain_probe_set, probe_indices, save_maps
from resomap.explain.quality import quality_context, quality_metrics, random_weight_maps, sanity_check
from resomap.models.spec import ModelSpec

log = logging.getLogger(__name__)
MAPS_FILE = "explanations.npz"
PROBE_KEY = "_probe_images"  # uint8 [N,C,r,r] probe images stored beside the maps, for overlays
PROBE_MASKS_KEY = "_probe_masks"  # bool [N,r,r] their object masks, when the dataset has masks


@dataclasses.dataclass
class ExplainOutcome:
    maps_path: Path | None
    metrics: dict[str, float]  # "explain/<method>/<metric>" -> value
    failed: dict[str, str]  # method -> one-line reason
    cam_layer: str | None
    seconds: float

    def summary(self) -> dict[str, Any]:
        return {
            "maps": str(self.maps_path) if self.maps_path else None,
            "failed": self.failed,
            "cam_layer": self.cam_layer,
            "seconds": round(self.seconds, 2),
            "metrics": self.metrics,
        }


def _probe_idx(bundle: Any, size: int, seed: int) -> np.ndarray:
    labels = bundle.labels("test").cpu().numpy()
    return probe_indices(labels, min(size, len(labels)), getattr(bundle, "data_seed", seed))  # same for every seed


def probe_batch(bundle: Any, size: int, seed: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, Any]:
    """(normalised images, true labels, masks or None) of the probe set at the bundle's resolution."""
    labels = bundle.labels("test").cpu().numpy()
    idx = _probe_idx(bundle, size, seed)
    images = bundle.normalize(bundle.images("test")[idx].to(device))
    masks = bundle.masks("test")
    chosen = torch.as_tensor(labels[idx], dtype=torch.int64)
    return images, chosen, (masks[idx].cpu().numpy() if masks is not None else None)


def explain_trial(
    model: nn.Module, spec: ModelSpec, bundle: Any, cfg: Config, seed: int, out_dir: Path, device: torch.device
) -> ExplainOutcome:
    """Maps of every configured method for the probe set, their quality metrics, and an npz of the raw maps."""
    ec = cfg.explainability
    start = time.perf_counter()
    from resomap.explain.cam import sweep_cam_spec

    spec = sweep_cam_spec(spec, cfg)  # models.cam_layer_policy: by default one CAM layer at every sweep resolution
    images, targets, masks = probe_batch(bundle, ec.probe_size, seed, device)
    kw = {"spec": spec, "resolution": bundle.resolution, "cfg": ec, "min_cam_size": cfg.models.min_cam_size}
    cam_layer = _cam_layer_name(model, spec, bundle.resolution, cfg.models.min_cam_size)
    maps, failed = explain_probe_set(model, images, targets, ec.methods, **kw)
    metrics: dict[str, float] = {}
    context = None  # the baselines every method is compared with, computed once for the probe set
    for method, method_maps in maps.items():
        try:
            context = context or quality_context(model, images, targets.to(device), ec, masks)
            random_weights = None  # the method on the model with every weight re-drawn (first sanity seed)
            sanity_scores: dict[str, float] = {}
            if method in ec.sanity_methods:
                sanity = sanity_check(method, model, images, targets.to(device), cascade=False, **kw)
                random_weights, sanity_scores = sanity.random_maps, sanity.metrics()
            elif masks is not None:
                random_weights = random_weight_maps(method, model, images, targets.to(device), **kw)
            scores = quality_metrics(
                model, images, targets.to(device), method_maps, ec, masks, context=context,
                random_weight_maps=random_weights if masks is not None else None,
            )  # fmt: skip
            scores.update(sanity_scores)
        except Exception as exc:  # scoring failure of one method is recorded; maps and other methods stay
            failed[f"{method}/quality"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
            log.warning("quality metrics of %s failed: %s", method, failed[f"{method}/quality"])
            continue
        metrics.update({f"explain/{method}/{k}": float(v) for k, v in scores.items()})
    meta = {
        "model": spec.name,
        "resolution": bundle.resolution,
        "seed": seed,
        "cam_layer": cam_layer,
        "cam_layer_policy": spec.cam_layer_policy,
        "targets": targets.tolist(),
        "failed": failed,
        "methods": list(maps),
        **(context.meta() if context is not None else {}),
    }
    arrays = dict(maps, **{PROBE_KEY: bundle.images("test")[_probe_idx(bundle, ec.probe_size, seed)].cpu().numpy()})
    arrays.update({PROBE_MASKS_KEY: masks} if masks is not None else {})
    path = save_maps(out_dir / MAPS_FILE, arrays, meta) if maps else None
    return ExplainOutcome(path, metrics, failed, cam_layer, time.perf_counter() - start)


def _cam_layer_name(model: nn.Module, spec: ModelSpec, resolution: int, min_size: int) -> str | None:
    try:
        layer = spec.cam_layer(model, resolution, min_size)
    except Exception:  # a model with no spatial layer: the CAM methods report their own error
        return None
    log.info("CAM target layer of %s at %d px: %s (%s)", spec.name, resolution, layer.name, layer.feature_size)
    return layer.name

"""Explaining chosen test images of a data bundle: their batch at the bundle's resolution (`test_batch`), what the
model said of each (`probe_predictions`), and `explain_images`, the maps of given test images (raw dataset indices)
in explanations.npz's form, the way explain.run.explain_trial explains its probe set (which takes these pieces from
here). Light to import: no explanation scoring (explain.evaluation) is loaded."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
from torch import nn

from resomap.config import Config
from resomap.data.loader import as_uint8
from resomap.errors import ExplainError
from resomap.explain.methods.probe import PROBE_KEY, PROBE_MASKS_KEY, explain_probe_set
from resomap.explain.methods.targets import classes_and_regions, region_mean
from resomap.models.spec import ModelSpec

log = logging.getLogger(__name__)


def test_batch(
    bundle: Any, rows: np.ndarray, device: torch.device, task: Any = None
) -> tuple[torch.Tensor, torch.Tensor, Any]:
    """(normalised images, targets, object masks or None) of the test images at `rows` (positions in the test
    split) at the bundle's resolution, what the task explains of each (probe_batch's images)."""
    from resomap.tasks import get_task

    images = bundle.normalize(bundle.images("test")[rows].to(device))
    targets, masks = (task or get_task()).probe_targets(bundle, rows, device)
    return images, targets, masks


def explain_images(
    model: nn.Module, spec: ModelSpec, bundle: Any, cfg: Config, seed: int, index: Any, device: torch.device
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """(arrays, meta) in explanations.npz's form for the test images of raw dataset `index` (in that order): every
    method of cfg.explainability over each, as explain_trial explains its probe set (the same CAM layer policy,
    targets, batches and options), with the images (PROBE_KEY) and what the model said; no scores, no costs. A
    method that fails is in meta `failed`; an index not in the test split raises ExplainError."""
    from resomap.explain.methods.cam import sweep_cam_spec
    from resomap.tasks import task_of

    ec = cfg.explainability
    test = np.asarray((getattr(bundle, "splits", None) or {}).get("test", []))
    where = {int(raw): pos for pos, raw in enumerate(test)}
    absent = [int(i) for i in index if int(i) not in where]
    if absent:
        raise ExplainError(f"images {absent} are not in the test split of {spec.name} at {bundle.resolution} px")
    rows = np.array([where[int(i)] for i in index], dtype=np.int64)
    spec = sweep_cam_spec(spec, cfg, model)
    images, targets, masks = test_batch(bundle, rows, device, task_of(cfg))
    kw = {"spec": spec, "resolution": bundle.resolution, "cfg": ec, "min_cam_size": cfg.models.min_cam_size}
    maps, failed = explain_probe_set(model, images, targets, ec.methods, **kw)
    cam_layer = cam_layer_name(model, spec, bundle.resolution, cfg.models.min_cam_size)
    meta = {
        **maps_meta(spec, bundle, seed, cam_layer, targets, test[rows]),
        **said_of(model, images, targets, ec.batch_size, spec.name),
        "methods": list(maps),
        "failed": failed,
    }
    arrays = dict(maps, **{PROBE_KEY: as_uint8(bundle.images("test")[rows]).cpu().numpy()})
    arrays.update({PROBE_MASKS_KEY: masks} if masks is not None else {})
    return arrays, meta


def maps_meta(spec: ModelSpec, bundle: Any, seed: int, cam_layer: str | None, targets: Any, raw: Any) -> dict:
    """What an explanations.npz's meta says of the maps: model, resolution, seed, CAM layer, each image's explained
    class (`targets`), raw dataset `index` and the class names."""
    return {
        "model": spec.name,
        "resolution": bundle.resolution,
        "seed": seed,
        "cam_layer": cam_layer,
        "cam_layer_policy": spec.cam_layer_policy,
        "targets": _target_classes(targets),
        "index": [int(i) for i in raw],
        "class_names": [str(c) for c in bundle.class_names],
    }


def said_of(model: nn.Module, images: torch.Tensor, targets: torch.Tensor, batch_size: int, name: str) -> dict:
    """probe_predictions of the images, or {} (with a warning naming model `name`) when they cannot be had."""
    try:
        return probe_predictions(model, images, targets, batch_size)
    except Exception as exc:  # e.g. a model whose output is neither form: the maps are still worth keeping
        log.warning("probe predictions of %s not recorded: %s", name, exc)
        return {}


def probe_predictions(model: nn.Module, images: torch.Tensor, targets: torch.Tensor, batch_size: int) -> dict:
    """What the model said about each probe image: `pred` (class), `prob` (its softmax probability) and
    `true_prob` (the probability of the true class), as lists for the npz meta (figures and the HTML report).
    For region targets (resomap.explain.methods.targets) each is over the region: the class with the highest mean
    probability there, that probability, and the explained class's mean probability."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = torch.cat([model(images[i : i + batch_size]).float() for i in range(0, len(images), batch_size)])
    finally:
        model.train(was_training)
    probs = torch.softmax(logits, dim=1).cpu()
    true, region = classes_and_regions(targets.cpu())
    if region is not None:  # mean probability of each class over the region: [N, K]
        probs = region_mean(probs, region[:, None])
    pred = probs.argmax(dim=1)
    return {
        "pred": pred.tolist(),
        "prob": [float(p) for p in probs.gather(1, pred[:, None])[:, 0]],
        "true_prob": [float(p) for p in probs.gather(1, true[:, None])[:, 0]],
    }


def _target_classes(targets: torch.Tensor) -> list[int]:
    """The explained class of each probe image (region targets: the class over its region)."""
    return [int(c) for c in classes_and_regions(targets.cpu())[0]]


def cam_layer_name(model: nn.Module, spec: ModelSpec, resolution: int, min_size: int) -> str | None:
    try:
        layer = spec.cam_layer(model, resolution, min_size)
    except Exception:  # a model with no spatial layer: the CAM methods report their own error
        return None
    log.info("CAM target layer of %s at %d px: %s (%s)", spec.name, resolution, layer.name, layer.feature_size)
    return layer.name

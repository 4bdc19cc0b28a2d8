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
from resomap.data.loader import as_uint8
from resomap.errors import ConfigError
from resomap.explain.evaluation.intervals import interval_metrics
from resomap.explain.evaluation.quality import quality_context, quality_scores
from resomap.explain.evaluation.sanity import random_weight_maps, sanity_check
from resomap.explain.images import cam_layer_name, maps_meta, said_of, test_batch
from resomap.explain.methods.nuisance import FLOOR_PREFIX, shift_floor_maps
from resomap.explain.methods.probe import (
    MAPS_FILE,
    PROBE_KEY,
    PROBE_MASKS_KEY,
    explain_probe_costed,
    probe_indices,
    save_maps,
)
from resomap.explain.methods.targets import region_targets
from resomap.models.spec import ModelSpec

log = logging.getLogger(__name__)


@dataclasses.dataclass
class ExplainOutcome:
    maps_path: Path | None
    metrics: dict[str, float]  # "explain/<method>/<metric>" -> value
    failed: dict[str, str]  # method -> one-line reason
    cam_layer: str | None
    seconds: float
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)  # method -> why the budget skipped it

    def summary(self) -> dict[str, Any]:
        return {
            "maps": str(self.maps_path) if self.maps_path else None,
            "failed": self.failed,
            "skipped": self.skipped,
            "cam_layer": self.cam_layer,
            "seconds": round(self.seconds, 2),
            "metrics": self.metrics,
        }


def _probe_idx(bundle: Any, size: int, seed: int) -> np.ndarray:
    labels = bundle.labels("test").cpu().numpy()
    return probe_indices(labels, min(size, len(labels)), getattr(bundle, "data_seed", seed))  # same for every seed


def probe_batch(
    bundle: Any, size: int, seed: int, device: torch.device, task: Any = None, target: int | None = None
) -> tuple[torch.Tensor, torch.Tensor, Any]:
    """(normalised images, targets, object masks or None) of the probe set at the bundle's resolution; the task
    (resomap.tasks, default classification) says what is explained: a class (targets [N]) or a class over a
    region (targets [N, r, r], resomap.explain.methods.targets). `target`: that class for every image instead."""
    images, targets, masks = test_batch(bundle, _probe_idx(bundle, size, seed), device, task)
    return images, (targets if target is None else one_target(targets, target)), masks


def one_target(targets: torch.Tensor, target: int) -> torch.Tensor:
    """Class `target` for every probe image, in the form of `targets` (region targets: over the whole image)."""
    same = torch.full((len(targets),), int(target), dtype=torch.int64)
    if targets.dim() == 3:
        same = region_targets(same, torch.ones(targets.shape, dtype=torch.bool))
    return same.to(targets.device)


def budget_seconds(ec: Any, train_seconds: float | None) -> tuple[float | None, str]:
    """(seconds a method may take, or None = no budget; the words saying so) from explainability.budget_share and
    the trial's training time (sum of its epochs' train/epoch_time_s; unknown outside a training run)."""
    share = ec.budget_share
    if share is None:
        return None, "off (explainability.budget_share is null)"
    if not share > 0:
        raise ConfigError(f"explainability.budget_share must be null or a positive number, got {share!r}")
    if train_seconds is None or not train_seconds > 0:
        return None, "not applied: no training time known (the model was not trained in this run)"
    budget = share * train_seconds
    return budget, f"{budget:.3g} s per method ({share:g} x {train_seconds:.3g} s of training)"


def explain_trial(
    model: nn.Module,
    spec: ModelSpec,
    bundle: Any,
    cfg: Config,
    seed: int,
    out_dir: Path,
    device: torch.device,
    train_seconds: float | None = None,
    target: int | None = None,
) -> ExplainOutcome:
    """Maps of every configured method for the probe set (of class `target` for every image, when given: resomap
    explain --target), their quality metrics, and an npz of the raw maps.

    Per method: `explain/<method>/seconds` and `peak_memory_mb` (its maps of the probe set) and `quality_seconds`
    (scoring them, sanity check included). With explainability.budget_share and `train_seconds`, a method whose
    predicted cost (one image timed, x probe images, x the explainer runs its scoring adds) exceeds that share of
    the training time is skipped with the reason in `skipped`, unless it is listed in explainability.always.
    """
    ec = cfg.explainability
    start = time.perf_counter()
    budget_s, budget_words = budget_seconds(ec, train_seconds)
    from resomap.explain.methods.cam import sweep_cam_spec
    from resomap.tasks import task_of

    spec = sweep_cam_spec(spec, cfg, model)  # models.cam_layer_policy: by default one CAM layer at every resolution
    images, targets, masks = probe_batch(bundle, ec.probe_size, seed, device, task_of(cfg), target)
    probe_local = _probe_idx(bundle, ec.probe_size, seed)  # positions in the test split
    splits = getattr(bundle, "splits", None) or {}
    raw = np.asarray(splits["test"])[probe_local] if "test" in splits else probe_local  # raw dataset indices
    kw = {"spec": spec, "resolution": bundle.resolution, "cfg": ec, "min_cam_size": cfg.models.min_cam_size}
    cam_layer = cam_layer_name(model, spec, bundle.resolution, cfg.models.min_cam_size)
    factor = _cost_factor(ec, masks)
    found = explain_probe_costed(
        model, images, targets, ec.methods, budget_s=budget_s, always=ec.always, cost_factor=factor, **kw
    )
    maps, failed = found.maps, found.failed
    metrics = {k: v for method, cost in found.costs.items() for k, v in cost.metrics(method).items()}
    floor, floor_meta = _floor_maps(model, images, targets, maps, ec, kw, metrics)
    metrics.update({f"explain/{m}/skipped": 1.0 for m in found.skipped})
    metrics.update(_map_counts(maps, spec.name, bundle.resolution))
    predictions = said_of(model, images, targets, ec.batch_size, spec.name)
    scored = _Scored(metrics, failed, getattr(cfg, "stats", None))
    context = _score_maps(model, images, targets.to(device), maps, masks, ec, kw, scored)
    meta = {
        **maps_meta(spec, bundle, seed, cam_layer, targets, raw),
        **predictions,
        **_outcome_meta(found, budget_words, context, scored),
        **floor_meta,
    }
    arrays = dict(maps, **{PROBE_KEY: as_uint8(bundle.images("test")[probe_local]).cpu().numpy()})
    arrays.update({FLOOR_PREFIX + m: v for m, v in floor.items()})
    arrays.update({PROBE_MASKS_KEY: masks} if masks is not None else {})
    path = save_maps(out_dir / MAPS_FILE, arrays, meta) if maps else None
    return ExplainOutcome(path, metrics, failed, cam_layer, time.perf_counter() - start, dict(found.skipped))


def _floor_maps(
    model: nn.Module, images: torch.Tensor, targets: torch.Tensor, maps: dict, ec: Any, kw: dict, metrics: dict
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The shift floor's maps of every method that gave maps (explainability.floor: the probe images moved
    explainability.floor_shift pixels, each map moved back; resomap.explain.methods.nuisance), and the npz meta
    saying so (`floor`); each method's time in metrics['explain/<method>/floor_seconds']. A method whose shifted
    run fails keeps its maps, with no floor (said in the meta)."""
    if ec.floor != "shift" or not maps:
        return {}, {"floor": {"nuisance": "none"}}
    floor: dict[str, np.ndarray] = {}
    failed: dict[str, str] = {}
    for method in maps:
        start = time.perf_counter()
        found, why = shift_floor_maps(model, images, targets, [method], ec.floor_shift, **kw)
        metrics[f"explain/{method}/floor_seconds"] = time.perf_counter() - start
        floor.update(found)
        failed.update(why)
    for method, reason in failed.items():
        log.warning("shift floor of %s not computed: %s", method, reason)
    return floor, {"floor": {"nuisance": "shift", "pixels": int(ec.floor_shift), "failed": failed}}


def _cost_factor(ec: Any, masks: Any) -> dict[str, float]:
    """Per method, the explainer runs its scoring adds to its maps (for the budget's predicted cost): the sanity
    check's seeds, or the random-weights maps of localisation when there are object masks."""
    extra = 1.0 if masks is not None else 0.0
    return {m: 1.0 + (ec.sanity_seeds if m in set(ec.sanity_methods) else extra) for m in ec.methods}


def _outcome_meta(found: Any, budget_words: str, context: Any, scored: Any) -> dict[str, Any]:
    """What the npz meta says of the run itself: failures, skips and the budget, each method's cost, the methods
    with maps, the quality context's baseline choice, the per-image scores behind the intervals
    (`quality_per_image`, explain.evaluation.intervals) and each sanity check's verdict in words (`sanity`)."""
    return {
        "failed": found.failed,
        "skipped": found.skipped,
        "budget": budget_words,
        "costs": {m: dataclasses.asdict(c) for m, c in found.costs.items()},
        "methods": list(found.maps),
        **(context.meta() if context is not None else {}),
        "quality_per_image": scored.per_image,
        "sanity": scored.sanity,
    }


def _map_counts(maps: dict[str, np.ndarray], model: str, resolution: int) -> dict[str, float]:
    """explain/<method>/maps_constant and maps_nonfinite: the maps every agreement measure has to leave out
    (all zero or constant: no ranking; NaN or infinite), counted per trial and warned about, never dropped silently."""
    from resomap.explain.evaluation.measures import unusable

    out = {}
    for method, method_maps in maps.items():
        constant, nonfinite = unusable(method_maps)
        out[f"explain/{method}/maps_constant"], out[f"explain/{method}/maps_nonfinite"] = constant, nonfinite
        if constant or nonfinite:
            log.warning(
                "%s at %d px, %s: %d of %d maps are constant (e.g. all zero) and %d non-finite; the agreement "
                "measures leave them out (counted in agreement.csv)",
                *(model, resolution, method, constant, len(method_maps), nonfinite),
            )
    return {k: float(v) for k, v in out.items()}


@dataclasses.dataclass
class _Scored:
    """Where `_score_maps` puts what it finds: metrics, failures, per-image scores, sanity verdicts in words."""

    metrics: dict[str, float]
    failed: dict[str, str]
    stats: Any = None  # cfg.stats: the level, resamples and seed of the intervals (defaults without it)
    per_image: dict[str, dict[str, list[float]]] = dataclasses.field(default_factory=dict)
    sanity: dict[str, str] = dataclasses.field(default_factory=dict)

    def interval_settings(self) -> dict[str, Any]:
        st = self.stats
        return {"level": st.level, "resamples": st.resamples, "seed": st.seed} if st is not None else {}


def _score_maps(
    model: nn.Module,
    images: torch.Tensor,
    targets: torch.Tensor,
    maps: dict[str, np.ndarray],
    masks: Any,
    ec: Any,
    kw: dict[str, Any],
    scored: _Scored,
) -> Any:
    """Each method's quality metrics with their intervals over the probe images (and its sanity check) into
    `scored.metrics` as explain/<method>/<name>, a failure into `scored.failed`; returns the quality context (the
    baselines every method is compared with, computed once), or None."""
    context = None
    ivs = scored.interval_settings()
    for method, method_maps in maps.items():
        scoring = time.perf_counter()
        try:
            context = context or quality_context(model, images, targets, ec, masks)
            random_weights = None  # the method on the model with every weight re-drawn (first sanity draw)
            sanity_scores: dict[str, float] = {}
            if method in ec.sanity_methods:
                sanity = sanity_check(method, model, images, targets, cascade=False, **kw, **_sanity_kw(ivs))
                random_weights, sanity_scores = sanity.random_maps, sanity.metrics()
                scored.sanity[method] = sanity.reason
            elif masks is not None:
                random_weights = random_weight_maps(method, model, images, targets, **kw)
            scores, per_image = quality_scores(
                model, images, targets, method_maps, ec, masks, context=context,
                random_weight_maps=random_weights if masks is not None else None,
            )  # fmt: skip
            scores.update(interval_metrics(per_image, **ivs))
            scores.update(sanity_scores)
        except Exception as exc:  # scoring failure of one method is recorded; maps and other methods stay
            scored.failed[f"{method}/quality"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
            log.warning("quality metrics of %s failed: %s", method, scored.failed[f"{method}/quality"])
            continue
        scored.metrics.update({f"explain/{method}/{k}": float(v) for k, v in scores.items()})
        scored.metrics[f"explain/{method}/quality_seconds"] = time.perf_counter() - scoring
        scored.per_image[method] = {k: [float(x) for x in v] for k, v in per_image.items()}
    return context


def _sanity_kw(ivs: dict[str, Any]) -> dict[str, Any]:
    return {k: ivs[k] for k in ("level", "resamples") if k in ivs}

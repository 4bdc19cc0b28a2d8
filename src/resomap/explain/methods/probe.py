"""The probe set: fixed, class-stratified test images explained by every trial, and its maps on disk."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from resomap.atomic import write_atomic
from resomap.config.schema import ExplainabilityConfig
from resomap.errors import ExplainError
from resomap.explain.methods.guard import explaining
from resomap.explain.methods.registry import EXPLAINERS, build_explainer
from resomap.models import ModelSpec

log = logging.getLogger(__name__)

META_KEY = "__meta__"
MAPS_FILE = "explanations.npz"
PROBE_KEY = "_probe_images"  # uint8 [N,C,r,r] probe images stored beside the maps, for overlays
PROBE_MASKS_KEY = "_probe_masks"  # bool [N,r,r] their object masks, when the dataset has masks


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


@dataclasses.dataclass
class MethodCost:
    """What one method's maps of the probe set cost: `seconds`, the wall time of explaining the probe set (the
    calls, not building the explainer: that is `build_seconds`, which holds a library's first import in the
    process and would blur the cost against resolution), peak memory above the level before it
    (resomap.profiling.memory.peak_increase: the CUDA allocator's peak, or the sampled RSS rise on CPU), and,
    under a budget, the predicted time it was checked against (one-image timing x probe images x factor)."""

    seconds: float = math.nan
    peak_memory_mb: float = math.nan
    predicted_seconds: float | None = None
    build_seconds: float = math.nan

    def metrics(self, method: str) -> dict[str, float]:
        out = {
            f"explain/{method}/seconds": self.seconds,
            f"explain/{method}/peak_memory_mb": self.peak_memory_mb,
            f"explain/{method}/build_seconds": self.build_seconds,
        }
        if self.predicted_seconds is not None:
            out[f"explain/{method}/predicted_seconds"] = self.predicted_seconds
        return {k: float(v) for k, v in out.items() if math.isfinite(v)}


@dataclasses.dataclass
class ProbeExplanations:
    """explain_probe_costed's answer: maps (method -> float32 [N,r,r]), failed and skipped (method -> one-line
    reason) and each method's cost (also the skipped ones': their one-image timing)."""

    maps: dict[str, np.ndarray]
    failed: dict[str, str]
    skipped: dict[str, str]
    costs: dict[str, MethodCost]


def explain_probe_set(
    model: nn.Module,
    images: torch.Tensor,
    targets: torch.Tensor | np.ndarray | Sequence[int],
    methods: Sequence[str],
    **kw: Any,
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """(maps, failed) of explain_probe_costed (no budget, no memory measured: no cost is returned): maps method ->
    float32 [N,r,r], failed method -> reason."""
    found = explain_probe_costed(model, images, targets, methods, measure_memory=False, **kw)
    return found.maps, found.failed


def explain_probe_costed(
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
    budget_s: float | None = None,
    always: Sequence[str] = (),
    cost_factor: Mapping[str, float] | None = None,
    measure_memory: bool = True,
) -> ProbeExplanations:
    """Explain float (normalised) images [N,C,r,r] with each method in batches, timing each.

    The model guard is entered once for the whole probe set; each method is built once (its CAM layer, hooks,
    captum object) and called per batch. `options` (method -> options instance) overrides `cfg`'s options.
    One failing method does not stop the others (the model is reset to the guarded state before the next one).

    Budget: with `budget_s`, a method not in `always` is first timed on one image; its predicted cost is that
    time x N x cost_factor[method] (default 1: e.g. the sanity check's extra runs), and a method predicted over
    `budget_s` is skipped with the reason (its map of one image is thrown away; the one-image call includes the
    method's first-call overhead and runs unbatched, so the prediction errs on the high side). Without
    `measure_memory` the peak memory is not measured (NaN; on CPU its measurement starts with a garbage collection).
    """
    param = next(model.parameters(), None)
    device = param.device if param is not None else torch.device("cpu")
    targets = torch.as_tensor(np.asarray(targets), dtype=torch.int64)
    probe = _Probe(images, targets, device, batch_size or cfg.batch_size, measure_memory)
    always_keys = {EXPLAINERS.resolve(m) for m in always}
    found = ProbeExplanations({}, {}, {}, {})
    with explaining(model) as guard:
        for method in methods:
            found.costs[method] = MethodCost()
            try:
                key = EXPLAINERS.resolve(method)
                opts = (options or {}).get(key)
                kw = dict(spec=spec, resolution=resolution, cfg=cfg, min_cam_size=min_cam_size, options=opts)
                under = budget_s is not None and key not in always_keys
                budget = (budget_s, float((cost_factor or {}).get(method, 1.0))) if under else None
                _explain_method(found, method, key, model, probe, kw, budget)
                if method in found.skipped:
                    log.warning("skipping %s on %s at %dpx: %s", method, spec.name, resolution, found.skipped[method])
            except Exception as exc:  # a method that fails is recorded with its reason; the others still run
                found.failed[method] = _reason(exc)
                guard.reset()  # hooks or flags a failed method left behind must not reach the next one
                reason = found.failed[method]
                log.warning("explainer %s failed on %s at %dpx: %s", method, spec.name, resolution, reason)
    return found


@dataclasses.dataclass(frozen=True)
class _Probe:
    """The probe set as explain_probe_costed runs it: images, int64 targets, the model's device, the batch size,
    whether the peak memory is measured."""

    images: torch.Tensor
    targets: torch.Tensor
    device: torch.device
    batch_size: int
    measure_memory: bool = True

    def batch(self, start: int, size: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(images, targets) from `start`, `size` of them (default: the batch size), on the device."""
        stop = start + (size or self.batch_size)
        return self.images[start:stop].to(self.device), self.targets[start:stop].to(self.device)

    def sync(self) -> None:
        """Wait for the device's queued work (CUDA), so wall time covers it."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def _explain_method(
    found: ProbeExplanations,
    method: str,
    key: str,
    model: nn.Module,
    probe: _Probe,
    kw: dict[str, Any],
    budget: tuple[float, float] | None,
) -> None:
    """Build the explainer `key` once and explain the probe set in batches into found.maps[method], its cost into
    found.costs[method]; under a budget (seconds, cost factor) it is timed on one image first and, predicted over
    the budget, put in found.skipped instead."""
    from resomap.profiling.memory import MB, PeakReading, peak_increase

    cost = found.costs[method]
    start = time.perf_counter()
    meter = peak_increase(probe.device) if probe.measure_memory else contextlib.nullcontext(PeakReading(-1))
    with meter as peak, build_explainer(key, model, **kw) as explainer:
        cost.build_seconds = time.perf_counter() - start
        if budget is not None:
            skip = _over_budget(explainer, probe, *budget, cost)
            if skip:
                found.skipped[method] = skip
                return
        run = time.perf_counter()
        parts = [explainer(*probe.batch(i)) for i in range(0, len(probe.images), probe.batch_size)]
        probe.sync()
        cost.seconds = time.perf_counter() - run
    cost.peak_memory_mb = peak.bytes / MB if peak.bytes >= 0 else math.nan
    found.maps[method] = torch.cat(parts).numpy().astype(np.float32)


def _over_budget(explainer: Any, probe: _Probe, budget_s: float, factor: float, cost: MethodCost) -> str | None:
    """Time the explainer on the first image; cost.predicted_seconds = that x probe images x `factor`. The reason
    to skip the method when that is over `budget_s`, else None."""
    one = time.perf_counter()
    explainer(*probe.batch(0, 1))
    probe.sync()
    one_s = time.perf_counter() - one
    n = len(probe.images)
    cost.predicted_seconds = one_s * n * factor
    if not cost.predicted_seconds > budget_s:
        return None
    return (
        f"predicted {cost.predicted_seconds:.3g} s (1 image {one_s:.3g} s x {n} images x {factor:g} runs) > budget "
        f"{budget_s:.3g} s (explainability.budget_share of the training time); list it in explainability.always "
        "to run it anyway"
    )


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


def load_meta(path: str | Path) -> dict[str, Any]:
    """The JSON metadata of an .npz written by save_maps, without reading its arrays."""
    with np.load(path, allow_pickle=False) as data:
        return json.loads(str(data[META_KEY])) if META_KEY in data.files else {}

"""Explain one trained checkpoint: probe images of its test split, raw maps (npz), a figure per method, metrics.

Every check on the input (methods, checkpoint, model/resolution, target class) runs before anything is written.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np

from resomap.analysis.checkpoints import CheckpointSource, TrainedModel
from resomap.analysis.figures import method_overlays
from resomap.config import Config, with_overrides
from resomap.errors import ExplainError
from resomap.explain import EXPLAINERS
from resomap.explain.methods.probe import load_maps
from resomap.explain.run import PROBE_KEY, explain_trial
from resomap.reports.explain_figures import save_figure
from resomap.training import write_json_atomic
from resomap.training.restore import load_bundle

log = logging.getLogger(__name__)
DEFAULT_ROOT = Path("analysis_results") / "explain"
METRICS_FILE = "metrics.json"


@dataclasses.dataclass(frozen=True)
class ExplainRequest:
    checkpoint: Path
    methods: tuple[str, ...]
    num_samples: int | None = None  # probe images; None: the trial's explainability.probe_size
    output_dir: Path | None = None  # None: analysis_results/explain/<model>_<resolution>/
    target: int | None = None  # explain this class for every image; None: each image's true class
    model: str | None = None  # when given, must match the checkpoint
    resolution: int | None = None  # when given, must match the checkpoint
    source: CheckpointSource = dataclasses.field(default_factory=CheckpointSource)


@dataclasses.dataclass
class ExplainReport:
    model: str
    resolution: int
    output_dir: Path
    maps_path: Path
    metrics_path: Path
    figures: list[Path]
    quality: dict[str, dict[str, float]]  # method -> metric -> value
    failed: dict[str, str]
    cam_layer: str | None


def check_methods(methods: tuple[str, ...] | list[str]) -> list[str]:
    """Canonical explainer names; an unknown one raises UnknownNameError listing the methods."""
    if not methods:
        raise ExplainError("no explanation method given; pass --method NAME (resomap explainers lists them)")
    return list(dict.fromkeys(EXPLAINERS.resolve(m) for m in methods))


def per_method(metrics: dict[str, float]) -> dict[str, dict[str, float]]:
    """{'explain/<method>/<metric>': v} -> {method: {metric: v}}."""
    out: dict[str, dict[str, float]] = {}
    for key, value in metrics.items():
        _, method, name = key.split("/", 2)
        out.setdefault(method, {})[name] = float(value)
    return out


def explain_config(cfg: Config, methods: list[str], num_samples: int | None) -> Config:
    extra: dict[str, Any] = {"explainability.methods": methods}
    if num_samples is not None:
        extra["explainability.probe_size"] = num_samples
    return with_overrides(cfg, extra, "command line")


def explain_checkpoint(req: ExplainRequest) -> ExplainReport:
    """Load the checkpoint, explain its probe set with each method and write maps, figures and metrics."""
    methods = check_methods(req.methods)
    if req.num_samples is not None and req.num_samples < 1:
        raise ExplainError(f"--num-samples must be >= 1, got {req.num_samples}")
    trained = req.source.load(req.checkpoint, req.model, req.resolution)
    if req.target is not None and not 0 <= req.target < trained.num_classes:
        names = ", ".join(f"{i}={n}" for i, n in enumerate(trained.meta.get("class_names") or []))
        raise ExplainError(
            f"--target {req.target} is out of range; valid classes are 0..{trained.num_classes - 1} ({names})"
        )
    cfg = explain_config(trained.cfg, methods, req.num_samples)
    bundle = load_bundle(trained, cfg)
    out_dir = req.output_dir or DEFAULT_ROOT / f"{trained.name}_{trained.resolution}"
    outcome = explain_trial(
        trained.model, trained.spec, bundle, cfg, trained.seed, out_dir, trained.device, target=req.target
    )
    if outcome.maps_path is None:
        reasons = "; ".join(f"{m}: {r}" for m, r in outcome.failed.items())
        raise ExplainError(f"every method failed on {trained.name} at {trained.resolution} px ({reasons})")
    figures = method_figures(outcome.maps_path, trained, bundle.class_names, out_dir)
    quality = per_method(outcome.metrics)
    payload = {
        "checkpoint": str(trained.path),
        "model": trained.name,
        "resolution": trained.resolution,
        "seed": trained.seed,
        "methods": methods,
        "target": req.target,
        "cam_layer": outcome.cam_layer,
        "failed": outcome.failed,
        "quality": {m: {k: _finite(v) for k, v in s.items()} for m, s in quality.items()},
        "maps": str(outcome.maps_path),
        "figures": [str(p) for p in figures],
    }
    metrics_path = write_json_atomic(out_dir / METRICS_FILE, payload)
    log.info("explanations of %s at %d px written to %s", trained.name, trained.resolution, out_dir)
    return ExplainReport(
        trained.name,
        trained.resolution,
        out_dir,
        outcome.maps_path,
        metrics_path,
        figures,
        quality,
        outcome.failed,
        outcome.cam_layer,
    )


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def method_figures(maps_path: Path, trained: TrainedModel, class_names: list[str], out_dir: Path) -> list[Path]:
    """One figure (png + pdf) per explained method: probe images x the map overlay."""
    arrays, meta = load_maps(maps_path)
    images = arrays[PROBE_KEY]
    targets = meta.get("targets") or []
    from resomap.plotstyle import class_labels

    shown = class_labels(class_names)  # by index where no installed font draws one
    captions = [shown[t] if 0 <= t < len(shown) else str(t) for t in targets]
    files: list[Path] = []
    for method in meta.get("methods", []):
        title = f"{trained.name} @ {trained.resolution}px: {method}"
        fig = method_overlays(images, np.asarray(arrays[method]), captions, title)
        files += save_figure(fig, out_dir, f"explain_{method}")
    return files

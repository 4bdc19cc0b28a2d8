"""Expand sweep.yaml into trials with stable keys, and read each trial's state from disk."""

from __future__ import annotations

import hashlib
import json

from resomap.config import Config, with_overrides
from resomap.errors import ConfigError, UnknownNameError
from resomap.models import get_spec
from resomap.sweep.trial import Trial, TrialResult, pin_precision

STATES = ("done", "failed", "partial", "pending")


def plan(cfg: Config, check: bool = True) -> list[Trial]:
    """models x resolutions x seeds, plus `include` pairs, minus `exclude` pairs; per-model overrides applied.
    Unknown model names raise here; unknown explainer names too unless `check` is off (see check_plan)."""
    cfg = pin_precision(cfg)
    sw = cfg.sweep
    for name in sw.models:
        get_spec(name)  # unknown model names fail here, before anything runs
    if check:
        check_plan(cfg)
    for name in sw.model_overrides:  # overrides of models not in this grid are kept for other grids
        try:
            get_spec(name)
        except UnknownNameError as exc:
            raise ConfigError(f"sweep.model_overrides: {exc}") from None
    pairs = [(m.lower(), r) for m in sw.models for r in sw.resolutions]
    for model, res in sw.include:
        get_spec(model)
        if (model.lower(), res) not in pairs:
            pairs.append((model.lower(), res))
    excluded = {(m.lower(), r) for m, r in sw.exclude}
    pairs = [p for p in pairs if p not in excluded]
    if not pairs:
        raise ConfigError("sweep: the grid is empty after sweep.exclude; nothing to run")
    trials = []
    cache: dict[str, Config] = {}
    for model, res in pairs:
        if model not in cache:
            overrides = sw.model_overrides.get(model, {})
            cache[model] = (
                pin_precision(with_overrides(cfg, overrides, f"sweep.model_overrides.{model}")) if overrides else cfg
            )
        for seed in sw.seeds:
            trials.append(Trial(model, res, seed, cache[model]))
    return trials


def check_plan(cfg: Config) -> None:
    """The explainer names of the config exist. Apart from plan() because it imports every explainer's library
    (a sweep with nothing left to run skips it: its results were made with these names)."""
    from resomap.explain.registry import get_explainer

    if cfg.explainability.enabled:
        for method in [*cfg.explainability.methods, *cfg.explainability.sanity_methods]:
            try:
                get_explainer(method)
            except UnknownNameError as exc:
                raise ConfigError(f"explainability.methods: {exc}") from None


def check_memory(trials: list[Trial], channels: int = 1) -> None:
    """DeviceError before anything is created when a trial's training or evaluation batch cannot fit in the
    device's free memory at its resolution (profiling.fits: activations estimated from a small probe forward).
    `channels`: the dataset's input channels when known (1, the fewest, otherwise: the estimate errs low)."""
    from resomap.models import build_model
    from resomap.profiling.fits import check_fits
    from resomap.runtime import resolve_device

    by_model: dict[str, list[Trial]] = {}
    for t in trials:
        by_model.setdefault(t.model, []).append(t)
    for model, group in by_model.items():
        cfg = group[0].cfg
        net, _ = build_model(model, 2, channels, cfg.models)
        tr = cfg.training
        check_fits(
            model,
            net,
            in_channels=channels,
            resolutions=[t.resolution for t in group],
            batches={"training": tr.batch_size, "evaluation": tr.eval_batch_size},
            precision=cfg.system.precision,
            device=resolve_device(cfg.system),
            settings="training.batch_size / training.eval_batch_size",
        )


def sweep_key(trials: list[Trial]) -> str:
    text = json.dumps(sorted(t.key for t in trials))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def load_result(trial: Trial) -> TrialResult | None:
    path = trial.summary_dir / "result.json"
    if not path.exists():
        return None
    try:
        result = TrialResult.from_json(path.read_text(encoding="utf-8"))
    except (ValueError, TypeError):
        return None
    return result if result.key == trial.key else None


def trial_state(trial: Trial) -> str:
    """done / failed (a result on disk for this exact key), partial (a last.pt), or pending."""
    result = load_result(trial)
    if result is not None:
        return "done" if result.status == "FINISHED" else "failed"
    family = get_spec(trial.model).family
    if (trial.checkpoint_dir(family) / "last.pt").exists():
        return "partial"
    return "pending"


def describe_plan(trials: list[Trial]) -> list[tuple[Trial, str]]:
    return [(t, trial_state(t)) for t in trials]

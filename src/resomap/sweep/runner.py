"""run_trial: data -> model -> Trainer -> best-checkpoint evaluation -> summary files + MLflow child run."""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from resomap import data as data_pkg
from resomap import models as models_pkg
from resomap.config import Config, flatten, with_overrides
from resomap.errors import ConfigError, ResoMapError
from resomap.explain.run import explain_trial
from resomap.models import unwrap
from resomap.profiling import profile, save_profile
from resomap.runtime import apply_system, describe_device, resolve_device, seed_everything
from resomap.sweep.trial import TRIAL_KEY_TAG, Trial, TrialResult, save_trial_config
from resomap.tracking import MlflowCallback, Tracker
from resomap.training import EarlyStopping, TopKCheckpoint, Trainer, distributed, load_checkpoint
from resomap.training.metrics import confusion_matrix_figure

log = logging.getLogger(__name__)


def _open_run(tracker: Tracker | None, trial: Trial, family: str, parent_run_id: str | None) -> str | None:
    """The trial's MLflow run: reuse the one an interrupted attempt left (same trial key), else create one."""
    if tracker is None:
        return None
    existing = tracker.find_runs(f"tags.`{TRIAL_KEY_TAG}` = '{trial.key}'")
    if existing:
        run_id = existing[0].info.run_id
        tracker._soft("reopen run", tracker.client.update_run, run_id, status="RUNNING")
        log.info("reusing MLflow run %s for %s", run_id, trial.name)
        return run_id
    tags = {
        TRIAL_KEY_TAG: trial.key,
        "resomap.kind": "trial",
        "model": trial.model,
        "family": family,
        "resolution": trial.resolution,
        "seed": trial.seed,
    }
    run_id = tracker.start_run(trial.name, tags=tags, parent_run_id=parent_run_id)
    params = {k: v for k, v in flatten(trial.cfg).items() if not k.startswith("sweep.")}
    params.update({"model": trial.model, "family": family, "resolution": trial.resolution, "seed": trial.seed})
    tracker.log_params(run_id, params)
    return run_id


def _resume_point(folder: Path, key: str, fresh: bool) -> Path | None:
    """last.pt of an interrupted attempt at this exact trial; checkpoints of another config are discarded."""
    last = folder / "last.pt"
    if folder.exists() and not fresh and last.exists():
        old_key = _checkpoint_key(folder)
        if old_key == key:
            return last
        log.warning("%s holds checkpoints of another config (%s, now %s); starting afresh", folder, old_key, key)
    if folder.exists():
        shutil.rmtree(folder)
    return None


def _checkpoint_key(folder: Path) -> str | None:
    """The config hash last.pt was written for: from last.json, or from last.pt itself when a kill came between
    the two writes."""
    try:
        return json.loads((folder / "last.json").read_text(encoding="utf-8")).get("config_hash")
    except (OSError, ValueError):
        pass
    try:
        return load_checkpoint(folder / "last.pt").get("meta", {}).get("config_hash")
    except ResoMapError:  # a torn or foreign file: start afresh
        return None


@dataclasses.dataclass
class _Prepared:
    cfg: Config
    bundle: Any
    model: torch.nn.Module
    family: str


def _prepare(trial: Trial, cfg: Config, device: torch.device) -> _Prepared:
    """Data and model for the trial; bad input (data, model, weights) surfaces here, before anything is written."""
    bundle = data_pkg.build(cfg, trial.resolution, trial.seed, device)
    seed_everything(trial.seed)  # weight init must not depend on what ran before in this process
    model, spec = models_pkg.build_model(trial.model, bundle.num_classes, bundle.channels, cfg.models)
    if cfg.system.grad_checkpointing and not models_pkg.set_grad_checkpointing(model, True):
        raise ConfigError(f"system.grad_checkpointing is on but {trial.model} has no stages to checkpoint; turn it off")
    return _Prepared(cfg, bundle, model, spec.family)


def run_trial(
    trial: Trial,
    *,
    tracker: Tracker | None = None,
    parent_run_id: str | None = None,
    fresh: bool = False,
    reraise: bool = False,
) -> TrialResult:
    """Train and evaluate one trial. A failure closes the MLflow run as FAILED with the reason and is returned
    in the result, so a sweep goes on. With `reraise`, user errors (ResoMapError) found while preparing data
    and model are raised before anything is written, and later ones after the run is closed."""
    device = resolve_device(trial.cfg.system)
    apply_system(trial.cfg.system, device)
    log.info("trial %s on %s", trial.name, describe_device(device))
    family = models_pkg.get_spec(trial.model).family
    result = TrialResult(trial.key, trial.name, trial.model, family, trial.resolution, trial.seed, "RUNNING")
    if not distributed.is_rank0():
        return _follow_rank0(trial, device, family, fresh, result)
    prepared, early = None, None
    try:
        prepared = _prepare(trial, trial.cfg, device)
    except Exception as exc:
        if reraise and isinstance(exc, ResoMapError):
            raise
        early = exc
    start_failures = len(tracker.failures) if tracker else 0
    try:
        run_id = result.run_id = _open_run(tracker, trial, family, parent_run_id)
    except Exception as exc:  # the store is unreachable: train anyway, `resomap sync` logs it later
        tracker.failures.append(f"open run: {type(exc).__name__}: {exc}")
        log.warning("MLflow unreachable (%s); %s trains untracked and is logged by `resomap sync`", exc, trial.name)
        run_id = None
    try:
        if early is not None:
            raise early
        _fit_with_oom_retry(trial, prepared, device, tracker, run_id, result, fresh)
        result.status = "FINISHED"
    except Exception as exc:
        result.status = "FAILED"
        result.error = f"{type(exc).__name__}: {exc}".splitlines()[0]
        log.error("trial %s failed: %s", trial.name, result.error)
        if tracker and run_id:
            tracker.set_tags(run_id, {"resomap.failure": result.error})
            tracker.log_text(run_id, "".join(traceback.format_exception(exc)), "failure.txt")
        if reraise and isinstance(exc, ResoMapError):
            raise
    finally:
        result.finished_at = time.time()
        result.tracked = False  # until the run is closed with everything in it
        result.save(trial.summary_dir)
        if tracker and run_id:
            tracker.log_artifact(run_id, trial.summary_dir / "result.json")
            tracker.log_artifact(run_id, trial.summary_dir / "summary.txt")
            tracker.end_run(run_id, "FINISHED" if result.status == "FINISHED" else "FAILED")
            if len(tracker.failures) == start_failures:
                result.tracked = True
                result.save(trial.summary_dir)
    return result


def _follow_rank0(trial: Trial, device: torch.device, family: str, fresh: bool, result: TrialResult) -> TrialResult:
    """A rank > 0 under torchrun: the same data, model and fit (its shard of every epoch), resumed from what rank 0
    chose; no files, no MLflow, no test evaluation (rank 0 does those)."""
    prepared = _prepare(trial, trial.cfg, device)
    resume = distributed.share_from_rank0(None)
    callbacks = _callbacks(trial.cfg, trial.checkpoint_dir(family), {}, None, None)
    trainer = Trainer(trial.cfg, device, callbacks=callbacks, run_name=trial.name)
    fit = trainer.fit(prepared.model, prepared.bundle, resume_from=resume)
    result.status, result.epochs_run, result.best_val = "FINISHED", len(fit.history), fit.best_score
    return result


def _fit_with_oom_retry(trial, prepared, device, tracker, run_id, result, fresh) -> None:
    """On CUDA out-of-memory, retry once with half the batch and twice the accumulation (same effective batch)."""
    try:
        _train_and_evaluate(trial, prepared, device, tracker, run_id, result, fresh)
    except torch.cuda.OutOfMemoryError:
        tc = prepared.cfg.training
        if tc.batch_size < 2 or distributed.is_distributed():  # DDP ranks must keep the same batches
            raise
        half = {"training.batch_size": tc.batch_size // 2, "training.grad_accum_steps": tc.grad_accum_steps * 2}
        note = f"CUDA out of memory at batch {tc.batch_size}; retried with batch {half['training.batch_size']}"
        note += f" x {half['training.grad_accum_steps']} accumulation steps"
        log.warning("%s: %s", trial.name, note)
        result.notes.append(note)
        if tracker and run_id:
            tracker.set_tags(run_id, {"resomap.oom_retry": note})
        prepared.model.to("cpu")
        torch.cuda.empty_cache()
        retry = _prepare(trial, with_overrides(prepared.cfg, half, "out-of-memory retry"), device)
        _train_and_evaluate(trial, retry, device, tracker, run_id, result, fresh=True)


def _train_and_evaluate(trial, prepared, device, tracker, run_id, result, fresh) -> None:
    cfg, bundle, model = prepared.cfg, prepared.bundle, prepared.model
    folder = trial.checkpoint_dir(prepared.family)
    resume = distributed.share_from_rank0(_resume_point(folder, trial.key, fresh))  # DDP: every rank resumes alike
    folder.mkdir(parents=True, exist_ok=True)
    config_path = save_trial_config(trial, folder)
    save_trial_config(trial, trial.summary_dir)
    meta = {
        "model": trial.model,
        "family": prepared.family,
        "resolution": trial.resolution,
        "num_classes": bundle.num_classes,
        "in_channels": bundle.channels,
        "class_names": list(bundle.class_names),
        "seed": trial.seed,
        "config_hash": trial.key,
    }
    trainer = Trainer(cfg, device, callbacks=_callbacks(cfg, folder, meta, tracker, run_id), run_name=trial.name)
    if tracker and run_id:
        tracker.log_artifact(run_id, config_path)
    start = time.perf_counter()
    fit = trainer.fit(model, bundle, resume_from=resume)
    result.train_time_s = time.perf_counter() - start
    result.epochs_run = len(fit.history)
    result.history = [{k: float(v) for k, v in h.items() if isinstance(v, int | float)} for h in fit.history]
    result.best_val = fit.best_score
    result.best_checkpoint = str(fit.best_path)
    if fit.resumed_from_epoch is not None:
        result.notes.append(f"resumed from last.pt after epoch {fit.resumed_from_epoch}")
    _test_best(trial, trainer, model, bundle, fit.best_path, meta, tracker, run_id, result)
    _test_other_resolutions(trial, trainer, model, device, result)
    if cfg.profiling.enabled:
        _profile(trial, cfg, unwrap(model), bundle.channels, device, tracker, run_id, result)
    if cfg.explainability.enabled:
        _explain(trial, cfg, unwrap(model).to(device), bundle, device, tracker, run_id, result)
    if tracker and run_id:
        xres = {f"test_at_{r}/accuracy": m["accuracy"] for r, m in result.cross_resolution.items()}
        tracker.log_metrics(run_id, xres)
        if cfg.mlflow.log_model and not tracker.has_logged_model(run_id):
            example = bundle.normalize(bundle.images("test")[:2]).cpu().numpy()
            tracker.log_model(run_id, unwrap(model).cpu().eval(), example)


def _profile(trial, cfg, model, in_channels, device, tracker, run_id, result) -> None:
    """The trial's model profiled at its resolution; the summary keeps the figures the sweep plots."""
    pc = cfg.profiling
    prof = profile(
        model,
        trial.resolution,
        in_channels=in_channels,
        batch_size=pc.batch_size,
        device=device,
        precision=cfg.system.precision,
        warmup=pc.warmup,
        iters=pc.iters,
        train_batch_size=pc.train_batch_size,
        model_name=trial.model,
    )
    txt, js = save_profile(prof, trial.summary_dir)
    result.profile = {
        "params_m": prof.params_m,
        "gmacs": prof.gmacs,
        "gflops": prof.gflops,
        "latency_median_ms": prof.latency.median_ms,
        "latency_p90_ms": prof.latency.p90_ms,
        "latency_p99_ms": prof.latency.p99_ms,
        "throughput_inference_ips": prof.inference_images_per_s,
        "throughput_train_ips": prof.train_images_per_s,
        "peak_memory_mb": prof.memory.peak_mb,
        "batch_size": prof.batch_size,
        "device": prof.device_name,
    }
    if tracker and run_id:
        tracker.log_metrics(run_id, prof.as_metrics())
        tracker.log_artifact(run_id, txt, "profile")
        tracker.log_artifact(run_id, js, "profile")


def _explain(trial, cfg, model, bundle, device, tracker, run_id, result) -> None:
    spec = models_pkg.get_spec(trial.model)
    outcome = explain_trial(model, spec, bundle, cfg, trial.seed, trial.summary_dir, device)
    result.explain = outcome.summary()
    for method, reason in outcome.failed.items():
        result.notes.append(f"explainer {method} failed: {reason}")
    if tracker and run_id:
        tracker.log_metrics(run_id, outcome.metrics)
        tags = {f"resomap.explain_failed.{m}": r for m, r in outcome.failed.items()}
        if outcome.cam_layer:
            tags["resomap.cam_layer"] = outcome.cam_layer
        tracker.set_tags(run_id, tags)
        if outcome.maps_path:
            tracker.log_artifact(run_id, outcome.maps_path, "explanations")


def _callbacks(cfg: Config, folder: Path, meta: dict, tracker: Tracker | None, run_id: str | None) -> list[Any]:
    tc = cfg.training
    callbacks: list[Any] = [
        TopKCheckpoint(folder, tc.checkpoint.monitor, tc.checkpoint.mode, tc.checkpoint.top_k, meta)
    ]
    if tc.early_stopping.enabled:
        es = tc.early_stopping
        callbacks.append(EarlyStopping(es.monitor, es.mode, es.patience, es.min_delta))
    if tracker and run_id:
        callbacks.append(MlflowCallback(tracker, run_id))
    return callbacks


def _test_other_resolutions(trial: Trial, trainer: Trainer, model: Any, device: Any, result: TrialResult) -> None:
    """The trained model tested at every resolution of the sweep (FixRes-style train x test matrix)."""
    for res in sorted(set(trial.cfg.sweep.resolutions) | {trial.resolution}):
        if res == trial.resolution:
            metrics = {"accuracy": result.test["test/accuracy"], "macro_f1": result.test["test/macro_f1"]}
        else:
            other = data_pkg.build(trial.cfg, res, trial.seed, device)
            found, _, _ = trainer.evaluate(model, other.test, prefix="x")
            metrics = {"accuracy": found["x/accuracy"], "macro_f1": found["x/macro_f1"]}
        result.cross_resolution[str(res)] = {k: float(v) for k, v in metrics.items()}


def _test_best(trial, trainer, model, bundle, best_path, meta, tracker, run_id, result) -> None:
    expect = {k: meta[k] for k in ("model", "resolution", "num_classes")}
    payload = load_checkpoint(best_path, expect=expect)
    model.load_state_dict(payload["model"])
    metrics, y_true, y_pred = trainer.evaluate(model, bundle.test, prefix="test")
    result.test = {k: float(v) for k, v in metrics.items()}
    log.info("%s test: %s", trial.name, ", ".join(f"{k}={v:.4f}" for k, v in sorted(result.test.items())))
    fig = confusion_matrix_figure(y_true, y_pred, bundle.class_names, f"{trial.name}: test confusion matrix")
    trial.summary_dir.mkdir(parents=True, exist_ok=True)
    fig.savefig(trial.summary_dir / "confusion_matrix.png", dpi=150, bbox_inches="tight")
    if tracker and run_id:
        tracker.log_metrics(run_id, result.test)
        tracker.log_figure(run_id, fig, "figures/confusion_matrix.png")
        if trial.cfg.mlflow.log_checkpoint:
            tracker.log_artifact(run_id, best_path, "checkpoints")
    import matplotlib.pyplot as plt

    plt.close(fig)

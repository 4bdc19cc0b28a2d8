"""run_trial: data -> model -> Trainer -> best-checkpoint evaluation -> summary files + MLflow child run."""

from __future__ import annotations

import logging
import shutil
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from resomap import data as data_pkg
from resomap import models as models_pkg
from resomap.config import flatten
from resomap.errors import ResoMapError
from resomap.runtime import apply_system, describe_device, resolve_device
from resomap.sweep.trial import TRIAL_KEY_TAG, Trial, TrialResult, save_trial_config
from resomap.tracking import MlflowCallback, Tracker
from resomap.training import EarlyStopping, TopKCheckpoint, Trainer, load_checkpoint
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


def _resume_point(folder: Path, fresh: bool) -> Path | None:
    last = folder / "last.pt"
    if fresh and folder.exists():
        shutil.rmtree(folder)
        return None
    return last if last.exists() else None


def run_trial(
    trial: Trial,
    *,
    tracker: Tracker | None = None,
    parent_run_id: str | None = None,
    fresh: bool = False,
    reraise: bool = False,
) -> TrialResult:
    """Train and evaluate one trial. A failure closes the MLflow run as FAILED with the reason and is returned
    in the result (a sweep goes on); with `reraise`, user errors (ResoMapError) are raised after that."""
    cfg = trial.cfg
    device = resolve_device(cfg.system)
    apply_system(cfg.system, device)
    log.info("trial %s on %s", trial.name, describe_device(device))
    spec = models_pkg.get_spec(trial.model)
    result = TrialResult(trial.key, trial.name, trial.model, spec.family, trial.resolution, trial.seed, "RUNNING")
    run_id = _open_run(tracker, trial, spec.family, parent_run_id)
    result.run_id = run_id
    try:
        _train_and_evaluate(trial, device, tracker, run_id, result, fresh)
        result.status = "FINISHED"
    except Exception as exc:
        result.status = "FAILED"
        result.error = f"{type(exc).__name__}: {exc}".splitlines()[0]
        log.error("trial %s failed: %s", trial.name, result.error)
        if tracker and run_id:
            tracker.set_tags(run_id, {"resomap.failure": result.error})
            tracker.log_text(run_id, traceback.format_exc(), "failure.txt")
        if reraise and isinstance(exc, ResoMapError):
            raise
    finally:
        result.finished_at = time.time()
        result.save(trial.summary_dir)
        if tracker and run_id:
            tracker.log_artifact(run_id, trial.summary_dir / "result.json")
            tracker.log_artifact(run_id, trial.summary_dir / "summary.txt")
            tracker.end_run(run_id, "FINISHED" if result.status == "FINISHED" else "FAILED")
    return result


def _train_and_evaluate(
    trial: Trial, device: torch.device, tracker: Tracker | None, run_id: str | None, result: TrialResult, fresh: bool
) -> None:
    cfg = trial.cfg
    bundle = data_pkg.build(cfg, trial.resolution, trial.seed, device)
    log.info("%s", bundle.describe())
    model, spec = models_pkg.build_model(trial.model, bundle.num_classes, bundle.channels, cfg.models)
    folder = trial.checkpoint_dir(spec.family)
    resume = _resume_point(folder, fresh)
    folder.mkdir(parents=True, exist_ok=True)
    config_path = save_trial_config(trial, folder)
    save_trial_config(trial, trial.summary_dir)
    meta = {
        "model": trial.model,
        "family": spec.family,
        "resolution": trial.resolution,
        "num_classes": bundle.num_classes,
        "in_channels": bundle.channels,
        "class_names": list(bundle.class_names),
        "seed": trial.seed,
        "config_hash": trial.key,
    }
    tc = cfg.training
    callbacks: list[Any] = [
        TopKCheckpoint(folder, tc.checkpoint.monitor, tc.checkpoint.mode, tc.checkpoint.top_k, meta)
    ]
    if tc.early_stopping.enabled:
        es = tc.early_stopping
        callbacks.append(EarlyStopping(es.monitor, es.mode, es.patience, es.min_delta))
    if tracker and run_id:
        callbacks.append(MlflowCallback(tracker, run_id))
        tracker.log_artifact(run_id, config_path)
    trainer = Trainer(cfg, device, callbacks=callbacks, run_name=trial.name)
    start = time.perf_counter()
    fit = trainer.fit(model, bundle, resume_from=resume)
    result.train_time_s = time.perf_counter() - start
    result.epochs_run = fit.epochs_run
    result.best_val = fit.best_score
    result.best_checkpoint = str(fit.best_path)
    if fit.resumed_from_epoch is not None:
        result.notes.append(f"resumed from last.pt after epoch {fit.resumed_from_epoch}")
    _test_best(trial, trainer, model, bundle, fit.best_path, meta, tracker, run_id, result)


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
        if trial.cfg.mlflow.log_model:
            example = bundle.normalize(bundle.images("test")[:2]).cpu().numpy()
            tracker.log_model(run_id, model.cpu().eval(), example)
    import matplotlib.pyplot as plt

    plt.close(fig)

"""One trial run: a model at one resolution and seed (Trial, from resomap.sweep.identity), what it found
(TrialResult, from resomap.trial_result), and run_trial: data -> model -> Trainer -> the stages of resomap.stages
-> summary files -> publish to MLflow."""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import time
import traceback
from pathlib import Path
from typing import Any

from resomap.atomic import disk_full, write_text
from resomap.config import Config, with_overrides
from resomap.errors import ConfigError, ResoMapError
from resomap.sweep.identity import _SEED_FOLDER, Trial, _checkpoint_key, save_trial_config, trial_key
from resomap.sweep.trial_records import data_record, recipe_record
from resomap.trial_result import DISK_FULL, TrialResult  # below sweep and analysis; kept importable from here

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- running a trial


def run_trial(
    trial: Trial,
    *,
    tracker: Any = None,
    parent_run_id: str | None = None,
    fresh: bool = False,
    reraise: bool = False,
) -> TrialResult:
    """Train and evaluate one trial, write its summary folder, then publish it to MLflow. A failure is recorded
    in the result (and the run closed as FAILED with the reason), so a sweep goes on. With `reraise`, user errors
    (ResoMapError) found while preparing data and model are raised before anything is written, and later ones
    after the result is written and published. An interrupt (KeyboardInterrupt: Ctrl-C, SIGTERM) is raised on
    with nothing written and the run closed KILLED: the trial stays resumable (`_interrupted`)."""
    from resomap.runtime import apply_system, describe_device, resolve_device
    from resomap.tracking import NullTracker
    from resomap.training import distributed

    tracker = tracker if tracker is not None else NullTracker()
    trial = trial.pinned()  # its folders (seed layout, or the single-seed folder it was started in) stay put
    device = resolve_device(trial.cfg.system)
    apply_system(trial.cfg.system, device)
    log.info("trial %s on %s", trial.name, describe_device(device))
    result = _started(trial, device)
    if not distributed.is_rank0():
        return _follow_rank0(trial, device, result.family, result)
    prepared, early = None, None
    try:
        prepared = prepare_trial(trial, trial.cfg, device)
        result.data = {**data_record(prepared.bundle), "recipe": recipe_record(trial.cfg)}
    except Exception as exc:
        if reraise and isinstance(exc, ResoMapError):
            raise
        early = exc
    live = _open_live_run(tracker, trial, result, parent_run_id)  # (tracker, run id) for per-epoch metrics
    result.run_id = live[1]
    error = None
    try:
        if early is not None:
            raise early
        _fit_with_oom_retry(trial, prepared, device, live, result, fresh)
        result.status = "FINISHED"
        (trial.summary_dir / "failure.txt").unlink(missing_ok=True)  # left by an earlier failed attempt
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM (resomap.interrupts)
        _interrupted(trial, *live)
        raise
    except Exception as exc:
        _failed(trial, result, exc)
        error = exc
    result.finished_at = time.time()
    _save_and_publish(trial, result, tracker, parent_run_id, prepared)
    if reraise and isinstance(error, ResoMapError):
        raise error
    return result


def _started(trial: Trial, device: Any) -> TrialResult:
    """The trial's result as it starts (RUNNING, never saved so): what it is and where it runs."""
    from resomap.models import canonical_name, get_spec
    from resomap.models.build import pretrained_entry
    from resomap.models.hub import describe
    from resomap.runtime import describe_device, machine_record

    spec = get_spec(trial.model)
    result = TrialResult(trial.key, trial.name, trial.model, spec.family, trial.resolution, trial.seed, "RUNNING")
    result.deterministic = spec.deterministic
    result.task = trial.cfg.experiment.task
    result.environment["device"] = describe_device(device)
    result.environment.update(machine_record(device))  # CPU model and capability, bf16 flags, GPU: bf16 differs
    result.environment["precision"] = trial.cfg.system.precision  # resolved (pin_precision): never auto
    key = canonical_name(trial.model)
    entry = pretrained_entry(key, trial.cfg.models)
    if entry:  # where its pretrained weights come from (models.pretrained): a file, or the published ones' name
        result.environment["pretrained"] = describe(key, entry)
    return result


def _interrupted(trial: Trial, tracker: Any, run_id: str | None) -> None:
    """An interrupted trial stays resumable, as after a kill: no result.json (the sweep would count it as failed),
    its last.pt kept for the next run to resume from, its MLflow run closed KILLED (that run reopens it)."""
    log.info("%s interrupted: running the same command again resumes it", trial.name)
    if run_id is not None:
        tracker.end_run(run_id, "KILLED")


def _failed(trial: Trial, result: TrialResult, exc: BaseException) -> None:
    """Record why the trial failed: its error in one line and the traceback in failure.txt. A full disk (ENOSPC
    anywhere in the chain, resomap.atomic.disk_full) is said as such, naming the file, and recorded as DISK_FULL,
    which a plain rerun of the sweep retries; failure.txt is then written when there is room for it."""
    result.status = "FAILED"
    full = disk_full(exc)
    if full is not None:
        result.error, result.failure_kind = str(full), DISK_FULL
        log.info("trial %s failed: %s", trial.name, result.error)  # the sweep's line for the trial says it
    else:
        result.error = f"{type(exc).__name__}: {exc}".splitlines()[0]
        log.error("trial %s failed: %s", trial.name, result.error)
    try:
        trial.summary_dir.mkdir(parents=True, exist_ok=True)
        write_text(trial.summary_dir / "failure.txt", "".join(traceback.format_exception(exc)))
    except OSError as err:
        if disk_full(err) is None:
            raise
        log.debug("%s: failure.txt not written: %s", trial.name, err)


def _save_and_publish(
    trial: Trial, result: TrialResult, tracker: Any, parent_run_id: str | None, prepared: Any
) -> None:
    """summary.txt, then the trial's MLflow run (its live run: result.run_id), then result.json, written once and
    last: it says whether publish logged everything (`tracked`, else `resomap sync` logs it later) and the run id.
    A full disk fails the trial for it (DISK_FULL): with no new result on disk the next run of the sweep runs it
    again."""
    result.tracked = False  # until publish has logged everything
    _saved(trial, result, TrialResult.save_summary)
    _publish(trial, result, tracker, parent_run_id, prepared)
    if not _saved(trial, result, TrialResult.save_result):
        result.tracked = False


def _saved(trial: Trial, result: TrialResult, save: Any) -> bool:
    """`save(result, folder)` done; False when the disk is full: the trial then fails for it."""
    try:
        save(result, trial.summary_dir)
        return True
    except OSError as exc:
        full = disk_full(exc)
        if full is None:
            raise
        if result.status != "FAILED" or result.failure_kind != DISK_FULL:
            result.status, result.error, result.failure_kind = "FAILED", str(full), DISK_FULL
        log.info("trial %s: result not saved: %s", trial.name, full)
        return False


def _publish(trial: Trial, result: TrialResult, tracker: Any, parent_run_id: str | None, prepared: Any) -> None:
    """The trial's MLflow run made to hold its result; the result then says `tracked` and the run id."""
    from resomap.models import unwrap
    from resomap.tracking.publish import publish

    model = example = None
    if prepared is not None and result.status == "FINISHED" and trial.cfg.mlflow.log_model:
        model, bundle = unwrap(prepared.model), prepared.bundle
        example = bundle.normalize(bundle.images("test")[:2]).cpu().numpy()
    run_id = publish(result, trial, tracker, parent_run_id, model=model, example=example)
    if run_id is not None:
        result.run_id, result.tracked = run_id, True


def _open_live_run(tracker: Any, trial: Trial, result: TrialResult, parent_run_id: str | None):
    """(tracker, run id) for live per-epoch logging; a NullTracker when the store is unreachable (the trial then
    trains untracked and publish or `resomap sync` logs it later)."""
    from resomap.tracking import NullTracker
    from resomap.tracking.mlflow_store import warn_level
    from resomap.tracking.publish import open_run

    if not tracker.enabled:
        return tracker, None
    try:
        return tracker, open_run(tracker, trial, dataclasses.asdict(result), parent_run_id, reopen=True)
    except Exception as exc:
        tracker.failures.append(f"open run: {type(exc).__name__}: {exc}")
        level = warn_level(tracker)
        log.log(level, "MLflow unreachable (%s); %s trains untracked and is logged by `resomap sync`", exc, trial.name)
        return NullTracker(), None


def _resume_point(folder: Path, key: str, fresh: bool) -> Path | None:
    """last.pt of an interrupted (or finished) attempt at this exact trial, when every checkpoint in the folder is
    whole; checkpoints of another config, or with a damaged one among them (a resume could not restore it, nor
    test the best one), are discarded and the trial trains from the start (the thread count its first attempt
    measured is kept unless `fresh`: resomap.training.threads.STORE). A last.pt that does not load (damaged, or
    refused by the safe loader: pickled code) is set aside as last.pt.refused, in one warning (`_set_aside`)."""
    from resomap.filecheck import check_zip
    from resomap.training.threads import STORE as THREADS_STORE

    last = folder / "last.pt"
    if folder.exists() and not fresh and last.exists() and not _set_aside(last):
        old_key = _checkpoint_key(folder)
        damaged = [(p, why) for p in sorted(folder.glob("*.pt")) if (why := check_zip(p))]
        if old_key == key and not damaged:
            return last
        if damaged:  # a damaged best checkpoint is named by sweep.plan.trial_state already
            log.info("%s: %s; the trial trains again from the start", *damaged[0])
        else:
            log.warning("%s holds checkpoints of another config (%s, now %s); starting afresh", folder, old_key, key)
    for path in sorted(folder.iterdir()) if folder.exists() else []:
        if path.name == THREADS_STORE and not fresh:  # the trial's measured thread count (it carries its key)
            continue
        if path.suffix == REFUSED:  # set aside for whoever wants to look at it
            continue
        if not path.is_dir() or path.is_symlink():
            path.unlink()
        elif not _SEED_FOLDER.fullmatch(path.name):  # another seed's folder inside an old-layout folder is kept
            shutil.rmtree(path)
    return None


REFUSED = ".refused"  # the suffix of a last.pt set aside


def _set_aside(last: Path) -> bool:
    """Whether last.pt was set aside: a file the checkpoint loader refuses (garbage, cut short, pickled code that
    the safe loader would not run: resomap.training.load_checkpoint) is renamed last.pt.refused beside it, said in
    one warning, so that the trial trains from the start instead of failing on it."""
    from resomap.errors import CheckpointError
    from resomap.training import load_checkpoint

    try:
        load_checkpoint(last)
        return False
    except CheckpointError as exc:
        why = str(exc).split("; ")[0]  # the path and the cause; not its advice (delete, re-save), done here
    aside = last.with_name(last.name + REFUSED)
    last.replace(aside)
    log.warning("%s; set aside as %s, the trial trains from the start", why, aside.name)
    return True


@dataclasses.dataclass
class _Prepared:
    cfg: Config
    bundle: Any
    model: Any
    spec: Any


def prepare_data(trial: Trial, cfg: Config, device: Any = "cpu") -> Any:
    """The trial's data bundle after every check of its input that needs the data (the model's task, unreadable
    images, the split, enough test images for the probe set): a ResoMapError before anything is written, the
    resolution cache included (`resomap train` runs it before printing anything)."""
    from resomap import data as data_pkg
    from resomap.data.verify import enough_probes

    _check_model_task(trial, cfg)
    probes_fit = enough_probes(cfg)
    bundle = data_pkg.build(cfg, trial.resolution, trial.seed, device, check=probes_fit)
    probes_fit(bundle.splits)  # again after segmentation left out images with unusable masks
    return bundle


def check_data(trial: Trial, cfg: Config, *, record: bool = True) -> Any:
    """prepare_data's checks (the same functions, the same one-line errors) without building the data: what
    `resomap sweep` (and its dry run) runs at load, before anything is created. The images are read once, only for
    a dataset of the user's files, and a pass is recorded with the resolution cache (`record`) so that unchanged
    data is not read again (resomap.data.verify.check). Returns the image files' bit depth (None: other data)."""
    from resomap.data.verify import check_files

    _check_model_task(trial, cfg)
    return check_files(cfg, trial.seed, record=record)


def _check_model_task(trial: Trial, cfg: Config) -> None:
    from resomap import models as models_pkg

    found = models_pkg.model_task(models_pkg.canonical_name(trial.model))
    if found != cfg.experiment.task:  # `train --model` and include pairs bypass sweep.models' config check
        raise ConfigError(
            f"{trial.model} is a {found} model but experiment.task is {cfg.experiment.task}; "
            f"pick a {cfg.experiment.task} model (resomap models) or set experiment.task={found}"
        )


def prepare_trial(trial: Trial, cfg: Config, device: Any) -> _Prepared:
    """Data and model for the trial (also what the sweep's cost probe times, resomap.sweep.eta); bad input (data,
    model, weights) surfaces here, before anything is written."""
    from resomap import models as models_pkg
    from resomap.runtime import seed_everything

    bundle = prepare_data(trial, cfg, device)
    seed_everything(trial.seed)  # weight init must not depend on what ran before in this process
    model, spec = models_pkg.build_model(trial.model, bundle.num_classes, bundle.channels, cfg.models)
    models_pkg.check_input_size(model, trial.model, trial.resolution, bundle.channels)
    if cfg.system.grad_checkpointing and not models_pkg.set_grad_checkpointing(model, True):
        raise ConfigError(f"system.grad_checkpointing is on but {trial.model} has no stages to checkpoint; turn it off")
    return _Prepared(cfg, bundle, model, spec)


def _follow_rank0(trial: Trial, device: Any, family: str, result: TrialResult) -> TrialResult:
    """A rank > 0 under torchrun: the same data, model and fit (its shard of every epoch), resumed from what rank 0
    chose; no files, no MLflow, no test evaluation (rank 0 does those)."""
    from resomap.training import Trainer, distributed

    prepared = prepare_trial(trial, trial.cfg, device)
    resume = distributed.share_from_rank0(None)
    callbacks = _callbacks(trial.cfg, trial.checkpoint_dir(family), {}, None, None)
    trainer = Trainer(trial.cfg, device, callbacks=callbacks, run_name=trial.name, spec=prepared.spec)
    fit = trainer.fit(prepared.model, prepared.bundle, resume_from=resume)
    result.status, result.epochs_run, result.best_val = "FINISHED", len(fit.history), fit.best_score
    return result


def _fit_with_oom_retry(trial: Trial, prepared: _Prepared, device: Any, live: tuple, result: TrialResult, fresh):
    """On CUDA out-of-memory, retry once with half the batch and twice the accumulation (same effective batch)."""
    import torch

    from resomap.config import with_overrides
    from resomap.training import distributed

    try:
        _train_and_evaluate(trial, prepared, device, live, result, fresh)
    except torch.cuda.OutOfMemoryError:
        tc = prepared.cfg.training
        if tc.batch_size < 2 or distributed.is_distributed():  # DDP ranks must keep the same batches
            raise
        half = {"training.batch_size": tc.batch_size // 2, "training.grad_accum_steps": tc.grad_accum_steps * 2}
        note = f"CUDA out of memory at batch {tc.batch_size}; retried with batch {half['training.batch_size']}"
        note += f" x {half['training.grad_accum_steps']} accumulation steps"
        log.warning("%s: %s", trial.name, note)
        result.notes.append(note)  # publish tags the run with it (resomap.oom_retry)
        prepared.model.to("cpu")
        torch.cuda.empty_cache()
        retry = prepare_trial(trial, with_overrides(prepared.cfg, half, "out-of-memory retry"), device)
        prepared.model, prepared.bundle = retry.model, retry.bundle  # what publish logs
        _train_and_evaluate(trial, retry, device, live, result, fresh=True)


def _train_and_evaluate(trial: Trial, prepared: _Prepared, device: Any, live: tuple, result: TrialResult, fresh):
    """Fit (checkpoints, early stopping, live MLflow epochs), then the stages on the best checkpoint."""
    from resomap.reports.probe_images import trial_probe_images
    from resomap.stages import evaluate_trained
    from resomap.training import Trainer, distributed, load_checkpoint
    from resomap.training.threads import STORE as THREADS_STORE
    from resomap.training.threads import environment_fields

    cfg, bundle, model = prepared.cfg, prepared.bundle, prepared.model
    folder = trial.checkpoint_dir(prepared.spec.family)
    resume = distributed.share_from_rank0(_resume_point(folder, trial.key, fresh))  # DDP: every rank resumes alike
    folder.mkdir(parents=True, exist_ok=True)
    cfg, found_lr = _learning_rate(trial, prepared, device)
    save_trial_config(cfg, folder)
    save_trial_config(cfg, trial.summary_dir)
    meta = {
        "model": trial.model,
        "family": prepared.spec.family,
        "resolution": trial.resolution,
        "num_classes": bundle.num_classes,
        "in_channels": bundle.channels,
        "class_names": list(bundle.class_names),
        "seed": trial.seed,
        "config_hash": trial.key,
    }
    callbacks = _callbacks(cfg, folder, meta, *live)
    store = (folder / THREADS_STORE, trial.key)  # the count the first attempt measured, reused by every other
    trainer = Trainer(cfg, device, callbacks=callbacks, run_name=trial.name, spec=prepared.spec)
    trainer.threads_store = store
    start = time.perf_counter()
    fit = trainer.fit(model, bundle, resume_from=resume)
    if found_lr is not None and fit.convergence is not None:
        fit.convergence = dataclasses.replace(fit.convergence, lr_found=found_lr)
    result.train_time_s = time.perf_counter() - start
    result.environment.update(environment_fields(trainer.meta.get("threads")))  # the count trained with, and why
    result.epochs_run = len(fit.history)
    result.history = [{k: float(v) for k, v in h.items() if isinstance(v, int | float)} for h in fit.history]
    result.best_val = fit.best_score
    result.convergence = fit.convergence.to_dict() if fit.convergence is not None else {}
    if result.convergence.get("undertrained"):
        log.warning("%s looks undertrained: %s", trial.name, result.convergence["undertrained_reason"])
    result.best_checkpoint = str(fit.best_path)
    if fit.resumed_from_epoch is not None:
        result.notes.append(f"resumed from last.pt after epoch {fit.resumed_from_epoch}")
    payload = load_checkpoint(fit.best_path, expect={k: meta[k] for k in ("model", "resolution", "num_classes")})
    model.load_state_dict(payload["model"])
    found = evaluate_trained(
        model,
        prepared.spec,
        bundle,
        cfg,
        title=trial.name,
        seed=trial.seed,
        device=device,
        out_dir=trial.summary_dir,
        trainer=trainer,
        siblings=_sibling_keys(trial) if prepared.spec.deterministic else None,
    )
    trial_probe_images(found, trial.summary_dir)  # what tracking logs as the run's probe images
    result.apply(found)


def _sibling_keys(trial: Trial) -> dict[int, str]:
    """seed -> trial key of this sweep's other seeds at the trial's model and resolution (a deterministic model's
    maps are taken from such a finished trial of the same fit: stages.reused_explanation)."""
    from resomap.sweep.identity import trial_key

    seeds = [int(s) for s in trial.cfg.sweep.seeds if int(s) != trial.seed]
    return {s: trial_key(trial.cfg, trial.model, trial.resolution, s) for s in seeds}


def _learning_rate(trial: Trial, prepared: _Prepared, device: Any) -> tuple[Config, float | None]:
    """The trial's config with training.optimizer.lr found by the LR range test (training.lr_find), and that rate.
    The test runs once per model x resolution: its record, lr_find.json beside the seeds' checkpoint folders, is
    reused by resumed trials and later seeds of the same config (its key is the trial key of seed 0)."""
    from resomap.training import Trainer
    from resomap.training.checkpoint import write_json_atomic
    from resomap.training.lr_find import lr_range_test

    cfg = prepared.cfg
    # a closed-form fit has no learning rate; a head on cached features is not found one here
    if not cfg.training.lr_find.enabled or prepared.spec.fit != "gradient":
        return cfg, None
    record_path = trial.lr_find_file(prepared.spec.family)  # beside the seeds' folders
    key = trial_key(cfg, trial.model, trial.resolution, 0)
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        record = {}
    if record.get("key") != key or not isinstance(record.get("lr"), int | float):
        record = {
            "key": key,
            **lr_range_test(Trainer(cfg, device), prepared.model, prepared.bundle, cfg.training.lr_find),
        }
        write_json_atomic(record_path, record)
    lr = float(record["lr"])
    log.info("%s: peak learning rate %.3g from the LR range test (%s)", trial.name, lr, record_path)
    return with_overrides(cfg, {"training.optimizer.lr": lr}, "training.lr_find"), lr


def _callbacks(cfg: Config, folder: Path, meta: dict, tracker: Any, run_id: str | None) -> list[Any]:
    """training.default_callbacks (checkpoints, early stopping), plus live MLflow logging when a run is open."""
    from resomap import training
    from resomap.tracking import MlflowCallback

    callbacks: list[Any] = training.default_callbacks(cfg, folder, meta)
    if run_id is not None:
        callbacks.append(MlflowCallback(tracker, run_id))
    return callbacks

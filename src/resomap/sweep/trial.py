"""One trial: a model at one resolution and seed (Trial), what it found (TrialResult, from resomap.trial_result),
and run_trial: data -> model -> Trainer -> the stages of resomap.stages -> summary files -> publish to MLflow."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import re
import shutil
import time
import traceback
from pathlib import Path
from typing import Any

from resomap.atomic import disk_full, write_text
from resomap.config import Config, save_resolved, to_dict, with_overrides
from resomap.errors import ConfigError, ResoMapError
from resomap.layout import Layout
from resomap.tasks import other_task_sections
from resomap.trial_result import DISK_FULL, TrialResult  # below sweep and analysis; kept importable from here

log = logging.getLogger(__name__)

# Settings that change how a trial is run or logged but not what it computes: left out of its key.
_KEY_EXCLUDE = ("sweep", "mlflow", "stats", "training.progress", "system.num_workers", "system.persistent_workers")
_SEED_FOLDER = re.compile(r"seed\d+")


@dataclasses.dataclass(frozen=True)
class Trial:
    """A model at one resolution and seed. Its folders are its experiment's (resomap.layout:
    model_summaries/<experiment>/<model>/<res>/seed<S>/, checkpoints/<experiment>/<family>/<model>/<res>/seed<S>/)
    and always end in `seed<S>`, whatever the number of seeds, so adding seeds to a finished sweep moves nothing and
    experiments sharing an output folder never meet. Its folders of the seed layout without an experiment level are
    moved into these by `resomap.sweep.migrate` (the sweep, under its lock). A trial of the older single-seed layout
    (the folder `<res>/` itself holding its result.json or last.pt) is found and used in place: `legacy` says which
    layout (None: look on disk; run_trial pins it once, so a run never switches folders half-way)."""

    model: str
    resolution: int
    seed: int
    cfg: Config
    legacy: bool | None = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "cfg", pin_precision(self.cfg))  # its key and records name the precision it runs

    @functools.cached_property
    def key(self) -> str:
        """trial_key of this trial, computed on first use (the fields are frozen, so it never changes)."""
        return trial_key(self.cfg, self.model, self.resolution, self.seed)

    @functools.cached_property
    def family(self) -> str:
        """The model's family (its checkpoint folders are grouped by it)."""
        from resomap.models import get_spec

        return get_spec(self.model).family

    @property
    def layout(self) -> Layout:
        return Layout.of(self.cfg)

    @property
    def name(self) -> str:
        """`<model>@<resolution>`, plus `/seed<S>` when the sweep has several seeds."""
        base = f"{self.model}@{self.resolution}"
        return base if len(self.cfg.sweep.seeds) <= 1 else f"{base}/seed{self.seed}"

    def checkpoint_dir(self, family: str | None = None) -> Path:
        family = family or self.family
        if self._in_legacy_folder():
            return self.layout.single_seed_checkpoints(family, self.model, self.resolution)
        return self.layout.trial_checkpoints(family, self.model, self.resolution, self.seed)

    @property
    def summary_dir(self) -> Path:
        if self._in_legacy_folder():
            return self.layout.single_seed_summary(self.model, self.resolution)
        return self.layout.trial_summary(self.model, self.resolution, self.seed)

    def lr_find_file(self, family: str | None = None) -> Path:
        """lr_find.json, shared by the seeds of this model x resolution: beside their folders (in a single-seed
        folder, inside it)."""
        folder = self.checkpoint_dir(family)
        return (folder if self._in_legacy_folder() else folder.parent) / "lr_find.json"

    def seed_layout_dirs(self) -> tuple[Path, Path]:
        """(summary, checkpoint folder) this trial had in the seed layout without an experiment level."""
        lay = self.layout
        return (
            lay.seed_layout_summary(self.model, self.resolution, self.seed),
            lay.seed_layout_checkpoints(self.family, self.model, self.resolution, self.seed),
        )

    def pinned(self) -> Trial:
        """This trial with its layout decided now (see `legacy`)."""
        pinned = dataclasses.replace(self, legacy=self._in_legacy_folder())
        pinned.__dict__["key"] = self.key  # the same trial (legacy is no part of the key): its key carries over
        return pinned

    def _in_legacy_folder(self) -> bool:
        """The trial lives in a folder of the single-seed layout: it has no folder of its experiment's layout nor
        one of the seed layout to be moved there, and `<res>/` holds its result.json (this key) or its last.pt /
        last.json (this config hash)."""
        if self.legacy is not None:
            return self.legacy
        lay = self.layout
        if lay.trial_summary(self.model, self.resolution, self.seed).exists():
            return False
        if lay.trial_checkpoints(self.family, self.model, self.resolution, self.seed).exists():
            return False
        old_summary, old_checkpoints = self.seed_layout_dirs()
        if result_key(old_summary) == self.key or checkpoint_key(old_checkpoints) == self.key:
            return False  # moved into the experiment's folders by the sweep (resomap.sweep.migrate)
        summary = lay.single_seed_summary(self.model, self.resolution)
        if result_key(summary) == self.key:
            return True
        return checkpoint_key(lay.single_seed_checkpoints(self.family, self.model, self.resolution)) == self.key


def result_key(folder: Path) -> str | None:
    """The trial key of the result.json in `folder` (None: none, unreadable or torn)."""
    try:
        key = json.loads((folder / "result.json").read_text(encoding="utf-8")).get("key")
    except (OSError, ValueError, AttributeError):
        return None
    return key if isinstance(key, str) else None


def checkpoint_key(folder: Path) -> str | None:
    """The config hash of the last.pt in `folder` (None: no last.pt / last.json there)."""
    if (folder / "last.json").is_file() or (folder / "last.pt").is_file():
        return _checkpoint_key(folder)
    return None


def trial_key(cfg: Config, model: str, resolution: int, seed: int) -> str:
    """A stable hash of everything that decides what the trial computes."""
    tree = _key_tree(cfg, model)
    tree["trial"] = {"model": model.lower(), "resolution": resolution, "seed": seed}
    revision = model_revision(model)
    if revision > 1:  # the model's architecture changed: results of its earlier revision belong to another trial
        tree["trial"]["revision"] = revision
    return _hash(tree)


def model_revision(model: str) -> int:
    """The registered revision of a model's architecture (register_model(revision=...); 1 for timm models, plugins
    and the first revision of every built-in), read from the catalog without importing torch when it can."""
    from resomap.catalog import registry
    from resomap.errors import UnknownNameError

    reg = registry("model")
    if reg is None:  # no catalog: the live registry
        from resomap.models.registry import MODELS as reg
    try:
        return int(reg.meta(model).get("revision", 1))
    except (UnknownNameError, KeyError):  # timm:<name>, or a name the trial itself rejects
        return 1


def sweep_identity(cfg: Config) -> str:
    """A stable hash of what a sweep computes apart from its grid (sweep.* is in no key): adding models,
    resolutions or seeds keeps it, so the sweep keeps its MLflow parent run."""
    return _hash({**_key_tree(cfg), "sweep": "identity"})


def _key_tree(cfg: Config, model: str | None = None) -> dict[str, Any]:
    """The config as a tree without the settings that do not change what a trial computes: the `models.*` sections
    that named models read (ModelsConfig.MODEL_SECTIONS: models.hog) only in those models' trees (`model`), so
    adding such a section kept every other key."""
    tree = to_dict(cfg)
    for section, readers in type(cfg.models).MODEL_SECTIONS.items():
        if model is None or model.lower() not in readers:
            tree["models"].pop(section, None)
    for dotted in _KEY_EXCLUDE:
        node = tree
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node[part]
        node.pop(leaf, None)
    task = tree["experiment"].pop("task", "classification")
    for section in other_task_sections(task):  # another task's settings do not change what this trial computes
        tree.pop(section, None)
    if task != "classification":  # classification keys stay what they were before the task axis
        tree["experiment"]["task"] = task
    return tree


def _hash(tree: dict[str, Any]) -> str:
    text = json.dumps(tree, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def precision_choice(cfg: Config) -> tuple[str, str]:
    """(precision, why) that `system.precision` means on the device this config resolves to (auto: bf16 where
    the hardware computes it natively, else fp32; runtime.resolve_precision)."""
    from resomap.runtime import resolve_device, resolve_precision

    if cfg.system.precision != "auto":
        return cfg.system.precision, "set in the config"
    return resolve_precision("auto", resolve_device(cfg.system))


def pin_precision(cfg: Config) -> Config:
    """The config with `system.precision: auto` replaced by what it resolves to here, and `system.channels_last:
    auto` by what goes with that precision (runtime.resolve_channels_last), once per sweep: every trial then runs,
    records and is keyed by the same settings (a trial's key hashes its config, so trials of one precision are
    never taken for those of another, and auto resolving to fp32 keeps the keys of the fp32 runs before auto)."""
    from resomap.runtime import resolve_channels_last

    sysc = cfg.system
    if sysc.precision != "auto" and isinstance(sysc.channels_last, bool):
        return cfg
    precision, _ = precision_choice(cfg)
    pinned = {
        "system.precision": precision,
        "system.channels_last": resolve_channels_last(sysc.channels_last, precision),
    }
    return with_overrides(cfg, pinned, "system auto settings")


def save_trial_config(cfg: Config, folder: Path) -> Path:
    """config.yaml of the config a trial runs with (after an out-of-memory retry: the halved batch that ran)."""
    return save_resolved(cfg, folder / "config.yaml")


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
    after the result is written and published."""
    from resomap.models import get_spec
    from resomap.runtime import apply_system, describe_device, machine_record, resolve_device
    from resomap.tracking import NullTracker
    from resomap.training import distributed

    tracker = tracker if tracker is not None else NullTracker()
    trial = trial.pinned()  # its folders (seed layout, or the single-seed folder it was started in) stay put
    device = resolve_device(trial.cfg.system)
    apply_system(trial.cfg.system, device)
    log.info("trial %s on %s", trial.name, describe_device(device))
    family = get_spec(trial.model).family
    result = TrialResult(trial.key, trial.name, trial.model, family, trial.resolution, trial.seed, "RUNNING")
    result.task = trial.cfg.experiment.task
    result.environment["device"] = describe_device(device)
    result.environment.update(machine_record(device))  # CPU model and capability, bf16 flags, GPU: bf16 differs
    result.environment["precision"] = trial.cfg.system.precision  # resolved (pin_precision): never auto
    if not distributed.is_rank0():
        return _follow_rank0(trial, device, family, result)
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
    failure = trial.summary_dir / "failure.txt"
    try:
        if early is not None:
            raise early
        _fit_with_oom_retry(trial, prepared, device, live, result, fresh)
        result.status = "FINISHED"
        failure.unlink(missing_ok=True)  # left by an earlier failed attempt
    except Exception as exc:
        _failed(trial, result, exc)
        if reraise and isinstance(exc, ResoMapError):
            raise
    finally:
        result.finished_at = time.time()
        _save_and_publish(trial, result, tracker, parent_run_id, prepared)
    return result


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


def data_record(bundle: Any) -> dict[str, Any]:
    """What a trial trained on, for result.json and MLflow's dataset inputs: the dataset and its options, a digest
    of the classes and of the raw-image indices of each split (same digest = same images in the same splits, at
    any resolution), and the split sizes."""
    import numpy as np

    h = hashlib.sha256(json.dumps([bundle.dataset, bundle.variant, list(bundle.class_names)]).encode())
    for split in sorted(bundle.splits):
        h.update(split.encode())
        h.update(np.asarray(bundle.splits[split], dtype=np.int64).tobytes())
    return {
        "name": bundle.dataset,
        "options": bundle.variant,
        "digest": h.hexdigest()[:12],
        "splits": {split: len(bundle.splits[split]) for split in sorted(bundle.splits)},
        "classes": list(bundle.class_names),
        "channels": int(bundle.channels),
        "data_seed": int(bundle.data_seed),
        "augmentation": augmentation_record(bundle),
    }


def recipe_record(cfg: Config) -> dict[str, str]:
    """How the trial was trained, in words, for result.json and the summary's "Training recipe" line: the class
    imbalance treatment, the learning rate, the weights evaluated, the stopping rule and test-time augmentation."""
    tc = cfg.training
    imbalance = {"balanced": "the loss weighted by inverse class frequency", "none": "none"}[tc.class_weights]
    if tc.sample_weights == "confidence":
        imbalance += ", each image also weighted by its label's confidence"
    es = tc.early_stopping
    stop = f"at most {tc.epochs} epochs"
    if es.enabled:
        smooth = f" (smoothed, weight {es.smoothing:g})" if es.smoothing < 1 else ""
        stop += f"; early stopping when {es.monitor}{smooth} did not improve for {es.patience} epochs"
        stop += f", not before epoch {es.min_epochs}" if es.min_epochs else ""
    if tc.max_minutes is not None:
        stop += f"; at most {tc.max_minutes:g} minutes"
    return {
        "class_imbalance": imbalance,
        "learning_rate": "the LR range test's (training.lr_find)" if tc.lr_find.enabled else f"{tc.optimizer.lr:g}",
        "schedule": tc.scheduler.name,
        "weights_evaluated": f"EMA (decay {tc.ema.decay:g})" if tc.ema.enabled else "the trained weights",
        "stopping": stop,
        "tta": ", ".join(tc.tta) if tc.tta else "none",
    }


def augmentation_record(bundle: Any) -> dict[str, Any]:
    """The augmentation recipe the trial trained with (BatchAugment.describe), or that there was none."""
    augment = getattr(getattr(bundle, "train", None), "augment", None)
    return augment.describe() if augment is not None else {"enabled": False, "recipe": "no augmentation"}


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
    test the best one), are discarded and the trial trains from the start."""
    from resomap.filecheck import check_zip

    last = folder / "last.pt"
    if folder.exists() and not fresh and last.exists():
        old_key = _checkpoint_key(folder)
        damaged = [(p, why) for p in sorted(folder.glob("*.pt")) if (why := check_zip(p))]
        if old_key == key and not damaged:
            return last
        if damaged:  # a damaged best checkpoint is named by sweep.plan.trial_state already; a damaged last.pt not
            path, why = next(((p, w) for p, w in damaged if p == last), damaged[0])
            level = logging.WARNING if path == last else logging.INFO
            log.log(level, "%s: %s; the trial trains again from the start", path, why)
        else:
            log.warning("%s holds checkpoints of another config (%s, now %s); starting afresh", folder, old_key, key)
    for path in sorted(folder.iterdir()) if folder.exists() else []:
        if not path.is_dir() or path.is_symlink():
            path.unlink()
        elif not _SEED_FOLDER.fullmatch(path.name):  # another seed's folder inside an old-layout folder is kept
            shutil.rmtree(path)
    return None


def _checkpoint_key(folder: Path) -> str | None:
    """The config hash last.pt was written for: from last.json, or from last.pt itself when a kill came between
    the two writes."""
    from resomap.training import load_checkpoint

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
    model: Any
    spec: Any


def prepare_data(trial: Trial, cfg: Config, device: Any = "cpu") -> Any:
    """The trial's data bundle after every check of its input that needs the data (the model's task, unreadable
    images, the split, enough test images for the probe set): a ResoMapError before anything is written, the
    resolution cache included (`resomap train` runs it before printing anything)."""
    from resomap import data as data_pkg
    from resomap import models as models_pkg

    found = models_pkg.model_task(models_pkg.canonical_name(trial.model))
    if found != cfg.experiment.task:  # `train --model` and include pairs bypass sweep.models' config check
        raise ConfigError(
            f"{trial.model} is a {found} model but experiment.task is {cfg.experiment.task}; "
            f"pick a {cfg.experiment.task} model (resomap models) or set experiment.task={found}"
        )
    ec = cfg.explainability

    def enough_probes(positions: dict) -> None:  # datasets whose size the config load could not know
        n_test = len(positions["test"])
        if ec.enabled and ec.probe_size > n_test:
            raise ConfigError(
                f"explainability.probe_size: expected at most the {n_test} test images of {cfg.data.dataset}, "
                f"got {ec.probe_size}; lower it or add images"
            )

    bundle = data_pkg.build(cfg, trial.resolution, trial.seed, device, check=enough_probes)
    enough_probes(bundle.splits)  # again after segmentation left out images with unusable masks
    return bundle


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
    trainer = Trainer(trial.cfg, device, callbacks=callbacks, run_name=trial.name)
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
    from resomap.stages import evaluate_trained
    from resomap.training import Trainer, distributed, load_checkpoint
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
    trainer = Trainer(cfg, device, callbacks=_callbacks(cfg, folder, meta, *live), run_name=trial.name)
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
    )
    result.apply(found)


def _learning_rate(trial: Trial, prepared: _Prepared, device: Any) -> tuple[Config, float | None]:
    """The trial's config with training.optimizer.lr found by the LR range test (training.lr_find), and that rate.
    The test runs once per model x resolution: its record, lr_find.json beside the seeds' checkpoint folders, is
    reused by resumed trials and later seeds of the same config (its key is the trial key of seed 0)."""
    from resomap.training import Trainer
    from resomap.training.checkpoint import write_json_atomic
    from resomap.training.lr_find import lr_range_test

    cfg = prepared.cfg
    if not cfg.training.lr_find.enabled or getattr(prepared.model, "closed_form", False):
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

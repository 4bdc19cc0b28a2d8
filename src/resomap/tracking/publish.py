"""Log one trial to MLflow from its result and its summary folder: `publish`, used after every trial and by
`resomap sync`.

The trial's run is the result's `run_id`; a result without one finds it by its trial-key tag (else creates it,
under the sweep's parent run when there is one), so no run is ever made twice. Then: params, tags (trial key,
model, family, resolution, seed, CAM layer, failed explainers, failure, undertrained, stop reason, augmentation
recipe), the per-epoch history (step = epoch), test, `test_at_<res>/accuracy`, profile, `convergence/*` and
explanation metrics, the summary folder's files, the best checkpoint (mlflow.log_checkpoint), the model
(mlflow.log_model), and the run is closed with the trial's status. Only what the run does not hold yet is logged
(metric points by key and step, params by key, files by path; result.json and the small text files are always
refreshed), so publishing again changes nothing, and the points MlflowCallback logged live are not repeated.

It knows runs and result files, not sweeps: `trial` is anything with key, name, cfg and summary_dir
(resomap.sweep.Trial), `result` a TrialResult (anything with to_dict()) or its dict. It publishes what the stages
produced and builds nothing: the probe maps come as the explain stage's captioned PNGs (probe_images/), the
parent's as arrays drawn by the sweep, a model not in memory through the caller's `load_model`.

What the sweep's parent run holds is published by `resomap.tracking.sweep_run` (`publish_sweep`: the summary's
tables, figures, report, headline metrics and tags, the per-resolution points and probe images); the parent
itself is found or made, and closed, by `resomap.tracking.parent`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from resomap.config import Config
from resomap.records import PROBE_IMAGES_DIR
from resomap.tracking.live import GRID_C, PENALTY, chosen_fit, grid_points, is_grid_row
from resomap.tracking.mlflow_store import is_number, log_points, warn_level
from resomap.tracking.origin import ORIGIN_TAG, origin, own_runs
from resomap.tracking.views import LATENCY_METRIC, RESOLUTION_METRIC, SCORE_METRIC, TRAIN_TIME_METRIC

log = logging.getLogger(__name__)

TRIAL_KEY_TAG = "resomap.trial_key"
KIND_TAG = "resomap.kind"  # "trial" on a trial's run (the sweep's parent: "sweep")
GROUP_TAG = "model_resolution"  # <model>@<resolution>: MLflow's group-by over seeds
ARTIFACT_FOLDERS = {".png": "figures", ".pdf": "figures", ".npz": "explanations"}
NAMED_FOLDERS = {"profile.txt": "profile", "profile.json": "profile"}
ALWAYS_REFRESHED = ("summary.txt", "failure.txt", "config.yaml")
CONVERGENCE_METRICS = ("best_epoch", "epochs_run", "still_improving", "undertrained")  # convergence/<name>
GRID_CONVERGENCE_METRICS = ("undertrained",)  # a closed-form fit's: its grid and train/penalty_C say the rest
# plain names for the figures a reader sorts the runs table by (the profile's own JSON keeps its field names)
HEADLINE_NAMES = {
    "profile/latency_median_ms": "profile/latency_p50_ms",
    "profile/memory_peak_mb": "profile/peak_memory_mb",
}
# (model, best_checkpoint, ...) of a result -> (model, input example) to log, or None: given by the caller
LoadModel = Callable[[Mapping[str, Any]], "tuple[Any, Any] | None"]


class PublishTrial(Protocol):
    """What publish needs of a planned trial (resomap.sweep.Trial has it)."""

    @property
    def key(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def summary_dir(self) -> Path: ...

    @property
    def cfg(self) -> Config: ...


def trial_params(cfg: Config, model: str, family: str, resolution: int, seed: int) -> dict[str, Any]:
    """The params of a trial's run: what identifies it (model, resolution, seed, task, dataset), the columns a reader
    groups, filters and sorts the runs table by. MLflow's image cards print a run's params above its image, so the
    rest of the resolved config is the run's config.yaml artifact (the trial's summary folder), named by the
    `resomap.config_digest` tag (`config_digest`); `family` is a tag."""
    del family  # a tag (trial_tags), not a param
    return {
        "model": model,
        "resolution": resolution,
        "seed": seed,
        "task": cfg.experiment.task,
        "dataset": cfg.data.dataset,
    }


CONFIG_DIGEST_TAG = "resomap.config_digest"


def config_digest(cfg: Config) -> str:
    """The first 12 hex digits of the SHA-256 of the trial's resolved config as YAML (what its config.yaml holds):
    runs trained with the same settings carry the same digest, whichever folder wrote them (mlflow.origin is left
    out)."""
    import dataclasses
    import hashlib

    from resomap.config import dump_yaml

    cfg = dataclasses.replace(cfg, mlflow=dataclasses.replace(cfg.mlflow, origin=None))  # who wrote it, not what
    return hashlib.sha256(dump_yaml(cfg).encode()).hexdigest()[:12]


def trial_tags(key: str, data: Mapping[str, Any], cfg: Config) -> dict[str, Any]:
    return {
        TRIAL_KEY_TAG: key,
        KIND_TAG: "trial",
        **{k: data[k] for k in ("model", "family", "resolution", "seed")},
        GROUP_TAG: f"{data['model']}@{data['resolution']}",  # group-by without the seed: mean and spread over seeds
        "dataset": cfg.data.dataset,
        CONFIG_DIGEST_TAG: config_digest(cfg),
        ORIGIN_TAG: origin(cfg),
        **{f"resomap.env.{k}": v for k, v in (data.get("environment") or {}).items() if v},  # versions, device
    }


_OTHER_WRITERS: set[str] = set()  # the other origins this process has said it found


def open_run(tracker: Any, trial: PublishTrial, data: Mapping[str, Any], parent_run_id: str | None, reopen: bool):
    """The trial's run id: the one this folder writes, found by its trial-key and origin tags (reopened when
    `reopen`), else a new one with its tags and params (a run of the same trial from another folder or host is never
    written to: one writer per run). Raises when the store cannot be reached."""
    here = origin(trial.cfg)
    found = tracker.find_runs(f"tags.`{TRIAL_KEY_TAG}` = '{trial.key}'")
    existing = own_runs(found, here)
    if existing:
        run_id = existing[0].info.run_id
        if ORIGIN_TAG not in existing[0].data.tags:  # written before runs carried their origin: now this folder's
            tracker.set_tags(run_id, {ORIGIN_TAG: here})
        if reopen:
            tracker.reopen_run(run_id)
            log.info("reusing MLflow run %s for %s", run_id, trial.name)
        return run_id
    other = found[0].data.tags.get(ORIGIN_TAG) if found else None
    if other and other not in _OTHER_WRITERS:  # another folder or host writes those runs: said once per process
        _OTHER_WRITERS.add(other)
        log.warning(
            "MLflow: this experiment holds runs of the same trials written from %s (e.g. %s's, %s); this folder "
            "(%s) logs runs of its own beside them",
            other, trial.name, found[0].info.status, here,
        )  # fmt: skip
    run_id = tracker.start_run(trial.name, tags=trial_tags(trial.key, data, trial.cfg), parent_run_id=parent_run_id)
    params = trial_params(trial.cfg, data["model"], data.get("family", ""), data["resolution"], data["seed"])
    pretrained = (data.get("environment") or {}).get("pretrained")
    if pretrained:  # where its pretrained weights came from (models.pretrained), a column of the runs table
        params["pretrained"] = pretrained
    tracker.log_params(run_id, params)
    return run_id


def publish(
    result: Any,
    trial: PublishTrial,
    tracker: Any,
    parent_run_id: str | None = None,
    *,
    model: Any = None,
    example: Any = None,
    load_model: LoadModel | None = None,
) -> str | None:
    """Make the trial's run hold everything of `result` and its summary folder, closed with its status.

    The run is the result's own `run_id` (the live run the trial trained in, or the one `resomap sync` found);
    only a result without one (trained while the store was unreachable) looks its run up by the trial-key tag.
    Returns the run id when every call succeeded (the result may then say `tracked: true`), else None (the
    reason is the tracker's last failure). `model` (+ `example` input) is logged when mlflow.log_model; without
    it, `load_model(result)` gives them (the caller rebuilds the model from the best checkpoint), else no model
    is logged."""
    if not tracker.enabled:
        return None
    data = dict(result) if isinstance(result, Mapping) else result.to_dict()
    before = len(tracker.failures)
    try:
        run_id = data.get("run_id") or open_run(tracker, trial, data, parent_run_id, reopen=False)
        run = tracker.get_run(run_id)
        _log_content(tracker, run, trial, data, parent_run_id)
        if trial.cfg.mlflow.log_model and data.get("status") == "FINISHED" and not tracker.has_logged_model(run_id):
            _log_model(tracker, run_id, data, model, example, load_model)
        tracker.log_text(run_id, json.dumps({**data, "tracked": True, "run_id": run_id}, indent=2), "result.json")
        status = "FINISHED" if data.get("status") == "FINISHED" else "FAILED"
        if run.info.status != status:
            tracker.end_run(run_id, status)
    except Exception as exc:
        tracker.failures.append(f"publish {trial.name}: {type(exc).__name__}: {exc}")
        log.log(warn_level(tracker), "MLflow: %s not published (%s); `resomap sync` logs it later", trial.name, exc)
        return None
    return run_id if len(tracker.failures) == before else None


def _log_content(tracker: Any, run: Any, trial: PublishTrial, data: dict[str, Any], parent: str | None) -> None:
    run_id = run.info.run_id
    tags = trial_tags(trial.key, data, trial.cfg)
    if parent and run.data.tags.get("mlflow.parentRunId") != parent:
        tags["mlflow.parentRunId"] = parent  # trained while the parent could not be reached
    if data.get("status") != "FINISHED":
        tags["resomap.failure"] = data.get("error") or "unknown error"
        if not (trial.summary_dir / "failure.txt").is_file():
            tracker.log_text(run_id, f"{data.get('error')}\n(logged from result.json)\n", "failure.txt")
    explain = data.get("explain") or {}
    tags.update({f"resomap.explain_failed.{m}": r for m, r in (explain.get("failed") or {}).items()})
    if explain.get("cam_layer"):
        tags["resomap.cam_layer"] = explain["cam_layer"]
    tags.update(convergence_tags(data))
    oom = [n for n in data.get("notes") or [] if n.startswith("CUDA out of memory")]
    if oom:
        tags["resomap.oom_retry"] = oom[-1]
    if any(run.data.tags.get(k) != str(v) for k, v in tags.items()):
        tracker.set_tags(run_id, tags)
    params = trial_params(trial.cfg, data["model"], data.get("family", ""), data["resolution"], data["seed"])
    missing = {k: v for k, v in params.items() if k not in run.data.params}
    if missing:
        tracker.log_params(run_id, missing)
    _log_metrics_once(tracker, run, metric_points(data, trial.summary_dir))
    _log_inputs(tracker, run, trial, data)
    have = _log_files(tracker, run_id, trial, data)
    if GRID_TABLE not in have:
        _log_grid_table(tracker, run_id, data)
    _log_probe_images(tracker, run_id, trial.summary_dir, data, have)


GRID_TABLE = "penalty_grid.csv"  # a closed-form fit's grid: one row per penalty, the chosen one marked


def grid_table(data: Mapping[str, Any]) -> str | None:
    """A closed-form fit's penalty grid as CSV (the grid curve's `penalty/*` values by penalty, strongest first,
    `chosen` 1 at the penalty chosen on validation), or None for any other fit."""
    import csv
    import io

    history = data.get("history") or []
    if not history or not is_grid_row(history[0]):
        return None
    best = (data.get("convergence") or {}).get("best_epoch")
    rows = []
    for i, row in enumerate(history):
        chosen = best is not None and int(row.get("epoch", i)) == int(best)
        rows.append({GRID_C: row[PENALTY], "chosen": int(chosen), **grid_points(row)})
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(dict.fromkeys(k for r in rows for k in r)), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def _log_grid_table(tracker: Any, run_id: str, data: Mapping[str, Any]) -> None:
    table = grid_table(data)
    if table is not None:
        tracker.log_text(run_id, table, GRID_TABLE)


def convergence_tags(data: Mapping[str, Any]) -> dict[str, str]:
    """resomap.undertrained (yes: why / no), resomap.stop_reason and resomap.augmentation (the recipe) of a result."""
    conv, recipe = data.get("convergence") or {}, ((data.get("data") or {}).get("augmentation") or {}).get("recipe")
    tags = {"resomap.augmentation": str(recipe)} if recipe else {}
    if conv:
        tags["resomap.undertrained"] = f"yes: {conv['undertrained_reason']}" if conv.get("undertrained") else "no"
        tags["resomap.stop_reason"] = str(conv.get("stop_detail") or conv.get("stop_reason"))
    return tags


def metric_points(data: Mapping[str, Any], folder: Path) -> dict[str, dict[int, float]]:
    """key -> {step: value}: per-epoch history (step = epoch index; a closed-form fit's penalty grid as
    `penalty/*` with step = the penalty's index, resomap.tracking.live.grid_points), then the step-0 summary
    metrics: a closed-form fit's chosen fit (`chosen_fit`: its train/* and val/*), test, test_at_<res>/accuracy,
    explanation quality, the profile (ModelProfile.as_metrics of profile.json) and the runs table's
    (`table_metrics`)."""
    points: dict[str, dict[int, float]] = {}
    history = data.get("history") or []
    for i, row in enumerate(history):
        step = int(row.get("epoch", i))
        for key, value in (grid_points(row) if is_grid_row(row) else row).items():
            if is_number(value):
                points.setdefault(key, {})[step] = float(value)
    conv = data.get("convergence") or {}
    kept = CONVERGENCE_METRICS
    flat: dict[str, Any] = {}
    if history and is_grid_row(history[0]):  # its epochs are penalties: the chosen fit, not epoch counts
        flat.update(chosen_fit(history, conv.get("best_epoch")))
        kept = GRID_CONVERGENCE_METRICS
    flat.update(data.get("test") or {})
    for res, metrics in (data.get("cross_resolution") or {}).items():
        if "accuracy" in metrics:
            flat[f"test_at_{res}/accuracy"] = metrics["accuracy"]
    flat.update((data.get("explain") or {}).get("metrics") or {})
    flat.update({f"convergence/{k}": float(conv[k]) for k in kept if conv.get(k) is not None})
    if data.get("profile") and (folder / "profile.json").is_file():
        from resomap.profiling import load_profile

        profile = load_profile(folder / "profile.json").as_metrics()
        flat.update({HEADLINE_NAMES.get(k, k): v for k, v in profile.items()})
    flat.update(table_metrics(data))
    for key, value in flat.items():
        if is_number(value):
            points.setdefault(key, {})[0] = float(value)
    return points


def table_metrics(data: Mapping[str, Any]) -> dict[str, float]:
    """The runs table's and the sweep view's metrics of one result (resomap.tracking.views): its resolution (the
    charts' x axis), its headline test score (its task's first score: accuracy, mIoU) to 3 decimals, its median
    latency and its training seconds to 3 significant digits (MLflow's table prints every digit a metric holds)."""
    from resomap.tasks import of_result

    out = {RESOLUTION_METRIC: float(data["resolution"])}
    score = (data.get("test") or {}).get(f"test/{of_result(data).scores[0].name}")
    if is_number(score):
        out[SCORE_METRIC] = round(float(score), 3)
    latency = (data.get("profile") or {}).get("latency_median_ms")
    if is_number(latency):
        out[LATENCY_METRIC] = float(f"{latency:.3g}")
    if is_number(data.get("train_time_s")):
        out[TRAIN_TIME_METRIC] = float(f"{data['train_time_s']:.3g}")
    return out


def _log_metrics_once(tracker: Any, run: Any, points: dict[str, dict[int, float]]) -> None:
    """Log the points the run does not hold yet (a metric it has is checked step by step)."""
    run_id = run.info.run_id
    missing: dict[str, dict[int, float]] = {}
    for key, steps in points.items():
        have: set[int] = set()
        if key in run.data.metrics:
            have = {m.step for m in tracker.metric_history(run_id, key)}
        missing[key] = {step: value for step, value in steps.items() if step not in have}
    log_points(tracker, run_id, missing)


def _log_files(tracker: Any, run_id: str, trial: PublishTrial, data: Mapping[str, Any]) -> set[str]:
    """The summary folder's files (figures under figures/, maps under explanations/, the profile under profile/)
    and the best checkpoint under checkpoints/; a file the run holds already is not sent again. Returns the
    artifact paths the run held before."""
    have = tracker.artifact_paths(run_id)
    for path in sorted(trial.summary_dir.iterdir()) if trial.summary_dir.is_dir() else []:
        if not path.is_file() or path.name == "result.json" or path.name.endswith("tmp"):
            continue
        folder = NAMED_FOLDERS.get(path.name) or ARTIFACT_FOLDERS.get(path.suffix)
        if path.name in ALWAYS_REFRESHED or _join(folder, path.name) not in have:
            tracker.log_artifact(run_id, path, folder)
    best = data.get("best_checkpoint")
    if (
        trial.cfg.mlflow.log_checkpoint
        and best
        and Path(best).is_file()
        and f"checkpoints/{Path(best).name}" not in have
    ):
        tracker.log_artifact(run_id, best, "checkpoints")
    return have


def _log_inputs(tracker: Any, run: Any, trial: PublishTrial, data: Mapping[str, Any]) -> None:
    """The dataset as the run's input (MLflow's dataset API: the runs table's Dataset column): name, digest of its
    images and splits, its options as the source, and the split sizes and classes as its profile. Logged once."""
    record = data.get("data") or {}
    inputs = getattr(run, "inputs", None)
    if not record or (inputs is not None and inputs.dataset_inputs):
        return
    from mlflow.data.code_dataset_source import CodeDatasetSource
    from mlflow.data.meta_dataset import MetaDataset

    class ProfiledDataset(MetaDataset):
        """A dataset known by its description (the images stay where they are) with a profile."""

        def __init__(self, source: Any, name: str, digest: str, profile: dict[str, Any]):
            super().__init__(source, name=name, digest=digest)
            self._profile = profile

        @property
        def profile(self) -> dict[str, Any]:
            return self._profile

        def to_dict(self) -> dict[str, str]:
            return {**super().to_dict(), "profile": json.dumps(self._profile)}

    source = CodeDatasetSource(
        {
            "dataset": trial.cfg.data.dataset,
            "options": record.get("options") or "",
            "data_seed": str(record.get("data_seed", "")),
        }
    )
    sizes = record.get("splits") or {}
    profile = {**{f"{split}_images": n for split, n in sizes.items()}, "classes": record.get("classes") or []}
    dataset = ProfiledDataset(source, record["name"], record["digest"], profile)
    tracker.log_inputs(run.info.run_id, [(dataset, "train")])


def probe_image_key(method: str, position: int) -> str:
    """The MLflow image key of one probe image's map (step = the trial's resolution)."""
    return f"probe/{method}/{position:02d}"


def _log_probe_images(tracker: Any, run_id: str, folder: Path, data: dict[str, Any], have: set[str]) -> None:
    """Each probe image's captioned map (the explain stage's PNGs, probe_images/<method>/<nn>.png) as an MLflow
    image at step = resolution, and the figures the trial's task shows in the report (resomap.tasks
    `report_figures`, e.g. a segmenter's test overlays); images the run holds at this step are not logged again."""

    from resomap.tasks import of_result

    held, resolution = _held_images(have), int(data["resolution"])
    pictures = [(key, folder / name) for name, key, _ in of_result(data).report_figures]
    for path in sorted((folder / PROBE_IMAGES_DIR).glob("*/*.png")):
        if path.stem.isdigit():
            pictures.append((probe_image_key(path.parent.name, int(path.stem)), path))
    tracker.log_images(  # a file that does not read is left out, with a warning (tracking.images)
        run_id, [(key, resolution, path) for key, path in pictures if path.is_file() and (key, resolution) not in held]
    )


def _held_images(have: set[str]) -> set[tuple[str, int]]:
    """(key, step) of the step-indexed images among a run's artifact paths (MLflow stores one as
    images/<key, / written ~>+step+<step>+timestamp+...png, with a +compressed.webp copy)."""
    held = set()
    for path in have:
        name = path.removeprefix("images/")
        if name != path and "+step+" in name:
            key, rest = name.split("+step+", 1)
            held.add((key.replace("~", "/"), int(rest.split("+", 1)[0])))
    return held


def _join(folder: str | None, name: str) -> str:
    return f"{folder}/{name}" if folder else name


def _log_model(
    tracker: Any, run_id: str, data: Mapping[str, Any], model: Any, example: Any, load_model: LoadModel | None
) -> None:
    """The trained model with an input example: the one given, else what `load_model(data)` rebuilds."""
    if model is None:
        found = load_model(data) if load_model is not None else None
        if found is None:
            return
        model, example = found
    tracker.log_model(run_id, model.cpu().eval(), example)


# ---------------------------------------------------------------- the sweep's parent run

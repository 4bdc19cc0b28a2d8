"""Log one trial to MLflow from its result and its summary folder: `publish`, used after every trial and by
`resomap sync`.

The trial's run is found by its trial-key tag (else created, under the sweep's parent run when there is one), so
no run is ever made twice. Then: params, tags (trial key, model, family, resolution, seed, CAM layer, failed
explainers, failure, undertrained, stop reason, augmentation recipe), the per-epoch history (step = epoch), test,
`test_at_<res>/accuracy`, profile, `convergence/*` and explanation metrics, the summary folder's files, the best
checkpoint (mlflow.log_checkpoint), the model
(mlflow.log_model), and the run is closed with the trial's status. Only what the run does not hold yet is logged
(metric points by key and step, params by key, files by path; result.json and the small text files are always
refreshed), so publishing again changes nothing, and the points MlflowCallback logged live are not repeated.

It knows runs and result files, not sweeps: `trial` is anything with key, name, cfg and summary_dir
(resomap.sweep.Trial), `result` a TrialResult (anything with to_dict()) or its dict. It publishes what the stages
produced and builds nothing: the probe maps come as the explain stage's captioned PNGs (probe_images/), the
parent's as arrays drawn by the sweep, a model not in memory through the caller's `load_model`.

What the sweep's parent run holds is published here too (second half): the summary's tables, figures, report,
headline metrics and tags, the per-resolution points and probe images (`publish_sweep`); the parent itself is
found or made, and closed, by `resomap.tracking.parent`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from resomap.config import Config, flatten
from resomap.records import PROBE_IMAGES_DIR
from resomap.tracking.mlflow_store import is_number, log_points, warn_level

log = logging.getLogger(__name__)

TRIAL_KEY_TAG = "resomap.trial_key"
GROUP_TAG = "model_resolution"  # <model>@<resolution>: MLflow's group-by over seeds
NOTE_TAG = "mlflow.note.content"  # a run's description in the MLflow UI (markdown)
NOTE_LIMIT = 8000  # characters of a tag value MLflow stores
ARTIFACT_FOLDERS = {".png": "figures", ".pdf": "figures", ".npz": "explanations"}
NAMED_FOLDERS = {"profile.txt": "profile", "profile.json": "profile"}
ALWAYS_REFRESHED = ("summary.txt", "failure.txt", "config.yaml")
CONVERGENCE_METRICS = ("best_epoch", "epochs_run", "still_improving", "undertrained")  # convergence/<name>
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
    """The params of a trial's run: its resolved config (without sweep.*) plus what identifies the trial under
    plain names (model, family, resolution, seed, dataset: columns of MLflow's runs table)."""
    params: dict[str, Any] = {k: v for k, v in flatten(cfg).items() if not k.startswith("sweep.")}
    params.update(
        {"model": model, "family": family, "resolution": resolution, "seed": seed, "dataset": cfg.data.dataset}
    )
    return params


def trial_tags(key: str, data: Mapping[str, Any], cfg: Config) -> dict[str, Any]:
    return {
        TRIAL_KEY_TAG: key,
        "resomap.kind": "trial",
        **{k: data[k] for k in ("model", "family", "resolution", "seed")},
        GROUP_TAG: f"{data['model']}@{data['resolution']}",  # group-by without the seed: mean and spread over seeds
        "dataset": cfg.data.dataset,
        **{f"resomap.env.{k}": v for k, v in (data.get("environment") or {}).items() if v},  # versions, device
    }


def open_run(tracker: Any, trial: PublishTrial, data: Mapping[str, Any], parent_run_id: str | None, reopen: bool):
    """The trial's run id: the one found by its trial-key tag (reopened when `reopen`), else a new one with its
    tags and params. Raises when the store cannot be reached."""
    existing = tracker.find_runs(f"tags.`{TRIAL_KEY_TAG}` = '{trial.key}'")
    if existing:
        run_id = existing[0].info.run_id
        if reopen:
            tracker.reopen_run(run_id)
            log.info("reusing MLflow run %s for %s", run_id, trial.name)
        return run_id
    run_id = tracker.start_run(trial.name, tags=trial_tags(trial.key, data, trial.cfg), parent_run_id=parent_run_id)
    params = trial_params(trial.cfg, data["model"], data.get("family", ""), data["resolution"], data["seed"])
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
    _log_probe_images(tracker, run_id, trial.summary_dir, data, have)


def convergence_tags(data: Mapping[str, Any]) -> dict[str, str]:
    """resomap.undertrained (yes: why / no), resomap.stop_reason and resomap.augmentation (the recipe) of a result."""
    conv, recipe = data.get("convergence") or {}, ((data.get("data") or {}).get("augmentation") or {}).get("recipe")
    tags = {"resomap.augmentation": str(recipe)} if recipe else {}
    if conv:
        tags["resomap.undertrained"] = f"yes: {conv['undertrained_reason']}" if conv.get("undertrained") else "no"
        tags["resomap.stop_reason"] = str(conv.get("stop_detail") or conv.get("stop_reason"))
    return tags


def metric_points(data: Mapping[str, Any], folder: Path) -> dict[str, dict[int, float]]:
    """key -> {step: value}: per-epoch history (step = epoch index), then the step-0 summary metrics: test,
    test_at_<res>/accuracy, explanation quality and the profile (ModelProfile.as_metrics of profile.json)."""
    points: dict[str, dict[int, float]] = {}
    for i, row in enumerate(data.get("history") or []):
        step = int(row.get("epoch", i))
        for key, value in row.items():
            if is_number(value):
                points.setdefault(key, {})[step] = float(value)
    flat = dict(data.get("test") or {})
    for res, metrics in (data.get("cross_resolution") or {}).items():
        if "accuracy" in metrics:
            flat[f"test_at_{res}/accuracy"] = metrics["accuracy"]
    flat.update((data.get("explain") or {}).get("metrics") or {})
    conv = data.get("convergence") or {}
    flat.update({f"convergence/{k}": float(conv[k]) for k in CONVERGENCE_METRICS if conv.get(k) is not None})
    if data.get("profile") and (folder / "profile.json").is_file():
        from resomap.profiling import load_profile

        profile = load_profile(folder / "profile.json").as_metrics()
        flat.update({HEADLINE_NAMES.get(k, k): v for k, v in profile.items()})
    for key, value in flat.items():
        if is_number(value):
            points.setdefault(key, {})[0] = float(value)
    return points


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
    from PIL import Image

    from resomap.tasks import of_result

    held, resolution = _held_images(have), int(data["resolution"])
    pictures = [(key, folder / name) for name, key, _ in of_result(data).report_figures]
    for path in sorted((folder / PROBE_IMAGES_DIR).glob("*/*.png")):
        if path.stem.isdigit():
            pictures.append((probe_image_key(path.parent.name, int(path.stem)), path))
    for key, path in pictures:
        if path.is_file() and (key, resolution) not in held:
            try:
                with Image.open(path) as image:
                    picture = image.convert("RGB")
            except OSError as exc:  # unreadable file: the npz and figures still hold the maps
                log.warning("%s not logged: %s", path, exc)
                continue
            tracker.log_image(run_id, picture, key=key, step=resolution)


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


BY_RESOLUTION = "by_resolution/"  # the parent's metrics drawn against resolution (step = resolution)


def resolution_points(rows: list[Any], matrices: Mapping[str, Mapping[str, Any]]) -> dict:
    """key -> {resolution: value} for the parent run, so that MLflow's chart view draws each model's results
    against resolution (step = resolution): the summary rows' columns marked for it (`rows`: SummaryRows, read
    through their `by_resolution()`: accuracy with its interval, macro-F1, latency, memory, GMACs, training time,
    explanation seconds per method), and per method the mean Spearman agreement of the maps at a resolution with
    those at the sweep's other resolutions (main grid of the comparison)."""
    points: dict[str, dict[int, float]] = {}

    def add(model: str, name: str, resolution: Any, value: Any) -> None:
        if is_number(value) and value == value:  # not NaN
            points.setdefault(f"{BY_RESOLUTION}{mlflow_name(model)}/{name}", {})[int(resolution)] = float(value)

    for row in rows:
        for name, value in row.by_resolution().items():
            add(row.model, name, row.resolution, value)
    for name, entry in matrices.items():
        model, method = name.rsplit("/", 1)
        matrix, labels = entry.get("spearman"), entry.get("resolutions") or []
        for i, resolution in enumerate(labels if matrix else []):
            others = [v for j, v in enumerate(matrix[i]) if j != i and v is not None]
            if others:
                add(model, f"agreement_{method}", resolution, sum(others) / len(others))
    return points


def log_metric_points(
    tracker: Any, run_id: str, points: dict[str, dict[int, float]], namespace: str | None = None
) -> None:
    """Make the run's points of each key those of ``points`` (key -> {step: value}): missing points are logged,
    and a key whose logged points differ (a value changed, a step gone, a step logged twice) is rewritten
    (Tracker.replace_metrics), so that the run follows its summary with one point per (key, step). With
    ``namespace``, the run's keys under it that ``points`` lacks are removed. A store that cannot rewrite gets the
    missing points only, and one warning."""
    try:
        run = tracker.get_run(run_id)
    except Exception as exc:  # the calls below are soft; without the run, nothing is known to be there
        log.log(warn_level(tracker), "MLflow: run %s not read (%s)", run_id, exc)
        return
    held = set(run.data.metrics)
    stale: dict[str, dict[int, float]] = {}
    missing: dict[str, dict[int, float]] = {}
    for key, steps in points.items():
        history = [(m.step, m.value) for m in tracker.metric_history(run_id, key)] if key in held else []
        if sorted(history) == sorted(steps.items()):
            continue
        steps_held = [step for step, _ in history]
        if len(set(steps_held)) < len(steps_held) or any(steps.get(step) != value for step, value in history):
            stale[key] = steps  # a point changed, gone from the summary, or logged twice: only a rewrite mends it
        missing[key] = {step: value for step, value in steps.items() if step not in dict(history)}
    if namespace:
        stale.update({key: {} for key in held if key.startswith(namespace) and key not in points})
    if stale and tracker.replace_metrics(run_id, stale):
        missing = {key: steps for key, steps in missing.items() if key not in stale}
    elif stale:
        log.warning(
            "MLflow: %s cannot rewrite a logged metric; %d chart(s) of run %s keep earlier values where the summary "
            "changed (summary.csv is current)",
            tracker.uri,
            len(stale),
            run_id,
        )
    log_points(tracker, run_id, missing)


def publish_sweep_images(tracker: Any, run_id: str, images: Mapping[tuple[str, str, int], Mapping[int, Any]]) -> None:
    """In the parent run, each model's probe maps at every resolution as MLflow images at step = resolution
    (key probe/<model>/<method>/<n>), so the image grid's step slider moves one model's maps across resolutions,
    and at step 0 the overview (MLflow's image card opens at step 0: it shows the overview, never an empty card).
    `images`: (model, method, probe position) -> {resolution, or 0 for the overview: RGB uint8 array}, drawn by
    the sweep (resomap.explain.figures.sweep_probe_images: one colour scale per model across its resolutions).
    Each (key, step) is logged once: an overview logged before resolutions were added stays as it was (its
    captions say which resolutions it shows); the per-resolution steps are complete."""
    from PIL import Image

    try:
        held = _held_images(tracker.artifact_paths(run_id))
    except Exception as exc:
        log.log(warn_level(tracker), "MLflow: images of run %s not listed (%s)", run_id, exc)
        return
    for (model, method, position), by_step in sorted(images.items()):
        key = f"probe/{mlflow_name(model)}/{method}/{position:02d}"
        for step, array in sorted(by_step.items()):
            if (key, int(step)) not in held:
                tracker.log_image(run_id, Image.fromarray(array), key=key, step=int(step))


def publish_sweep(
    tracker: Any,
    parent: str,
    summary: Any,
    *,
    tables: Iterable[Path] = (),
    figures: Iterable[Path] = (),
    page: Path | None = None,
    comparison: Any = None,
    images: Mapping[tuple[str, str, int], Mapping[int, Any]] | None = None,
) -> None:
    """Log what the sweep's summary produced to its parent run, only what the run lacks or what changed (so
    publishing again is harmless): report.html, the tables under summary/, the figures under figures/, the
    comparison's files under explanations/<kind>/, headline metrics and the recommendation tags, the
    per-resolution points (`resolution_points`) and the probe images (`publish_sweep_images`). `summary`: a
    resomap.reports SweepSummary (rows, recommendations); `comparison`: a resomap.stages Comparison (files,
    agreement, matrices) or None."""
    figures = list(figures)
    if page:
        tracker.log_artifact(parent, page)
    for path in tables:
        tracker.log_artifact(parent, path, "summary")
    for path in figures:
        tracker.log_artifact(parent, path, "figures")
    files = comparison.files if comparison is not None else []
    for path in files:
        tracker.log_artifact(parent, path, f"explanations/{path.parent.name}")
    metrics = dict(comparison.agreement) if comparison is not None else {}
    tags = headline(summary)
    findings = comparison.findings if comparison is not None else []
    tags[NOTE_TAG] = parent_note(summary, findings, page, figures)
    top = max(summary.rows, key=lambda r: r.test_accuracy or 0.0, default=None)
    if top and top.test_accuracy is not None:
        metrics["best_test_accuracy"] = top.test_accuracy  # descriptive: the highest test accuracy of the sweep
    best = best_recommended(summary)
    if best is not None:
        tags[BEST_TAG] = best
    unrecommended = []
    for rec in summary.recommendations:
        if rec["resolution"] is not None and rec.get("recommended"):  # only with the evidence (the summary's rule)
            metrics[f"recommended_resolution/{mlflow_name(rec['model'])}"] = rec["resolution"]
        else:
            unrecommended.append(f"recommended_resolution/{mlflow_name(rec['model'])}")
        if rec["resolution"] is not None:
            metrics[f"reference_resolution/{mlflow_name(rec['model'])}"] = rec["reference"]
    for row in summary.rows:  # the columns the row marks for the parent run (reports.rows.SummaryRow)
        where = f"{mlflow_name(row.model)}/{row.resolution}"
        metrics.update({f"{key}/{where}": value for key, value in row.parent_metrics().items()})
    drop = () if best is not None else (BEST_TAG,)
    log_changed(tracker, parent, metrics, tags, drop=drop, drop_metrics=unrecommended)
    matrices = comparison.matrices if comparison is not None else {}
    log_metric_points(tracker, parent, resolution_points(summary.rows, matrices), namespace=BY_RESOLUTION)
    publish_sweep_images(tracker, parent, images or {})


BEST_TAG = "resomap.best"  # the parent's recommended model@resolution; absent when no model is recommended


def best_recommended(summary: Any) -> str | None:
    """'<model>@<res>' of the most accurate resolution the summary recommends (a recommendation row's
    `recommended`: reports.uncertainty.recommendation, not recomputed here); None when it recommends none."""
    chosen = {(r["model"], r["resolution"]) for r in summary.recommendations if r.get("recommended")}
    rows = [r for r in summary.rows if (r.model, r.resolution) in chosen]
    best = max(rows, key=lambda r: r.test_accuracy or 0.0, default=None)
    return f"{best.model}@{best.resolution}" if best is not None else None


def parent_note(summary: Any, statements: Iterable[str], page: Path | None, figures: Iterable[Path]) -> str:
    """The parent run's description (markdown, shown above its details in the MLflow UI): the decision per model
    with its recommendation or 'no recommendation: <reason>' (and a line saying so when no model is recommended),
    the undertrained model x resolutions, the explanation finding per model x method, and where the report and the
    figures are."""
    lines = ["**Decisions** (each resolution against the reference at the stated margin)", ""]
    lines += [f"- {r['sentence']}" for r in summary.recommendations if r.get("sentence")] or ["- no finished trial"]
    if summary.recommendations and not any(r.get("recommended") for r in summary.recommendations):
        lines += ["", "**No recommendation** for any model: the evidence each one lacks is named in its decision."]
    lines += training_lines(getattr(summary, "rows", ()))
    statements = [s for s in statements if s.strip()]
    if statements:
        lines += ["", "**Explanations** (agreement across resolutions against the cross-seed floor)", ""]
        lines += [f"- {s}" for s in statements]
    files = [f"- report: artifact `{page.name}` (one self-contained page; on disk `{page}`)"] if page else []
    files += [f"- figure: artifact `figures/{p.name}`" for p in figures if Path(p).suffix == ".png"]
    if files:
        lines += ["", "**Files**", "", *files]
    text = "\n".join(lines)
    if len(text) > NOTE_LIMIT:  # MLflow's tag value limit
        text = text[: NOTE_LIMIT - 40].rsplit("\n", 1)[0] + "\n- ... (the rest: summary/summary.md)"
    return text


def training_lines(rows: Iterable[Any]) -> list[str]:
    """The parent description's training part: each model x resolution with an undertrained seed and why (the
    summary rows' convergence fields, reports.rows.SummaryRow); [] when no row has a convergence record."""
    checked = [r for r in rows if getattr(r, "undertrained", None) is not None]
    if not checked:
        return []
    flagged = [f"- {r.model}@{r.resolution}: {r.undertrained_reason}" for r in checked if r.undertrained]
    head = "**Training** (convergence records; learning curves: `figures/learning_curves_<model>.png`)"
    return ["", head, "", *(flagged or ["- no seed flagged undertrained"])]


def headline(summary: Any) -> dict[str, str]:
    """Tags of the parent run: the decision per model in words, and each resolution's verdict with its margin and
    the margin the design could detect (`resomap.verdict.<model>.<resolution>`)."""
    tags = {f"resomap.recommendation.{mlflow_name(r['model'])}": r["sentence"][:4900] for r in summary.recommendations}
    for row in summary.rows:
        if row.verdict:
            text = f"{row.verdict} (margin {row.margin:g}"
            if row.detectable_margin is not None:
                text += f"; detectable {row.detectable_margin:.3f}"
            tags[f"resomap.verdict.{mlflow_name(row.model)}.{row.resolution}"] = text + ")"
    return tags


def log_changed(
    tracker: Any,
    run_id: str,
    metrics: dict[str, float],
    tags: dict[str, str],
    drop: Iterable[str] = (),
    drop_metrics: Iterable[str] = (),
) -> None:
    """Log only the metrics and tags whose value the run does not hold yet (a repeated summary adds nothing): a
    metric the run holds with another value is rewritten at step 0 (Tracker.replace_metrics: one point, the
    current value; a store that cannot rewrite gets a second point); delete the tags in ``drop`` and the metrics
    in ``drop_metrics`` that the run holds (an earlier summary's `resomap.best` once nothing is recommended)."""
    try:
        run = tracker.get_run(run_id)
    except Exception:  # unreachable: log everything (the calls themselves are soft)
        run = None
    have_m = dict(run.data.metrics) if run is not None else {}
    have_t = dict(run.data.tags) if run is not None else {}
    metrics = {k: float(v) for k, v in metrics.items() if have_m.get(k) != float(v)}
    tags = {k: str(v) for k, v in tags.items() if have_t.get(k) != str(v)}
    changed = {k: {0: v} for k, v in metrics.items() if k in have_m}
    changed.update({k: {} for k in drop_metrics if k in have_m and k not in metrics})
    if changed and tracker.replace_metrics(run_id, changed):
        metrics = {k: v for k, v in metrics.items() if k not in changed}
    if metrics:
        tracker.log_metrics(run_id, metrics)
    if tags:
        tracker.set_tags(run_id, tags)
    for key in drop:
        if key in have_t and key not in tags:
            tracker.delete_tag(run_id, key)


def mlflow_name(text: str) -> str:
    """A name usable in an MLflow metric, tag or image key (letters, digits, _ - . / and space)."""
    return "".join(c if c.isalnum() or c in "_-. /" else "_" for c in str(text))

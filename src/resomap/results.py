"""A finished sweep as pandas DataFrames, for notebooks.

Example::

    from resomap.results import load_sweep

    sweep = load_sweep("resomap-quickstart")       # model_summaries/_sweep/resomap-quickstart/ (resomap.layout)
    sweep.summary[["model", "resolution", "test_accuracy_pooled", "test_accuracy_ci_low", "test_accuracy_ci_high"]]
    sweep.recommendations[["model", "resolution", "sentence"]]
    own = sweep.predictions.query("test_resolution == resolution")  # each trial at its own resolution
    own.groupby(["model", "resolution", "seed"])["correct"].mean()   # per-trial test accuracy
    sweep.paired_tests.query("significant")
    sweep.class_decisions[["model", "class", "n_images", "resolution", "reason"]]  # per class, minority first
    sweep.train_test.query("verdict == 'better'")  # tested above the training resolution: shown better
    sweep.groups.query("group == 'cell_type'")  # per group value and resolution: the score, its interval, the decision
    sweep.sensitivity[["model", "resolution", "lost", "lost_low", "lost_high", "seed_dependent"]]
    sweep.sensitive_images.query("status == 'lost'")  # the images each model needs the pixels for
    sweep.front3.query("on_front")  # per model the resolutions on the score x cost x explanation-quality front

Nothing is recomputed: the tables are the files the sweep wrote (summary.json, paired_tests, recommendation,
explanations/agreement.csv, sensitive_images.csv) and each trial's per-image table (its task's: predictions.csv,
seg_predictions.csv), found through the folders recorded in summary.json.
pandas is imported when a sweep is loaded.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from resomap.errors import DataError
from resomap.layout import SWEEP_DIR, Layout
from resomap.schema import (
    AnswerStep,
    ClassDecision,
    FrontTest,
    PairedTest,
    RecommendationRow,
    SensitiveImage,
    Sensitivity,
    TrainTestPair,
    keys,
)

PREDICTIONS_FILE = "predictions.csv"  # a trial's table when its result.json names none (resomap.records)
PREDICTION_COLUMNS = ("model", "resolution", "seed", "test_resolution", "index", "label", "prediction", "correct")
# the columns of paired_tests.csv and recommendation.csv (written by resomap.summary.build, read here)
PAIRED_COLUMNS = keys(PairedTest)
RECOMMENDATION_COLUMNS = keys(RecommendationRow)  # resomap.schema: what each holds
ANSWER_COLUMNS = keys(AnswerStep)  # answer.csv: the answer across models, a configuration per row

# the per-group table (summary.json's group_decisions, resomap.summary.groups), one row per model x group x value x
# resolution: the score there with its interval, and the value's decision (repeated on its resolutions' rows)
GROUP_COLUMNS = (
    "model",
    "group",
    "value",
    "n_images",  # the value's test images compared
    "resolution",
    "score",  # the headline score on those images, pooled over seeds
    "score_low",
    "score_high",
    "verdict",  # this resolution's verdict against the reference (the value's decision)
    "decided_resolution",  # the value's decided resolution; None: not decided
    "decided",
    "alpha",  # one-sided: the model's alpha / the group's number of values (Bonferroni)
    "correction",
    "reason",  # the decision in words, or "not decided: <why>"
)


def group_table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """summary.json's group_decisions as GROUP_COLUMNS rows (a value that was not decided: one row, no resolution)."""
    out = []
    for r in rows:
        verdicts = {int(v["resolution"]): v.get("verdict") for v in r.get("verdicts") or []}
        head = {
            "model": r["model"],
            "group": r["group"],
            "value": r["value"],
            "n_images": r.get("n_images"),
            "decided_resolution": r.get("resolution") if r.get("decided") else None,
            "decided": bool(r.get("decided")),
            "alpha": r.get("alpha"),
            "correction": r.get("correction"),
            "reason": r.get("reason"),
        }
        scores = r.get("scores") or {}
        for res, sc in sorted(scores.items(), key=lambda kv: int(kv[0])):
            out.append(
                {
                    **head,
                    "resolution": int(res),
                    "score": sc.get("estimate"),
                    "score_low": sc.get("low"),
                    "score_high": sc.get("high"),
                    "verdict": verdicts.get(int(res), "reference" if int(res) == r.get("reference") else None),
                }
            )
        if not scores:
            out.append({**head, "resolution": None, "score": None, "score_low": None, "score_high": None})
    return out


# summary.json's class_decisions (resomap.summary.per_class): one row per classification model x class, the
# minority class first; `verdicts` each resolution's verdict with its bounds (a list of dicts)
CLASS_DECISION_COLUMNS = keys(ClassDecision)

# summary.json's train_test (resomap.summary.train_test): one row per model x (trained, tested above it) pair, with
# the model's family alpha and correction
TRAIN_TEST_MODEL = ("model", "metric", "alpha", "correction", "margin", "scope", "deterministic")
TRAIN_TEST_COLUMNS = (*TRAIN_TEST_MODEL, *keys(TrainTestPair))

# resolution-sensitive test images (resomap.summary.sensitivity): summary.json's `sensitivity` rows (one per model x
# resolution below its reference) and the per-image rows of sensitive_images.csv in the summary folder
SENSITIVE_IMAGES_FILE = "sensitive_images.csv"
SENSITIVITY_COLUMNS = keys(Sensitivity)
SENSITIVE_IMAGE_COLUMNS = keys(SensitiveImage)

# the three-way trade-off (resomap.summary.front): summary.json's `front3`, one row per model x resolution; each
# axis an estimate with its interval (None where the axis has none or the model lacks it: its note says why)
FRONT_AXES = ("score", "cost", "quality")
FRONT_COLUMNS = (
    "model",
    "resolution",
    "on_front",
    "standing",  # "on the front" or "dropped: <r> px is shown better on <axis> (Holm p ...) and worse on none"
    "dropped_by",
    *(f"{axis}{part}" for axis in FRONT_AXES for part in ("", "_low", "_high", "_words")),
    "level",
    "note",  # the axes left out for this model and why
)


# every test of the front (summary.json front3's `tests`): one row per model x pair of resolutions x axis; effect =
# b - a in the axis's units, its two-sided p, the Holm p over the model's front, the resolution shown better (None:
# no difference shown), the test in words and why there is none
FRONT_TEST_COLUMNS = ("model", *keys(FrontTest))


def front_tests(front3: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """summary.json's ``front3`` tests as FRONT_TEST_COLUMNS rows."""
    return [{"model": model.get("model"), **test} for model in front3 for test in model.get("tests") or []]


def front_table(front3: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """summary.json's ``front3`` (one entry per model, its points per resolution) as FRONT_COLUMNS rows."""
    rows = []
    for model in front3:
        words = {a.get("name"): a.get("words") for a in model.get("axes") or []}
        for point in model.get("points") or []:
            row = {k: model.get(k) for k in ("model", "level", "note")}
            row.update({k: point.get(k) for k in ("resolution", "on_front", "standing", "dropped_by")})
            for axis in FRONT_AXES:
                value = [*(point.get(axis) or ()), None, None, None]
                row.update(dict(zip((axis, f"{axis}_low", f"{axis}_high"), value[:3], strict=True)))
                row[f"{axis}_words"] = words.get(axis)
            rows.append(row)
    return rows


@dataclasses.dataclass
class SweepResults:
    """One sweep's tables (pandas DataFrames) and where they came from."""

    name: str
    folder: Path  # model_summaries/_sweep/<name>/
    summary: Any  # one row per model x resolution: means, stds, intervals, n_seeds, sufficient, note
    predictions: Any  # one row per trial x test resolution x test image (PREDICTION_COLUMNS)
    paired_tests: Any  # one row per pair of resolutions of a model: effect, CI, p, Holm-adjusted p, significant
    recommendations: Any  # one row per model: the decided resolution, its smallest sufficient one or not and why
    agreement: Any  # explanations/agreement.csv as written (empty when the sweep explained nothing)
    trials: Any  # one row per trial: model, resolution, seed, status, name, key, folder, has_predictions
    stats: dict[str, Any]  # the settings the statistics used (config `stats`)
    # one row per classification model x class: the decision on the class's recall (CLASS_DECISION_COLUMNS; empty
    # for a summary written before per-class decisions, or a task without classes)
    class_decisions: Any = None
    # one row per model x group x value x resolution (GROUP_COLUMNS: stats.groups, e.g. ELPV's cell_type); empty for
    # a summary written before per-group decisions or data without groups
    groups: Any = None
    # per model x resolution below its reference: the images lost, gained and seed-dependent, with Wilson intervals
    sensitivity: Any = None  # SENSITIVITY_COLUMNS (summary.json `sensitivity`; empty for a summary from before it)
    sensitive_images: Any = None  # one row per lost or gained image (sensitive_images.csv; SENSITIVE_IMAGE_COLUMNS)
    front3: Any = None  # one row per model x resolution of the three-way trade-off (FRONT_COLUMNS; summary.json front3)
    front_tests: Any = None  # the tests the front decided on (FRONT_TEST_COLUMNS)
    # the answer across models: a configuration per row (ANSWER_COLUMNS, answer.csv: the one to use, then the cheaper
    # ones in the order the fixed sequence tested them); `answer` the whole record (summary.json `answer`)
    answer_steps: Any = None
    answer: dict[str, Any] | None = None
    # where it looks, decided: a row per model x method x step (explanations/map_decisions.csv; empty without it)
    map_decisions: Any = None
    # one row per model x (trained, tested above it) pair: better, non-inferior, worse or undecided (TRAIN_TEST_COLUMNS;
    # empty for a summary written before it, or a sweep that tests no model above its training resolution)
    train_test: Any = None


def known_sweeps(root: str | Path = "model_summaries") -> list[str]:
    base = Path(root) / SWEEP_DIR
    return sorted(p.parent.name for p in base.glob("*/summary.json")) if base.is_dir() else []


def find_sweep(name: str | None, root: str | Path = "model_summaries") -> Path:
    """The folder of sweep `name` (a name under <root>/_sweep/ or a folder holding summary.json); None: the only
    or most recently summarised sweep. An unknown name raises DataError listing the known sweeps. Plain file
    reads: `resomap report` answers a missing sweep before it imports the report's libraries (torch among them)."""
    base = Path(root) / SWEEP_DIR
    known = known_sweeps(root)
    if name is None:
        if not known:
            raise DataError(f"no finished sweep under {base} (run `resomap sweep` first, or pass --sweep)")
        return max((base / k for k in known), key=lambda p: (p / "summary.json").stat().st_mtime)
    if (Path(name) / "summary.json").is_file():
        return Path(name)
    if name in known:
        return base / name
    listed = ", ".join(known) if known else f"none under {base}"
    raise DataError(f"no sweep {name!r}; known sweeps: {listed}")


def _find(name_or_folder: str | Path, root: str | Path) -> Path:
    given = Path(name_or_folder)
    if (given / "summary.json").is_file():
        return given
    folder = Path(root) / SWEEP_DIR / str(name_or_folder)
    if (folder / "summary.json").is_file():
        return folder
    known = known_sweeps(root)
    listed = ", ".join(known) if known else f"none under {Path(root) / SWEEP_DIR}"
    where = f"a name under {Path(root) / SWEEP_DIR} or a folder with summary.json"
    raise DataError(f"no sweep {str(name_or_folder)!r} ({where}); known sweeps: {listed}")


def trial_folder(sweep: Path, trial: dict[str, Any]) -> Path | None:
    """A trial's folder: the one recorded in summary.json (relative to the sweep folder), else (a summary written
    before folders were recorded, or one whose trials were moved since: resomap.sweep.migrate) the trial's folder in
    any layout (resomap.layout) whose result.json holds its key."""
    recorded = trial.get("folder")
    if recorded:
        path = Path(recorded)
        found = next((c for c in ([path] if path.is_absolute() else [sweep / path, path]) if c.is_dir()), None)
        if found is not None:
            return found
    try:
        model, resolution, seed = str(trial.get("model")), int(trial.get("resolution")), int(trial.get("seed") or 0)
    except (TypeError, ValueError):
        return None
    for candidate in Layout.of_sweep_folder(sweep).summary_candidates(model, resolution, seed):
        try:
            if json.loads((candidate / "result.json").read_text(encoding="utf-8")).get("key") == trial.get("key"):
                return candidate
        except (OSError, ValueError, AttributeError):
            continue
    return None


def _records(frame: Any, trial: dict[str, Any]) -> Any:
    """A trial's per-image table with its model, resolution and seed in front: classification's predictions.csv
    as PREDICTION_COLUMNS (`correct` a bool), another task's table (segmentation: seg_predictions.csv, per-image
    IoU, Dice, pixel accuracy, boundary F1) with the columns it has."""
    frame.insert(0, "seed", trial.get("seed"))
    frame.insert(0, "resolution", trial.get("resolution"))
    frame.insert(0, "model", trial.get("model"))
    if "correct" not in frame.columns:
        return frame
    frame["correct"] = frame["correct"].astype(bool)
    return frame[list(PREDICTION_COLUMNS)]


def load_sweep(name_or_folder: str | Path, *, root: str | Path = "model_summaries") -> SweepResults:
    """The sweep named ``name_or_folder`` (``<root>/_sweep/<name>/``) or the summary folder itself, as DataFrames.

    >>> sweep = load_sweep("resomap-smoke")  # doctest: +SKIP
    >>> sweep.summary.loc[:, ["model", "resolution", "test_accuracy_ci_low", "test_accuracy_ci_high"]]  # doctest: +SKIP

    An unknown name raises :class:`~resomap.errors.DataError` listing the known sweeps. ``predictions`` is each
    trial's per-image table as its task wrote it (the file its result.json names: classification's predictions.csv,
    segmentation's seg_predictions.csv); trials without one (results from before per-image records) have no rows
    there (``trials.has_predictions``).
    """
    import pandas as pd

    folder = _find(name_or_folder, root)
    data = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    rows = [{k: v for k, v in row.items() if k != "cross_resolution"} for row in data.get("rows", [])]
    frames, trials = [], []
    for trial in data.get("trials", []):
        where = trial_folder(folder, trial)
        path = where / str(trial.get("predictions") or PREDICTIONS_FILE) if where is not None else None
        has = path is not None and path.suffix == ".csv" and path.is_file()
        trials.append(
            {
                "model": trial.get("model"),
                "resolution": trial.get("resolution"),
                "seed": trial.get("seed"),
                "status": trial.get("status"),
                "name": trial.get("name"),
                "key": trial.get("key"),
                "folder": str(where) if where is not None else None,
                "has_predictions": has,
            }
        )
        if has:
            frames.append(_records(pd.read_csv(path), trial))
    columns = list(frames[0].columns) if frames else list(PREDICTION_COLUMNS)
    predictions = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)
    sensitive_csv = folder / SENSITIVE_IMAGES_FILE
    sensitive = pd.read_csv(sensitive_csv) if sensitive_csv.is_file() else pd.DataFrame()
    return SweepResults(
        name=folder.name,
        folder=folder,
        summary=pd.DataFrame(rows),
        predictions=predictions,
        paired_tests=pd.DataFrame(data.get("paired_tests", []), columns=list(PAIRED_COLUMNS)),
        recommendations=pd.DataFrame(data.get("recommendations", []), columns=list(RECOMMENDATION_COLUMNS)),
        agreement=_csv(folder / "explanations" / "agreement.csv"),
        trials=pd.DataFrame(trials),
        stats=dict(data.get("stats") or {}),
        class_decisions=pd.DataFrame(data.get("class_decisions") or [], columns=list(CLASS_DECISION_COLUMNS)),
        groups=pd.DataFrame(group_table(data.get("group_decisions") or []), columns=list(GROUP_COLUMNS)),
        sensitivity=pd.DataFrame(data.get("sensitivity") or [], columns=list(SENSITIVITY_COLUMNS)),
        sensitive_images=sensitive.reindex(columns=list(SENSITIVE_IMAGE_COLUMNS)),
        front3=pd.DataFrame(front_table(data.get("front3") or []), columns=list(FRONT_COLUMNS)),
        front_tests=pd.DataFrame(front_tests(data.get("front3") or []), columns=list(FRONT_TEST_COLUMNS)),
        answer_steps=pd.DataFrame((data.get("answer") or {}).get("steps") or [], columns=list(ANSWER_COLUMNS)),
        answer=data.get("answer"),
        map_decisions=_csv(folder / "explanations" / "map_decisions.csv"),
        train_test=pd.DataFrame(_pairs(data.get("train_test") or []), columns=list(TRAIN_TEST_COLUMNS)),
    )


def _pairs(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """summary.json's train_test rows flattened: one per pair, with its model's columns."""
    return [{**{k: row.get(k) for k in TRAIN_TEST_MODEL}, **pair} for row in rows for pair in row["pairs"]]


def _csv(path: Path) -> Any:
    import pandas as pd

    return pd.read_csv(path) if path.is_file() else pd.DataFrame()


QUALITY_SCORES = {  # quality.csv score -> what its panel's axis says (every one: > 0 = better than random maps)
    "deletion_auc_vs_random": "deletion AUC, random maps - method",
    "insertion_auc_vs_random": "insertion AUC, method - random maps",
    "road_vs_random": "ROAD, method - random maps",
    "pointing_game_vs_random": "pointing game, method - random maps",
    "energy_in_mask_vs_random": "energy in mask, method - random maps",
}

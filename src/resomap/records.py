"""Per-test-image records of a trial: what the model predicted for each test image, at each test resolution.

Kept beside result.json as `predictions.csv` (columns test_resolution, index, label, prediction, correct, score;
`index` is the image's index in the raw dataset, the same across resolutions and seeds when the split is fixed;
`score` the probability of class 1 in a two-class task, which AUROC ranks, else empty), so any
statistic (bootstrap intervals, paired tests between resolutions, pooled seeds) can be recomputed later without
retraining. Plain csv: readable by pandas, R or a spreadsheet.

Whatever the task, a trial's records read back as one `ScoreTable` per test resolution: a score per image (0/1
correctness for classification, IoU or boundary F1 per image for segmentation; the task names its scores and reads
its own file, resomap.tasks), which is what the summary's intervals and paired tests consume.

`environment()`: what every result records of where it was computed (python and library versions, platform); the
trial adds the machine (resomap.runtime.machine_record: CPU model, torch's CPU capability, native-bf16 flags, GPU),
which `machine_of` says in one line and `machines` counts over a sweep's results (`machines_warning` when they ran
on more than one: bf16 results differ between CPUs, with the same seeds and code).
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import platform
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from resomap.atomic import write_text
from resomap.errors import DataError

PREDICTIONS_FILE = "predictions.csv"
FINDINGS_FILE = "findings.txt"  # explanations/: the short finding per model x method (report, MLflow)
SEG_RECORDS_FILE = "seg_predictions.csv"  # a segmentation trial's per-image scores (resomap.tasks.segmentation)
SEG_OVERLAYS_FILE = "seg_overlays.png"  # a segmentation trial's true and predicted masks of a few test images
# beside it, <method>/<nn>.png: each probe image's map, captioned (reports.probe_images), the trial run's MLflow images
PROBE_IMAGES_DIR = "probe_images"
# the distributions whose versions every result records (read from installed metadata: nothing is imported)
LIBRARIES = ("torch", "torchvision", "timm", "captum", "grad-cam", "numpy", "mlflow")
# a library that is also installed under another distribution's name, without the full one (mlflow-skinny: the
# client alone, as on a machine given only what a sweep imports)
DISTRIBUTION_ALIASES = {"mlflow": ("mlflow-skinny",)}
COLUMNS = ("test_resolution", "index", "label", "prediction", "correct", "score")


@dataclasses.dataclass(frozen=True)
class Predictions:
    """One trained model's predictions on the test split at one test resolution (arrays aligned by image)."""

    test_resolution: int
    index: np.ndarray  # int64 [N]: image index in the raw dataset
    label: np.ndarray  # int64 [N]
    prediction: np.ndarray  # int64 [N]
    score: np.ndarray | None = None  # float [N]: the probability of class 1 (two classes only), else None

    def __post_init__(self) -> None:
        n = len(self.index)
        if len(self.label) != n or len(self.prediction) != n or (self.score is not None and len(self.score) != n):
            raise ValueError(
                f"predictions: index, label, prediction and score differ in length ({n}, {len(self.label)}, "
                f"{len(self.prediction)}, {'-' if self.score is None else len(self.score)})"
            )

    @property
    def correct(self) -> np.ndarray:
        return np.asarray(self.label) == np.asarray(self.prediction)

    @property
    def accuracy(self) -> float:
        return float(self.correct.mean()) if len(self.index) else float("nan")

    def table(self, score: str = "accuracy") -> ScoreTable:
        """As a ScoreTable: the 0/1 score `score` (correct or not), with the labels, predictions and the probability
        of class 1 kept."""
        index = np.asarray(self.index)
        return ScoreTable(self.test_resolution, index, {score: self.correct}, self.label, self.prediction, self.score)


@dataclasses.dataclass(frozen=True)
class ScoreTable:
    """One trained model's per-image scores on the test split at one test resolution (arrays aligned by image).

    ``scores``: name -> [N] (bool for a 0/1 score, float otherwise; NaN where an image has no score, e.g. no
    boundary in its mask); ``label``/``prediction``: the class labels and predictions where the task has them
    (a pooled macro-F1 needs them); ``positive``: the probability of class 1 in a two-class task (AUROC)."""

    test_resolution: int
    index: np.ndarray  # int64 [N]: image index in the raw dataset
    scores: dict[str, np.ndarray]
    label: np.ndarray | None = None
    prediction: np.ndarray | None = None
    positive: np.ndarray | None = None


def read_score_csv(path: str | Path, columns: tuple[str, ...]) -> dict[int, ScoreTable]:
    """{test resolution: ScoreTable of `columns`} from a csv with test_resolution, index and those columns (an
    empty cell is NaN); {} when the file is absent."""
    path = Path(path)
    if not path.is_file():
        return {}
    rows: dict[int, list[list[float]]] = {}
    with path.open(newline="", encoding="utf-8") as fh:
        for number, row in enumerate(csv.DictReader(fh), start=2):
            try:
                scored = [float(row[c]) if row.get(c) not in ("", None) else np.nan for c in columns]
                rows.setdefault(int(row["test_resolution"]), []).append([float(row["index"]), *scored])
            except (KeyError, TypeError, ValueError):
                raise _damaged(path, number) from None
    out = {}
    for res, items in rows.items():
        arr = np.asarray(items, dtype=np.float64).reshape(-1, 1 + len(columns))
        scores = {c: arr[:, 1 + i] for i, c in enumerate(columns)}
        out[res] = ScoreTable(res, arr[:, 0].astype(np.int64), scores)
    return out


def write_predictions(folder: str | Path, records: Mapping[int, Predictions]) -> Path:
    """predictions.csv in `folder` (atomically), rows sorted by test resolution then image index."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(COLUMNS)
    for res in sorted(records):
        rec = records[res]
        order = np.argsort(rec.index, kind="stable")
        correct = rec.correct
        for i in order:
            score = "" if rec.score is None else f"{float(rec.score[i]):.9g}"
            writer.writerow((res, int(rec.index[i]), int(rec.label[i]), int(rec.prediction[i]), int(correct[i]), score))
    path = Path(folder) / PREDICTIONS_FILE
    write_text(path, buf.getvalue())
    return path


def read_predictions(folder: str | Path) -> dict[int, Predictions]:
    """{test resolution: Predictions} from `folder`/predictions.csv; {} when the file is absent."""
    path = Path(folder) / PREDICTIONS_FILE
    if not path.is_file():
        return {}
    rows: dict[int, list[tuple[int, int, int]]] = {}
    scores: dict[int, list[float]] = {}
    with path.open(newline="", encoding="utf-8") as fh:
        for number, row in enumerate(csv.DictReader(fh), start=2):
            try:
                res = int(row["test_resolution"])
                item = (int(row["index"]), int(row["label"]), int(row["prediction"]))
                cell = row.get("score")  # absent from files written before it existed
                score = float(cell) if cell not in (None, "") else np.nan
            except (KeyError, TypeError, ValueError):
                raise _damaged(path, number) from None
            rows.setdefault(res, []).append(item)
            scores.setdefault(res, []).append(score)
    out = {}
    for res, items in rows.items():
        arr = np.asarray(items, dtype=np.int64).reshape(-1, 3)
        score = np.asarray(scores[res], dtype=np.float64)
        out[res] = Predictions(res, arr[:, 0], arr[:, 1], arr[:, 2], None if np.isnan(score).all() else score)
    return out


def _damaged(path: Path, line: int) -> DataError:
    """A per-image table that does not read (cut mid-row, a hand's edit): one line naming it."""
    return DataError(
        f"{path}: line {line} is not a whole row (the file was cut short or edited); run the sweep again, which "
        "redoes the trial"
    )


def environment() -> dict[str, str | None]:
    """python, the library versions (None when not installed), the platform; the device is added by whoever
    knows it. A fresh dict each call."""
    return dict(_environment())


@functools.cache
def _environment() -> tuple[tuple[str, str | None], ...]:
    from importlib import metadata

    found: dict[str, str | None] = {"python": platform.python_version()}
    for dist in LIBRARIES:
        found[dist] = None
        for name in (dist, *DISTRIBUTION_ALIASES.get(dist, ())):
            try:
                found[dist] = metadata.version(name)
                break
            except metadata.PackageNotFoundError:
                continue
    found["platform"] = platform.platform()
    return tuple(found.items())


MACHINE_KEYS = ("cpu", "cpu_capability", "cpu_bf16", "gpu")  # environment keys naming the machine (machine_record)


def machine_of(environment: Mapping[str, Any] | None) -> str | None:
    """The machine of a result's environment in one line ('AMD EPYC 9654 96-Core Processor (AVX512; bf16:
    avx512_bf16)', then ', GPU <name>' when it ran on one); None for a result written before the machine was
    recorded."""
    env = environment or {}
    if not env.get("cpu"):
        return None
    line = f"{env['cpu']} ({env.get('cpu_capability') or 'capability unknown'}; bf16: {env.get('cpu_bf16') or '?'})"
    return f"{line}, GPU {env['gpu']}" if env.get("gpu") else line


def machines(environments: Iterable[Mapping[str, Any] | None]) -> list[dict[str, Any]]:
    """One entry per machine the results ran on, in the order first met: {"machine": its line (None: not
    recorded), the MACHINE_KEYS it recorded, "trials": how many results}."""
    found: dict[str | None, dict[str, Any]] = {}
    for env in environments:
        label = machine_of(env)
        entry = found.setdefault(label, {"machine": label, **{k: (env or {}).get(k) for k in MACHINE_KEYS}})
        entry["trials"] = entry.get("trials", 0) + 1
    return list(found.values())


def machine_lines(found: list[dict[str, Any]]) -> list[str]:
    """`machines` in words, one line each: 'AMD EPYC ... (AVX512; bf16: avx512_bf16): 6 trials'."""
    lines = []
    for entry in found:
        n = entry["trials"]
        label = entry["machine"] or "machine not recorded (results written before it was)"
        lines.append(f"{label}: {n} trial{'s' if n != 1 else ''}")
    return lines


def machines_warning(found: list[dict[str, Any]]) -> str:
    """One line when the results ran on more than one (recorded) machine, else ''."""
    known = [e for e in found if e["machine"]]
    if len(known) < 2:
        return ""
    return (
        f"the trials ran on {len(known)} different machines: bf16 (and, in the last bits, fp32) results differ "
        "between CPUs with the same seeds and code, so rows mixing them do not reproduce on one machine; rerun "
        "on one machine to compare them exactly"
    )

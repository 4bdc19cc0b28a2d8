"""The task axis: what every model of a sweep learns (`experiment.task`), as a registered strategy.

A task is a `Task` subclass registered with `@register_task(name)`: `classification` and `segmentation` are
built in, a plugin (the `resomap.plugins` entry point) or any imported module adds others. A task supplies
- `check(cfg, fail)`: its config checks, run at load (loss names and options, explainers that fit its targets);
- `criterion(cfg, data, device)`: the training loss, and `correct(out, y)` for the training accuracy;
- `evaluate(...)`: a test split -> metrics and one score table per image (classification: label and prediction;
  segmentation: IoU/Dice/... per image), `headline` naming the metrics a summary reads first, `write_records` the
  per-image table to the trial's folder (`records_file`), `test_outputs` its figures (confusion matrix, overlays;
  `report_figures` names those the sweep's report shows);
- `check_records(path, images, resolutions)`: what is wrong with the per-image table a finished trial left
  (resomap.filecheck.check_table by default: whole csv rows, one per test image at each test resolution), so a
  sweep run again redoes a trial whose table was cut short;
- `scores` and `read_scores(folder)`: the per-image scores the summary's intervals, paired tests and
  recommendation read (the first is the headline score), as resomap.records.ScoreTable per test resolution, and
  `words` for the summary's columns;
- `probe_targets(bundle, rows, device)`: what an explanation of a probe image explains, in one of the forms of
  resomap.explain.targets (`target_form`: "class" logit or a class's logits summed over a "region"), and the
  object masks its localisation scores use;
- `step_targets(out, cfg)`: random labels and the loss of a timed training step (profiling).
Models (`register_model(..., task=)`) and datasets (registry meta `task=`) declare the task they serve; the config
loader refuses a model, dataset, loss or explainer that does not fit (one line, exit 2, before anything runs).
Only the registries are read for that: no model is built and no heavy library is imported.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from resomap.config import register_check
from resomap.config.checks import check_dataset_fit
from resomap.errors import ConfigError, UnknownNameError
from resomap.filecheck import check_table
from resomap.records import PREDICTIONS_FILE, ScoreTable, read_predictions
from resomap.registry import Registry

DEFAULT_TASK = "classification"


@dataclasses.dataclass(frozen=True)
class Score:
    """A per-image score a task's records hold: `name` in its ScoreTable, `column` the stem of its summary columns
    (`<column>_pooled`, `_ci_low`, `_ci_high`), `words` for tables and figures; `binary`: 0/1 per image (correct or
    not), which McNemar's test can take; otherwise a number in [0, 1] compared with a paired bootstrap."""

    name: str
    column: str
    words: str
    binary: bool = False


class Task:
    """The strategy of one task; subclasses override what differs (see the module doc)."""

    name: ClassVar[str] = ""
    target_form: ClassVar[str] = "class"  # the explanation target form (resomap.explain.targets)
    headline: ClassVar[tuple[str, ...]] = ("accuracy", "macro_f1")  # metric names a summary reads first
    section: ClassVar[str | None] = None  # the config section holding this task's settings, if any
    output_rank: ClassVar[int] = 2  # rank of the model's output: logits [B, K] (2) or [B, K, r, r] (4)
    step_words: ClassVar[str] = "cross-entropy"  # a timed training step's labels and loss, in words
    default_classes: ClassVar[int] = 1000  # outputs of a model profiled without data (ImageNet's classes)
    line_metrics: ClassVar[tuple[tuple[str, str], ...]] = (("test/accuracy", "test accuracy"),)  # a trial's line
    # the per-image scores of the summary (the first is the headline score) and the file holding them
    scores: ClassVar[tuple[Score, ...]] = (Score("accuracy", "test_accuracy", "accuracy", binary=True),)
    records_file: ClassVar[str] = PREDICTIONS_FILE
    # summary columns -> words (tables, figures, the report); the seeds' mean of test/<headline[0]> is `test_<name>`
    words: ClassVar[tuple[tuple[str, str], ...]] = (("test_accuracy", "accuracy"), ("test_macro_f1", "macro-F1"))
    # (file in a trial's folder, MLflow image key, caption): figures of a trial the report and its MLflow run show
    report_figures: ClassVar[tuple[tuple[str, str, str], ...]] = ()
    # the trivial predictor every model's headline score is set against in the summary, in words
    trivial_words: ClassVar[str] = "the majority class"

    def line_figures(self, test: dict[str, float]) -> list[str]:
        """The headline test figures of a finished trial, in words, for its one line in the sweep's output."""
        return [f"{words} {float(test[key]):.3f}" for key, words in self.line_metrics if key in test]

    # ---------------------------------------------------------------- config

    def check(self, cfg: Any, fail: Callable[[str, str, Any], None]) -> None:
        """fail(path, expected, got) on a key of cfg that this task cannot run with."""

    def check_metric(self, metric: str, classes: list[str] | None) -> str | None:
        """Why ``metric`` (stats.metric) is not a score this task's decisions can be taken on, or None; ``classes``:
        the data's class names when known before loading. By default: one of the task's per-image scores."""
        names = [s.name for s in self.scores]
        return None if metric in names else f"one of the {self.name} task's per-image scores ({', '.join(names)})"

    # ---------------------------------------------------------------- training

    def criterion(self, cfg: Any, data: Any, device: Any) -> Any:
        raise NotImplementedError

    def correct(self, out: Any, y: Any) -> Any:
        """Correct labels in a training batch (a tensor; divided by y.numel() for train/accuracy)."""
        return (out.detach().argmax(1) == y).sum()

    # ---------------------------------------------------------------- testing

    def evaluate(
        self, trainer: Any, forward: Any, model: Any, loader: Any, prefix: str, num_classes: int | None
    ) -> tuple[Any, ...]:
        """(metrics '<prefix>/<name>', y_true, y_pred[, score]): the arrays are the per-image score table; the
        optional fourth, one number per image or None, is what a ranking metric orders (classification: the
        probability of class 1 of a two-class task, for AUROC)."""
        raise NotImplementedError

    def test_outputs(self, found: Any, model: Any, bundle: Any, trainer: Any, title: str, out_dir: Path) -> None:
        """Figures of a test (confusion_matrix.png, ...) written to out_dir."""

    def write_records(self, matrix: dict[int, Any], out_dir: Path) -> Path | None:
        """The per-image score table of every test resolution ({resolution: EvalResult}) in out_dir."""
        return None

    def check_records(self, path: Path, images: int | None, resolutions: Any) -> str | None:
        """What is wrong with the per-image table `path` a finished trial wrote (`write_records`), in a few words,
        or None when it is whole: by default a csv with test_resolution and index columns, `images` rows (the
        test set's size; None: not checked) at each of `resolutions`, ending in a newline (else cut mid-row). A
        task whose records are no csv overrides it; until then such a file is only checked to be there, not empty
        (the sweep redoes a trial whose table this finds damaged, so it must never flag a whole file)."""
        if Path(path).suffix.lower() == ".csv":
            return check_table(path, images, resolutions)
        if not Path(path).is_file():
            return "missing"
        return "empty (0 bytes)" if Path(path).stat().st_size == 0 else None

    def read_scores(self, folder: Path) -> dict[int, ScoreTable]:
        """{test resolution: ScoreTable} of a trial's records ({} when it has none); by default predictions.csv
        (a label and a prediction per image: the 0/1 score `scores[0].name`, correct or not)."""
        return {res: p.table(self.scores[0].name) for res, p in read_predictions(folder).items()}

    def trivial_scores(self, scores: dict[str, Any], label: Any) -> Any:
        """Per test image, the headline score of the trivial predictor (float [N]), from the aligned per-image scores
        ({name: [S, N]}) and labels ([N] or None); None when the records cannot say. Classification: always
        answering the test images' most frequent class (ties: the smallest label), correct or not."""
        import numpy as np

        if label is None:
            return None
        label = np.asarray(label)
        classes, counts = np.unique(label, return_counts=True)
        return (label == classes[np.argmax(counts)]).astype(np.float64)

    # ---------------------------------------------------------------- explaining

    def probe_targets(self, bundle: Any, rows: Any, device: Any) -> tuple[Any, Any]:
        """(targets of the probe images at `rows` of the test split, object masks bool [N, r, r] or None)."""
        raise NotImplementedError

    # ---------------------------------------------------------------- profiling

    def step_targets(self, out: Any, cfg: Any = None) -> tuple[Any, Callable[[Any, Any], Any]]:
        """(random labels for a batch whose logits are `out`, the loss): a timed training step's inputs."""
        raise NotImplementedError


TASKS: Registry[type[Task]] = Registry("task", "resomap tasks")


def register_task(name: str) -> Callable[[type[Task]], type[Task]]:
    """Register a Task subclass under `name` (the value of experiment.task)."""

    def deco(cls: type[Task]) -> type[Task]:
        if not (isinstance(cls, type) and issubclass(cls, Task)):
            raise TypeError(f"task '{name}' must be a resomap.tasks.Task subclass, got {cls!r}")
        cls.name = name
        TASKS.register(name)(cls)
        return cls

    return deco


_BUILT: dict[str, Task] = {}


def get_task(name: str | None = None) -> Task:
    """The task named `name` (default classification); unknown names raise UnknownNameError with suggestions."""
    _builtins()
    key = TASKS.resolve(name or DEFAULT_TASK)
    if key not in _BUILT:
        _BUILT[key] = TASKS.get(key)()
    return _BUILT[key]


def task_of(cfg: Any) -> Task:
    return get_task(cfg.experiment.task)


def task_names() -> list[str]:
    _builtins()
    return TASKS.names()


def _builtins() -> None:
    from resomap.tasks import classification, segmentation  # noqa: F401  (registers the built-in tasks)


def other_task_sections(name: str) -> list[str]:
    """The config sections that hold the settings of tasks other than `name` (a trial key leaves them out)."""
    return [s for t in task_names() if t != name and (s := get_task(t).section)]


def step_words(name: str) -> str:
    """The labels and loss of a task's timed training step in words (its name when the task is unknown)."""
    try:
        return get_task(name).step_words
    except UnknownNameError:  # a profile read back from a task no longer registered
        return str(name)


def of_result(result: Any) -> Task:
    """The task of a trial's result.json tree: its `task`, else the task whose records file it names (results
    written before tasks were recorded), else the default; a task no longer registered falls back the same way."""
    name = result.get("task") if hasattr(result, "get") else None
    if name:
        try:
            return get_task(name)
        except UnknownNameError:
            pass
    written = result.get("predictions") if hasattr(result, "get") else None
    default = get_task(DEFAULT_TASK)
    if written and written != default.records_file:
        for candidate in task_names():
            if get_task(candidate).records_file == written:
                return get_task(candidate)
    return default


def for_output(out: Any) -> Task:
    """The first registered task whose models give outputs of this rank (profiling a bare model)."""
    for name in task_names():
        task = get_task(name)
        if task.output_rank == out.dim():
            return task
    raise ConfigError(
        f"profile: the model's output has shape {list(out.shape)}; expected classifier logits [B, C] or segmentation "
        "logits [B, K, H, W]"
    )


# ---------------------------------------------------------------- config checks (run by the config loader)


def dataset_task(name: str) -> str:
    import resomap.data  # noqa: F401  (registers the built-in datasets)
    from resomap.data.registry import DATASETS

    return str(DATASETS.meta(name).get("task", DEFAULT_TASK))


def check(cfg: Any, fail: Callable[[str, str, Any], None]) -> None:
    """fail(path, expected, got) on the first key that does not fit cfg.experiment.task."""
    from resomap.models.registry import model_task

    try:
        task = get_task(cfg.experiment.task)
    except UnknownNameError:
        hint = TASKS.hint(cfg.experiment.task).lstrip("; ")  # "did you mean ...?" or the known names
        fail("experiment.task", f"a registered task, see resomap tasks ({hint})", cfg.experiment.task)
        return
    name = task.name
    names = list(cfg.sweep.models) + [pair[0] for pair in cfg.sweep.include]
    for model in names:
        try:
            found = model_task(model)
        except UnknownNameError:
            continue  # reported with its suggestions where models are resolved
        if found != name:
            fail("sweep.models", f"{name} models (experiment.task={name})", f"{model} ({found} model)")
    try:
        data_task = dataset_task(cfg.data.dataset)
    except UnknownNameError:
        data_task = name
    if data_task != name:
        fail("data.dataset", f"a {name} dataset (experiment.task={name})", f"{cfg.data.dataset} ({data_task})")
    try:
        from resomap.data.registry import DATASETS

        meta = DATASETS.meta(cfg.data.dataset)
    except UnknownNameError:
        meta = {}
    check_dataset_fit(cfg, meta, fail)
    task.check(cfg, fail)
    metric = cfg.stats.metric
    if metric is not None:
        from resomap.data.checks import known_classes

        expected = task.check_metric(str(metric), known_classes(cfg))
        if expected:
            fail("stats.metric", f"{expected} or null (the task's headline score)", metric)


register_check(check)  # the config loader runs it on every load (the config layer imports nothing above it)

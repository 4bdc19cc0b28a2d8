"""The task axis: what every model of a sweep learns (`experiment.task`), as a registered strategy.

A task is a `Task` subclass registered with `@register_task(name)`: `classification` and `segmentation` are
built in, a plugin (the `resomap.plugins` entry point) or any imported module adds others. A task supplies
- `check(cfg, fail)`: its config checks, run at load (loss names and options, explainers that fit its targets);
- `options`: its own options dataclass (`register_task(name, options=...)`), set as `task.<name>.<field>` in the
  config (the `task` config group; the loader refuses options of a task that is not experiment.task);
- `criterion(cfg, data, device)`: the training loss, and `correct(out, y)` for the training accuracy; a loss may
  be a registered loss term (resomap.tasks.losses, `register_loss(name, options=..., task=...)`) whose options are
  set as `loss.<name>.<field>` (the `loss` config group);
- `evaluate(ctx, loader, prefix)`: a test split -> metrics and one score table per image (classification: label
  and prediction; segmentation: IoU/Dice/... per image), `headline` naming the metrics a summary reads first,
  `write_records` the per-image table to the trial's folder (`records_file`), `test_outputs(found, ctx, bundle,
  title, out_dir)` its figures (confusion matrix, overlays; `report_figures` names those the sweep's report shows);
- `check_records(path, images, resolutions)`: what is wrong with the per-image table a finished trial left
  (resomap.filecheck.check_table by default: whole csv rows, one per test image at each test resolution), so a
  sweep run again redoes a trial whose table was cut short;
- `scores` and `read_scores(folder)`: the per-image scores the summary's intervals, paired tests and
  recommendation read (the first is the headline score), as resomap.records.ScoreTable per test resolution, and
  `words` for the summary's columns;
- `probe_targets(bundle, rows, device)`: what an explanation of a probe image explains, in one of the forms of
  resomap.explain.methods.targets (`target_form`: "class" logit or a class's logits summed over a "region"), and the
  object masks its localisation scores use;
- `step_targets(out, cfg)`: random labels and the loss of a timed training step (profiling: the trial's task and
  its configured loss).
What a task sees of the Trainer is an `EvalContext` (the model, its forward, the input transform, the autocast
context, the device, the config), built by `Trainer.eval_context`; no task reads the Trainer itself.
Models (`register_model(..., task=)`) and datasets (registry meta `task=`) declare the task they serve; the config
loader refuses a model, dataset, loss or explainer that does not fit (one line, exit 2, before anything runs).
Only the registries are read for that: no model is built and no heavy library is imported.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from resomap.config import register_check
from resomap.config.checks import check_dataset_fit, check_model_fit
from resomap.config.groups import register_group
from resomap.errors import ConfigError, UnknownNameError
from resomap.filecheck import check_table
from resomap.records import PREDICTIONS_FILE, ScoreTable, read_predictions
from resomap.registry import Registry

if TYPE_CHECKING:  # annotations only: importing torch here would slow the command line's start
    import numpy as np
    import torch
    from torch import nn

    from resomap.config.schema import Config
    from resomap.data.bundle import DataBundle
    from resomap.tasks.evaluation import EvalResult

DEFAULT_TASK = "classification"
Fail = Callable[[str, str, Any], None]  # fail(path, expected, got): the config loader's one-line error
Loss = Callable[..., "torch.Tensor"]  # loss(out, y[, w]) -> a scalar tensor
# (metrics '<prefix>/<name>', y_true, y_pred[, per-image ranking score or None]): a task's evaluation
Evaluation = (
    tuple[dict[str, float], "np.ndarray", "np.ndarray"]
    | tuple[dict[str, float], "np.ndarray", "np.ndarray", "np.ndarray | None"]
)


@dataclasses.dataclass(frozen=True)
class EvalContext:
    """What a task's evaluation and test figures see of the Trainer (built by `Trainer.eval_context`): the model
    (its train/eval mode is restored after `evaluating`), its forward as the trainer runs it (compiled or not),
    the input transform (channels-last), the autocast context of the trial's precision, the device, the config and
    the number of classes (the caller's, else the trainer's data's, else None: the task infers it)."""

    cfg: Config
    model: nn.Module
    forward: Callable[[torch.Tensor], torch.Tensor]
    inputs: Callable[[torch.Tensor], torch.Tensor]
    autocast: Callable[[], contextlib.AbstractContextManager[Any]]
    device: torch.device
    num_classes: int | None = None

    def logits(self, x: torch.Tensor, forward: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
        """The model's output on a batch as a trial computes it: input transform and autocast applied."""
        with self.autocast():
            return (forward or self.forward)(self.inputs(x))

    @contextlib.contextmanager
    def evaluating(self) -> Iterator[None]:
        """Eval mode and torch.inference_mode for the block; the model's train/eval mode restored after."""
        import torch

        was_training = self.model.training
        self.model.eval()
        try:
            with torch.inference_mode():
                yield
        finally:
            self.model.train(was_training)


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
    target_form: ClassVar[str] = "class"  # the explanation target form (resomap.explain.methods.targets)
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

    def check(self, cfg: Config, fail: Fail) -> None:
        """fail(path, expected, got) on a key of cfg that this task cannot run with."""

    def check_metric(self, metric: str, classes: list[str] | None) -> str | None:
        """Why ``metric`` (stats.metric) is not a score this task's decisions can be taken on, or None; ``classes``:
        the data's class names when known before loading. By default: one of the task's per-image scores."""
        names = [s.name for s in self.scores]
        return None if metric in names else f"one of the {self.name} task's per-image scores ({', '.join(names)})"

    # ---------------------------------------------------------------- training

    def criterion(self, cfg: Config, data: DataBundle, device: torch.device) -> Loss:
        """The training loss `loss(out, y)` of this task under cfg (data: the trial's DataBundle)."""
        raise NotImplementedError

    def correct(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Correct labels in a training batch (a tensor; divided by y.numel() for train/accuracy)."""
        return (out.detach().argmax(1) == y).sum()

    # ---------------------------------------------------------------- testing

    def evaluate(
        self, ctx: EvalContext, loader: Iterable[tuple[torch.Tensor, torch.Tensor]], prefix: str
    ) -> Evaluation:
        """(metrics '<prefix>/<name>', y_true, y_pred[, score]) of ctx.model over the loader's (x, y) batches: the
        arrays are the per-image score table; the optional fourth, one number per image or None, is what a
        ranking metric orders (classification: the probability of class 1 of a two-class task, for AUROC)."""
        raise NotImplementedError

    def test_outputs(self, found: EvalResult, ctx: EvalContext, bundle: DataBundle, title: str, out_dir: Path) -> None:
        """Figures of a test (confusion_matrix.png, ...) of ctx.model written to out_dir."""

    def write_records(self, matrix: Mapping[int, EvalResult], out_dir: Path) -> Path | None:
        """The per-image score table of every test resolution ({resolution: EvalResult}) in out_dir."""
        return None

    def check_records(self, path: Path, images: int | None, resolutions: Iterable[int]) -> str | None:
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

    def trivial_scores(
        self, scores: Mapping[str, np.ndarray], label: np.ndarray | None, train_counts: Sequence[int] | None = None
    ) -> np.ndarray | None:
        """Per test image, the headline score of the trivial predictor (float [N]), from the aligned per-image scores
        ({name: [S, N]}), labels ([N] or None) and the training split's count per class (`train_counts`, result.json
        data.train_counts); None when the records cannot say. Classification: always answering the training split's
        most frequent class (ties: the smallest label), correct or not; for results from before the trials recorded
        their training counts, the test images' most frequent class."""
        import numpy as np

        if label is None:
            return None
        label = np.asarray(label)
        if train_counts is not None and len(train_counts) and sum(train_counts) > 0:
            return (label == int(np.argmax(np.asarray(train_counts)))).astype(np.float64)
        classes, counts = np.unique(label, return_counts=True)
        return (label == classes[np.argmax(counts)]).astype(np.float64)

    # ---------------------------------------------------------------- explaining

    def probe_targets(
        self, bundle: DataBundle, rows: np.ndarray, device: torch.device
    ) -> tuple[torch.Tensor, np.ndarray | None]:
        """(targets of the probe images at `rows` of the test split, object masks bool [N, r, r] or None)."""
        raise NotImplementedError

    # ---------------------------------------------------------------- profiling

    def step_targets(self, out: torch.Tensor, cfg: Config | None = None) -> tuple[torch.Tensor, Loss]:
        """(random labels for a batch whose logits are `out`, the loss of `cfg`, else of the default config): a
        timed training step's inputs."""
        raise NotImplementedError


TASKS: Registry[type[Task]] = Registry("task", "resomap tasks")
register_group("task", TASKS)  # the loader checks task.<name>.* against the task's options


def register_task(name: str, *, options: type | None = None) -> Callable[[type[Task]], type[Task]]:
    """Register a Task subclass under `name` (the value of experiment.task); `options`: its options dataclass,
    whose fields are the config keys task.<name>.<field> (read with `task_options(cfg)`)."""

    def deco(cls: type[Task]) -> type[Task]:
        if not (isinstance(cls, type) and issubclass(cls, Task)):
            raise TypeError(f"task '{name}' must be a resomap.tasks.Task subclass, got {cls!r}")
        cls.name = name
        TASKS.register(name, options=options)(cls)
        return cls

    return deco


def task_options(cfg: Config) -> Any:
    """The options of cfg's experiment.task (task.<name>.*, its defaults when unset; None: it has none)."""
    from resomap.config.groups import group_options

    return group_options(cfg.task, cfg.experiment.task)


_BUILT: dict[str, Task] = {}


def get_task(name: str | None = None) -> Task:
    """The task named `name` (default classification); unknown names raise UnknownNameError with suggestions."""
    _builtins()
    key = TASKS.resolve(name or DEFAULT_TASK)
    if key not in _BUILT:
        _BUILT[key] = TASKS.get(key)()
    return _BUILT[key]


def task_of(cfg: Config) -> Task:
    return get_task(cfg.experiment.task)


def task_names() -> list[str]:
    _builtins()
    return TASKS.names()


def _builtins() -> None:
    from resomap.tasks import (  # noqa: F401  (registers the built-in tasks)
        classification,
        losses,
        segmentation,
    )


def other_task_sections(name: str) -> list[str]:
    """The config sections that hold the settings of tasks other than `name` (a trial key leaves them out)."""
    return [s for t in task_names() if t != name and (s := get_task(t).section)]


def step_words(name: str) -> str:
    """The labels and loss of a task's timed training step in words (its name when the task is unknown)."""
    try:
        return get_task(name).step_words
    except UnknownNameError:  # a profile read back from a task no longer registered
        return str(name)


def of_result(result: Mapping[str, Any]) -> Task:
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


def for_output(out: torch.Tensor) -> Task:
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


def _model_meta(name: str) -> dict[str, Any]:
    """The model's registry metadata ({} for timm: names and unknown names, reported where models resolve)."""
    from resomap.models.registry import MODELS, is_timm_name

    if is_timm_name(name):
        return {}
    try:
        return MODELS.meta(name)
    except UnknownNameError:
        return {}


def check(cfg: Config, fail: Fail) -> None:
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
    check_model_fit(cfg, _model_meta, fail)
    check_options(cfg, name, fail)
    task.check(cfg, fail)
    metric = cfg.stats.metric
    if metric is not None:
        from resomap.data.checks import known_classes

        expected = task.check_metric(str(metric), known_classes(cfg))
        if expected:
            fail("stats.metric", f"{expected} or null (the task's headline score)", metric)


def check_options(cfg: Config, name: str, fail: Fail) -> None:
    """fail on task.<other>.* (options of a task that is not experiment.task) and loss.<term>.* of another task's
    loss term; their keys and values were checked against the options dataclasses at load."""
    from resomap.tasks.losses import check_loss_options

    for other in cfg.task.__dict__.get("options") or {}:
        if other != name:
            mine = f"task.{name}.*" if TASKS.options(name) is not None else f"none: the {name} task has no options"
            fail(f"task.{other}", f"options of experiment.task ({mine})", f"options of the {other} task")
    check_loss_options(cfg, name, fail)


register_check(check)  # the config loader runs it on every load (the config layer imports nothing above it)

_builtins()  # the task and loss config groups hold the built-in entries from the first config load

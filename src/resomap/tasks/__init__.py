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

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from resomap.config import register_check
from resomap.config.checks import check_dataset_fit, check_model_fit
from resomap.errors import ConfigError, UnknownNameError
from resomap.tasks.base import (
    DEFAULT_TASK,
    TASKS,
    EvalContext,
    Evaluation,
    Fail,
    Loss,
    Score,
    Task,
    register_task,
    task_options,
)

if TYPE_CHECKING:  # annotations only: importing torch here would slow the command line's start
    import torch

    from resomap.config.schema import Config

__all__ = [
    "DEFAULT_TASK",
    "TASKS",
    "EvalContext",
    "Evaluation",
    "Fail",
    "Loss",
    "Score",
    "Task",
    "dataset_task",
    "for_output",
    "get_task",
    "of_result",
    "register_task",
    "step_words",
    "task_names",
    "task_of",
    "task_options",
]


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

    if "@" in str(name):  # a recipe of a timm or torchvision backbone (resomap.models.recipes): its stages
        from resomap.errors import ModelError
        from resomap.models.build import recipe_meta

        try:
            return recipe_meta(str(name))
        except (UnknownNameError, ModelError):
            return {}  # reported where the model is built
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

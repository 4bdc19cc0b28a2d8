"""The task contract: the `Task` strategy every task subclasses, what it sees of the Trainer (`EvalContext`), the
per-image `Score`, and the registry (`TASKS`, `register_task`). The built-in tasks import it from here; the lookups
that load them (`get_task`, `of_result`, ...) are resomap.tasks's, so no task module imports the package that
loads it."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from resomap.config.groups import register_group
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

"""What a task's evaluation of a model gives (the task contract's own types, resomap.tasks): the metrics and the
per-image score table of one test split (EvalResult), and the two numbers the cross-resolution matrix keeps
(EvalMetrics). resomap.stages produces them; the tasks write their records from them."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: the tasks package stays light for the command line's start
    import numpy as np


@dataclasses.dataclass
class EvalMetrics:
    """A model tested at one resolution (the cross-resolution matrix keeps these two)."""

    accuracy: float = math.nan
    macro_f1: float = math.nan

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EvalMetrics:
        names = {f.name for f in dataclasses.fields(cls)}  # older or newer files may hold others
        return cls(**{k: float(v) for k, v in data.items() if k in names})


@dataclasses.dataclass
class EvalResult:
    """A model evaluated on a test split: `metrics` named '<prefix>/<name>', the task's per-image score table behind
    them (y_true, y_pred) and `index`, each image's index in the raw dataset (bundle.splits['test'], the test
    loader's order)."""

    metrics: dict[str, float]
    y_true: np.ndarray
    y_pred: np.ndarray
    prefix: str = "test"
    index: np.ndarray | None = None
    score: np.ndarray | None = None  # classification with two classes: each image's probability of class 1

    @property
    def summary(self) -> EvalMetrics:
        get = self.metrics.get  # a task without these metrics keeps NaN in the cross-resolution matrix
        return EvalMetrics(get(f"{self.prefix}/accuracy", math.nan), get(f"{self.prefix}/macro_f1", math.nan))

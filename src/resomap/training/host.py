"""What the Trainer's strategies for other kinds of fit (closed_form: a closed-form model; feature_head: a head on
cached features) use of the Trainer that hands them a model: its settings, its state and the steps of its loop.
A Protocol, so that they name it without importing the Trainer, which imports them (no import circle)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch
    from torch import nn

    from resomap.config.schema import Config
    from resomap.models.spec import FeatureKind, FitKind
    from resomap.training.fit_result import FitResult


class FitHost(Protocol):
    cfg: Config
    device: torch.device
    precision: str
    channels_last: bool
    model: nn.Module
    history: list[dict[str, Any]]
    epoch: int
    should_stop: bool
    criterion: Any
    fit_kind: FitKind  # the model's ModelSpec.fit
    features: FeatureKind  # the model's ModelSpec.features

    def place(self, model: nn.Module, data: Any) -> nn.Module: ...

    def evaluate(
        self, model: nn.Module, loader: Any, prefix: str = "val", num_classes: int | None = None
    ) -> tuple[Any, ...]: ...

    def setup(self, model: nn.Module, data: Any) -> None: ...

    def call_hooks(self, hook: str, *args: Any) -> None: ...

    def autocast(self) -> AbstractContextManager[Any]: ...

    def prepare_inputs(self, x: torch.Tensor) -> torch.Tensor: ...

    def train_step(self, x: torch.Tensor, y: torch.Tensor, w: list, group: int, update: bool) -> tuple: ...

    def fit_result(self, start: int, resumed: int | None, epochs_planned: int | None = None) -> FitResult: ...

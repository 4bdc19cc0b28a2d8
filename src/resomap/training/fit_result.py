"""What a fit returns (resomap.training.Trainer.fit and the strategies it hands a model to: closed_form,
feature_head), apart from the Trainer so that those strategies name it without importing the Trainer."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from resomap.training.convergence import Convergence


@dataclass
class FitResult:
    best_path: Path | None
    last_path: Path | None
    best_score: float | None
    epochs_run: int
    history: list[dict[str, Any]] = field(default_factory=list)
    stopped_early: bool = False
    resumed_from_epoch: int | None = None
    convergence: Convergence | None = None  # best epoch, still improving, stop reason, undertrained

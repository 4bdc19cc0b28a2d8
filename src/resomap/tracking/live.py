"""Per-epoch metrics logged live, while a trial trains, into its run (the Trainer callback)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from resomap.tracking.mlflow_store import Tracker


class MlflowCallback:
    """Trainer callback: per-epoch metrics into one run, logged in batches with the epoch as step.

    An epoch the run already holds is not logged again (as `publish` logs only what a run lacks): the run of a
    trial is reused by its next attempt (`--rerun-failed`, a resume), and an attempt that trains an epoch again
    would add a second point at its step. A gradient fit resumes after its last.pt's epoch, but a closed-form
    model (resomap.models.classical) refits every penalty from the start, with the same seed and the same scores."""

    def __init__(self, tracker: Tracker, run_id: str):
        self.tracker = tracker
        self.run_id = run_id
        self._pending: dict[str, float] = {}
        self._logged: set[int] = set()

    def on_fit_start(self, trainer: Any) -> None:
        try:  # the epochs an earlier attempt logged (every history row has "epoch")
            self._logged = {int(m.step) for m in self.tracker.metric_history(self.run_id, "epoch")}
        except Exception:  # the store went away: log as usual (publish and sync repeat nothing)
            self._logged = set()

    def on_train_epoch_end(self, trainer: Any, metrics: Mapping[str, float]) -> None:
        self._pending.update(metrics)

    def on_validation_end(self, trainer: Any, metrics: Mapping[str, float]) -> None:
        self._pending.update(metrics)
        step = int(trainer.epoch)
        if step not in self._logged:
            self.tracker.log_metrics(self.run_id, self._pending, step=step)
            self._logged.add(step)
        self._pending = {}

"""Per-epoch metrics logged live, while a trial trains, into its run (the Trainer callback), and how a closed-form
fit's penalty grid is logged instead of epochs (`grid_points`, `chosen_fit`, also used by `publish`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from resomap.tracking.mlflow_store import is_number

if TYPE_CHECKING:
    from resomap.tracking.mlflow_store import Tracker

# A closed-form fit (resomap.models.classical, resomap.training.closed_form) solves once per penalty of a grid; its
# history has one row per penalty ("epoch" = the penalty's index, `train/penalty_C` its value). MLflow gets the grid
# as a curve under GRID (step = the penalty's index, GRID_C the penalty itself), and the run's own train/* and val/*
# are those of the fit chosen on validation (`chosen_fit`), so the runs table and the run page show the fit that was
# kept, not the last one solved, and no `epoch` metric suggests gradient epochs.
PENALTY = "train/penalty_C"  # resomap.summary.convergence.PENALTY_KEY (not imported: the summary package is heavy)
GRID = "penalty/"
GRID_C = GRID + "C"
GRID_NAMES = {  # a grid row's keys whose plain renaming (train/loss -> penalty/train_loss) would mislead
    PENALTY: GRID_C,
    "train/epoch_time_s": GRID + "fit_time_s",
    "train/images_per_s": GRID + "fit_images_per_s",
    "train/peak_memory_mb": GRID + "peak_memory_mb",
}
NOT_CHOSEN = ("epoch", "train/epoch_time_s", "train/images_per_s", "train/peak_memory_mb")  # of one fit, in the grid


def is_grid_row(row: Mapping[str, Any]) -> bool:
    """Whether a history row is one penalty of a closed-form fit's grid."""
    return PENALTY in row


def grid_points(row: Mapping[str, Any]) -> dict[str, float]:
    """One penalty's row of a closed-form fit as the grid curve's point: `penalty/C` (the penalty) and each metric
    under `penalty/` (train/loss -> penalty/train_loss, val/loss -> penalty/val_loss; the fit's seconds as
    penalty/fit_time_s); `epoch` left out."""
    return {
        GRID_NAMES.get(key, GRID + key.replace("/", "_")): float(value)
        for key, value in row.items()
        if key != "epoch" and is_number(value)
    }


def chosen_fit(history: list[Mapping[str, Any]], best_epoch: Any) -> dict[str, float]:
    """The run's own metrics of a closed-form fit: the train/* and val/* of the grid's row at `best_epoch` (the
    penalty chosen on validation, the convergence record's), with its penalty as train/penalty_C; the per-fit
    seconds, throughput and memory stay in the grid curve. Empty when no row is at `best_epoch`."""
    for i, row in enumerate(history):
        if best_epoch is not None and int(row.get("epoch", i)) == int(best_epoch):
            return {k: float(v) for k, v in row.items() if k not in NOT_CHOSEN and is_number(v)}
    return {}


class MlflowCallback:
    """Trainer callback: per-epoch metrics into one run, logged in batches with the epoch as step; a closed-form
    fit's rows as the penalty grid's curve (`grid_points`: step = the penalty's index; its chosen fit's metrics are
    `publish`'s, once the fit is over).

    An epoch (or penalty) the run already holds is not logged again (as `publish` logs only what a run lacks): the
    run of a trial is reused by its next attempt (`--rerun-failed`, a resume), and an attempt that trains an epoch
    again would add a second point at its step. A gradient fit resumes after its last.pt's epoch, but a closed-form
    model (resomap.models.classical) refits every penalty from the start, with the same seed and the same scores."""

    def __init__(self, tracker: Tracker, run_id: str):
        self.tracker = tracker
        self.run_id = run_id
        self._pending: dict[str, float] = {}
        self._logged: dict[str, set[int]] = {}  # "epoch" or GRID_C -> the steps the run holds

    def on_fit_start(self, trainer: Any) -> None:
        self._logged = {}

    def _held(self, key: str) -> set[int]:
        """The steps of `key` the run holds (every epoch row has "epoch", every grid row GRID_C), read once."""
        if key not in self._logged:
            try:
                self._logged[key] = {int(m.step) for m in self.tracker.metric_history(self.run_id, key)}
            except Exception:  # the store went away: log as usual (publish and sync repeat nothing)
                self._logged[key] = set()
        return self._logged[key]

    def on_train_epoch_end(self, trainer: Any, metrics: Mapping[str, float]) -> None:
        self._pending.update(metrics)

    def on_validation_end(self, trainer: Any, metrics: Mapping[str, float]) -> None:
        self._pending.update(metrics)
        step = int(trainer.epoch)
        row, marker = self._pending, "epoch"
        if is_grid_row(row):
            row, marker = grid_points(row), GRID_C
        held = self._held(marker)
        if step not in held:
            self.tracker.log_metrics(self.run_id, row, step=step)
            held.add(step)
        self._pending = {}

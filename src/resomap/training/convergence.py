"""Did a model train enough? The convergence record of one fit: the epoch of the best checkpoint, whether
validation was still improving when training stopped, why it stopped, the learning rate the range test found, and an
`undertrained` flag.

A fit stops on a plateau (early stopping: the smoothed monitored value did not improve for `patience` epochs, after
at least `min_epochs`), on its wall-clock cap (`training.max_minutes`) or when the epoch budget runs out. It is flagged
undertrained only when the cap or the budget ended it while validation was still improving: the best of the
smoothed stop monitor (else the checkpoint monitor) lies within the last `window` epochs, half the patience rounded up
(1 without early stopping), and beats the best before them by more than `training.convergence_tolerance` of its
size (a schedule annealed to its end creeps on by a fraction of a percent: converged, not cut short). A fit whose
checkpoint monitor reached its best possible value (macro-F1 1.0, a loss of 0) is converged whatever stopped it; a
plateau is converged, even an early one (a model stuck near its start is a model that did not learn, which the
baselines of the summary show, not one that needs more epochs).
The best epoch is the one the best checkpoint is chosen by (`training.checkpoint.monitor` / `mode`; the earliest of
tied epochs, as `TopKCheckpoint` keeps it), read from the fit's per-epoch history, so a resumed fit gives the same
record as an uninterrupted one. Pure Python: result.json and MLflow read its `to_dict()`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

EARLY_STOPPING = "early_stopping"
TIME_CAP = "time_cap"
EPOCH_BUDGET = "epoch_budget"
NOTHING_RUN = "no_epochs"


@dataclasses.dataclass(frozen=True)
class Convergence:
    """One fit's convergence record (epochs are 0-based, as in the history and checkpoint names)."""

    monitor: str  # the metric the best checkpoint is chosen by
    mode: str  # min or max
    best_epoch: int | None  # epoch of the best checkpoint; None when the monitor was never logged
    best_value: float | None
    last_epoch: int | None
    epochs_run: int  # epochs in the history (epochs of an earlier, resumed attempt included)
    epochs_planned: int  # training.epochs
    still_improving: bool  # the last epoch is the best one: validation was still improving when training stopped
    stop_reason: str  # early_stopping | epoch_budget | no_epochs
    stop_detail: str  # the stop reason in words
    undertrained: bool
    undertrained_reason: str | None = None
    perfect: bool = False  # the checkpoint monitor reached its best possible value (converged, whatever stopped it)
    lr_found: float | None = None  # the peak learning rate of the LR range test (training.lr_find), when it ran

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _rank(value: Any, mode: str) -> float:
    """Lower is better; NaN or missing ranks worst."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return math.inf
    if math.isnan(v):
        return math.inf
    return v if mode == "min" else -v


def best_epoch(history: Sequence[Mapping[str, Any]], monitor: str, mode: str) -> tuple[int | None, float | None]:
    """(epoch, value) of the best `monitor` in the history: the earliest of ties; (None, None) when never finite."""
    best, best_rank = None, math.inf
    for i, row in enumerate(history):
        rank = _rank(row.get(monitor), mode)
        if rank < best_rank:
            best, best_rank = (int(row.get("epoch", i)), float(row[monitor])), rank
    return best if best is not None else (None, None)


def _perfect(value: float | None, mode: str) -> bool:
    """The best possible value: 1 for a score in [0, 1] (max mode), 0 for a loss (min mode)."""
    if value is None or math.isnan(value):
        return False
    return value >= 1.0 - 1e-9 if mode == "max" else value <= 1e-9


def _still_improving(
    history: Sequence[Mapping[str, Any]], monitor: str, mode: str, window: int, tolerance: float = 0.0
) -> bool:
    """The best value of `monitor` (smoothed when the history has `<monitor>_smoothed`) lies within the last
    `window` epochs and beats the best before them by more than `tolerance` times its size (relative: a plateau
    that creeps by less, as a schedule annealed to its end does, is converged). A history no longer than the window
    has nothing before it: still improving when its best is there at all."""
    smoothed = f"{monitor}_smoothed"
    key = smoothed if history and smoothed in history[-1] else monitor
    epoch, _ = best_epoch(history, key, mode)
    recent = [int(row.get("epoch", i)) for i, row in enumerate(history)][-window:]
    if epoch is None or epoch not in recent:
        return False
    earlier = history[: len(history) - window]
    if not earlier or tolerance <= 0:
        return True
    _, before = best_epoch(earlier, key, mode)
    _, now = best_epoch(history[-window:], key, mode)
    if before is None or now is None:
        return True
    return _rank(now, mode) < _rank(before, mode) - tolerance * abs(before)


def convergence(
    history: Sequence[Mapping[str, Any]],
    *,
    monitor: str,
    mode: str,
    epochs_planned: int,
    stopped_early: bool,
    patience: int | None = None,
    stop_monitor: str | None = None,
    stop_mode: str | None = None,
    time_capped: bool = False,
    tolerance: float = 0.0,
) -> Convergence:
    """The record of a fit from its per-epoch history. `stopped_early`: early stopping (on `stop_monitor` /
    `stop_mode` with `patience`, when given) or another callback stopped it before `epochs_planned`;
    `time_capped`: training.max_minutes ended it; `tolerance`: the relative improvement over the last window that
    still counts as improving (training.convergence_tolerance)."""
    epoch, value = best_epoch(history, monitor, mode)
    n = len(history)
    last = int(history[-1].get("epoch", n - 1)) if history else None
    if not history:
        reason, detail = NOTHING_RUN, "no epoch ran"
    elif stopped_early:
        reason = EARLY_STOPPING
        what = f"{stop_monitor} did not improve for {patience} epochs" if stop_monitor and patience else "a callback"
        detail = f"early stopping after epoch {last} ({what})"
    elif time_capped:
        reason, detail = TIME_CAP, f"the time cap ended it after epoch {last} (training.max_minutes)"
    else:
        reason, detail = EPOCH_BUDGET, f"the epoch budget ran out (training.epochs={epochs_planned})"
    window = max(1, math.ceil(patience / 2)) if patience else 1
    trend_monitor, trend_mode = (stop_monitor, stop_mode) if stop_monitor and stop_mode else (monitor, mode)
    still = bool(history) and _still_improving(history, trend_monitor, trend_mode, window, tolerance)
    perfect = _perfect(value, mode)
    flagged: str | None = None
    if epoch is None and history:
        flagged = f"{monitor} was never finite: nothing to choose a best epoch by"
    elif still and not perfect and reason in (EPOCH_BUDGET, TIME_CAP):
        what = "the time cap" if reason == TIME_CAP else "the epoch budget"
        by = f" by more than {tolerance:.1%}" if tolerance > 0 else ""
        flagged = (
            f"{what} ended it while {trend_monitor} was still improving (best within the last {window} epochs{by})"
        )
    return Convergence(
        monitor=monitor,
        mode=mode,
        best_epoch=epoch,
        best_value=value,
        last_epoch=last,
        epochs_run=n,
        epochs_planned=int(epochs_planned),
        still_improving=bool(still),
        stop_reason=reason,
        stop_detail=detail,
        undertrained=flagged is not None,
        undertrained_reason=flagged,
        perfect=perfect,
    )


def closed_form_convergence(
    record: Convergence, history: Sequence[Mapping[str, Any]], penalties: Sequence[float]
) -> Convergence:
    """The record of a closed-form fit over a penalty grid (resomap.models.classical): each "epoch" is one penalty,
    strongest first, so an early best epoch is a strong penalty chosen on validation, not a stuck model. Flagged
    when the solver did not converge at the chosen penalty, or the weakest penalty of the grid was the best (a
    weaker one might do better)."""
    grid = ", ".join(f"{p:g}" for p in penalties)
    detail = f"fitted in closed form at each penalty C of the grid ({grid}); the best on validation is kept"
    flagged = None
    if record.best_epoch is not None:
        chosen = penalties[record.best_epoch]
        if not history[record.best_epoch].get("train/solver_converged", 1.0):
            flagged = f"the solver did not converge at the chosen penalty C={chosen:g}"
        elif record.best_epoch == len(penalties) - 1:
            flagged = (
                f"the weakest penalty of the grid (C={chosen:g}) was the best on validation: a weaker one might "
                "do better"
            )
    reason = flagged if flagged is not None or record.best_epoch is not None else record.undertrained_reason
    return dataclasses.replace(
        record,
        stop_detail=detail if record.stop_reason != EARLY_STOPPING else record.stop_detail,
        undertrained=reason is not None,
        undertrained_reason=reason,
    )

"""Callbacks with Lightning's hook names: top-k checkpointing and early stopping.

A callback is any object; the trainer calls a hook only when the callback has it. Callbacks with a higher
`order` run later in each hook; TopKCheckpoint runs last so last.pt holds every other callback's updated state.
"""

from __future__ import annotations

import math
import re
import time
from pathlib import Path
from typing import Any

from resomap.config.schema import Config
from resomap.errors import ConfigError
from resomap.training import distributed
from resomap.training.checkpoint import save_checkpoint, write_json_atomic


def _check_mode(mode: str, owner: str) -> None:
    if mode not in ("min", "max"):
        raise ConfigError(f"{owner}: mode must be 'min' or 'max', got {mode!r}")


def _score(metrics: dict[str, Any], monitor: str, owner: str) -> float:
    if monitor not in metrics:
        names = ", ".join(sorted(k for k in metrics if k != "epoch"))
        raise ConfigError(f"{owner}: monitored metric {monitor!r} is not logged; available: {names}")
    return float(metrics[monitor])


def _rank(score: float, mode: str) -> float:
    """A value where lower is better; NaN ranks worst."""
    if math.isnan(score):
        return math.inf
    return score if mode == "min" else -score


class TopKCheckpoint:
    """Keeps the `top_k` best checkpoints as `epoch=E-<metric>=V.pt` and writes `last.pt` every epoch.

    A metadata JSON (epoch, metric, config hash, model, resolution, num_classes, time) sits beside each file.
    Under DDP only rank 0 writes files (with eviction and `last.pt`); every rank tracks the same best list.
    """

    order = 100

    def __init__(
        self,
        dirpath: str | Path,
        monitor: str = "val/macro_f1",
        mode: str = "max",
        top_k: int = 1,
        metadata: dict[str, Any] | None = None,
    ):
        _check_mode(mode, "training.checkpoint")
        if not isinstance(top_k, int) or top_k < 1:
            raise ConfigError(f"training.checkpoint.top_k: expected an integer >= 1, got {top_k!r}")
        self.dirpath = Path(dirpath)
        self.monitor, self.mode, self.top_k = monitor, mode, top_k
        self.metadata = dict(metadata or {})
        self.kept: list[dict[str, Any]] = []  # [{"file", "score", "epoch"}], best first

    @property
    def last_path(self) -> Path:
        return self.dirpath / "last.pt"

    @property
    def best_path(self) -> Path | None:
        return self.dirpath / self.kept[0]["file"] if self.kept else None

    @property
    def best_score(self) -> float | None:
        return self.kept[0]["score"] if self.kept else None

    def _filename(self, epoch: int, score: float) -> str:
        metric = re.sub(r"[^A-Za-z0-9_.-]+", "_", self.monitor)
        return f"epoch={epoch}-{metric}={score:.4f}.pt"

    def _meta(self, trainer: Any, epoch: int, score: float) -> dict[str, Any]:
        return {
            **trainer.meta,
            **self.metadata,
            "epoch": epoch,
            "metric": self.monitor,
            "mode": self.mode,
            "value": None if math.isnan(score) else score,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }

    def _write(self, trainer: Any, name: str, meta: dict[str, Any]) -> None:
        if not distributed.is_rank0():  # under DDP only rank 0 writes; the others keep the same `kept` list
            return
        payload = trainer.checkpoint_payload()
        payload["meta"] = {**payload.get("meta", {}), **meta}
        save_checkpoint(self.dirpath / name, payload)
        write_json_atomic((self.dirpath / name).with_suffix(".json"), meta)

    def on_validation_end(self, trainer: Any, metrics: dict[str, Any]) -> None:
        score = _score(metrics, self.monitor, "training.checkpoint.monitor")
        epoch = trainer.epoch
        meta = self._meta(trainer, epoch, score)
        rank = _rank(score, self.mode)
        worst = max((_rank(k["score"], self.mode) for k in self.kept), default=math.inf)
        if len(self.kept) < self.top_k or rank < worst:
            name = self._filename(epoch, score)
            self._write(trainer, name, meta)  # written safely before anything is evicted
            self.kept = [k for k in self.kept if k["file"] != name]
            self.kept.append({"file": name, "score": score, "epoch": epoch})
            self.kept.sort(key=lambda k: (_rank(k["score"], self.mode), k["epoch"]))
            for old in self.kept[self.top_k :] if distributed.is_rank0() else []:
                (self.dirpath / old["file"]).unlink(missing_ok=True)
                (self.dirpath / old["file"]).with_suffix(".json").unlink(missing_ok=True)
            self.kept = self.kept[: self.top_k]
        self._write(trainer, "last.pt", meta)  # after the top-k update, so resume sees the new list

    def state_dict(self) -> dict[str, Any]:
        return {"kept": [dict(k) for k in self.kept], "monitor": self.monitor, "mode": self.mode}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.kept = [dict(k) for k in state.get("kept", [])]


class EarlyStopping:
    """Sets `trainer.should_stop` after `patience` epochs without an improvement larger than `min_delta` of the
    monitored value, smoothed as an exponential moving average (`smoothing`: the newest epoch's weight; 1: none),
    and never before `min_epochs` epochs ran."""

    def __init__(
        self,
        monitor: str = "val/loss",
        mode: str = "min",
        patience: int = 5,
        min_delta: float = 0.0,
        smoothing: float = 1.0,
        min_epochs: int = 0,
    ):
        _check_mode(mode, "training.early_stopping")
        if not isinstance(patience, int) or patience < 1:
            raise ConfigError(f"training.early_stopping.patience: expected an integer >= 1, got {patience!r}")
        self.monitor, self.mode, self.patience, self.min_delta = monitor, mode, patience, abs(min_delta)
        self.smoothing, self.min_epochs = float(smoothing), int(min_epochs)
        self.best: float | None = None
        self.smoothed: float | None = None
        self.wait = 0
        self.stopped_epoch: int | None = None

    def on_validation_end(self, trainer: Any, metrics: dict[str, Any]) -> None:
        score = _score(metrics, self.monitor, "training.early_stopping.monitor")
        if not math.isnan(score):
            a = self.smoothing
            self.smoothed = score if self.smoothed is None else a * score + (1 - a) * self.smoothed
        value = self.smoothed if self.smoothed is not None else score
        if self.smoothing < 1:  # in the history: the convergence record reads the trend from it
            metrics[f"{self.monitor}_smoothed"] = value
        improved = not math.isnan(value) and (
            self.best is None or _rank(value, self.mode) < _rank(self.best, self.mode) - self.min_delta
        )
        if improved:
            self.best, self.wait = value, 0
            return
        self.wait += 1
        if self.wait >= self.patience and trainer.epoch + 1 >= self.min_epochs:
            self.stopped_epoch = trainer.epoch
            trainer.should_stop = True

    def state_dict(self) -> dict[str, Any]:
        return {"best": self.best, "wait": self.wait, "stopped_epoch": self.stopped_epoch, "smoothed": self.smoothed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best, self.wait, self.stopped_epoch = state["best"], state["wait"], state["stopped_epoch"]
        self.smoothed = state.get("smoothed")


def default_callbacks(cfg: Config, dirpath: str | Path, metadata: dict[str, Any] | None = None) -> list:
    """TopKCheckpoint from training.checkpoint, plus EarlyStopping when training.early_stopping.enabled."""
    ck, es = cfg.training.checkpoint, cfg.training.early_stopping
    callbacks: list = [TopKCheckpoint(dirpath, ck.monitor, ck.mode, ck.top_k, metadata)]
    if es.enabled:
        callbacks.insert(0, EarlyStopping(es.monitor, es.mode, es.patience, es.min_delta, es.smoothing, es.min_epochs))
    return callbacks

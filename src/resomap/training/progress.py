"""Progress display: tqdm bars on a terminal, one log line per epoch otherwise (training.progress)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Iterator
from typing import Any

log = logging.getLogger(__name__)

_KEYS = ("train/loss", "train/accuracy", "val/loss", "val/accuracy", "val/macro_f1", "lr", "train/images_per_s")


def resolve_mode(mode: str) -> str:
    """auto -> bar on a TTY (stderr), log otherwise."""
    if mode == "auto":
        isatty = getattr(sys.stderr, "isatty", None)
        return "bar" if isatty is not None and isatty() else "log"
    return mode


def format_metrics(metrics: dict[str, Any]) -> str:
    parts = []
    for key in _KEYS:
        if key in metrics:
            value = metrics[key]
            parts.append(f"{key}={value:.3g}" if key in ("lr", "train/images_per_s") else f"{key}={value:.4f}")
    return " ".join(parts)


class Progress:
    """Wraps the epoch loop and each epoch's batches. Bars never read tensors, so they add no device syncs."""

    def __init__(self, mode: str, run_name: str = ""):
        self.mode = resolve_mode(mode)
        self.prefix = f"[{run_name}] " if run_name else ""
        self._epoch_bar = None

    def start(self, first_epoch: int, epochs: int) -> None:
        if self.mode == "bar":
            from tqdm.auto import tqdm

            self._epoch_bar = tqdm(total=epochs, initial=first_epoch, desc=f"{self.prefix}epochs", unit="epoch")

    def batches(self, loader: Iterable, epoch: int, total: int) -> Iterator:
        if self.mode != "bar":
            return iter(loader)
        from tqdm.auto import tqdm

        return iter(tqdm(loader, total=total, desc=f"epoch {epoch}", unit="batch", leave=False))

    def epoch_end(self, epoch: int, epochs: int, metrics: dict[str, Any]) -> None:
        if self.mode == "bar" and self._epoch_bar is not None:
            self._epoch_bar.set_postfix_str(format_metrics(metrics), refresh=False)
            self._epoch_bar.update(1)
        elif self.mode == "log":
            log.info("%sepoch %d/%d %s", self.prefix, epoch + 1, epochs, format_metrics(metrics))

    def close(self) -> None:
        if self._epoch_bar is not None:
            self._epoch_bar.close()
            self._epoch_bar = None

"""Trainer overhead benchmark: a bare PyTorch loop (resomap.training.bare) vs Trainer.fit on the same in-memory
batches. Used by scripts/benchmark_trainer.py and `resomap bench --vs-bare`; it lives with the other benchmarks
(it times through resomap.profiling.timing), above the training layer it measures.
"""

from __future__ import annotations

import copy
import logging
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from resomap.config import build
from resomap.config.schema import Config
from resomap.training.bare import InMemoryLoader, SmallCNN, bare_epoch

log = logging.getLogger(__name__)


@dataclass
class BenchResult:
    bare_images_per_s: float  # median over rounds
    trainer_images_per_s: float
    ratio: float  # trainer / bare: median of the per-round ratios
    bare_runs: list[float] = field(default_factory=list)
    trainer_runs: list[float] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    ratio_low: float = math.nan  # 95% interval of the median per-round ratio (resomap.profiling.timing)
    ratio_high: float = math.nan
    ratios: list[float] = field(default_factory=list)  # per round


def _default_model_factory(model: str | None, num_classes: int, cfg: Config) -> Callable[[], nn.Module]:
    if not model or model == "small_cnn":
        return lambda: SmallCNN(num_classes)
    from resomap.models import build_model  # optional: only when a registry model is asked for

    return lambda: build_model(model, num_classes, 3, cfg.models)[0]


def benchmark_vs_bare(
    model: str | None = None,
    resolution: int = 64,
    num_images: int = 512,
    batch_size: int = 32,
    epochs: int = 2,
    rounds: int = 5,
    device: str | torch.device = "cpu",
    overrides: dict | None = None,
) -> BenchResult:
    """images/s of a bare loop and of Trainer.fit (same model, data, optimizer settings, precision, threads) over
    `epochs` timed epochs after one warm-up epoch, in `rounds` interleaved rounds (bare first in even rounds,
    the Trainer first in odd ones); the ratio Trainer / bare is taken per round and reported with its interval.
    """
    from resomap.profiling.timing import Interval

    device = torch.device(device)
    cfg = _bench_config(device, epochs, overrides)
    data = _bench_data(num_images, resolution, batch_size, device)
    factory = _default_model_factory(model, 2, cfg)
    torch.manual_seed(0)
    initial = factory()
    bare_runs, trainer_runs = _interleaved_rounds(
        lambda: _bare_speed(initial, data.train, cfg, device, epochs),
        lambda: _trainer_speed(initial, data, cfg, device),
        rounds,
    )
    ratios = [t / b for t, b in zip(trainer_runs, bare_runs)]
    ci = Interval.of(ratios)
    settings = {"model": model or "small_cnn", "resolution": resolution, "batch_size": batch_size}
    settings.update(device=str(device), epochs=epochs, rounds=rounds, precision=cfg.system.precision)
    settings.update(threads=cfg.system.threads, images=num_images)
    return BenchResult(
        statistics.median(bare_runs), statistics.median(trainer_runs), ci.value, bare_runs, trainer_runs, settings,
        ci.low, ci.high, ratios,
    )  # fmt: skip


def _bench_config(device: torch.device, epochs: int, overrides: dict | None) -> Config:
    """The config both loops run with (one warm-up epoch more than timed, no progress output, cosine schedule),
    `overrides` ({section: {key: value}}) on top; on CPU one thread count for both loops, set now (Trainer.fit
    would re-pick it)."""
    from resomap.runtime import auto_threads

    raw = {
        "training": {"epochs": epochs + 1, "progress": "off", "scheduler": {"name": "cosine"}},
        "system": {"device": device.type},
    }
    for key, value in (overrides or {}).items():
        raw.setdefault(key, {}).update(value)
    if device.type == "cpu" and not raw["system"].get("threads"):
        raw["system"]["threads"] = auto_threads()
    cfg = build(raw)
    if cfg.system.threads > 0:
        torch.set_num_threads(cfg.system.threads)
    return cfg


def _bench_data(num_images: int, resolution: int, batch_size: int, device: torch.device) -> SimpleNamespace:
    """Random images of 2 classes on `device` (seed 0): `train` (shuffled batches), a one-batch `val`, and what
    Trainer.fit reads of a data bundle."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(num_images, 3, resolution, resolution, generator=gen).to(device)
    y = torch.randint(0, 2, (num_images,), generator=gen).to(device)
    train = InMemoryLoader(x, y, batch_size, seed=0)
    val = InMemoryLoader(x[:batch_size], y[:batch_size], batch_size, shuffle=False)
    return SimpleNamespace(train=train, val=val, num_classes=2, train_labels=y.cpu().numpy(), resolution=resolution)


def _bare_speed(initial: nn.Module, train: InMemoryLoader, cfg: Config, device: torch.device, epochs: int) -> float:
    """images/s of the bare loop on a copy of `initial`: mean over the epochs after the warm-up one."""
    from resomap.runtime import resolve_channels_last, resolve_precision

    net = copy.deepcopy(initial).to(device)
    if resolve_channels_last(cfg.system.channels_last, resolve_precision(cfg.system.precision, device)[0]):
        net = net.to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(net.parameters(), lr=cfg.training.optimizer.lr, weight_decay=0.05)
    speeds = [bare_epoch(net, train, opt, cfg) for _ in range(epochs + 1)]
    return statistics.mean(speeds[1:])


def _trainer_speed(initial: nn.Module, data: SimpleNamespace, cfg: Config, device: torch.device) -> float:
    """images/s of Trainer.fit on a copy of `initial`: mean over the epochs after the warm-up one."""
    from resomap.training.trainer import Trainer

    history = Trainer(cfg, device).fit(copy.deepcopy(initial), data).history
    return statistics.mean(h["train/images_per_s"] for h in history[1:])


def _interleaved_rounds(
    bare: Callable[[], float], trainer: Callable[[], float], rounds: int
) -> tuple[list[float], list[float]]:
    """(bare runs, trainer runs): bare first in even rounds, the Trainer first in odd ones."""
    bare_runs: list[float] = []
    trainer_runs: list[float] = []
    for r in range(rounds):
        if r % 2 == 0:
            bare_runs.append(bare())
            trainer_runs.append(trainer())
        else:
            trainer_runs.append(trainer())
            bare_runs.append(bare())
        log.info("round %d: bare %.1f img/s, trainer %.1f img/s", r + 1, bare_runs[-1], trainer_runs[-1])
    return bare_runs, trainer_runs

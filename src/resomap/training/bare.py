"""Trainer overhead benchmark: a bare PyTorch loop vs Trainer.fit on the same in-memory batches.

Used by scripts/benchmark_trainer.py (and later `resomap bench --vs-bare`).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from torch import nn

from resomap.config import build
from resomap.config.schema import Config
from resomap.runtime import autocast_dtype

log = logging.getLogger(__name__)


class InMemoryLoader:
    """The loader protocol over tensors already on the device; order depends only on (seed, epoch)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, batch_size: int, shuffle: bool = True, seed: int = 0):
        self.x, self.y, self.batch_size, self.shuffle, self.seed = x, y, batch_size, shuffle, seed
        self.epoch = 0

    @property
    def num_samples(self) -> int:
        return len(self.y)

    def __len__(self) -> int:
        return -(-len(self.y) // self.batch_size)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self.shuffle:
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
            order = torch.randperm(len(self.y), generator=gen).to(self.y.device)
        else:
            order = torch.arange(len(self.y), device=self.y.device)
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            yield self.x[idx], self.y[idx]


def in_memory_data(x: torch.Tensor, y: torch.Tensor, batch_size: int, val_fraction: float = 0.25, seed: int = 0):
    """A minimal `data` bundle (train, val, num_classes, train_labels, resolution) from two tensors."""
    n_val = max(1, int(len(y) * val_fraction))
    train_y = y[n_val:]
    return SimpleNamespace(
        train=InMemoryLoader(x[n_val:], train_y, batch_size, shuffle=True, seed=seed),
        val=InMemoryLoader(x[:n_val], y[:n_val], batch_size, shuffle=False),
        num_classes=int(y.max()) + 1,
        train_labels=train_y.cpu().numpy().astype(np.int64),
        resolution=int(x.shape[-1]),
    )


class SmallCNN(nn.Module):
    """The benchmark's default model: four conv-BN-ReLU blocks, global pooling, a linear head."""

    def __init__(self, num_classes: int = 2, in_channels: int = 3, width: int = 16):
        super().__init__()
        layers: list[nn.Module] = []
        c = in_channels
        for i in range(4):
            out = width * 2**i
            layers += [nn.Conv2d(c, out, 3, stride=2 if i else 1, padding=1, bias=False), nn.BatchNorm2d(out)]
            layers.append(nn.ReLU(inplace=True))
            c = out
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(c, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(2, 3)))


def bare_epoch(model: nn.Module, loader: InMemoryLoader, optimizer: torch.optim.Optimizer, cfg: Config) -> float:
    """One plain training epoch (same precision/channels_last as the trainer); returns images per second."""
    dtype = autocast_dtype(cfg.system.precision)
    device_type = loader.x.device.type
    amp = (lambda: torch.autocast(device_type, dtype=dtype)) if dtype else contextlib.nullcontext
    model.train()
    t0 = time.perf_counter()
    for x, y in loader:
        if cfg.system.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with amp():
            loss = nn.functional.cross_entropy(model(x).float(), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    if device_type == "cuda":
        torch.cuda.synchronize()
    return loader.num_samples / (time.perf_counter() - t0)


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
    net = copy.deepcopy(initial).to(device)
    if cfg.system.channels_last:
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

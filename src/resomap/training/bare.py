"""A bare PyTorch training loop and in-memory batches: what the Trainer overhead benchmark
(resomap.profiling.bare.benchmark_vs_bare, `resomap bench --vs-bare`) compares Trainer.fit with; the in-memory
loaders also feed the trainer tests.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from types import SimpleNamespace

import numpy as np
import torch
from torch import nn

from resomap.config.schema import Config
from resomap.runtime import autocast_dtype, resolve_channels_last, resolve_precision

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
    device_type = loader.x.device.type
    precision, _ = resolve_precision(cfg.system.precision, loader.x.device)
    dtype = autocast_dtype(precision)
    channels_last = resolve_channels_last(cfg.system.channels_last, precision)
    amp = (lambda: torch.autocast(device_type, dtype=dtype)) if dtype else contextlib.nullcontext
    model.train()
    t0 = time.perf_counter()
    for x, y in loader:
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with amp():
            loss = nn.functional.cross_entropy(model(x).float(), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    if device_type == "cuda":
        torch.cuda.synchronize()
    return loader.num_samples / (time.perf_counter() - t0)

"""The dataset registry and the `RawDataset` protocol every entry returns."""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Iterable
from typing import Protocol, runtime_checkable

import numpy as np

from resomap.config.groups import register_group
from resomap.config.schema import DataConfig
from resomap.registry import Registry

DATASETS: Registry[Callable[..., RawDataset]] = Registry("dataset", "resomap datasets")
register_group("data", DATASETS)  # the loader checks the section's selectors and options against it


@runtime_checkable
class RawDataset(Protocol):
    """Full-size images before any resizing. `load(i)` may raise for an unreadable file (it is skipped)."""

    class_names: list[str]
    labels: np.ndarray  # int64 [N]
    channels: int  # 1 or 3
    has_masks: bool
    fingerprint: str  # content id: names the disk cache

    def __len__(self) -> int: ...

    # uint8 (H, W) or (H, W, C); uint16 on 0..65535 for a dataset whose `depth` (resomap.data.images.BitDepth) is deep
    def load(self, i: int) -> np.ndarray: ...

    def mask(self, i: int) -> np.ndarray: ...  # bool (H, W); only when has_masks

    def name(self, i: int) -> str: ...  # shown in warnings (a file name, "synthetic #3")


def register_dataset(name: str, *, options: type | None = None, **meta: object) -> Callable:
    """Decorator: `@register_dataset("elpv", options=ElpvOptions)` on `fn(cfg: DataConfig[, options][, seed: int])
    -> RawDataset`. `options` is a frozen dataclass: its fields are the config keys `data.<name>.<field>`."""
    return DATASETS.register(name, options=options, **meta)


def list_datasets() -> list[str]:
    return DATASETS.names()


def get_dataset(name: str) -> Callable[..., RawDataset]:
    return DATASETS.get(name)


def open_dataset(cfg: DataConfig, seed: int = 0) -> RawDataset:
    """Call the registered factory with its options and, to factories that take one, the seed."""
    from resomap.config.groups import group_options

    factory = get_dataset(cfg.dataset)
    params = inspect.signature(factory).parameters
    kwargs: dict[str, object] = {}
    if "options" in params:
        kwargs["options"] = group_options(cfg, cfg.dataset)
    if "seed" in params:
        kwargs["seed"] = seed
    return factory(cfg, **kwargs)


def digest(parts: Iterable[object], length: int = 16) -> str:
    """A short stable hash of `parts` (used to build fingerprints)."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part if isinstance(part, bytes) else str(part).encode())
        h.update(b"\0")
    return h.hexdigest()[:length]
